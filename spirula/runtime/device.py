"""The device interface every backend implements, and the code they share.

A backend is a package of :mod:`spirula.backends` (:mod:`spirula.backends.vulkan`,
:mod:`spirula.backends.cuda`) whose ``__init__`` gives its :class:`Device`
subclass (``backend`` set to the package's name) and three functions:
``list_devices()`` (their :class:`DeviceInfo`, raising a one-line
:class:`~spirula.errors.SpirulaError` where the backend cannot run),
``resolve_index(index)`` and ``unavailable_reason(index)``.
:func:`spirula.backends.open_device` is the one way to open a device.

What the render and training code use of a device, on either backend:

- ``info`` (:class:`DeviceInfo`), ``pool`` (the :class:`BufferPool`: every
  allocation, by category), ``profiler`` (the active Profiler or None),
  ``defines`` and ``float_atomics``;
- ``kernel(name, **defines)``, ``recorder(label)`` (a :class:`Recorder`, whose
  ``finish()`` gives a :class:`Sequence`: ``run``, ``run_async``, ``wait``,
  ``stale``), ``sync()``;
- the transfers, each done now, after any sequence still running:
  ``upload`` (H2D), ``readback`` (D2H), ``copy`` (D2D) and ``fill`` (memset).

This class does the part of each transfer that is the same everywhere (the
range checks, waiting for a running sequence, the profiler's transfer rows)
and calls the backend's primitive (``_write``, ``_read``, ``_copy``,
``_fill``) for the data movement itself.
"""

from __future__ import annotations

import abc
import dataclasses
import math

import numpy as np

from spirula import settings
from spirula.contract.kernel import Kernel
from spirula.errors import SpirulaError
from spirula.runtime import profiler as _profiler
from spirula.runtime.buffers import Buffer, BufferPool
from spirula.runtime.sequence import Recorder, Sequence, fill_word

__all__ = ["Device", "DeviceInfo", "Sequence", "check_range", "resolve_index"]


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """One GPU, as ``spirula devices`` lists it (a backend may add fields).

    ``index`` is the backend's own numbering (Vulkan: the loader's
    enumeration, the order ``kp.Manager(index)`` uses; CUDA: CUDA's).
    ``timestamp_period_ns`` converts timestamp ticks to nanoseconds;
    ``timestamp_valid_bits`` masks them. ``max_workgroup_count`` is the
    grid limit :meth:`Device.fold_groups` folds into.
    """

    index: int
    name: str
    device_type: str
    driver: str
    api_version: str
    subgroup_size: int
    timestamps: bool
    timestamp_period_ns: float
    timestamp_valid_bits: int
    device_local_bytes: int
    max_storage_buffer_range: int
    max_shared_memory: int
    max_workgroup_count: tuple
    max_workgroup_invocations: int
    shader_int64: bool
    atomic_float_add: bool
    extensions: frozenset

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "cpu"


def check_range(buf: Buffer, offset: int, nbytes: int):
    """Raise ValueError unless ``[offset, offset + nbytes)`` is a word-aligned
    range inside the live buffer ``buf``'s capacity."""
    if not buf.alive:
        raise ValueError("buffer %r was freed" % buf.name)
    if offset % 4 or nbytes % 4:
        raise ValueError("%s: offset and size must be multiples of 4 bytes (got %d, %d)" % (buf.name, offset, nbytes))
    if offset < 0 or nbytes < 0 or offset + nbytes > buf.capacity:
        raise ValueError(
            "%s: range [%d, %d) outside the buffer's %d bytes" % (buf.name, offset, offset + nbytes, buf.capacity)
        )


def resolve_index(index, count: int, default: int, error, kind: str, listing: str = "spirula devices") -> int:
    """The device index to use: ``index``, else ``$SPIRULA_DEVICE``, else ``default``.

    ``count`` devices of ``kind`` ('Vulkan', 'CUDA') exist; an index that is not
    one of them raises ``error`` (a SpirulaError class) with one line that
    points at ``listing``.
    """
    source = "device"
    if index is None and settings.device() is not None:
        index, source = settings.device(), "device (--device / SPIRULA_DEVICE)"
    if index is None:
        return default
    try:
        index = int(index)
    except ValueError:
        raise error("%s %r is not a device index (see `%s`)" % (source, index, listing)) from None
    if not 0 <= index < count:
        raise error(
            "%s %d does not exist: this machine has %d %s device%s (0..%d; see `%s`)"
            % (source, index, count, kind, "s" if count != 1 else "", count - 1, listing)
        )
    return index


