"""memory_bench: what training holds in GPU memory (docs/performance.md).

    pytest benchmarks/test_memory_bench.py --benchmark-only -s [--bench-full] [--bench-scene DIR]

Three figures:

``memory_run``
    An MCMC run, the pool read after every step: bytes per live splat (the
    ``splat`` category, and the per-view ``splat x img`` one), the pool's
    peak, and the worst ratio of the pool's capacity to the live need
    (:meth:`BufferPool.live_bytes`) over the run (issue #12: at most 1.3).
    Default: the demo scene, 300 steps; ``--bench-full``: ``--bench-scene``
    (the 1080p training scene on the GPU machine), 3,000 steps.
``memory_max_splats``
    The largest SH degree 3 splat count that trains (three steps) at
    1920x1080 within an 8 GiB budget (``--vram-budget``), by bisection.
    The splats fill raster_bench's slab with their scales shrunk as N^(-1/3)
    (a denser scene, not larger splats), so intersections per splat stay
    those of the 1M slab at 1080p. Default (lavapipe): a 64 MiB budget at 320x180.
``memory_per_splat``
    The bytes each live splat costs in training, from the pool's buffers
    (parameters, Adam moments, statistics, strategy scratch, per-view
    buffers), float32 and ``--compact``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scenes import make_scene

GIB = 1 << 30
MIB = 1 << 20


def _scene_arg(request):
    return request.config.getoption("--bench-scene")


class SyntheticScene:
    """A Scene-like object of ``views`` cameras at the origin looking down +z
    (slightly turned), ``width`` x ``height``, with noise images: enough for
    the trainer to run steps; nothing is learnt."""

    def __init__(self, width, height, views=4, seed=0):
        from spirula.data.scene import Frame

        self.width, self.height = width, height
        f = 0.94 * width
        K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], np.float64)
        self.frames = []
        for v in range(views):
            a = 0.05 * (v - (views - 1) / 2)
            vm = np.eye(4)
            vm[:3, :3] = [[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]]
            vm[0, 3] = 0.3 * v
            self.frames.append(Frame("v%d" % v, Path("v%d.png" % v), width, height, K, vm))
        self.train, self.test = list(range(views)), []
        self.points = np.zeros((1, 3), np.float32)
        self.point_colors = None
        self.points_random = False
        self.background = np.zeros(3, np.float32)
        self.source, self.path, self.extent = "synthetic", Path("<memory_bench>"), 1.0
        self._rng = np.random.default_rng(seed)

    def load_image(self, i):
        return self._rng.random((self.height, self.width, 3), dtype=np.float32)

    def load_mask(self, i):
        return None  # every pixel counts (spirula.data.scene.Scene.load_mask)


def slab_init(n: int, pixels: int, sh_degree: int = 3) -> dict:
    """raster_bench's slab of ``n`` splats, scales shrunk by (n_ref / n)^(1/3)
    where n_ref = 1M x pixels / 1080p's: splats per pixel as the 1M slab at 1080p."""
    s = make_scene(n, sh_degree=sh_degree)
    shrink = math.log((1e6 * pixels / (1920 * 1080) / n) ** (1 / 3))
    return dict(
        means=s["means"],
        quats=s["quats"],
        scales=(s["log_scales"] + shrink).astype(np.float32),
        opacities=s["opacity_logits"],
        sh=s["sh"],
    )


def trains_within(device, scene, n: int, budget: int, steps: int = 6, **cfg_fields) -> dict | None:
    """Train ``steps`` steps from ``n`` slab splats (no densification; SH
    degree 3 from step 3) under ``budget`` bytes; the pool's peak and the
    ms/step of the steps after the fourth, or None when it ran out."""
    import time

    from spirula.errors import OutOfMemoryError
    from spirula.train.config import TrainConfig
    from spirula.train.trainer import Trainer

    pool = device.pool
    cfg = TrainConfig.from_settings(
        iterations=steps,
        cap_max=n,
        refine_start=10**9,
        sh_degree=3,
        sh_every=1,
        vram_budget=str(budget),
        **cfg_fields,
    )
    trainer = None
    pool._high_total = -1
    try:
        trainer = Trainer(scene, cfg, device, init=slab_init(n, scene.width * scene.height))
        for _ in range(4):  # each SH degree records the step anew
            trainer.train_step()
        t0 = time.perf_counter()
        for _ in range(steps - 4):
            trainer.train_step()
        ms = 1e3 * (time.perf_counter() - t0) / max(steps - 4, 1)
        if trainer.model.n != n:  # the budget lowered the count: not a run of n splats
            return None
        return dict(peak=pool.peak_bytes, ms_per_step=ms, n_isects=trainer.raster.isect_capacity)
    except OutOfMemoryError as exc:
        print("[bench]   %d splats do not fit: %s" % (n, exc))
        return None
    finally:
        if trainer is not None:
            trainer.free()
        pool.set_budget(None)


