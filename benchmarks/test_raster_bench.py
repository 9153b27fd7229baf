"""raster_bench: the rasterizer's stages on a fixed random slab (docs/design.md §7).

    pytest benchmarks/test_raster_bench.py --benchmark-only -s [--bench-full] [--bench-n N]

Default: 20,000 Gaussians at 320x214 (lavapipe-sized); --bench-full: 2M at
1237x822, the workload of gsplat_raster_bench.py. Stage times are GPU times
from the profiler's timestamps around each dispatch (medians over the timed
iterations): projection (projection_fwd), intersect+sort (depth sort, tile
counts and scan, intersection write, tile sort, tile ranges),
rasterize_fwd, rasterize_bwd (with rasterize_chunks, its chunk table),
projection_bwd, and clears (fill). The whole forward and forward+backward are
also timed by wall clock around one eval, recorded without the profiler's
timestamps (``wall_fwd_bwd_profiled_ms``: with them, as before).
SPIRULA_RASTER_CHUNK=1024 (any multiple of 256) sets the backward's chunk
(recorded as ``chunk``).
"""

import os
import statistics
import time

import numpy as np
import pytest
from scenes import FOCAL, HEIGHT, WIDTH, camera, make_scene

STAGES = {
    "projection": ("projection_fwd",),
    "intersect_sort": (
        "radix_sort_count",
        "radix_sort_scatter",
        "prefix_sum",
        "intersect_tile_count",
        "intersect_tile_write",
        "tile_ranges",
    ),
    "rasterize_fwd": ("rasterize_fwd",),
    "rasterize_bwd": ("rasterize_chunks", "rasterize_bwd"),  # the chunk table, then the chunks
    "projection_bwd": ("projection_bwd",),
    "clears": ("fill",),  # tile ranges (forward) and gradient buffers (backward)
}


@pytest.fixture(scope="module")
def profiled_device(bench_opts):
    from spirula.backends import open_device
    from spirula.runtime import profiler

    old = os.environ.get("SS_PROFILE")
    os.environ["SS_PROFILE"] = "1"
    profiler.reset()
    dev = open_device(bench_opts.backend)
    prof = dev.profiler
    import atexit

    atexit.unregister(prof.report_at_exit)  # the figures are printed by the benchmark
    if old is None:
        os.environ.pop("SS_PROFILE")
    profiler.reset()
    yield dev


def _setup(device, opts):
    from spirula.render.rasterizer import Rasterizer, Splats

    n = opts.n or opts.pick(20_000, 2_000_000)
    w, h = (WIDTH, HEIGHT) if opts.full else (320, 214)
    focal = FOCAL * w / WIDTH
    s = make_scene(n)
    splats = Splats.from_numpy(
        device,
        s["means"],
        s["quats"],
        np.exp(s["log_scales"]),
        1 / (1 + np.exp(-s["opacity_logits"])),
        s["sh"],
        activated=True,
        prefix="bench",
    )
    raster = Rasterizer(device, w, h, 1, capacity=n, name="bench.raster")
    vm, K = camera(w, h, focal)
    raster.set_cameras(vm, K)
    m = raster.forward(splats, 0)
    rng = np.random.default_rng(1)
    device.upload(raster.grad_colors, (rng.standard_normal((1, h, w, 3)) * 1e-3).astype(np.float32))
    grads = Splats.alloc(device, n, 1, prefix="bench.grad")
    return n, w, h, m, splats, raster, grads


def _stage_times(prof, kernels_by_name):
    out = {}
    for stage, names in STAGES.items():
        out[stage] = sum(kernels_by_name.get(k, 0) for k in names) / 1e6
    return out


def test_raster_bench(benchmark, profiled_device, bench_opts):
    device = profiled_device
    prof = device.profiler
    n, w, h, m, splats, raster, grads = _setup(device, bench_opts)

    def record(label, backward):
        rec = device.recorder(label)
        raster.record_project(rec, splats, 0)
        raster.record_raster(rec)
        if backward:
            raster.record_backward(rec, splats, 0, grads)
        return rec.finish()

    fwdbwd = record("bench.fwdbwd", True)

    iters = bench_opts.iters or bench_opts.pick(5, 20)
    bench_opts.warm_up(fwdbwd.run)
    runs = []
    for _ in range(iters):
        prof.kernels.clear()
        fwdbwd.run()
        runs.append(_stage_times(prof, {name: row.ns for name, row in prof.kernels.items()}))
    stages = {k: statistics.median(r[k] for r in runs) for k in STAGES}
    # the GPU's span of the last profiled run, gaps between dispatches included: wall - span
    # is the host's part of an eval (submit, wait, wake-up), span - the stage sum the gaps'
    span = fwdbwd.gpu_span_ns()

    def wall(seq):
        seq.run()
        t = []
        for _ in range(iters):
            t0 = time.perf_counter()
            seq.run()
            t.append(time.perf_counter() - t0)
        return statistics.median(t) * 1e3

    # The wall clock times sequences recorded without the profiler, as the
    # peer's wall loop runs without its CUDA events: on Vulkan a timestamp
    # after every dispatch drains the pipeline there (the stage times above
    # come from those timestamps; the wall would pay for them).
    device.profiler = None
    try:
        fwd_ms = wall(record("bench.fwd.plain", False))
        fwdbwd_ms = wall(record("bench.fwdbwd.plain", True))
        profiled_fwdbwd_ms = wall(fwdbwd)
    finally:
        device.profiler = prof
    bench_opts.record(
        "raster_bench",
        n=n,
        width=w,
        height=h,
        n_isects=m,
        chunk=raster.chunk,
        device=device.info.name,
        **{k + "_ms": v for k, v in stages.items()},
        gpu_fwd_ms=sum(stages[k] for k in ("projection", "intersect_sort", "rasterize_fwd")),
        gpu_fwd_bwd_ms=sum(stages.values()),
        wall_fwd_ms=fwd_ms,
        wall_fwd_bwd_ms=fwdbwd_ms,
        wall_fwd_bwd_profiled_ms=profiled_fwdbwd_ms,
        gpu_span_fwd_bwd_ms=span / 1e6 if span is not None else None,
    )
    benchmark.extra_info.update(stages, n_isects=m)
    prof.kernels.clear()
    fwdbwd.run()
    print(prof.kernel_report())
    benchmark.pedantic(fwdbwd.run, rounds=3, iterations=1)
