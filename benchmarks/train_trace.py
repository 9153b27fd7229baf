"""Trace a training run's health: splats relocated by each MCMC refinement,
and every N steps the test PSNR per view, non-finite parameters, nearly dead
and saturated splats, and the largest scales.

    python benchmarks/train_trace.py DATASET [--seed S] [--every 1000] [--set KEY=VALUE ...]

Defaults as the training benchmark of docs/performance.md (3,000 steps, MCMC
budget 1,000,000, black background). Meant for the GPU machine: it reads the
parameters back at each report.
"""
import argparse
import json
import time

import numpy as np

from spirula.data import load_dataset
from spirula.runtime.device import get_device
from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=1000, help="report every N steps")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    fields = dict(iterations=3000, cap_max=1_000_000, background="black", seed=args.seed)
    for item in args.overrides:
        key, _, value = item.partition("=")
        fields[key] = json.loads(value)
    cfg = TrainConfig(**fields)
    scene = load_dataset(args.dataset, background=cfg.background, seed=cfg.seed)
    trainer = Trainer(scene, cfg, get_device())
    t0 = time.time()
    while trainer.step < cfg.iterations:
        out = trainer.train_step()
        step = trainer.step
        if cfg.strategy == "mcmc" and trainer.strategy.refine_due(step - 1):
            print("step %d relocated %d isects %d loss %.4f"
                  % (step, trainer.strategy.relocated, out["n_isects"], out["loss"]), flush=True)
        if step % args.every == 0 or step == cfg.iterations:
            p = trainer.model.download()["params"]
            nonfinite = {k: int((~np.isfinite(v)).sum()) for k, v in p.items()}
            o = 1 / (1 + np.exp(-p["opacities"].astype(np.float64)))
            s = np.exp(p["scales"].astype(np.float64)).max(-1)
            m = trainer.evaluate()
            print("step %d PSNR %.3f per view %s | non-finite %s | opacity < 0.005: %d, > 0.99: %d | "
                  "scale p50 %.2e p99.9 %.2e max %.2e | %.0f s"
                  % (step, m["psnr"], [round(float(x["psnr"]), 2) for x in m["per_image"]], nonfinite,
                     (o < 0.005).sum(), (o > 0.99).sum(), np.median(s), np.quantile(s, 0.999), s.max(),
                     time.time() - t0), flush=True)
    trainer.free()


if __name__ == "__main__":
    main()
