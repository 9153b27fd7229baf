"""Benchmark options. Defaults are small so a CPU (lavapipe) run stays short;
``--bench-full`` (or SPIRULA_BENCH_FULL=1) selects the GPU workloads of docs/design.md §7."""

import os

import pytest


def pytest_addoption(parser):
    g = parser.getgroup("spirula benchmarks")
    g.addoption(
        "--bench-full",
        action="store_true",
        default=os.environ.get("SPIRULA_BENCH_FULL") == "1",
        help="full-size workloads (for a real GPU)",
    )
    g.addoption("--bench-n", type=int, default=None, help="problem size N (splats / values)")
    g.addoption("--bench-iters", type=int, default=None, help="timed repetitions")
    g.addoption("--bench-json", default=None, help="also write the printed figures to this JSON file")
    g.addoption("--bench-scene", default=None, help="dataset folder for memory_run --bench-full")
    g.addoption("--bench-gsplat", default=None, help="gsplat_train.py: the peer of test_train_bench, same call")
    g.addoption("--bench-steps", type=int, default=None, help="training steps of test_train_bench")
    g.addoption("--bench-profile", action="store_true", help="test_train_bench: a profiled run too (kernel times)")
    g.addoption("--bench-backend", default="vulkan", choices=("vulkan", "cuda"), help="the backend to measure")


class BenchOptions:
    def __init__(self, config):
        self.full = config.getoption("--bench-full")
        self.n = config.getoption("--bench-n")
        self.iters = config.getoption("--bench-iters")
        self.json = config.getoption("--bench-json")
        self.backend = config.getoption("--bench-backend")
        self.results = {}

    def pick(self, small, full):
        return full if self.full else small

    def warm_up(self, run):
        """Call ``run`` for at least 3 times and 2 s (0.2 s on small workloads).
        On the H200 a fresh process's first ~15 runs of fpbo took 8-14 ms, then
        3.3 ms from there on; three warm-up runs measured the slow phase."""
        import time

        end = time.perf_counter() + self.pick(0.2, 2.0)
        runs = 0
        while runs < 3 or time.perf_counter() < end:
            run()
            runs += 1

    def record(self, name, **values):
        """Print one figure line and keep it for --bench-json."""
        self.results[name] = values
        print("[bench] %-28s %s" % (name, "  ".join("%s=%s" % (k, _fmt(v)) for k, v in values.items())))


def _fmt(v):
    return "%.4g" % v if isinstance(v, float) else str(v)


@pytest.fixture(scope="session")
def bench_opts(request):
    opts = BenchOptions(request.config)
    yield opts
    if opts.json:
        import json

        with open(opts.json, "w") as f:
            json.dump(opts.results, f, indent=1)


@pytest.fixture(scope="session")
def device(bench_opts):
    from spirula.backends import open_device

    return open_device(bench_opts.backend)
