"""Write the demo world at any resolution as a Blender/NeRF-synthetic dataset
(transforms_{train,test}.json with OpenGL camera-to-world, JPEG images) with
seed points (points3D.txt, which gsplat_train.py reads, and points3d.ply, which
Spirula reads): the training benchmark's scene, read identically by Spirula
and by the gsplat peer.

    python benchmarks/make_scene.py OUT [--width 1920 --height 1080 --views 48 --density 30] [--object]
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np
from PIL import Image

from spirula.data import demo


def write_scene(
    out: Path,
    width: int = 1920,
    height: int = 1080,
    focal: float | None = None,
    views: int = 48,
    test_every: int = 8,
    density: float = 30.0,
    supersample: int = 1,
    format: str = "jpg",
    points_only: bool = False,
    object_world: bool = False,
    log=print,
) -> int:
    """Write the scene (see the module docstring) into ``out``; returns the seed point count.
    ``object_world``: the object-centric variant (spirula/data/demo.py)."""
    out = Path(out)
    focal = focal or (0.98 if object_world else 0.94) * width
    viewmats, K = (demo.object_cameras if object_world else demo.cameras)(width, height, focal, views)
    (out / "images").mkdir(parents=True, exist_ok=True)
    frames = {"train": [], "test": []}
    for v, vm in enumerate([] if points_only else viewmats):
        name = "images/%04d.%s" % (v, format)
        img = demo.render_view(vm, K, width, height, supersample, object_world)
        options = {"quality": 95} if format == "jpg" else {}
        Image.fromarray(np.rint(img * 255).astype(np.uint8)).save(out / name, **options)
        c2w = np.linalg.inv(vm) @ np.diag([1.0, -1.0, -1.0, 1.0])  # OpenCV -> OpenGL axes
        split = "test" if v % test_every == 0 else "train"
        frames[split].append({"file_path": name, "transform_matrix": c2w.tolist()})
        if log:
            log("view %d/%d" % (v + 1, views))
    for split, fr in ({} if points_only else frames).items():
        meta = {
            "camera_angle_x": 2 * math.atan(width / (2 * focal)),
            "w": width,
            "h": height,
            "fl_x": focal,
            "fl_y": focal,
            "cx": width / 2,
            "cy": height / 2,
            "frames": fr,
        }
        (out / ("transforms_%s.json" % split)).write_text(json.dumps(meta, indent=1))
    pts, cols = demo.seed_points(np.random.default_rng(7), density, object_world)
    c8 = np.rint(cols * 255).astype(np.uint8)
    with open(out / "points3D.txt", "w") as f:
        for i, (p, c) in enumerate(zip(pts, c8)):
            f.write("%d %.7g %.7g %.7g %d %d %d 0\n" % (i + 1, p[0], p[1], p[2], c[0], c[1], c[2]))
    header = (
        "ply\nformat binary_little_endian 1.0\nelement vertex %d\nproperty float x\nproperty float y\n"
        "property float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n" % len(pts)
    )
    rec = np.zeros(len(pts), [("p", "<f4", 3), ("c", "u1", 3)])
    rec["p"], rec["c"] = pts, c8
    with open(out / "points3d.ply", "wb") as f:
        f.write(header.encode())
        f.write(rec.tobytes())
    if log:
        log("%s: %d views (%d test), %d seed points" % (out, views, len(frames["test"]), len(pts)))
    return len(pts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--width", type=int, default=1920)
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--focal", type=float, default=None, help="pixels [default: 0.94 x width; 0.98 with --object]")
    ap.add_argument("--views", type=int, default=48)
    ap.add_argument("--test-every", type=int, default=8)
    ap.add_argument("--density", type=float, default=30.0, help="seed points, x the demo's ~6,000")
    ap.add_argument("--supersample", type=int, default=1)
    ap.add_argument("--format", choices=["jpg", "png"], default="jpg", help="png: lossless (quality benchmarks)")
    ap.add_argument("--points-only", action="store_true", help="rewrite the seed points only")
    ap.add_argument(
        "--object",
        action="store_true",
        help="the object-centric variant: a small floor, black background, views from all around",
    )
    args = ap.parse_args()
    write_scene(
        args.out,
        args.width,
        args.height,
        args.focal,
        args.views,
        args.test_every,
        args.density,
        args.supersample,
        args.format,
        args.points_only,
        args.object,
        log=lambda msg: print(msg, flush=True),
    )


if __name__ == "__main__":
    main()