class Device(abc.ABC):
    """One GPU of one backend and everything Spirula allocates on it.

    A subclass sets ``info``, ``defines`` and ``float_atomics``, then calls
    :meth:`_init_device`; it implements the kernel, memory and transfer
    primitives below. Everything else is here.
    """

    backend = ""  # 'vulkan' | 'cuda'
    info: DeviceInfo
    defines: dict  # compile-time defines every kernel gets (capabilities)
    float_atomics: bool

    def _init_device(self):
        self.pool = BufferPool(self)
        self.profiler = _profiler.active()
        if self.profiler is not None:
            self.profiler.pools.append(self.pool)
            self.profiler.devices.append(self)
        self._pending = None  # the last Sequence started with run_async and not waited for
        self._inflight = []  # every such Sequence, in submission order

    def __repr__(self):
        return "%s(%d: %s, %s)" % (type(self).__name__, self.info.index, self.info.name, self.info.driver)

    # -- kernels and recording (the backend's) ----------------------------------------
    @abc.abstractmethod
    def kernel(self, name: str, **defines) -> Kernel:
        """Kernel ``name`` (its contract from ``shaders/<name>.comp``) for this
        device, with the device's capability defines merged in."""

    @abc.abstractmethod
    def kernel_names(self) -> list:
        """The kernels this device can run."""

    @abc.abstractmethod
    def algorithm(self, kernel: Kernel, tensors, groups: tuple, spec_words: np.ndarray):
        """What one recorded dispatch runs: ``kernel`` bound to ``tensors``
        (binding order) with ``groups`` workgroups and specialization words."""

    @abc.abstractmethod
    def sequence(self, plan: list, buffers: list, label: str = "") -> Sequence:
        """The :class:`Sequence` a :class:`Recorder` finishes with: ``plan`` is
        its operations with 'barrier' where one is needed, ``buffers`` the
        (Buffer, version) pairs it uses."""

    def recorder(self, label: str = "") -> Recorder:
        """A :class:`~spirula.runtime.sequence.Recorder` for one sequence of dispatches."""
        return Recorder(self, label)

    def fold_groups(self, groups) -> tuple:
        """(x, y, z) workgroup counts within the device limits: a 1D count past
        max_workgroup_count[0] is folded into y (shaders use linear_group_id())."""
        if isinstance(groups, (tuple, list)):
            g = tuple(int(v) for v in groups) + (1,) * (3 - len(groups))
        else:
            g = (int(groups), 1, 1)
        g = tuple(max(1, v) for v in g)
        max_x = self.info.max_workgroup_count[0]
        if g[0] > max_x and g[1] == 1 and g[2] == 1:
            y = -(-g[0] // max_x)
            g = (-(-g[0] // y), y, 1)
        if any(v > m for v, m in zip(g, self.info.max_workgroup_count)):
            raise SpirulaError(
                "dispatch of %s workgroups exceeds %s's limit %s" % (g, self.info.name, self.info.max_workgroup_count)
            )
        return g

    def sync(self):
        """Wait for the sequences started with ``run_async`` (counted as GPU wait)."""
        if self._inflight:
            self._inflight[-1].wait()

    # -- memory (what BufferPool calls; the backend's) ------------------------------------
    @abc.abstractmethod
    def new_storage_tensor(self, words: int):
        """Device memory of ``words`` 32-bit words: a pool buffer's ``tensor``."""

    @abc.abstractmethod
    def new_host_tensor(self, words: int):
        """Host-visible memory the GPU reads and writes (``data()`` is the host's uint32 view)."""

    @abc.abstractmethod
    def forget_tensor(self, tensor):
        """``tensor`` is being dropped: release what refers to it."""

    @abc.abstractmethod
    def copy_tensors(self, src_tensor, dst_tensor, nbytes: int):
        """Copy the first ``nbytes`` (a multiple of 4) between raw tensors now (pool growth)."""

    # -- transfers --------------------------------------------------------------------------
    def _transfer(self, kind: str, nbytes: int, move, *args):
        """Wait for a running sequence, then ``move(*args)``; with the profiler
        on, the whole of it is one ``kind`` row of the timing breakdown."""
        prof = self.profiler
        if prof is None:
            self.sync()
            move(*args)
            return
        t0 = prof.clock()
        self.sync()
        move(*args)
        prof.transfer(kind, nbytes, prof.clock() - t0)

    def upload(self, buf: Buffer, array, offset: int = 0):
        """H2D: write ``array``'s bytes into ``buf`` at byte ``offset`` (both multiples of 4)."""
        data = np.ascontiguousarray(array)
        nbytes = data.nbytes
        check_range(buf, offset, nbytes)
        if nbytes == 0:
            return
        self._transfer("H2D", nbytes, self._write, buf, data.reshape(-1).view(np.uint8), offset)

    def readback(self, buf: Buffer, shape=None, dtype=None, offset: int = 0) -> np.ndarray:
        """D2H: a new numpy array of ``buf``'s contents (its used shape and dtype
        unless given), starting at byte ``offset``."""
        dtype = np.dtype(dtype or buf.dtype)
        if shape is None:
            shape = buf.shape if offset == 0 and dtype == buf.dtype else ((buf.nbytes - offset) // dtype.itemsize,)
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        nbytes = int(math.prod(shape)) * dtype.itemsize
        check_range(buf, offset, nbytes)
        out = np.empty(shape, dtype)
        self._transfer("D2H", nbytes, self._read, buf, out.reshape(-1).view(np.uint8), offset)
        return out

    def copy(self, src: Buffer, dst: Buffer, nbytes: int | None = None, src_offset: int = 0, dst_offset: int = 0):
        """D2D: copy ``nbytes`` (default: all of ``src`` in use) between buffers now."""
        nbytes = src.nbytes - src_offset if nbytes is None else nbytes
        check_range(src, src_offset, nbytes)
        check_range(dst, dst_offset, nbytes)
        self._transfer("D2D", nbytes, self._copy, src, dst, nbytes, src_offset, dst_offset)

    def fill(self, buf: Buffer, value=0, nbytes: int | None = None, offset: int = 0):
        """memset: set ``nbytes`` (default: the whole capacity) from byte ``offset``
        to a 32-bit ``value`` (an int is the word; a float its bit pattern)."""
        nbytes = buf.capacity - offset if nbytes is None else nbytes
        check_range(buf, offset, nbytes)
        self._transfer("memset", nbytes, self._fill, buf, fill_word(value), nbytes, offset)

    # The data movement of each transfer (ranges checked, no sequence running).
    @abc.abstractmethod
    def _write(self, buf: Buffer, data: np.ndarray, offset: int):
        """H2D: ``data`` (uint8, a multiple of 4 bytes) into ``buf`` at byte ``offset``."""

    @abc.abstractmethod
    def _read(self, buf: Buffer, out: np.ndarray, offset: int):
        """D2H: ``out.size`` bytes from ``buf`` at byte ``offset`` into ``out`` (uint8)."""

    @abc.abstractmethod
    def _copy(self, src: Buffer, dst: Buffer, nbytes: int, src_offset: int, dst_offset: int):
        """D2D: ``nbytes`` from ``src`` at ``src_offset`` to ``dst`` at ``dst_offset``."""

    @abc.abstractmethod
    def _fill(self, buf: Buffer, word: int, nbytes: int, offset: int):
        """memset: ``nbytes`` of ``buf`` from byte ``offset`` to the 32-bit ``word``."""

    # -- the profiler's hooks and the end -------------------------------------------------------
    def process_memory_used(self) -> int | None:
        """Device memory this process uses as the driver reports it (the VRAM
        report's ``process (driver)`` row, metrics.json's process_vram_mib);
        None where the driver does not say."""
        return None

    def close(self):
        """Free every pool buffer (the device is unusable afterwards)."""
        self.sync()
        for buf in list(self.pool.buffers.values()):
            self.pool.free(buf)
