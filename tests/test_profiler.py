"""SS_PROFILE: the three reports, timestamps against wall time, zero cost when off."""

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT

from spirula.runtime import profiler

PREFIX = re.escape("[spirula-profile]")


def _run(code: str, **env):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    e.pop("SS_PROFILE", None)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=e, capture_output=True, text=True, cwd=str(ROOT), timeout=300
    )


def _sections(stderr: str) -> dict:
    """{title: [lines]} of every [spirula-profile] ---- title ---- block."""
    out = {}
    for m in re.finditer(PREFIX + r" ---- (.+?) ----\n(.*?)\n" + PREFIX + r" ----", stderr, re.S):
        out[m.group(1)] = m.group(2).split("\n")
    return out


@pytest.fixture(scope="module")
def profiled_run():
    proc = _run("import tests.workloads as w; w.runtime(steps=3)", SS_PROFILE="1")
    assert proc.returncode == 0, proc.stderr
    return _sections(proc.stderr)


def test_three_reports_are_printed_at_exit(profiled_run):
    assert list(profiled_run) == ["GPU time by kernel", "timing breakdown", "VRAM breakdown (pool high-water)"]


def test_kernel_report_rows_count_every_dispatch(profiled_run):
    lines = profiled_run["GPU time by kernel"]
    assert lines[0].split() == ["kernel", "count", "gpu_ms", "us/call"]
    rows = {}
    for ln in lines[1:]:
        name, count, ms, us = ln.split()
        rows[name] = (int(count), float(ms), float(us))
        assert float(ms) >= 0 and abs(float(us) * int(count) / 1e3 - float(ms)) <= 1e-3 + 1e-3 * float(ms)
    assert rows["increment"][0] == 4 * 4  # 4 dispatches x (3 runs + 1 async)
    assert rows["saxpy"][0] == 4
    assert rows["prefix_sum"][0] == 4 * 3  # 3 levels' dispatches for 3000 values
    assert "copy" in rows and "fill" in rows
    ms = [r[1] for r in rows.values()]
    assert ms == sorted(ms, reverse=True)  # sorted by GPU time


def test_timing_breakdown_adds_up(profiled_run):
    lines = profiled_run["timing breakdown"]
    assert lines[0].split() == ["category", "count", "bytes", "wall_ms", "GB/s"]
    vals = {}
    for ln in lines[1:]:
        label = ln[:22].strip()
        vals[label] = ln[22:].split()
    for label in (
        "H2D  (upload)",
        "D2H  (readback)",
        "D2D  (dev->dev)",
        "memset",
        "device (GPU wait)",
        "of which GPU-exec",
        "host (est.)",
        "wall (total)",
    ):
        assert label in vals, label
    assert int(vals["H2D  (upload)"][0]) == 1 and int(vals["H2D  (upload)"][1]) == 12000
    assert int(vals["D2H  (readback)"][0]) == 2
    assert int(vals["device (GPU wait)"][0]) == 4  # 3 runs + 1 async wait
    assert int(vals["of which GPU-exec"][0]) == 4 * (4 + 1 + 3)
    spent = sum(float(vals[k][-2]) for k in ("H2D  (upload)", "D2H  (readback)", "D2D  (dev->dev)"))
    spent += float(vals["memset"][-2]) + float(vals["device (GPU wait)"][-2])
    host, wall = float(vals["host (est.)"][0]), float(vals["wall (total)"][0])
    assert abs(wall - spent - host) < 0.01
    assert float(vals["of which GPU-exec"][-2]) <= float(vals["device (GPU wait)"][-2]) + 0.5


def test_vram_report_shows_the_pool_by_category(profiled_run):
    lines = profiled_run["VRAM breakdown (pool high-water)"]
    rows = {ln[:24].strip(): ln[24:].split() for ln in lines[1:]}
    for cat in ("splat", "image", "splat x img", "other"):
        n, used, cap = rows[cat]
        assert int(n) >= 1 and float(used) <= float(cap)
    total = rows["pool total"]
    assert int(total[0]) == sum(int(rows[c][0]) for c in ("splat", "image", "splat x img", "other"))
    assert "scratch" in rows and "largest buffers" in rows
    assert any(ln.strip().startswith("w.a") for ln in lines)


def test_gpu_timestamps_agree_with_wall_time(monkeypatch):
    """Ticks x timestampPeriod must be real nanoseconds: a long dispatch's GPU
    time lies within its wall time and is most of it. The dispatch is made
    long enough (tens of ms) that the eval's fixed cost (~0.6 ms on an H200)
    is small beside it, whatever the device's speed."""
    monkeypatch.setenv("SS_PROFILE", "1")
    profiler.reset()
    try:
        import tests.workloads as w

        iters = 20000
        while True:
            dev, seq = w.spin(iters=iters)
            prof = dev.profiler
            seq.run()  # warm-up: pipeline compile
            prof.kernels.clear()
            t0 = time.perf_counter_ns()
            seq.run()
            wall = time.perf_counter_ns() - t0
            gpu = prof.kernels["spin"].ns
            if gpu > 20e6 or iters >= 1 << 26:
                break
            iters = int(iters * min(64.0, max(2.0, 30e6 / max(gpu, 1))))
        assert 0.5 * wall < gpu <= wall, (gpu, wall, iters)
    finally:
        profiler.reset()


