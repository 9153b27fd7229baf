"""The training step through a lens against the pinhole step (issue #39's "step
time at 1080p with a fisheye camera"): one Blender-format scene (make_scene.py's
hd1080 by default) written twice as a nerfstudio dataset with the same images,
poses, focal length and seed points, once PINHOLE and once OPENCV_FISHEYE with
k1..k4 = 0 (an equidistant fisheye: at the hd1080 scene's 28-degree half-width
it covers nearly the same pixels, so the difference is the lens path's cost,
fpbo's unscented transform and the lens-aware tile bounds, not more splats in
view). Each is trained for --steps MCMC steps per backend; prints metrics.json's
median and mean ms a step for each, and the fisheye's ratio to the pinhole.

    python benchmarks/lens_step.py SCENE [--steps 1000] [--backend vulkan cuda] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LENSES = {
    "pinhole": {"camera_model": "PINHOLE"},
    "fisheye": {"camera_model": "OPENCV_FISHEYE", "k1": 0.0, "k2": 0.0, "k3": 0.0, "k4": 0.0},
}


def write_twin(scene: Path, out: Path, lens: dict) -> Path:
    """A nerfstudio ``transforms.json`` in ``out`` for ``scene``'s train and test
    frames (Blender layout, one intrinsics block; the images and points3d.ply are
    linked, not copied) through ``lens``."""
    out.mkdir(parents=True, exist_ok=True)
    train = json.loads((scene / "transforms_train.json").read_text())
    test = json.loads((scene / "transforms_test.json").read_text())
    meta = {k: train[k] for k in ("w", "h", "fl_x", "fl_y", "cx", "cy")}
    meta.update(lens)
    meta["frames"] = train["frames"] + test["frames"]
    for name in ("images", "points3d.ply"):
        if not (out / name).exists():
            os.symlink((scene / name).resolve(), out / name)
    meta["ply_file_path"] = "points3d.ply"
    (out / "transforms.json").write_text(json.dumps(meta, indent=1))
    return out


def train(data: Path, run: Path, backend: str, steps: int, cap: int) -> dict:
    cmd = [sys.executable, "-m", "spirula", "--backend", backend, "train", str(data), "--output", str(run)]
    cmd += ["--iterations", str(steps), "--strategy", "mcmc", "--cap-max", str(cap), "--save-every", "0"]
    cmd += ["--eval-split", "interval:8", "--overwrite"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit("lens_step: %s failed:\n%s" % (" ".join(cmd), (proc.stdout + proc.stderr)[-1500:]))
    return json.loads((run / "metrics.json").read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scene", type=Path, help="Blender layout: transforms_train/test.json, images/, points3d.ply")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--cap-max", type=int, default=1_000_000)
    ap.add_argument("--backend", nargs="+", default=["vulkan"])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lens_step-"))
    data = {name: write_twin(args.scene, work / name, lens) for name, lens in LENSES.items()}
    rows = {}
    for backend in args.backend:
        for name in LENSES:
            m = train(data[name], work / ("run-%s-%s" % (name, backend)), backend, args.steps, args.cap_max)
            rows[(backend, name)] = dict(
                median=m["ms_per_step_median"], mean=m["ms_per_step_mean"], splats=m.get("n_splats"), psnr=m.get("psnr")
            )
            r = rows[(backend, name)]
            print(
                "[lens_step] %-6s %-7s %8.3f / %8.3f ms a step (median / mean)"
                % (backend, name, r["median"], r["mean"])
            )
        pin, fish = rows[(backend, "pinhole")], rows[(backend, "fisheye")]
        print(
            "[lens_step] %-6s fisheye / pinhole: %.3fx median, %.3fx mean"
            % (backend, fish["median"] / pin["median"], fish["mean"] / pin["mean"]),
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps({"%s/%s" % k: v for k, v in rows.items()}, indent=1))


if __name__ == "__main__":
    main()
