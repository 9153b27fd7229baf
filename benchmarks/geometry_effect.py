"""What --geometry changes: train the synthetic sphere scene (tests/geometry_cases.py: a
textured unit sphere, seed points scattered through a ball) with and without the geometry
regularizers, mesh each result (fuse_splats + marching cubes) and print, per run: test PSNR,
the mean depth distortion and median-depth error over the training views, the splats'
flatness (mean smallest / middle scale) and the Chamfer distance of the mesh to the true
sphere. Runs: plain, each term alone (the depth distortion and the normal consistency, at
--geometry's weights; the flattening at --flatten-weight), --geometry (distortion + normal
consistency), and all three (--runs picks some).

    python benchmarks/geometry_effect.py --backend cuda --iterations 7000 --size 512 --views 64
    python benchmarks/geometry_effect.py --iterations 300            # lavapipe: a few minutes

Chamfer distance: the mean of (mesh vertex -> sphere) and (sphere sample -> nearest mesh
vertex) distances, in units of the sphere's radius. Marching cubes is scikit-image's, called
here directly (spirula/mesh/surface.py, from the mesh-surface work, can take its place).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


# the runs: TrainConfig fields (flatten_weight None: --flatten-weight); --geometry turns on the
# distortion and the normal consistency, each at its default weight and start
RUNS = {
    "plain": {},
    "distortion": dict(geometry=True, normal_weight=0.0),
    "normal": dict(geometry=True, distortion_weight=0.0),
    "geometry": dict(geometry=True),
    "flatten": dict(flatten_weight=None),
    "all": dict(geometry=True, flatten_weight=None),
}


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def depth_stats(dev, splats, scene, frames) -> tuple:
    """(mean distortion, mean |median depth - true depth| where the sphere is hit and rendered,
    mean normal consistency loss a (1 - N . n_d) over the pixels, the training's depth image)."""
    from geometry_cases import ray_sphere_depth

    from spirula.reference.normals import normal_consistency_fwd
    from spirula.render.api import rasterization

    distort, err, normal = [], [], []
    for f in frames:  # one view at a time: the views may be large
        _, alphas, depths, meta = rasterization(
            splats["means"],
            splats["quats"],
            np.exp(splats["scales"]),
            _sigmoid(splats["opacities"]),
            splats["sh"],
            f.viewmat[None],
            f.K[None],
            f.width,
            f.height,
            0,
            distortion=True,
            normals=True,
            device=dev,
        )
        a = alphas[..., 0]
        normal.append(float(normal_consistency_fwd(meta["normals"], depths[..., 0] * a, a, f.K[None]).mean()))
        true = ray_sphere_depth(f.viewmat, f.K, f.width, f.height)
        med = meta["median_depths"][0, ..., 0]
        hit = (true > 0) & (med > 0)
        distort.append(float(meta["distortions"].mean()))
        err.append(np.abs(med - true)[hit])
    return float(np.mean(distort)), float(np.concatenate(err).mean()), float(np.mean(normal))


def mesh_chamfer(dev, splats, scene, resolution: int, samples: int = 20000) -> tuple:
    """(Chamfer distance to the unit sphere, vertex count) of the fused, meshed splats."""
    from scipy.spatial import cKDTree
    from skimage.measure import marching_cubes

    from spirula.mesh.cameras import Cameras
    from spirula.mesh.fuse import fuse_splats

    viewmats, Ks, sizes = scene.cameras()
    vol = fuse_splats(dev, splats_for_fusion(splats), Cameras(viewmats, Ks, sizes), resolution, progress=False)
    tsdf = np.where(vol.weight > 0, vol.tsdf, vol.truncation)  # unseen: outside
    verts, _, _, _ = marching_cubes(tsdf, 0.0)
    verts = vol.origin + (verts + 0.5) * vol.voxel_size
    r = np.linalg.norm(verts, axis=1)
    to_sphere = np.abs(r - 1.0).mean()
    rng = np.random.default_rng(0)
    s = rng.normal(size=(samples, 3))
    s /= np.linalg.norm(s, axis=1, keepdims=True)
    to_mesh = cKDTree(verts).query(s)[0].mean()
    return 0.5 * (to_sphere + to_mesh), len(verts)


def splats_for_fusion(p: dict) -> dict:
    return dict(
        means=p["means"], quats=p["quats"], log_scales=p["scales"], opacity_logits=p["opacities"], sh_coeffs=p["sh"]
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--views", type=int, default=24)
    ap.add_argument("--size", type=int, default=64, help="image width (height 3/4 of it)")
    ap.add_argument("--resolution", type=int, default=96, help="TSDF voxels along the longest axis")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="TrainConfig KEY=VALUE (every run)")
    ap.add_argument("--flatten-weight", type=float, default=1.0, help="flatten_weight of the flattening runs")
    ap.add_argument("--runs", default=",".join(RUNS), help="comma-separated of: " + ", ".join(RUNS))
    a = ap.parse_args()
    import json

    from geometry_cases import write_sphere_scene

    from spirula.backends import open_device
    from spirula.data import load_dataset
    from spirula.train.config import TrainConfig
    from spirula.train.trainer import Trainer

    dev = open_device(a.backend)
    root = Path(tempfile.mkdtemp(prefix="spirula-geometry-"))
    write_sphere_scene(root, n_cams=a.views, width=a.size, height=a.size * 3 // 4, focal=a.size * 60 / 64)
    scene = load_dataset(root)
    extra = {k: json.loads(v) for k, v in (o.split("=", 1) for o in a.overrides)}
    for run in a.runs.split(","):
        fields = dict(RUNS[run], **extra)
        if "flatten_weight" in fields and fields["flatten_weight"] is None:
            fields["flatten_weight"] = a.flatten_weight
        cfg = TrainConfig(iterations=a.iterations, sh_degree=0, **fields)
        trainer = Trainer(scene, cfg, dev)
        t = time.perf_counter()
        for _ in range(a.iterations):
            trainer.train_step()
        dt = time.perf_counter() - t
        psnr = trainer.evaluate()["psnr"]
        splats = trainer.splat_arrays()
        distort, med_err, normal_err = depth_stats(dev, splats, scene, [scene.frames[i] for i in scene.train])
        chamfer, nverts = mesh_chamfer(dev, splats, scene, a.resolution)
        s = np.sort(np.exp(splats["scales"]), axis=1)
        flat = float((s[:, 0] / s[:, 1]).mean())
        print(
            "%-18s distortion_weight %g normal_weight %g flatten_weight %g: %d steps %.1f s, %d splats,"
            " test PSNR %.2f dB,"
            " distortion %.4f, median depth error %.4f, normal error %.4f, min/mid scale %.3f,"
            " Chamfer %.4f (%d vertices)"
            % (
                (
                    run,
                    cfg.distortion_weight,
                    cfg.normal_weight,
                    cfg.flatten_weight,
                    a.iterations,
                    dt,
                    trainer.model.n,
                    psnr,
                    distort,
                )
                + (med_err, normal_err, flat, chamfer, nverts)
            ),
            flush=True,
        )
        trainer.free()


if __name__ == "__main__":
    main()
