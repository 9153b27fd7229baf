"""The CUDA backend: ``build/libspirula_cuda.so`` (native_cuda/*.cu) through ctypes.

:class:`CudaDevice` has the public surface of
:class:`spirula.runtime.device.Device` that the render and training code use
(``info``, ``pool``, ``kernel``, ``recorder``, ``upload``/``readback``/
``copy``/``fill``/``sync``, ``fold_groups``, ``profiler``), so the same code
drives either backend. Each kernel is a C function of the same name as its
shader, launched with the dispatch the render code recorded (workgroups,
buffers in binding order, push-constant words, specialization constants,
compile-time flags: ``native_cuda/common/launch.cuh``). The contract of each
kernel is read from ``shaders/<name>.comp`` (:mod:`spirula.backends.contract`),
so both backends check the same buffer names and constants.

Everything runs on one CUDA stream, in recording order, so the barriers a
Vulkan sequence needs are implicit. With the profiler on, every launch sits
between a pair of CUDA events, and the kernel rows, transfers and memsets are
accounted as on Vulkan (DESIGN.md section 5).

Every library call returns a ``cudaError_t``; :func:`check` raises
:class:`CudaError` with the driver's message for any that is not 0.
"""
from __future__ import annotations

import ctypes as C
import weakref

import numpy as np

from spirula.backends import cudart
from spirula.backends.contract import CUDA_DEFINES, FLAGS, read_kernel
from spirula.backends.cudart import (BUILD_HINT, RUNTIME_SYMBOLS, CudaError, CudaHostMemory, CudaMemory,  # noqa: F401
                                     Event, NoCudaError, SpirulaLaunch, check, error_text, load_library)
from spirula.errors import SpirulaError
from spirula.runtime import profiler as _profiler
from spirula.runtime.buffers import Buffer, BufferPool
from spirula.runtime.device import Device, _check_range
from spirula.runtime.kernels import Kernel, shader_dir
from spirula.runtime.sequence import Recorder, fill_word

_ERR_INVALID_VALUE = 1


class _Launch:
    """One recorded dispatch: the launch function and its SpirulaLaunch,
    built when the dispatch is recorded (push words set when the sequence is made)."""

    __slots__ = ("name", "fn", "struct", "address")

    def __init__(self, name, fn, kernel: Kernel, flags: int, tensors, groups, spec_words, stream):
        s = SpirulaLaunch()
        if len(tensors) > len(s.buffers):
            raise SpirulaError("%s binds %d buffers; SpirulaLaunch holds %d (native_cuda/common/launch.cuh)"
                               % (name, len(tensors), len(s.buffers)))
        s.grid[:] = groups
        s.n_buffers = len(tensors)
        s.buffers[:len(tensors)] = [t.ptr for t in tensors]
        s.sizes[:len(tensors)] = [t.nbytes for t in tensors]
        s.n_push = len(kernel.push)
        words = np.asarray(spec_words).view(np.uint32)
        s.n_spec = len(words)
        s.spec[:len(words)] = [int(w) for w in words]
        s.flags = flags
        s.stream = stream
        self.name, self.fn, self.struct, self.address = name, fn, s, C.addressof(s)

    def set_push(self, words: np.ndarray):
        words = np.ascontiguousarray(words).view(np.uint32)
        C.memmove(self.address + SpirulaLaunch.push.offset, words.ctypes.data, 4 * words.size)

    def __call__(self):
        code = self.fn(self.address)
        if code:
            hint = ""
            if code == _ERR_INVALID_VALUE:
                s = self.struct
                hint = (" (does native_cuda/%s.cu still match shaders/%s.comp? this launch has %d buffers of %s "
                        "bytes, %d push words, %d spec constants)"
                        % (self.name, self.name, s.n_buffers, list(s.sizes[:s.n_buffers]), s.n_push, s.n_spec))
            raise CudaError("CUDA error launching %s: %s%s" % (self.name, error_text(code), hint))


# ---- the device -------------------------------------------------------------------

_open_devices = weakref.WeakSet()


