"""The built-in profiler: ``SS_PROFILE=1`` (or ``--profile``; spirula/settings.py).

On, it collects three things and prints them on stderr at exit, each framed by
``[spirula-profile] ---- ... ----`` lines (formats: docs/design.md §5):

1. GPU time by kernel, from a timestamp pair around every dispatch;
2. the timing breakdown: H2D / D2H / D2D / memset / device wait (of which
   GPU-exec), the host stages before training (frames, SfM: :func:`stage`)
   and the host time left over;
3. the VRAM high-water breakdown of the buffer pool, by category.

Off (unset or ``0``), :func:`active` returns None, and every caller guards its
bookkeeping with ``if prof is not None``: no timestamps are recorded, no clock
is read and nothing extra is synchronized.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import sys
import time

from spirula import settings

PREFIX = "[spirula-profile]"

_active = None


def active():
    """The process's Profiler when profiling is on, else None (created on first use)."""
    global _active
    if _active is None and settings.profile():
        _active = Profiler()
        atexit.register(_active.report_at_exit)
    return _active


def reset():
    """Forget the process profiler (tests switch SS_PROFILE on and off)."""
    global _active
    if _active is not None:
        try:
            atexit.unregister(_active.report_at_exit)
        except Exception:
            pass
    _active = None


@contextlib.contextmanager
def stage(name: str):
    """Time a host stage (``frames``, ``sfm extract``, ...) for the timing
    breakdown; nothing when profiling is off."""
    prof = active()
    if prof is None:
        yield
        return
    t0 = prof.clock()
    try:
        yield
    finally:
        prof.stage(name, prof.clock() - t0)


class _Row:
    __slots__ = ("count", "bytes", "ns")

    def __init__(self):
        self.count = 0
        self.bytes = 0
        self.ns = 0


