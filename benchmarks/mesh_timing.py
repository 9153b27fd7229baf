"""Time and memory of ``spirula mesh``, stage by stage, on a synthetic scene (issue 14, item 9).

    python benchmarks/mesh_timing.py --splats 1000000 --resolution 256 512 --backend vulkan cuda \\
        --color texture vertex --simplify 200000

The scene: flat discs tangent to a sphere, a box and a torus set apart (tests/test_mesh_shapes.py's
samplers, the shapes of tests/mesh_cases.py), ``--splats`` in all, coloured by a linear field,
meshed from ``--views`` virtual cameras of ``--size`` pixels. Each (backend, resolution) runs in
its own process, so its memory figures are its own, through the stages of ``spirula mesh``
(spirula/mesh/pipeline.py run_mesh): fuse, surface, clean, simplify (with ``--simplify``),
colour, export (GLB, or PLY for vertex colours, to a temporary folder). ``--color`` pairs with
``--resolution`` (the last one repeats): a texture on a multi-million-face mesh takes xatlas
minutes, so decimate first or colour the vertices.

One line per stage: seconds, the GPU pool's peak (the device's BufferPool: the largest total it
has held so far), the process's resident memory now and its peak so far (ru_maxrss), and what
the stage made.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def scene(n: int) -> dict:
    """read_splat_ply's dict: ~n discs on a sphere, a box and a torus (the three about equal in area)."""
    from mesh_cases import Box, Sphere, Torus
    from test_mesh_shapes import box_points, disc_splats, sphere_points, torus_points

    shapes = [Sphere(center=(-1.0, -1.0, -0.5)), Box(center=(1.0, -1.0, 0.5)), Torus(center=(0.0, 1.0, 0.0))]
    spacing = np.sqrt(sum(s.area for s in shapes) / n)
    parts = [
        sphere_points(shapes[0], int(round(shapes[0].area / spacing**2))),
        box_points(shapes[1], spacing),
        torus_points(shapes[2], spacing),
    ]
    splats = [disc_splats(p, nrm, sp) for p, nrm, sp in parts]
    return {k: np.concatenate([s[k] for s in splats]) for k in splats[0]}


def rss_gb() -> tuple:
    """(resident now, peak so far) of this process, GB."""
    now = 0.0
    try:
        now = int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 1e9
    except OSError:
        pass
    return now, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def one(a, backend: str, res: int, colour: str) -> None:
    """Mesh the scene once in this process, printing a line per stage."""
    from spirula.backends import open_device, set_device
    from spirula.mesh.cameras import sphere_cameras, splat_support
    from spirula.mesh.colour import bake_texture, colour_vertices, splat_colour_fn
    from spirula.mesh.export import export_mesh
    from spirula.mesh.fuse import fuse_splats
    from spirula.mesh.surface import clean_mesh, extract_surface, simplify_mesh

    dev = open_device(backend)
    set_device(dev)
    splats = scene(a.splats)
    n = len(splats["means"])
    support = splat_support(np.exp(splats["log_scales"]), 1 / (1 + np.exp(-splats["opacity_logits"])))
    cams = sphere_cameras(splats["means"], n=a.views, size=a.size, support=support)
    fuse_splats(dev, splats, cams, resolution=16, progress=False)  # warm-up: kernels compiled

    def stage(name, fn, *args, what=lambda out: ""):
        t = time.perf_counter()
        out = fn(*args)
        dt = time.perf_counter() - t
        now, peak = rss_gb()
        print(
            "mesh_timing %s splats %d res %d %-8s %7.2f s  pool peak %6.2f GB  rss %6.2f GB (peak %6.2f)  %s"
            % (backend, n, res, name, dt, dev.pool.peak_bytes / 1e9, now, peak, what(out)),
            flush=True,
        )
        return out

    vol = stage(
        "fuse",
        lambda: fuse_splats(dev, splats, cams, resolution=res, progress=False),
        what=lambda v: "%s voxels, %d views of %d^2" % ("x".join(map(str, v.tsdf.shape)), a.views, a.size),
    )
    faces = lambda m: "%d faces" % len(m.faces)  # noqa: E731
    mesh = stage("surface", extract_surface, vol, what=faces)
    del vol
    mesh = stage("clean", clean_mesh, mesh, what=faces)
    if a.simplify:
        mesh = stage("simplify", simplify_mesh, mesh, a.simplify, what=faces)
    fn = splat_colour_fn(splats)
    if colour == "texture":
        mesh = stage("colour", bake_texture, mesh, fn, a.texture_size, what=lambda m: "%d^2 texture" % a.texture_size)
        fmt = "glb"
    else:
        mesh = stage("colour", colour_vertices, mesh, fn, what=lambda m: "vertex colours")
        fmt = "ply"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / ("mesh." + fmt)
        stage("export", export_mesh, mesh, out, fmt, what=lambda w: "%s %.1f MB" % (fmt, out.stat().st_size / 1e6))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", nargs="+", default=["vulkan"])
    ap.add_argument("--splats", type=int, default=1_000_000)
    ap.add_argument("--resolution", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--color", nargs="+", choices=("texture", "vertex"), default=["texture"])
    ap.add_argument("--simplify", type=int, default=None, metavar="FACES")
    ap.add_argument("--texture-size", type=int, default=2048)
    ap.add_argument("--views", type=int, default=64)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--one", nargs=3, metavar=("BACKEND", "RES", "COLOR"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        return one(a, a.one[0], int(a.one[1]), a.one[2])
    shared = ["--splats", a.splats, "--texture-size", a.texture_size, "--views", a.views, "--size", a.size]
    if a.simplify:
        shared += ["--simplify", a.simplify]
    status = 0
    for backend in a.backend:
        for i, res in enumerate(a.resolution):
            colour = a.color[min(i, len(a.color) - 1)]
            cmd = [sys.executable, __file__, *map(str, shared), "--one", backend, str(res), colour]
            status |= subprocess.run(cmd).returncode
    sys.exit(status)


if __name__ == "__main__":
    main()
