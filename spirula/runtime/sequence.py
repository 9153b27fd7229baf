"""Recording named kernels into one Kompute sequence, correctly ordered.

One ``seq.eval()`` costs ~0.6 ms on an H200, so a whole training step is
recorded once and evaluated once per step. Kompute records no barrier between
two compute dispatches, so a dispatch reading what an earlier one wrote would
be a data race by the Vulkan spec. :class:`Recorder` therefore tracks, per
buffer, what was read and written since the last barrier (from each kernel's
``readonly``/``writeonly`` bindings) and inserts a global memory barrier
(``kp.OpBarrier``, from Spirula's Kompute patch) before any dispatch with a
read-after-write, write-after-write or write-after-read hazard. Independent
dispatches stay unordered, so the GPU may overlap them. Every sequence also
starts with a barrier (ordering it after earlier submissions) and ends with
one that makes its writes visible to the host; only that last one names the
host, since on NVIDIA a host-inclusive barrier between dispatches costs GPU
time (docs/kompute.md).

With the profiler on, the sequence gets a timestamp after every operation and
each dispatch's GPU time is the difference of the pair around it.

The recording, its checks and the barrier plan serve both backends: ``finish``
asks the device for its :class:`Sequence` (Vulkan's is
:class:`spirula.backends.vulkan.sequence.RecordedSequence`, CUDA's
:class:`spirula.backends.cuda.device.CudaSequence`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from spirula import settings
from spirula.contract.kernel import Kernel
from spirula.runtime.buffers import Buffer

GRID_STRIDE_MAX_GROUPS = 16384  # copy/fill workgroups of 256 threads (grid-stride loops; 83% of
# the H200's bandwidth, against 76% with 1024)


@dataclasses.dataclass(frozen=True)
class Threads:
    """A 1D dispatch given by its invocations: ``rec.dispatch(name, Threads(n), ...)``
    records enough workgroups of the kernel's own local size for ``n`` (``Kernel.groups``)."""

    n: int


def grid_stride_groups(kernel: Kernel, units: int) -> int:
    """Workgroups for grid-stride ``kernel`` over ``units`` items: a power of two
    (so few distinct algorithms are built) up to GRID_STRIDE_MAX_GROUPS."""
    g = max(1, kernel.groups(units))
    return min(1 << (g - 1).bit_length(), GRID_STRIDE_MAX_GROUPS)


def fill_word(value) -> int:
    """The 32-bit word a fill writes: ints as they are, floats as their bits."""
    if isinstance(value, (float, np.floating)):
        return int(np.float32(value).view(np.uint32))
    return int(value) & 0xFFFFFFFF


def _check_aliasing(kernel: Kernel, bufs: list):
    """A ``restrict`` binding promises the compiler that no other binding of the
    dispatch reaches its memory; binding one buffer twice, with a write on
    either side, would break that promise silently (undefined results)."""
    seen = {}
    for bd, buf in zip(kernel.bindings, bufs):
        other = seen.get(id(buf))
        if other is not None and (bd.restrict or other.restrict) and (bd.writes or other.writes):
            raise ValueError(
                "%s: buffer %s is bound to both %s and %s, which are restrict"
                % (kernel.name, buf.name, other.name, bd.name)
            )
        seen.setdefault(id(buf), bd)


@dataclasses.dataclass
class _Dispatch:
    name: str  # profiler row
    kind: str  # 'kernel' | 'copy' | 'fill'
    algorithm: object
    push: np.ndarray
    reads: frozenset  # ids of tensors read
    writes: frozenset  # ids of tensors written
    nbytes: int = 0  # bytes moved (copy/fill)


