"""Trace a training run's health: splats relocated by each MCMC refinement,
and every N steps the test PSNR per view, non-finite parameters, nearly dead
and saturated splats, and the largest scales. With --watch N it also reads
the whole state (parameters and Adam moments) back every N steps and on the
two steps after each refinement, and prints, for the splats that became
non-finite since the last look, their state then and now: where NaNs start.

    python benchmarks/train_trace.py DATASET [--seed S] [--every 1000] [--watch 50] [--set KEY=VALUE ...]

Defaults as the training benchmark of docs/performance.md (3,000 steps, MCMC
budget 1,000,000, black background). Meant for the GPU machine: it reads the
parameters back at each report.
"""

import argparse
import json
import time

import numpy as np

from spirula.backends import open_device
from spirula.data import load_dataset
from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=1000, help="report every N steps")
    ap.add_argument("--watch", type=int, default=0, help="look for new non-finite splats every N steps")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    fields = dict(iterations=3000, cap_max=1_000_000, background="black", seed=args.seed)
    for item in args.overrides:
        key, _, value = item.partition("=")
        try:
            fields[key] = json.loads(value)
        except ValueError:
            fields[key] = value
    cfg = TrainConfig.from_settings(**fields)
    scene = load_dataset(args.dataset, background=cfg.background, seed=cfg.seed)
    trainer = Trainer(scene, cfg, open_device("vulkan"))
    t0 = time.time()
    watch = Watch(trainer) if args.watch else None
    while trainer.step < cfg.iterations:
        out = trainer.train_step()
        step = trainer.step
        if watch and (
            step % args.watch == 0 or trainer.strategy.refine_due(step - 1) or trainer.strategy.refine_due(step - 2)
        ):
            watch.look(step)
        if cfg.strategy.name == "mcmc" and trainer.strategy.refine_due(step - 1):
            print(
                "step %d relocated %d isects %d loss %.4f"
                % (step, trainer.strategy.relocated, out["n_isects"], out["loss"]),
                flush=True,
            )
        if step % args.every == 0 or step == cfg.iterations:
            p = trainer.model.download()["params"]
            nonfinite = {k: int((~np.isfinite(v)).sum()) for k, v in p.items()}
            o = 1 / (1 + np.exp(-p["opacities"].astype(np.float64)))
            s = np.exp(p["scales"].astype(np.float64)).max(-1)
            m = trainer.evaluate()
            print(
                "step %d PSNR %.3f per view %s | non-finite %s | opacity < 0.005: %d, > 0.99: %d | "
                "scale p50 %.2e p99.9 %.2e max %.2e | %.0f s"
                % (
                    step,
                    m["psnr"],
                    [round(float(x["psnr"]), 2) for x in m["per_image"]],
                    nonfinite,
                    (o < 0.005).sum(),
                    (o > 0.99).sum(),
                    np.median(s),
                    np.quantile(s, 0.999),
                    s.max(),
                    time.time() - t0,
                ),
                flush=True,
            )
    trainer.free()


class Watch:
    """Finds the splats that turn non-finite between two looks at the state."""

    def __init__(self, trainer, show=6):
        self.trainer, self.show = trainer, show
        self.prev, self.prev_step, self.reported = None, 0, 0

    @staticmethod
    def _bad(state):
        bad = None
        for group in state.values():
            for a in group.values():
                row = ~np.isfinite(a.reshape(len(a), -1)).all(axis=1)
                bad = row if bad is None else bad | row
        return bad

    def look(self, step):
        state = self.trainer.model.download()
        bad = self._bad(state)
        if self.prev is not None and len(self.prev["params"]["means"]) == len(bad):
            new = np.flatnonzero(bad & ~self._bad(self.prev))
            if len(new):
                print(
                    "watch: step %d: %d splats became non-finite since step %d (%d non-finite now)"
                    % (step, len(new), self.prev_step, bad.sum()),
                    flush=True,
                )
                for i in new[: self.show] if self.reported < 4 else []:
                    for when, st in (("step %d" % self.prev_step, self.prev), ("step %d" % step, state)):
                        print("  splat %d at %s:" % (i, when), flush=True)
                        for group in ("params", "exp_avg", "exp_avg_sq"):
                            print(
                                "    %-10s %s"
                                % (
                                    group,
                                    {
                                        k: np.round(v[i].ravel()[:6].astype(float), 4).tolist()
                                        for k, v in st[group].items()
                                    },
                                ),
                                flush=True,
                            )
                self.reported += 1
        self.prev, self.prev_step = state, step


if __name__ == "__main__":
    main()
