"""Size and quality of each share format on a trained run (docs/export.md):
each format written from RUN/splat.ply, read back, and rendered from the
run's test cameras; the table has the file size, how many times smaller than
the PLY, the test PSNR against the images and the PSNR of the decoded
splats' render against the original splats' render.

    python benchmarks/export_quality.py RUN [--formats spz,sog,...]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def main(argv=None):
    from spirula.backends import open_device
    from spirula.cli.common import open_run
    from spirula.export import SUFFIX, read_splats, write_splats
    from spirula.train.metrics import psnr
    from spirula.train.run import SplatRenderer

    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--formats", default="ply,spz,sog,ply-compressed,splat,gltf,gltf-spz")
    args = ap.parse_args(argv)
    cfg, _, _, scene = open_run(args.run)
    device = open_device("vulkan")
    original = read_splats(args.run / "splat.ply")
    ply_size = (args.run / "splat.ply").stat().st_size

    def renders(p):
        params = dict(
            means=p["means"], quats=p["quats"], scales=p["log_scales"], opacities=p["opacity_logits"], sh=p["sh_coeffs"]
        )
        r = SplatRenderer(device, params, scene.background, cfg.max_alpha)
        out = [
            np.clip(r.render(f.viewmat, f.K, f.width, f.height), 0, 1) for f in (scene.frames[i] for i in scene.test)
        ]
        r.free()
        return out

    ref = renders(original)
    gts = [scene.load_image(i) for i in scene.test]
    print("| format | file | size | smaller than PLY | test PSNR (dB) | PSNR vs original render (dB) |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats.split(","):
            path = Path(tmp) / ("splat" + SUFFIX[fmt])
            write_splats(path, original, fmt)
            imgs = renders(read_splats(path))
            test = float(np.mean([psnr(a, b) for a, b in zip(imgs, gts)]))
            same = [psnr(a, b) for a, b in zip(imgs, ref)]
            vs = float(np.mean(same)) if np.all(np.isfinite(same)) else float("inf")
            size = path.stat().st_size
            print(
                "| %s | %s | %.1f KiB | %.1fx | %.2f | %s |"
                % (fmt, path.name, size / 1024, ply_size / size, test, "exact" if vs == float("inf") else "%.1f" % vs)
            )


if __name__ == "__main__":
    main()
