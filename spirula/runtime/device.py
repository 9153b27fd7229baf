"""The GPU device: a Kompute manager plus what Spirula keeps beside it.

:class:`Device` owns the ``kp.Manager`` (or borrows one an embedding app
hands over), the buffer pool, the kernel registry, the cache of Kompute
algorithms (one per kernel x bound buffers x workgroups x specialization) and
the host staging memory. Transfers go through it so the profiler sees them:
:meth:`upload` (H2D), :meth:`readback` (D2H), :meth:`copy` (D2D) and
:meth:`fill` (memset); each is a ``copy``/``fill`` kernel between evals.

Device selection: ``Device(index)``, else ``SPIRULA_DEVICE``, else a
discrete GPU before an integrated one before the CPU driver (lavapipe).
"""
from __future__ import annotations

import collections
import os

import numpy as np

from spirula.errors import NoVulkanError, SpirulaError
from spirula.runtime import profiler as _profiler
from spirula.runtime import vkinfo
from spirula.runtime.buffers import Buffer, BufferPool
from spirula.runtime.kernels import Kernel, KernelRegistry
from spirula.runtime.sequence import Recorder, fill_word, grid_stride_groups

STAGING_MAX_BYTES = 64 << 20     # transfers larger than this go in chunks


def _import_kp():
    try:
        import kp
    except ImportError as exc:
        if "libvulkan" in str(exc):
            raise NoVulkanError("no Vulkan loader (libvulkan.so.1): " + vkinfo.INSTALL_HINT) from None
        raise SpirulaError("Kompute's Python module `kp` is not installed: run `make install` "
                           "(%s)" % exc) from None
    if not hasattr(kp, "OpBarrier"):
        raise SpirulaError("this `kp` lacks Spirula's patch (kp.OpBarrier): run `make install`, "
                           "which builds it (docs/kompute.md)")
    return kp


def resolve_index(index=None, devices=None) -> int:
    """The device index to use: the argument, else $SPIRULA_DEVICE, else the default."""
    devices = devices if devices is not None else vkinfo.list_devices()
    source = "device"
    if index is None and os.environ.get("SPIRULA_DEVICE", "") != "":
        index, source = os.environ["SPIRULA_DEVICE"], "device (--device / SPIRULA_DEVICE)"
    if index is None:
        return vkinfo.default_index(devices)
    try:
        index = int(index)
    except ValueError:
        raise NoVulkanError("%s %r is not a device index (see `spirula devices`)" % (source, index)) from None
    if not 0 <= index < len(devices):
        raise NoVulkanError("%s %d does not exist: this machine has %d Vulkan device%s (0..%d; see "
                            "`spirula devices`)" % (source, index, len(devices),
                                                    "s" if len(devices) != 1 else "", len(devices) - 1))
    return index