class Profiler:
    """Accumulates kernel GPU times, transfer times and pool statistics.

    Times are integer nanoseconds. ``clock`` is ``time.perf_counter_ns``.
    """

    TRANSFERS = ("H2D", "D2H", "D2D", "memset")

    def __init__(self):
        self.clock = time.perf_counter_ns
        self.t0 = self.clock()
        self.kernels = collections.defaultdict(_Row)  # name -> count, ns
        self.transfers = {k: _Row() for k in self.TRANSFERS}
        self.wait = _Row()  # device (GPU wait): evals of recorded sequences
        self.gpu_exec = _Row()  # of which: dispatch time from timestamps
        self.stages = collections.defaultdict(_Row)  # host stages before training, in order
        self.pools = []  # BufferPools to report
        self.devices = []  # each device used (its process_memory_used() for the VRAM report)
        self.reported = False

    # -- recording ----------------------------------------------------------------
    def kernel(self, name: str, ns: int):
        row = self.kernels[name]
        row.count += 1
        row.ns += ns

    def transfer(self, kind: str, nbytes: int, ns: int, count: int = 1):
        row = self.transfers[kind]
        row.count += count
        row.bytes += nbytes
        row.ns += ns

    def stage(self, name: str, ns: int):
        row = self.stages[name]
        row.count += 1
        row.ns += ns

    def device_wait(self, ns: int, gpu_ns: int, dispatches: int, waited: bool = True):
        """``waited``: the host blocked (the row counts host waits); False for a
        sequence found finished while waiting for a later one."""
        self.wait.count += int(waited)
        self.wait.ns += ns
        self.gpu_exec.count += dispatches
        self.gpu_exec.ns += gpu_ns

    def sequence(self, wall_ns: int, timed, waited: bool = True):
        """Account one evaluated sequence: ``wall_ns`` spent waiting for it and
        ``timed``, its dispatches as (op, GPU ns) with ``op.name``, ``op.kind``
        ('kernel' | 'copy' | 'fill') and ``op.nbytes``. Recorded copies and
        fills count as D2D / memset, not as GPU-exec (nor as GPU wait)."""
        gpu = moved = n = 0
        for op, ns in timed:
            self.kernel(op.name, ns)
            if op.kind == "copy":
                self.transfer("D2D", op.nbytes, ns)
                moved += ns
            elif op.kind == "fill":
                self.transfer("memset", op.nbytes, ns)
                moved += ns
            else:
                gpu += ns
                n += 1
        self.device_wait(max(wall_ns - moved, 0), gpu, n, waited)

    # -- reports ------------------------------------------------------------------
    def kernel_report(self) -> str:
        lines = [
            PREFIX + " ---- GPU time by kernel ----",
            "%-40s %10s %12s %10s" % ("kernel", "count", "gpu_ms", "us/call"),
        ]
        for name, row in sorted(self.kernels.items(), key=lambda kv: -kv[1].ns):
            lines.append("%-40s %10d %12.3f %10.2f" % (name, row.count, row.ns / 1e6, row.ns / 1e3 / max(row.count, 1)))
        lines.append(PREFIX + " ----")
        return "\n".join(lines)

    def timing_report(self) -> str:
        wall = self.clock() - self.t0
        names = {"H2D": "H2D  (upload)", "D2H": "D2H  (readback)", "D2D": "D2D  (dev->dev)", "memset": "memset"}
        lines = [
            PREFIX + " ---- timing breakdown ----",
            "%-22s %7s %14s %12s %10s" % ("category", "count", "bytes", "wall_ms", "GB/s"),
        ]
        spent = 0
        for kind in self.TRANSFERS:
            row = self.transfers[kind]
            spent += row.ns
            if kind == "memset":
                lines.append("%-22s %7d %14s %12.3f %10s" % (names[kind], row.count, "-", row.ns / 1e6, "-"))
            else:
                gbs = row.bytes / row.ns if row.ns else 0.0
                lines.append("%-22s %7d %14d %12.3f %10.2f" % (names[kind], row.count, row.bytes, row.ns / 1e6, gbs))
        lines.append(
            "%-22s %7d %14s %12.3f %10s" % ("device (GPU wait)", self.wait.count, "-", self.wait.ns / 1e6, "-")
        )
        lines.append(
            "%-22s %7d %14s %12.3f %10s"
            % ("  of which GPU-exec", self.gpu_exec.count, "-", self.gpu_exec.ns / 1e6, "-")
        )
        for name, row in self.stages.items():
            spent += row.ns
            lines.append("%-22s %7d %14s %12.3f %10s" % ("stage " + name, row.count, "-", row.ns / 1e6, "-"))
        host = wall - spent - self.wait.ns
        lines.append("%-22s %7s %14s %12.3f" % ("  host (est.)", "", "", host / 1e6))
        lines.append("%-22s %7s %14s %12.3f" % ("  wall (total)", "", "", wall / 1e6))
        lines.append(PREFIX + " ----")
        return "\n".join(lines)

    def vram_report(self) -> str:
        from spirula.runtime.buffers import CATEGORIES

        mib = 1 << 20
        lines = [
            PREFIX + " ---- VRAM breakdown (pool high-water) ----",
            "%-24s %10s %11s %11s" % ("category", "buffers", "used_MiB", "cap_MiB"),
        ]
        total_n = total_used = total_cap = scratch = 0
        largest = []
        for pool in self.pools:
            hw = pool.high_water
            for cat in CATEGORIES:
                n, used, cap = hw["categories"].get(cat, (0, 0, 0))
                if n:
                    lines.append("%-24s %10d %11.2f %11.2f" % (cat, n, used / mib, cap / mib))
                total_n += n
                total_used += used
                total_cap += cap
            scratch += hw["scratch"]
            largest += hw["largest"]
        lines.append("%-24s %10d %11.2f %11.2f" % ("  pool total", total_n, total_used / mib, total_cap / mib))
        lines.append("%-24s %10s %11s %11.2f" % ("  scratch", "-", "-", scratch / mib))
        for pool in self.pools:
            if getattr(pool, "worst_ratio", None) is not None:
                cap, live = pool.worst_ratio_at
                lines.append(
                    "%-24s %10s %11.2f %11.2f  (worst capacity / live need: %.3fx)"
                    % ("  worst vs live need", "", live / mib, cap / mib, pool.worst_ratio)
                )
        process = _process_vram(self.devices)
        if process is not None:
            lines.append("%-24s %10s %11s %11.2f" % ("  process (driver)", "", "", process / mib))
        lines.append("%-24s %10s %11s %11s" % ("largest buffers", "category", "used_MiB", "cap_MiB"))
        for name, cat, used, cap in sorted(largest, key=lambda t: -t[3])[:8]:
            lines.append("  %-22s %10s %11.2f %11.2f" % (name, cat, used / mib, cap / mib))
        lines.append(PREFIX + " ----")
        return "\n".join(lines)

    def report(self) -> str:
        return "\n".join((self.kernel_report(), self.timing_report(), self.vram_report()))

    def report_at_exit(self):
        if self.reported:
            return
        self.reported = True
        try:
            sys.stderr.write(self.report() + "\n")
            sys.stderr.flush()
        except Exception as exc:  # never turn a finished run into a crash at exit
            sys.stderr.write("%s report failed: %s\n" % (PREFIX, exc))


def _process_vram(devices):
    """Bytes of device memory this process uses, as the drivers of ``devices``
    report it (Vulkan: VK_EXT_memory_budget; CUDA: cudaMemGetInfo); None where
    none does."""
    total = None
    for dev in devices:
        try:
            used = dev.process_memory_used()
        except Exception:
            used = None
        if used is not None:
            total = (total or 0) + used
    return total
