"""Where a Vulkan training run's slow steps come from: per step, the wall
time and the Kompute algorithms (Vulkan pipelines) created in it, with the
time spent creating them; then the ten slowest steps and the totals.

    python benchmarks/pipeline_trace.py DATASET [--iterations 1000] [--cap-max 1000000]

The regimes of docs/performance.md (MCMC, black background). Meant for the
GPU machine, where vkCreateComputePipelines compiles each new pipeline.
"""

import argparse
import collections
import json
import time

import numpy as np

from spirula.backends import open_device
from spirula.backends.vulkan import VulkanDevice
from spirula.data import load_dataset
from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--cap-max", type=int, default=1_000_000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    created = collections.defaultdict(list)  # step -> [(kernel, ms)]
    step_now = [0]
    create = VulkanDevice.algorithm

    def algorithm(self, kernel, tensors, groups, spec_words):
        key = (kernel.key, tuple(id(t) for t in tensors), groups, spec_words.tobytes())
        if key in self._algorithms:
            return create(self, kernel, tensors, groups, spec_words)
        t0 = time.perf_counter()
        algo = create(self, kernel, tensors, groups, spec_words)
        created[step_now[0]].append((kernel.name, 1e3 * (time.perf_counter() - t0)))
        return algo

    VulkanDevice.algorithm = algorithm
    t0 = time.perf_counter()
    scene = load_dataset(args.dataset)
    cfg = TrainConfig.from_settings(iterations=args.iterations, cap_max=args.cap_max, background="black")
    dev = open_device("vulkan")
    trainer = Trainer(scene, cfg, dev)
    setup_s = time.perf_counter() - t0
    ms = []
    while trainer.step < cfg.iterations:
        step_now[0] = trainer.step + 1
        t = time.perf_counter()
        trainer.train_step(ahead=trainer.step + 1 < cfg.iterations)
        ms.append(1e3 * (time.perf_counter() - t))
    ms = np.array(ms)
    create_ms = {s: sum(x for _, x in v) for s, v in created.items()}
    print("setup %.1f s (pipelines created then: %d, %.0f ms)" % (setup_s, len(created[0]), create_ms.get(0, 0.0)))
    print("steps: median %.3f mean %.3f ms; sum %.0f ms" % (np.median(ms), ms.mean(), ms.sum()))
    late = {s: v for s, v in create_ms.items() if s > 0}
    print("pipelines created during steps: %d, %.0f ms" % (sum(len(created[s]) for s in late), sum(late.values())))
    for i in np.argsort(ms)[::-1][:10]:
        s = int(i) + 1
        names = collections.Counter(n for n, _ in created.get(s, []))
        print("  step %5d: %8.2f ms, pipelines %.1f ms %s" % (s, ms[i], create_ms.get(s, 0.0), dict(names)))
    biggest = sorted(((x, n, s) for s, v in created.items() for n, x in v), reverse=True)[:8]
    print("slowest pipeline creations:", ", ".join("%s@%d %.1f ms" % (n, s, x) for x, n, s in biggest))
    if args.json:
        out = dict(median=float(np.median(ms)), mean=float(ms.mean()), setup_s=setup_s, step_ms=ms.round(3).tolist())
        out["created"] = {str(s): v for s, v in created.items()}
        with open(args.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
