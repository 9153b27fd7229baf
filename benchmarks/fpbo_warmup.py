"""How fpbo's GPU time settles in a fresh process: fpbo_bench's workload
(5,000,000 splats, SH degree 3) over five allocations of the splat buffers,
each timed for 12 runs after 3, then three of them again.

    python benchmarks/fpbo_warmup.py [N]

On the H200 (docs/performance.md) the first allocation's runs took 8-14 ms
until the process had run fpbo ~15 times, then every allocation 3.27 ms:
warm-up, not buffer placement. Hence BenchOptions.warm_up.
"""

import os
import statistics
import sys
import time

from test_fpbo_bench import FpboWorkload


def main():
    os.environ["SS_PROFILE"] = "1"
    from spirula.backends import open_device

    dev = open_device("vulkan")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5_000_000
    work = FpboWorkload(dev, n, 1237, 822, mcmc_noise=False)
    seqs, spacers = [work.record(work.first_model)], []
    for k in range(1, 5):
        # a spacer between allocations, so that each lands elsewhere
        spacers.append(dev.pool.alloc("warmup.spacer%d" % k, ((k * 37 + 1) << 10,), "float32"))
        seqs.append(work.record(work.new_model()))
    for i in list(range(5)) + [0, 2, 4]:
        for _ in range(3):
            seqs[i].run()
        gpu, wall = [], []
        for _ in range(12):
            dev.profiler.kernels.clear()
            t0 = time.perf_counter()
            seqs[i].run()
            wall.append(1e3 * (time.perf_counter() - t0))
            gpu.append(dev.profiler.kernels["fpbo"].ns / 1e6)
        print(
            "allocation %d: fpbo median %.2f ms (min %.2f, max %.2f), wall median %.2f ms"
            % (i, statistics.median(gpu), min(gpu), max(gpu), statistics.median(wall)),
            flush=True,
        )


if __name__ == "__main__":
    main()