class Recorder:
    """Collects dispatches; :meth:`finish` records them into the device's :class:`Sequence`.

    Example::

        rec = device.recorder("render")
        rec.dispatch("projection_fwd", Threads(n),
                     buffers=dict(means=means, ...), push=dict(n=n))
        seq = rec.finish()
        seq.run()
    """

    def __init__(self, device, label: str = ""):
        self.device = device
        self.label = label
        self._ops = []
        self._buffers = {}  # id(Buffer) -> (Buffer, version at record time)

    def __len__(self):
        return len(self._ops)

    def _use(self, buffers):
        for b in buffers:
            if not isinstance(b, Buffer):
                raise TypeError("expected a pool Buffer, got %r" % (b,))
            if not b.alive:
                raise ValueError("buffer %r was freed" % b.name)
            self._buffers[id(b)] = (b, b.version)

    def dispatch(
        self,
        kernel,
        groups,
        buffers: dict,
        push: dict | None = None,
        spec: dict | None = None,
        defines: dict | None = None,
    ):
        """Record one dispatch of ``kernel`` (a name or a Kernel).

        Args:
            groups: workgroup count, an int or (x, y, z), or ``Threads(n)`` for
                one invocation per item of a 1D dispatch; a 1D count past the
                device limit is folded into y (see ``linear_group_id()``).
            buffers: every binding of the kernel by name -> Buffer.
            push: push constants by name; spec: specialization constants by name.
            defines: compile-time variant (only with a kernel name).
        """
        if not isinstance(kernel, Kernel):
            kernel = self.device.kernel(kernel, **(defines or {}))
        return self._add(kernel, groups, buffers, push, spec, 0)

    def _add(self, kernel: Kernel, groups, buffers: dict, push, spec, nbytes: int):
        names = [b.name for b in kernel.bindings]
        missing = [n for n in names if n not in buffers]
        extra = sorted(set(buffers) - set(names))
        if missing or extra:
            raise TypeError(
                "%s: %s%s"
                % (
                    kernel.name,
                    "missing buffers %s " % missing if missing else "",
                    "unknown buffers %s" % extra if extra else "",
                )
            )
        bufs = [buffers[n] for n in names]
        _check_aliasing(kernel, bufs)
        self._use(bufs)
        if isinstance(groups, Threads):
            groups = kernel.groups(groups.n)
        groups = self.device.fold_groups(groups)
        tensors = [b.tensor for b in bufs]
        algo = self.device.algorithm(kernel, tensors, groups, kernel.pack_spec(spec))
        reads = frozenset(id(t) for t, bd in zip(tensors, kernel.bindings) if bd.reads)
        writes = frozenset(id(t) for t, bd in zip(tensors, kernel.bindings) if bd.writes)
        kind = kernel.name if kernel.name in ("copy", "fill") else "kernel"
        self._ops.append(_Dispatch(kernel.name, kind, algo, kernel.pack_push(push), reads, writes, nbytes))
        return self

    def copy(self, src: Buffer, dst: Buffer, nbytes: int | None = None, src_offset: int = 0, dst_offset: int = 0):
        """Record a D2D copy of ``nbytes`` (default: ``src`` in use), multiples of 4."""
        nbytes = src.nbytes - src_offset if nbytes is None else nbytes
        nwords, so, do = nbytes // 4, src_offset // 4, dst_offset // 4
        vec4 = nwords % 4 == 0 and so % 4 == 0 and do % 4 == 0
        k = 4 if vec4 else 1
        kernel = self.device.kernel("copy", VEC4=int(vec4))
        return self._add(
            kernel,
            grid_stride_groups(kernel, nwords // k),
            dict(src=src, dst=dst),
            dict(src_offset=so // k, dst_offset=do // k, count=nwords // k),
            None,
            nbytes,
        )

    def fill(self, dst: Buffer, value=0, nbytes: int | None = None, offset: int = 0):
        """Record a memset of ``nbytes`` (default: ``dst`` in use, rounded up to
        whole words) to a 32-bit ``value`` (int word or float bits)."""
        nbytes = -(-dst.nbytes // 4) * 4 if nbytes is None else nbytes
        nwords, off = nbytes // 4, offset // 4
        vec4 = nwords % 4 == 0 and off % 4 == 0
        k = 4 if vec4 else 1
        kernel = self.device.kernel("fill", VEC4=int(vec4))
        return self._add(
            kernel,
            grid_stride_groups(kernel, nwords // k),
            dict(dst=dst),
            dict(offset=off // k, count=nwords // k, value=fill_word(value)),
            None,
            nbytes,
        )

    def plan(self) -> list:
        """The operations in order: each dispatch, with 'barrier' where one is needed."""
        out = ["barrier"]
        read, written = set(), set()
        every = settings.barrier_all()  # SPIRULA_BARRIER_ALL=1: before every dispatch (debugging)
        for op in self._ops:
            if every or (op.reads & written) or (op.writes & (written | read)):
                out.append("barrier")
                read.clear()
                written.clear()
            out.append(op)
            read |= op.reads
            written |= op.writes
        out.append("barrier")
        return out

    def finish(self) -> Sequence:
        """The device's :class:`Sequence` of what was recorded."""
        return self.device.sequence(self.plan(), list(self._buffers.values()), self.label)


class Sequence:
    """A recorded sequence, run as often as needed, on any backend.

    ``dispatches`` and ``barriers`` count the plan's operations. ``stale`` is
    True once a buffer it uses was reallocated or freed: record it again. A
    backend gives ``_eval`` (run and wait), ``_eval_async``/``_await`` (the
    same in two halves) and ``_account`` (the profiler's rows of one run).
    """

    def __init__(self, device, plan: list, buffers: list, label: str = ""):
        self.device = device
        self.label = label
        self._buffers = buffers
        self.dispatches = sum(1 for op in plan if op != "barrier")
        self.barriers = len(plan) - self.dispatches
        self._async = False

    @property
    def stale(self) -> bool:
        return any(b.version != v for b, v in self._buffers)

    def _check(self):
        if self.stale:
            names = [b.name for b, v in self._buffers if b.version != v]
            raise RuntimeError(
                "sequence %r uses reallocated or freed buffers %s: record it again" % (self.label, names)
            )

    def run(self):
        """Run the sequence and wait for it."""
        self._check()
        self.device.sync()
        prof = self.device.profiler
        if prof is None:
            self._eval()
            return
        t0 = prof.clock()
        self._eval()
        self._account(prof, prof.clock() - t0)

    def run_async(self):
        """Submit the sequence and return; :meth:`wait` (or the next transfer) waits.

        Sequences already running stay running: the GPU runs submissions in
        order (on Vulkan each sequence starts with a barrier against earlier
        submissions to the queue; CUDA has one stream), so several may be in
        flight; ``device.sync()`` waits for them all. The same sequence
        submitted again first waits for its previous run."""
        self._check()
        if self._async:
            self.wait()
        self._eval_async()
        self._async = True
        self.device._inflight.append(self)
        self.device._pending = self

    def wait(self):
        """Wait for this sequence's run (and so for every submission before it)."""
        if not self._async:
            return
        prof = self.device.profiler
        t0 = prof.clock() if prof is not None else 0
        self._await()
        self._async = False
        inflight = self.device._inflight
        # what was submitted before it is finished too (in-order execution)
        k = inflight.index(self) if self in inflight else -1
        for earlier in inflight[:k]:
            earlier._finished()
        del inflight[: k + 1]
        if self.device._pending is self or not inflight:
            self.device._pending = inflight[-1] if inflight else None
        if prof is not None:
            # Only the time spent blocked here counts as GPU wait; the host work
            # done between run_async and wait stays host time.
            self._account(prof, prof.clock() - t0)

    def _finished(self):
        """A later submission was waited for, so this run is over too: no wait,
        and (with the profiler on) its rows count as zero wall time."""
        self._await()
        self._async = False
        prof = self.device.profiler
        if prof is not None:
            self._account(prof, 0, waited=False)

    def _eval(self):
        raise NotImplementedError

    def _eval_async(self):
        raise NotImplementedError

    def _await(self):
        raise NotImplementedError

    def _account(self, prof, wall_ns: int, waited: bool = True):
        raise NotImplementedError

    def gpu_span_ns(self):
        """GPU time from the start of this sequence's last run to its end, the
        gaps between dispatches included (barriers, launches); None when it
        was recorded without the profiler."""
        raise NotImplementedError