class CudaDevice:
    """One CUDA GPU and everything Spirula allocates on it (the CUDA twin of
    :class:`spirula.runtime.device.Device`).

    Args:
        index: CUDA device index (0 is the first GPU ``nvidia-smi`` lists,
            in CUDA's order).
    """

    float_atomics = True
    fold_groups = Device.fold_groups      # same folding, with CUDA's grid limits

    def __init__(self, index: int = 0):
        self.lib = load_library()
        self.info = cudart.open_info(int(index))
        self.defines = dict(CUDA_DEFINES)
        self._kernels = {}        # (name, defines) -> (Kernel, launch function, flags)
        stream = C.c_void_p()
        check(self.lib.spirula_cuda_stream_create(C.byref(stream)), "cudaStreamCreate")
        self.stream = stream.value
        self.pool = BufferPool(self)
        self.profiler = _profiler.active()
        self._pending = None      # a CudaSequence running asynchronously
        self._events = None       # the event pair for immediate operations
        if self.profiler is not None:
            self.profiler.pools.append(self.pool)
            _install_vram_hook()
        _open_devices.add(self)

    def __repr__(self):
        return "CudaDevice(%d: %s, %s)" % (self.info.index, self.info.name, self.info.driver)

    # -- kernels ----------------------------------------------------------------------
    def kernel(self, name: str, **defines) -> Kernel:
        """Kernel ``name``'s contract (from shaders/<name>.comp) with its CUDA launch."""
        return self._kernel_entry(name, defines)[0]

    def _kernel_entry(self, name: str, defines: dict):
        merged = {**defines, **self.defines}      # float atomics are always native here
        key = (name, tuple(sorted((k, str(v)) for k, v in merged.items())))
        entry = self._kernels.get(key)
        if entry is None:
            flags = 0
            for k, v in merged.items():
                if k in FLAGS:
                    flags |= FLAGS[k] if int(v) else 0
                elif k not in CUDA_DEFINES:
                    raise SpirulaError("%s: the CUDA backend has no variant for the define %s=%s "
                                       "(add a flag bit to SpirulaLaunch)" % (name, k, v))
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                raise SpirulaError("kernel %s has no CUDA port yet (native_cuda/%s.cu), or the library is "
                                   "older than it: %s" % (name, name, BUILD_HINT)) from None
            fn.restype, fn.argtypes = C.c_int, [C.c_void_p]
            entry = (read_kernel(name, merged), fn, flags)
            self._kernels[key] = entry
        return entry

    def kernel_names(self) -> list:
        """Shaders with a CUDA port in the loaded library."""
        return [n for n in sorted(p.stem for p in shader_dir().glob("*.comp")) if hasattr(self.lib, n)]

    def algorithm(self, kernel: Kernel, tensors, groups: tuple, spec_words: np.ndarray) -> _Launch:
        """A launch record binding ``tensors`` to ``kernel`` (one per recorded dispatch)."""
        _, fn, flags = self._kernel_entry(kernel.name, dict(kernel.defines))
        return _Launch(kernel.name, fn, kernel, flags, tensors, groups, spec_words, self.stream)

    def recorder(self, label: str = ""):
        """A :class:`~spirula.runtime.sequence.Recorder` whose ``finish`` gives a :class:`CudaSequence`."""
        return CudaRecorder(self, label)

    # -- memory (what BufferPool calls) ----------------------------------------------------
    def new_storage_tensor(self, words: int) -> CudaMemory:
        return CudaMemory(4 * int(words))

    def new_host_tensor(self, words: int) -> CudaHostMemory:
        return CudaHostMemory(4 * int(words))

    def forget_tensor(self, tensor: CudaMemory):
        """Free ``tensor`` once the work that may use it has finished."""
        self.sync()
        tensor.free()

    def copy_tensors(self, src_tensor: CudaMemory, dst_tensor: CudaMemory, nbytes: int):
        self.sync()
        check(self.lib.spirula_cuda_memcpy_dtod(dst_tensor.ptr, src_tensor.ptr, nbytes, self.stream),
              "cudaMemcpy D2D")

    def process_memory_used(self):
        """Bytes in use on this GPU as cudaMemGetInfo reports them (total - free:
        this process's use on a GPU it has alone); None if the call fails."""
        free, total = C.c_size_t(), C.c_size_t()
        if self.lib.spirula_cuda_mem_get_info(C.byref(free), C.byref(total)):
            return None
        return int(total.value - free.value)

    # -- synchronization and transfers -------------------------------------------------
    def sync(self):
        """Wait for a sequence started with ``run_async`` (counted as GPU wait)."""
        if self._pending is not None:
            self._pending.wait()

    def _stream_sync(self, what: str):
        check(self.lib.spirula_cuda_stream_sync(self.stream), what)

    def _timed_now(self, row: str, run):
        """Run ``run()`` on the stream and wait; with the profiler on, time it
        with an event pair as kernel row ``row`` (as Vulkan times its copy/fill)."""
        prof = self.profiler
        if prof is None:
            run()
            self._stream_sync(row)
            return
        if self._events is None:
            self._events = (Event(), Event())
        start, stop = self._events
        start.record(self.stream)
        run()
        stop.record(self.stream)
        self._stream_sync(row)
        prof.kernel(row, stop.since(start))

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
        check(self.lib.spirula_cuda_memcpy_htod(buf.tensor.ptr + offset, data.ctypes.data, nbytes, self.stream),
              "upload to %s" % buf.name)
        if prof is not None:
            prof.transfer("H2D", nbytes, prof.clock() - t0)

    def readback(self, buf: Buffer, shape=None, dtype=None, offset: int = 0) -> np.ndarray:
        """D2H: a new numpy array of ``buf``'s contents (its used shape and dtype
        unless given), starting at byte ``offset``."""
        dtype = np.dtype(dtype or buf.dtype)
        if shape is None:
            shape = buf.shape if offset == 0 and dtype == buf.dtype else ((buf.nbytes - offset) // dtype.itemsize,)
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        out = np.empty(shape, dtype)
        nbytes = out.nbytes
        _check_range(buf, offset, nbytes)
        prof = self.profiler
        t0 = prof.clock() if prof is not None else 0
        self.sync()
        if nbytes:
            check(self.lib.spirula_cuda_memcpy_dtoh(out.ctypes.data, buf.tensor.ptr + offset, nbytes, self.stream),
                  "readback of %s" % buf.name)
        if prof is not None:
            prof.transfer("D2H", nbytes, prof.clock() - t0)
        return out

    def copy(self, src: Buffer, dst: Buffer, nbytes: int | None = None, src_offset: int = 0,
             dst_offset: int = 0):
        """D2D: copy ``nbytes`` (default: all of ``src`` in use) between buffers now."""
        nbytes = src.nbytes - src_offset if nbytes is None else nbytes
        _check_range(src, src_offset, nbytes)
        _check_range(dst, dst_offset, nbytes)
        prof = self.profiler
        t0 = prof.clock() if prof is not None else 0
        self.sync()
        self._timed_now("copy", lambda: check(self.lib.spirula_cuda_memcpy_dtod(
            dst.tensor.ptr + dst_offset, src.tensor.ptr + src_offset, nbytes, self.stream), "copy"))
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
        self._timed_now("fill", lambda: check(self.lib.spirula_cuda_memset32(
            buf.tensor.ptr + offset, word, nbytes // 4, self.stream), "fill"))
        if prof is not None:
            prof.transfer("memset", nbytes, prof.clock() - t0)

    def close(self):
        """Free every pool buffer and the stream (the device is unusable afterwards)."""
        if self.stream is None:
            return
        self.sync()
        for buf in list(self.pool.buffers.values()):
            self.pool.free(buf)
        self._events = None
        check(self.lib.spirula_cuda_stream_destroy(self.stream), "cudaStreamDestroy")
        self.stream = None


# ---- recording and running ---------------------------------------------------------------

class CudaRecorder(Recorder):
    """:class:`~spirula.runtime.sequence.Recorder` for a :class:`CudaDevice`:
    the same recording, checks and hazard plan; ``finish`` gives a :class:`CudaSequence`."""

    def finish(self) -> "CudaSequence":
        return CudaSequence(self.device, self.plan(), list(self._buffers.values()), self.label)


class CudaSequence:
    """A recorded sequence of launches on the device's stream, run as often as needed.

    The plan's barriers need no command here (one stream runs in order); they
    are counted in ``barriers`` as on Vulkan. ``stale`` is True once a buffer
    it uses was reallocated or freed: record it again.
    """

    def __init__(self, device: CudaDevice, plan: list, buffers: list, label: str = ""):
        self.device = device
        self.label = label
        self._buffers = buffers
        ops = [op for op in plan if op != "barrier"]
        self.dispatches = len(ops)
        self.barriers = len(plan) - len(ops)
        self._ops = ops
        self._launches = []
        for op in ops:
            op.algorithm.set_push(op.push)
            self._launches.append(op.algorithm)
        prof = device.profiler
        self._events = [(Event(), Event()) for _ in ops] if prof is not None else None
        self._async = False
        self._t0 = 0

    @property
    def stale(self) -> bool:
        return any(b.version != v for b, v in self._buffers)

    def _check(self):
        if self.stale:
            names = [b.name for b, v in self._buffers if b.version != v]
            raise RuntimeError("sequence %r uses reallocated or freed buffers %s: record it again"
                               % (self.label, names))

    def _submit(self):
        if self._events is None:
            for launch in self._launches:
                launch()
            return
        stream = self.device.stream
        for launch, (start, stop) in zip(self._launches, self._events):
            start.record(stream)
            launch()
            stop.record(stream)

    def _finish(self):
        self.device._stream_sync("sequence %r" % self.label)

    def run(self):
        """Run the sequence and wait for it."""
        self._check()
        self.device.sync()
        prof = self.device.profiler
        if prof is None:
            self._submit()
            self._finish()
            return
        t0 = prof.clock()
        self._submit()
        self._finish()
        self._account(prof, prof.clock() - t0)

    def run_async(self):
        """Queue the sequence and return; :meth:`wait` (or the next transfer) waits."""
        self._check()
        self.device.sync()
        self._submit()
        self._async = True
        self.device._pending = self

    def wait(self):
        if not self._async:
            return
        prof = self.device.profiler
        t0 = prof.clock() if prof is not None else 0
        self._async = False
        if self.device._pending is self:
            self.device._pending = None
        self._finish()
        if prof is not None:
            # only the time blocked here counts as GPU wait (as on Vulkan)
            self._account(prof, prof.clock() - t0)

    def _account(self, prof, wall_ns: int):
        if not self._ops:
            prof.device_wait(wall_ns, 0, 0)
            return
        prof.sequence(wall_ns, ((op, stop.since(start)) for op, (start, stop) in zip(self._ops, self._events)))


# ---- the profiler's VRAM row ------------------------------------------------------------

def _install_vram_hook():
    """Add the open CUDA devices' cudaMemGetInfo use to the VRAM report's
    ``process (driver)`` row. The profiler asks the Vulkan driver only, so its
    module function is wrapped once (optional: with no CUDA device open it
    answers exactly as before, and the report format is unchanged)."""
    original = _profiler._process_vram
    if getattr(original, "spirula_cuda", False):
        return

    def process_vram(devices):
        total = original(devices)
        for dev in list(_open_devices):
            used = dev.process_memory_used() if dev.stream is not None else None
            if used is not None:
                total = (total or 0) + used
        return total

    process_vram.spirula_cuda = True
    _profiler._process_vram = process_vram


def open_cuda_device(index: int | None = 0) -> CudaDevice:
    """Open CUDA device ``index`` (default 0).

    Raises :class:`NoCudaError` (a SpirulaError, exit code 2) with one line
    when the library is not built, no NVIDIA driver is usable, or there is no
    CUDA GPU.
    """
    return CudaDevice(0 if index is None else int(index))


def cuda_unavailable_reason(index: int = 0):
    """None if CUDA device ``index`` can be opened here, else the one-line reason."""
    try:
        load_library()
        cudart.open_info(index)
    except SpirulaError as exc:
        return str(exc)
    return None