class Device:
    """One Vulkan device and everything Spirula allocates on it.

    Args:
        index: physical device index (``spirula devices``); None picks as above.
        manager: an existing ``kp.Manager`` to borrow (embedding); then
            ``index`` names its physical device if known, else it is matched by name.
        float_atomics: use native float atomicAdd where the device offers it
            (``SPIRULA_NO_FLOAT_ATOMICS=1`` forces the compare-and-swap path).
    """

    def __init__(self, index: int | None = None, manager=None, *, float_atomics: bool | None = None):
        self.kp = kp = _import_kp()
        devices = vkinfo.list_devices()
        if manager is None:
            index = resolve_index(index, devices)
            self.info = devices[index]
            if float_atomics is None:
                float_atomics = os.environ.get("SPIRULA_NO_FLOAT_ATOMICS", "") in ("", "0")
            float_atomics = bool(float_atomics and self.info.atomic_float_add)
            exts = [vkinfo.ATOMIC_FLOAT_EXTENSION] if float_atomics else []
            try:
                self.mgr = kp.Manager(index, [], exts)
            except Exception as exc:
                raise NoVulkanError("cannot open Vulkan device %d (%s): %s"
                                    % (index, self.info.name, exc)) from None
        else:
            self.mgr = manager
            name = manager.get_device_properties()["device_name"]
            if index is None:
                index = next((d.index for d in devices if d.name == name), 0)
            self.info = devices[index]
            # A borrowed manager's enabled features are unknown unless stated.
            float_atomics = bool(float_atomics)
        self.float_atomics = float_atomics
        self.defines = {"ATOMIC_FLOAT": int(float_atomics)}
        self.kernels = KernelRegistry()
        self.pool = BufferPool(self)
        self.profiler = _profiler.active()
        if self.profiler is not None:
            self.profiler.pools.append(self.pool)
            self.profiler.devices.append(self.info)
        self._algorithms = {}
        self._algorithms_by_tensor = collections.defaultdict(set)
        self._staging = None
        self._staging_words = 0
        self._immediate = None
        self._pending = None           # a RecordedSequence evaluating asynchronously
        bits = self.info.timestamp_valid_bits
        self.timestamp_mask = (1 << bits) - 1 if 0 < bits < 64 else (1 << 64) - 1

    def __repr__(self):
        return "Device(%d: %s, %s)" % (self.info.index, self.info.name, self.info.driver)

    # -- kernels and algorithms ---------------------------------------------------
    def kernel(self, name: str, **defines) -> Kernel:
        """Kernel ``name`` compiled for this device (capability defines merged in)."""
        return self.kernels.get(name, **{**self.defines, **defines})

    def algorithm(self, kernel: Kernel, tensors, groups: tuple, spec_words: np.ndarray):
        """The cached Kompute algorithm binding ``tensors`` to ``kernel``."""
        key = (kernel.key, tuple(id(t) for t in tensors), groups, spec_words.tobytes())
        algo = self._algorithms.get(key)
        if algo is None:
            push0 = np.zeros(len(kernel.push), np.uint32).view(np.float32)
            algo = self.mgr.algorithm(list(tensors), kernel.spirv, list(groups), spec_words, push0)
            self._algorithms[key] = (algo, tuple(tensors))
            for t in tensors:
                self._algorithms_by_tensor[id(t)].add(key)
            return algo
        return algo[0]

    def fold_groups(self, groups) -> tuple:
        """(x, y, z) workgroup counts within the device limits: a 1D count past
        maxComputeWorkGroupCount[0] is folded into y (shaders use linear_group_id())."""
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
            raise SpirulaError("dispatch of %s workgroups exceeds %s's limit %s"
                               % (g, self.info.name, self.info.max_workgroup_count))
        return g

    def forget_tensor(self, tensor):
        """Drop every algorithm bound to ``tensor`` (so its memory can be freed)."""
        for key in self._algorithms_by_tensor.pop(id(tensor), ()):
            entry = self._algorithms.pop(key, None)
            if entry is not None:
                for t in entry[1]:
                    if t is not tensor:
                        self._algorithms_by_tensor.get(id(t), set()).discard(key)

    def new_storage_tensor(self, words: int):
        return self.mgr.tensor_t(np.empty(words, np.uint32), self.kp.TensorTypes.storage)

    def new_host_tensor(self, words: int):
        return self.mgr.tensor_t(np.zeros(words, np.uint32), self.kp.TensorTypes.host)

    # -- recording ----------------------------------------------------------------
    def recorder(self, label: str = ""):
        """A :class:`~spirula.runtime.sequence.Recorder` for one sequence of dispatches."""
        return Recorder(self, label)

    def sync(self):
        """Wait for a sequence started with ``run_async`` (counted as GPU wait)."""
        if self._pending is not None:
            self._pending.wait()

    # -- transfers ----------------------------------------------------------------
    def _staging_array(self, nwords: int) -> np.ndarray:
        if nwords > self._staging_words:
            words = max(1024, 1 << (nwords - 1).bit_length())
            if self._staging is not None:
                self.forget_tensor(self._staging)
            self._staging = self.mgr.tensor_t(np.zeros(words, np.uint32), self.kp.TensorTypes.host)
            self._staging_words = words
        return self._staging.data()

    def _run_now(self, kernel: Kernel, tensors, units: int, push: dict):
        """Dispatch one grid-stride kernel and wait (transfers between evals)."""
        groups = (grid_stride_groups(kernel, units), 1, 1)
        algo = self.algorithm(kernel, tensors, groups, kernel.pack_spec(None))
        prof = self.profiler
        timed = prof is not None and self.info.timestamps
        if self._immediate is None:
            self._immediate = self.mgr.sequence(0, 3 if timed else 0)
        seq = self._immediate
        seq.clear()
        seq.record(self.kp.OpBarrier())
        seq.record(self.kp.OpAlgoDispatch(algo, kernel.pack_push(push)))
        seq.record(self.kp.OpBarrier())
        seq.eval()
        if timed:
            ts = seq.get_timestamps()
            prof.kernel(kernel.name, int(((ts[2] - ts[1]) & self.timestamp_mask) * self.info.timestamp_period_ns))

    def _copy_words(self, src_tensor, dst_tensor, nwords: int, src_off: int = 0, dst_off: int = 0):
        vec4 = nwords % 4 == 0 and src_off % 4 == 0 and dst_off % 4 == 0
        k = 4 if vec4 else 1
        kernel = self.kernel("copy", VEC4=int(vec4))
        self._run_now(kernel, (src_tensor, dst_tensor), nwords // k,
                      dict(src_offset=src_off // k, dst_offset=dst_off // k, count=nwords // k))

    def copy_tensors(self, src_tensor, dst_tensor, nbytes: int):
        """Copy the first ``nbytes`` (a multiple of 4) between raw Kompute tensors."""
        self.sync()
        self._copy_words(src_tensor, dst_tensor, nbytes // 4)

    def upload(self, buf: Buffer, array, offset: int = 0):
        """H2D: write ``array``'s bytes into ``buf`` at byte ``offset`` (both multiples of 4)."""
        data = np.ascontiguousarray(array)
        nbytes = data.nbytes
        _check_range(buf, offset, nbytes)
        if nbytes == 0:
            return
        prof = self.profiler
        t0 = prof.clock() if prof is not None else 0
        self.sync()
        words = data.reshape(-1).view(np.uint8).view(np.uint32)
        chunk = STAGING_MAX_BYTES // 4
        for start in range(0, words.size, chunk):
            part = words[start:start + chunk]
            staging = self._staging_array(part.size)
            staging[:part.size] = part
            self._copy_words(self._staging, buf.tensor, part.size, 0, offset // 4 + start)
        if prof is not None:
            prof.transfer("H2D", nbytes, prof.clock() - t0)

    def readback(self, buf: Buffer, shape=None, dtype=None, offset: int = 0) -> np.ndarray:
        """D2H: a new numpy array of ``buf``'s contents (its used shape and dtype
        unless given), starting at byte ``offset``."""
        dtype = np.dtype(dtype or buf.dtype)
        if shape is None:
            shape = buf.shape if offset == 0 and dtype == buf.dtype else ((buf.nbytes - offset) // dtype.itemsize,)
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        _check_range(buf, offset, nbytes)
        out = np.empty(-(-nbytes // 4), np.uint32)
        prof = self.profiler
        t0 = prof.clock() if prof is not None else 0
        self.sync()
        chunk = STAGING_MAX_BYTES // 4
        for start in range(0, out.size, chunk):
            n = min(chunk, out.size - start)
            staging = self._staging_array(n)
            self._copy_words(buf.tensor, self._staging, n, offset // 4 + start, 0)
            out[start:start + n] = staging[:n]
        if prof is not None:
            prof.transfer("D2H", nbytes, prof.clock() - t0)
        return out.view(np.uint8)[:nbytes].view(dtype).reshape(shape)

    def copy(self, src: Buffer, dst: Buffer, nbytes: int | None = None, src_offset: int = 0,
             dst_offset: int = 0):
        """D2D: copy ``nbytes`` (default: all of ``src`` in use) between buffers now."""
        nbytes = src.nbytes - src_offset if nbytes is None else nbytes
        _check_range(src, src_offset, nbytes)
        _check_range(dst, dst_offset, nbytes)
        prof = self.profiler
        t0 = prof.clock() if prof is not None else 0
        self.sync()
        self._copy_words(src.tensor, dst.tensor, nbytes // 4, src_offset // 4, dst_offset // 4)
        if prof is not None:
            prof.transfer("D2D", nbytes, prof.clock() - t0)

    def fill(self, buf: Buffer, value=0, nbytes: int | None = None, offset: int = 0):
        """memset: set ``nbytes`` (default: the whole capacity) from byte ``offset``
        to a 32-bit ``value`` (an int is the word; a float its bit pattern)."""
        nbytes = buf.capacity - offset if nbytes is None else nbytes
        _check_range(buf, offset, nbytes)
        word = fill_word(value)
        prof = self.profiler
        t0 = prof.clock() if prof is not None else 0
        self.sync()
        nwords, off = nbytes // 4, offset // 4
        vec4 = nwords % 4 == 0 and off % 4 == 0
        k = 4 if vec4 else 1
        kernel = self.kernel("fill", VEC4=int(vec4))
        self._run_now(kernel, (buf.tensor,), nwords // k,
                      dict(offset=off // k, count=nwords // k, value=word))
        if prof is not None:
            prof.transfer("memset", nbytes, prof.clock() - t0)


def _check_range(buf: Buffer, offset: int, nbytes: int):
    if not buf.alive:
        raise ValueError("buffer %r was freed" % buf.name)
    if offset % 4 or nbytes % 4:
        raise ValueError("%s: offset and size must be multiples of 4 bytes (got %d, %d)"
                         % (buf.name, offset, nbytes))
    if offset < 0 or nbytes < 0 or offset + nbytes > buf.capacity:
        raise ValueError("%s: range [%d, %d) outside the buffer's %d bytes"
                         % (buf.name, offset, offset + nbytes, buf.capacity))


_default = None


def get_device() -> Device:
    """The process's default device, opened on first use."""
    global _default
    if _default is None:
        _default = Device()
    return _default


def set_device(device: Device | None):
    """Make ``device`` the process default (None: open a fresh one on next use)."""
    global _default
    _default = device
