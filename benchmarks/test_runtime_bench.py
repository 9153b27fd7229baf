"""Runtime benchmarks: copy and fill bandwidth, per-dispatch overhead, and the
profiler's cost when off (against the same loop with profiling compiled out).

    pytest benchmarks/test_runtime_bench.py --benchmark-only [--bench-full]

Bandwidth counts bytes read + written. Times are wall-clock around one eval of
a recorded sequence holding many operations, so the ~0.6 ms eval round trip
is amortized (it is reported separately as ``eval_roundtrip``).
"""

import time

import numpy as np
import pytest


def _wall(fn, reps):
    fn()  # warm-up: pipelines compiled, caches hot
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.fixture(scope="module")
def big_buffers(device, bench_opts):
    nbytes = bench_opts.pick(8 << 20, 256 << 20)
    a = device.pool.alloc("bench.a", (nbytes // 4,), np.uint32, zero=True)
    b = device.pool.alloc("bench.b", (nbytes // 4,), np.uint32, zero=True)
    yield a, b, nbytes
    device.pool.free(a)
    device.pool.free(b)


@pytest.mark.parametrize("max_groups", [1024, 4096, 16384])
def test_copy_bandwidth(benchmark, device, bench_opts, big_buffers, max_groups, monkeypatch):
    """vec4 grid-stride copies; max_groups caps the workgroups of 256 threads."""
    from spirula.runtime import sequence

    monkeypatch.setattr(sequence, "GRID_STRIDE_MAX_GROUPS", max_groups)
    a, b, nbytes = big_buffers
    k = bench_opts.pick(4, 40)
    rec = device.recorder("bench.copy")
    for i in range(k):
        src, dst = (a, b) if i % 2 == 0 else (b, a)
        rec.copy(src, dst)
    seq = rec.finish()
    t = _wall(seq.run, bench_opts.iters or 5)
    gbs = 2 * nbytes * k / t / 1e9
    bench_opts.record("copy_bandwidth_g%d" % max_groups, GBps=gbs, buffer_MiB=nbytes >> 20, copies=k, seconds=t)
    benchmark.extra_info.update(GBps=gbs)
    benchmark.pedantic(seq.run, rounds=3, iterations=1)


def test_fill_bandwidth(benchmark, device, bench_opts, big_buffers):
    a, b, nbytes = big_buffers
    k = bench_opts.pick(4, 40)
    rec = device.recorder("bench.fill")
    for i in range(k):
        rec.fill(a if i % 2 == 0 else b, i)
    seq = rec.finish()
    t = _wall(seq.run, bench_opts.iters or 5)
    gbs = nbytes * k / t / 1e9
    bench_opts.record("fill_bandwidth", GBps=gbs, buffer_MiB=nbytes >> 20, fills=k, seconds=t)
    benchmark.extra_info.update(GBps=gbs)
    benchmark.pedantic(seq.run, rounds=3, iterations=1)


def _chain(device, m, dependent):
    """m tiny copies: each reading what the previous wrote (dependent), or all independent."""
    bufs = [device.pool.alloc("bench.tiny%d" % i, (4,), np.uint32, zero=True) for i in range(4)]
    rec = device.recorder("bench.chain")
    for i in range(m):
        if dependent:
            src, dst = (bufs[0], bufs[1]) if i % 2 == 0 else (bufs[1], bufs[0])
        else:
            src, dst = bufs[2], bufs[3]
        rec.copy(src, dst)
    return rec.finish(), bufs


def test_dispatch_overhead(benchmark, device, bench_opts):
    m = bench_opts.pick(200, 2000)
    reps = bench_opts.iters or 5
    seq1, b1 = _chain(device, 1, True)
    roundtrip = _wall(seq1.run, reps * 4)
    dep, b2 = _chain(device, m, True)
    t_dep = _wall(dep.run, reps)
    per_dep = (t_dep - roundtrip) / (m - 1) * 1e6
    bench_opts.record("eval_roundtrip", us=roundtrip * 1e6)
    bench_opts.record("dependent_dispatch", us=per_dep, dispatches=m, barriers=dep.barriers)
    benchmark.extra_info.update(us_per_dependent_dispatch=per_dep, eval_roundtrip_us=roundtrip * 1e6)
    benchmark.pedantic(dep.run, rounds=3, iterations=1)
    for b in b1 + b2:
        device.pool.free(b)


def test_profiler_off_costs_nothing(benchmark, device, bench_opts):
    """RecordedSequence.run() with SS_PROFILE unset, against the bare kp eval of
    the same recorded sequence (the profiler compiled out)."""
    assert device.profiler is None, "run the benchmarks without SS_PROFILE"
    seq, bufs = _chain(device, 8, True)
    reps = bench_opts.pick(200, 2000)
    raw = seq._seq.eval

    def loop(fn):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps

    loop(seq.run)
    off = min(loop(seq.run) for _ in range(3))
    out = min(loop(raw) for _ in range(3))
    bench_opts.record("profiler_off_vs_compiled_out", off_us=off * 1e6, compiled_out_us=out * 1e6, ratio=off / out)
    benchmark.extra_info.update(off_us=off * 1e6, compiled_out_us=out * 1e6)
    benchmark.pedantic(seq.run, rounds=20, iterations=1)
    for b in bufs:
        device.pool.free(b)