@pytest.mark.benchmark(group="memory")
def test_memory_run(benchmark, bench_opts, device, request):
    """memory_run: bytes per splat and the pool against the live need over an MCMC run."""
    from spirula.data import load_dataset
    from spirula.data.demo import ensure_demo_scene
    from spirula.train.config import TrainConfig
    from spirula.train.trainer import Trainer

    path = _scene_arg(request) if bench_opts.full else None
    path = path or ensure_demo_scene()
    steps = bench_opts.iters or bench_opts.pick(300, 3000)
    cap = bench_opts.n or bench_opts.pick(30_000, 1_000_000)
    refine_start = bench_opts.pick(100, 500)
    cfg = TrainConfig.from_settings(iterations=steps, cap_max=cap, background="black", refine_start=refine_start)
    scene = load_dataset(path, background=cfg.background, seed=0)
    pool = device.pool
    pool._high_total = -1
    trace = []

    def run():
        trainer = Trainer(scene, cfg, device)
        try:
            while trainer.step < steps:
                out = trainer.train_step()
                trace.append((trainer.step, out["n_splats"], pool.total_capacity(), pool.live_bytes()))
            usage = pool.usage()
            return trainer.model.n, usage
        finally:
            trainer.free()

    n, usage = benchmark.pedantic(run, rounds=1, iterations=1)
    worst = max(trace, key=lambda t: t[2] / max(t[3], 1))  # after each step; pool.worst_ratio: at every change
    splat_cap = usage.get("splat", (0, 0, 0))[2]
    view_cap = usage.get("splat x img", (0, 0, 0))[2]
    bench_opts.record(
        "memory_run",
        splats=n,
        bytes_per_splat=splat_cap / n,
        view_bytes_per_splat=view_cap / n,
        peak_MiB=pool.peak_bytes / MIB,
        worst_ratio=worst[2] / max(worst[3], 1),
        worst_step=worst[0],
        worst_ratio_any_time=pool.worst_ratio,
    )
    assert worst[2] <= 1.3 * worst[3], "pool %d B against a live need of %d B at step %d" % (
        worst[2],
        worst[3],
        worst[0],
    )


@pytest.mark.benchmark(group="memory")
@pytest.mark.parametrize("compact", [False, True], ids=["f32", "compact"])
def test_memory_per_splat(benchmark, bench_opts, device, compact):
    """memory_per_splat: the pool's bytes per live splat at SH degree 3."""
    n = bench_opts.pick(20_000, 1_000_000)
    scene = SyntheticScene(*bench_opts.pick((320, 180), (1920, 1080)))
    extra = dict(compact=compact)
    base = trains_within(device, scene, 1, 1 << 62, steps=5, **extra)
    result = benchmark.pedantic(lambda: trains_within(device, scene, n, 1 << 62, steps=5, **extra), rounds=1)
    bench_opts.record(
        "memory_per_splat_" + ("compact" if compact else "f32"),
        splats=n,
        bytes_per_splat=(result["peak"] - base["peak"]) / (n - 1),
    )


@pytest.mark.benchmark(group="memory")
@pytest.mark.parametrize("compact", [False, True], ids=["f32", "compact"])
def test_memory_max_splats(benchmark, bench_opts, device, compact):
    """memory_max_splats: the largest SH3 count that trains at 1080p in 8 GiB."""
    width, height = bench_opts.pick((320, 180), (1920, 1080))
    budget = bench_opts.pick(64 * MIB, 8 * GIB)
    scene = SyntheticScene(width, height)
    lo, hi = bench_opts.pick((10_000, 400_000), (1_000_000, 40_000_000))

    def search():
        nonlocal lo, hi
        best = None
        while hi - lo > max(lo // 50, 1000):
            mid = (lo + hi) // 2
            r = trains_within(device, scene, mid, budget, compact=compact)
            if r is None:
                hi = mid
            else:
                lo, best = mid, dict(r, n=mid)
        return best

    best = benchmark.pedantic(search, rounds=1)
    bench_opts.record(
        "memory_max_splats_" + ("compact" if compact else "f32"),
        splats=best and best["n"],
        peak_MiB=best and best["peak"] / MIB,
        ms_per_step=best and best["ms_per_step"],
        budget_MiB=budget / MIB,
        size="%dx%d" % (width, height),
    )