def test_gpu_span_covers_the_dispatches_and_lies_within_the_wall(monkeypatch):
    """Sequence.gpu_span_ns: the GPU's time from a run's start to its end, gaps
    included: at least the sum of its kernels' times, at most the wall time of
    the run; None for a sequence recorded without the profiler."""
    import tests.workloads as w

    monkeypatch.setenv("SS_PROFILE", "1")
    profiler.reset()
    try:
        dev, seq = w.spin(iters=2000)
        prof = dev.profiler
        seq.run()
        prof.kernels.clear()
        t0 = time.perf_counter_ns()
        seq.run()
        wall = time.perf_counter_ns() - t0
        span = seq.gpu_span_ns()
        assert prof.kernels["spin"].ns <= span <= wall, (prof.kernels["spin"].ns, span, wall)
        dev.profiler = None
        rec = dev.recorder("spin.plain")
        plain = rec.finish()
        plain.run()
        assert plain.gpu_span_ns() is None
    finally:
        profiler.reset()


class _Counting:
    """Wraps a kp object; counts method calls by name (and wraps what they return)."""

    def __init__(self, target, counts):
        self._t, self._c = target, counts

    def __getattr__(self, name):
        attr = getattr(self._t, name)
        if not callable(attr):
            return attr

        def call(*a, **k):
            self._c[name] = self._c.get(name, 0) + 1
            if name == "sequence":
                self._c.setdefault("sequence_timestamps", []).append(
                    a[1] if len(a) > 1 else k.get("total_timestamps", 0)
                )
            r = attr(*a, **k)
            return _Counting(r, self._c) if name == "sequence" else r

        return call


def test_profiler_off_adds_no_timestamps_clock_reads_or_syncs(monkeypatch):
    monkeypatch.delenv("SS_PROFILE", raising=False)
    profiler.reset()
    import kp

    import tests.workloads as w
    from spirula.backends import open_device

    counts = {}
    dev = open_device("vulkan", manager=_Counting(kp.Manager(), counts))
    assert dev.profiler is None
    clock_calls = []
    for fn in ("perf_counter_ns", "perf_counter", "time", "time_ns", "monotonic", "monotonic_ns"):
        real = getattr(time, fn)
        monkeypatch.setattr(time, fn, lambda *a, _r=real, _f=fn: clock_calls.append(_f) or _r(*a))
    n = 1024
    a = dev.pool.alloc("z.a", (n,), np.uint32, zero=True)
    b = dev.pool.alloc("z.b", (n,), np.uint32)
    rec = dev.recorder()
    rec.dispatch(w.test_kernels().get("increment"), 4, dict(src=a, dst=b), push=dict(n=n))
    seq = rec.finish()
    evals_before = counts.get("eval", 0)
    for _ in range(10):
        seq.run()
    dev.upload(a, np.zeros(n, np.uint32))
    dev.readback(b)
    assert clock_calls == []
    assert set(counts["sequence_timestamps"]) == {0}  # no query pools at all
    assert counts.get("get_timestamps", 0) == 0
    assert counts["eval"] - evals_before == 10 + 2  # one per run, one per transfer


def test_cli_profile_flag_turns_the_profiler_on():
    proc = _run("from spirula.cli.main import main; main(['--profile', 'selftest', '--size', '4096'])")
    assert proc.returncode == 0, proc.stderr
    assert len(_sections(proc.stderr)) == 3
    proc = _run("from spirula.cli.main import main; main(['selftest', '--size', '4096', '--profile'])")
    assert len(_sections(proc.stderr)) == 3
    proc = _run("from spirula.cli.main import main; main(['selftest', '--size', '4096'])")
    assert "[spirula-profile]" not in proc.stderr


def test_host_stages_are_rows_of_the_timing_breakdown(monkeypatch):
    """profiler.stage times a host stage (frames, SfM) into a `stage NAME` row,
    taken out of the host estimate; off, it reads no clock."""
    monkeypatch.setenv("SS_PROFILE", "0")
    profiler.reset()
    with profiler.stage("frames"):
        pass
    assert profiler.active() is None
    monkeypatch.setenv("SS_PROFILE", "1")
    profiler.reset()
    prof = profiler.active()
    try:
        ticks = iter(range(0, 10**12, 10**9))  # a clock that advances 1 s a read
        prof.clock = lambda: next(ticks)
        prof.t0 = prof.clock()
        for name in ("frames", "sfm extract", "frames"):
            with profiler.stage(name):
                pass
        rows = {ln[:22].strip(): ln[22:].split() for ln in prof.timing_report().splitlines()[2:-1]}
    finally:
        profiler.reset()
    assert rows["stage frames"] == ["2", "-", "2000.000", "-"]
    assert rows["stage sfm extract"] == ["1", "-", "1000.000", "-"]
    wall, host = float(rows["wall (total)"][0]), float(rows["host (est.)"][0])
    assert wall - host == 3000.000
