"""A capture with per-image exposure and white balance, built from the demo world
(issue 37 item 5; docs/performance.md, "Appearance correction"): the demo's ray-traced
scene (spirula/data/demo.py) rendered at a small size into a COLMAP text model, each
training image scaled by 2^e (e uniform in +-0.7 stops) and per-channel gains 1 + g (g
uniform in +-15%), both zero mean over the training images, optionally vignetted; the
test images (every 8th, the default split) left clean.

    python benchmarks/perturbed_capture.py [--seeds 0 1 2] [--steps 300] [--size 64x48]
        [--modes ppisp none] [--no-clean] [--drift STOPS [--no-perturb]]
        [--controller [--controller-ratio R] [--controller-lr LR]]

trains each seed on the clean images without appearance correction, then on the
perturbed images once per ``--modes`` value (default: PPISP and none; `both`,
`bilagrid` too), and prints test PSNR, colour-corrected PSNR and the differences, and
with PPISP's controller trained (``--controller``; off here, unlike training's default,
so the figures of docs/performance.md stay comparable) its test PSNR. ``--drift``: every view, test
views too, exposed by STOPS x cos(azimuth), which the controller can predict.
tests/test_appearance_training.py and tests/test_controller_training.py run one seed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

EXPOSURE_STOPS, WB_GAIN = 0.7, 0.15
# the appearance models' learning rate: the references' 2e-3 is meant for runs of 30,000 steps
# (each image's parameters move only when it is trained, ~1 step in 40 here); a run of a few
# hundred steps visits each image ~10 times
LR = 5e-2


def perturbation(n: int, seed: int):
    """(exposure stops [n], white-balance gains [n, 3]) of ``n`` training images: uniform
    in +-0.7 stops and 1 +- 15%, each zero mean over the images."""
    rng = np.random.default_rng(1000 + seed)
    e = rng.uniform(-EXPOSURE_STOPS, EXPOSURE_STOPS, n)
    g = rng.uniform(-WB_GAIN, WB_GAIN, (n, 3))
    return e - e.mean(), 1.0 + g - g.mean(0)


def drift_stops(v: int, n_views: int, drift: float) -> float:
    """The exposure (stops) of view ``v`` of a capture whose exposure drifts with the camera's
    azimuth (as around a scene lit from one side): ``drift`` x cos(2 pi v / n_views)."""
    return drift * np.cos(2 * np.pi * v / n_views)


def write_capture(root: Path, width=64, height=48, n_views=48, perturb=True, seed=0, vignetting=0.0,
                  drift=0.0) -> Path:  # fmt: skip
    """The demo world as a COLMAP capture in ``root`` (images/, sparse/0 text model);
    ``perturb``: the training images' exposure and white balance changed
    (:func:`perturbation`), ``vignetting``: their corners darkened by 1 - this x r^2
    (r = 1 at the corners); the test images (every 8th by name) stay clean but for
    ``drift``: every view, test views too, exposed by :func:`drift_stops` (an exposure the
    render can predict: PPISP's controller's test, tests/test_controller_training.py)."""
    from PIL import Image

    from spirula.data import demo

    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "sparse" / "0").mkdir(parents=True, exist_ok=True)
    focal = demo.FOCAL * width / demo.WIDTH
    viewmats, K = demo.cameras(width, height, focal, n_views)
    train = [v for v in range(n_views) if v % 8]
    e, g = perturbation(len(train), seed)
    ys, xs = np.mgrid[0:height, 0:width]
    r2 = ((xs + 0.5 - width / 2) ** 2 + (ys + 0.5 - height / 2) ** 2) / ((width / 2) ** 2 + (height / 2) ** 2)
    lines = []
    for v, vm in enumerate(viewmats):
        img = demo.render_view(vm, K, width, height)
        if drift:
            img = img * 2.0 ** drift_stops(v, n_views, drift)
        if perturb and v in train:
            k = train.index(v)
            img = img * 2.0 ** e[k] * g[k]
            if vignetting:
                img = img * (1 - vignetting * r2)[..., None]
        name = "%04d.png" % v
        Image.fromarray(np.rint(np.clip(img, 0, 1) * 255).astype(np.uint8)).save(root / "images" / name)
        q, t = demo._qvec(vm[:3, :3]), vm[:3, 3]
        lines.append("%d %s 1 %s\n\n" % (v + 1, " ".join("%.12g" % x for x in list(q) + list(t)), name))
    sp = root / "sparse" / "0"
    (sp / "cameras.txt").write_text(
        "1 PINHOLE %d %d %.12g %.12g %.12g %.12g\n" % (width, height, K[0, 0], K[1, 1], K[0, 2], K[1, 2])
    )
    (sp / "images.txt").write_text("".join(lines))
    pts, cols = demo.seed_points(np.random.default_rng(7))
    with open(sp / "points3D.txt", "w") as f:
        for i, (p, c) in enumerate(zip(pts, np.rint(cols * 255).astype(int))):
            f.write("%d %.9g %.9g %.9g %d %d %d 0\n" % (i + 1, p[0], p[1], p[2], c[0], c[1], c[2]))
    return root


def train(
    dataset: Path,
    appearance: str,
    steps: int,
    seed: int,
    device,
    output: Path,
    lr: float = LR,
    grid_lr=None,
    **settings,
) -> dict:
    """test PSNR, SSIM and colour-corrected PSNR of one run of ``steps`` steps (its
    metrics; ``settings``: more training settings; PPISP's controller off unless
    ``controller=True``)."""
    from spirula.data import load_dataset
    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run

    scene = load_dataset(dataset, seed=seed)
    settings.setdefault("controller", False)
    cfg = TrainConfig.from_settings(
        iterations=steps, cap_max=20_000, seed=seed, appearance=appearance, init_scale=1.0, save_every=0,
        refine_start=100, refine_every=50, appearance_lr=lr, bilagrid_lr=grid_lr, **settings,
    )  # fmt: skip
    return train_run(scene, cfg, device, output, log=lambda m: None)


def measure(
    seeds,
    steps,
    size,
    device,
    vignetting=0.0,
    log=print,
    modes=("ppisp", "none"),
    clean=True,
    grid_lr=None,
    drift=0.0,
    perturb=True,
    **settings,
) -> list:
    """one row per seed: ``clean`` (without correction, on the clean images; if ``clean``)
    and one (psnr, psnr_cc) per appearance mode on the perturbed images; ``on`` and ``off``
    alias ``ppisp`` and ``none``; ``ctrl <mode>``: psnr_controller where the controller
    trained."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        w, h = size
        for seed in seeds:
            clean_data = write_capture(tmp / ("clean%d" % seed), w, h, perturb=False, seed=seed) if clean else None
            pert = write_capture(tmp / ("pert%d" % seed), w, h, perturb=perturb, seed=seed, vignetting=vignetting,
                                 drift=drift)  # fmt: skip
            row = dict(seed=seed)
            runs = ([("clean", clean_data, "none")] if clean else []) + [(m, pert, m) for m in modes]
            for key, data, mode in runs:
                m = train(data, mode, steps, seed, device, tmp / ("run-%s-%d" % (key, seed)), grid_lr=grid_lr,
                          **settings)  # fmt: skip
                row[key] = (m["psnr"], m["psnr_cc"])
                if m.get("psnr_controller") is not None:
                    row["ctrl " + key] = m["psnr_controller"]
            for alias, mode in (("on", "ppisp"), ("off", "none")):
                if mode in row:
                    row[alias] = row[mode]
            rows.append(row)
            log(
                "seed %d: " % seed
                + " | ".join(
                    "%s %.2f (cc %.2f)" % ("clean" if k == "clean" else "perturbed, " + k, *row[k])
                    + (" (controller %.2f)" % row["ctrl " + k] if "ctrl " + k in row else "")
                    for k, _, _ in runs
                )
            )
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--size", default="64x48")
    ap.add_argument("--vignetting", type=float, default=0.0)
    ap.add_argument("--modes", nargs="+", default=["ppisp", "none"], choices=["ppisp", "bilagrid", "both", "none"])
    ap.add_argument("--no-clean", action="store_true", help="skip the clean run")
    ap.add_argument("--grid-lr", type=float, default=None, help="the grids' lr (default: PPISP's, %g)" % LR)
    ap.add_argument("--drift", type=float, default=0.0, help="every view exposed by STOPS x cos(azimuth)")
    ap.add_argument("--no-perturb", action="store_true", help="no random exposure and white balance")
    ap.add_argument("--controller", action="store_true", help="train PPISP's controller (training's default)")
    ap.add_argument("--controller-ratio", type=float, default=None, help="controller_activation_ratio")
    ap.add_argument("--controller-lr", type=float, default=None, help="controller_lr")
    args = ap.parse_args(argv)
    from spirula.backends import open_device

    w, h = map(int, args.size.split("x"))
    rows = measure(
        args.seeds,
        args.steps,
        (w, h),
        open_device(),
        args.vignetting,
        modes=args.modes,
        clean=not args.no_clean,
        grid_lr=args.grid_lr,
        drift=args.drift,
        perturb=not args.no_perturb,
        controller=args.controller,
        **{
            k: v
            for k, v in (("controller_activation_ratio", args.controller_ratio), ("controller_lr", args.controller_lr))
            if v is not None
        },
    )
    for mode in args.modes:
        mean = np.mean([r[mode][0] for r in rows])
        mean_cc = np.mean([r[mode][1] for r in rows])
        line = "mean over seeds: %s %.2f dB (cc %.2f)" % (mode, mean, mean_cc)
        if not args.no_clean:
            line += ", %+.2f dB against clean" % np.mean([r[mode][0] - r["clean"][0] for r in rows])
        if all("ctrl " + mode in r for r in rows):
            line += "; with the controller %.2f dB" % np.mean([r["ctrl " + mode] for r in rows])
        print(line)


if __name__ == "__main__":
    sys.exit(main())
