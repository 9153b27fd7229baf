"""Issue 39's evidence: training through a fisheye / equirectangular lens on the demo world.

Writes the datasets of spirula/data/demo.py write_lens_scenes (a 180-degree equidistant
fisheye orbit as COLMAP OPENCV_FISHEYE, the same images undistorted to a 120-degree
pinhole crop, a 360-degree equirectangular set as nerfstudio EQUIRECTANGULAR), trains
each for --steps steps per seed and prints, on the fisheye test views, the test PSNR of
the model trained natively and of the one trained on the undistortion (whole image, and
the part the crop covers), and the equirectangular test PSNR against the best flat colour.
tests/test_lens_training.py runs seed 0 of the defaults; docs/performance.md has the table.

    python benchmarks/lens_quality.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=96)
    ap.add_argument("--height", type=int, default=72)
    ap.add_argument("--views", type=int, default=24)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--backend", default="vulkan")
    args = ap.parse_args()

    from spirula.backends import open_device, set_device
    from spirula.data import load_dataset
    from spirula.data.demo import write_lens_scenes
    from spirula.data.lenses import pixel_rays, project
    from spirula.train.config import TrainConfig
    from spirula.train.metrics import psnr
    from spirula.train.trainer import Trainer

    W, H = args.width, args.height
    paths = write_lens_scenes(Path(tempfile.mkdtemp(prefix="lenses-")), W, H, args.views)
    dev = open_device(args.backend)
    set_device(dev)
    fish, pin, eq = (load_dataset(paths[k]) for k in ("fisheye", "pinhole", "equirect"))
    f0 = fish.frames[0]
    uv, ok = project("PINHOLE", paths["K_pinhole"], None, pixel_rays(f0.model, f0.K, f0.dist, W, H)[0])
    crop = ok & (uv[..., 0] >= 0) & (uv[..., 0] <= W) & (uv[..., 1] >= 0) & (uv[..., 1] <= H)
    print(
        "fisheye %dx%d, %d train / %d test views; the crop covers %.1f%%"
        % (W, H, len(fish.train), len(fish.test), 100 * crop.mean())
    )

    def train(scene, seed):
        cfg = TrainConfig.from_settings(
            iterations=args.steps, cap_max=30_000, init_scale=1.0, appearance="none", seed=seed
        )
        tr = Trainer(scene, cfg, dev)
        t = time.time()
        for _ in range(args.steps):
            tr.train_step()
        tr.settle()
        return tr, time.time() - t

    flat = np.mean([eq.load_image(i).reshape(-1, 3).mean(0) for i in eq.train], 0)
    baseline = np.mean([psnr(np.broadcast_to(flat, eq.load_image(i).shape), eq.load_image(i)) for i in eq.test])
    for seed in args.seeds:
        row = []
        for scene in (fish, pin):
            tr, dt = train(scene, seed)
            scores = []
            for i in fish.test:
                f = fish.frames[i]
                img = tr.render(f.viewmat, f.K, size=(W, H), model=f.model, dist=f.dist)
                gt = fish.load_image(i)
                scores.append((psnr(img, gt), psnr(img, gt, crop)))
            row += list(np.mean(scores, 0)) + [dt]
            tr.free()
        tr, dt = train(eq, seed)
        m = tr.evaluate()
        tr.free()
        print(
            "seed %d: fisheye native %.2f dB whole, %.2f crop (%.0f s); undistorted %.2f whole, %.2f crop (%.0f s);"
            " equirectangular %.2f dB, flat colour %.2f (%.0f s)" % (seed, *row, m["psnr"], baseline, dt),
            flush=True,
        )


if __name__ == "__main__":
    main()
