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
import dataclasses
import os
import weakref
from pathlib import Path

import numpy as np

from spirula.backends.contract import read_kernel
from spirula.errors import SpirulaError
from spirula.runtime import profiler as _profiler
from spirula.runtime.buffers import Buffer, BufferPool
from spirula.runtime.device import Device, _check_range
from spirula.runtime.kernels import Kernel, shader_dir
from spirula.runtime.sequence import Recorder, fill_word

LIB_NAME = "libspirula_cuda.so"
BUILD_HINT = "build it with `make cuda` (needs nvcc)"
FLAGS = {"VEC4": 1, "FLOAT": 2}  # compile-time defines -> SpirulaLaunch.flags bits (launch.cuh)
_ERR_INVALID_VALUE = 1
_ERR_INSUFFICIENT_DRIVER = 35
_ERR_NO_DEVICE = 100
_ERR_INVALID_DEVICE = 101


class NoCudaError(SpirulaError):
    """No CUDA backend library, no NVIDIA driver, or no CUDA GPU."""

    exit_code = 2


class CudaError(SpirulaError):
    """A CUDA call failed; the message names the call and the driver's error."""


# ---- the library ---------------------------------------------------------------------

class SpirulaLaunch(C.Structure):
    """Mirror of ``SpirulaLaunch`` in native_cuda/common/launch.cuh."""
    _fields_ = [("grid", C.c_uint32 * 3), ("n_buffers", C.c_uint32), ("buffers", C.c_void_p * 16),
                ("n_push", C.c_uint32), ("push", C.c_uint32 * 32), ("n_spec", C.c_uint32),
                ("spec", C.c_uint32 * 16), ("flags", C.c_uint32), ("stream", C.c_void_p)]


class _Properties(C.Structure):
    """Mirror of ``SpirulaDeviceProperties`` in native_cuda/runtime.cu."""
    _fields_ = [("name", C.c_char * 256), ("total_memory", C.c_uint64), ("sm_count", C.c_int32),
                ("cc_major", C.c_int32), ("cc_minor", C.c_int32), ("warp_size", C.c_int32),
                ("max_threads_per_block", C.c_int32), ("max_grid", C.c_int32 * 3),
                ("shared_memory_per_block", C.c_uint64), ("driver_version", C.c_int32),
                ("runtime_version", C.c_int32), ("pci_bus_id", C.c_int32), ("pad", C.c_int32)]


_P, _I, _U32, _SZ = C.c_void_p, C.c_int, C.c_uint32, C.c_size_t
_PROTOTYPES = {
    "spirula_cuda_error_string": (C.c_char_p, [_I]),
    "spirula_cuda_error_name": (C.c_char_p, [_I]),
    "spirula_cuda_get_last_error": (_I, []),
    "spirula_cuda_device_count": (_I, [C.POINTER(_I)]),
    "spirula_cuda_set_device": (_I, [_I]),
    "spirula_cuda_device_properties": (_I, [_I, C.POINTER(_Properties)]),
    "spirula_cuda_mem_get_info": (_I, [C.POINTER(_SZ), C.POINTER(_SZ)]),
    "spirula_cuda_malloc": (_I, [C.POINTER(_P), _SZ]),
    "spirula_cuda_free": (_I, [_P]),
    "spirula_cuda_host_alloc": (_I, [C.POINTER(_P), _SZ]),
    "spirula_cuda_host_free": (_I, [_P]),
    "spirula_cuda_memcpy_htod": (_I, [_P, _P, _SZ, _P]),
    "spirula_cuda_memcpy_dtoh": (_I, [_P, _P, _SZ, _P]),
    "spirula_cuda_memcpy_dtod": (_I, [_P, _P, _SZ, _P]),
    "spirula_cuda_memset32": (_I, [_P, _U32, _SZ, _P]),
    "spirula_cuda_stream_create": (_I, [C.POINTER(_P)]),
    "spirula_cuda_stream_destroy": (_I, [_P]),
    "spirula_cuda_stream_sync": (_I, [_P]),
    "spirula_cuda_device_sync": (_I, []),
    "spirula_cuda_event_create": (_I, [C.POINTER(_P)]),
    "spirula_cuda_event_record": (_I, [_P, _P]),
    "spirula_cuda_event_sync": (_I, [_P]),
    "spirula_cuda_event_elapsed": (_I, [C.POINTER(C.c_float), _P, _P]),
    "spirula_cuda_event_destroy": (_I, [_P]),
    "spirula_cuda_abi_sizes": (_I, [C.POINTER(_SZ), C.POINTER(_SZ)]),
}
RUNTIME_SYMBOLS = tuple(_PROTOTYPES)

_lib = None


def library_path() -> Path:
    """Where the library is: ``$SPIRULA_CUDA_LIB``, else ``build/`` of the checkout."""
    env = os.environ.get("SPIRULA_CUDA_LIB")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "build" / LIB_NAME


def load_library():
    """The loaded library, with every runtime prototype declared (once per process)."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if not path.is_file():
        raise NoCudaError("the CUDA backend library %s does not exist: %s" % (path, BUILD_HINT))
    try:
        lib = C.CDLL(str(path), mode=os.RTLD_LOCAL)
    except OSError as exc:
        raise NoCudaError("cannot load the CUDA backend library %s (%s): %s" % (path, exc, BUILD_HINT)) from None
    for name, (res, args) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise NoCudaError("%s lacks %s (an old build?): %s" % (path, name, BUILD_HINT)) from None
        fn.restype, fn.argtypes = res, args
    launch, props = _SZ(), _SZ()
    lib.spirula_cuda_abi_sizes(C.byref(launch), C.byref(props))
    if (launch.value, props.value) != (C.sizeof(SpirulaLaunch), C.sizeof(_Properties)):
        raise NoCudaError("%s was built for another ABI (struct sizes %d/%d, expected %d/%d): %s"
                          % (path, launch.value, props.value, C.sizeof(SpirulaLaunch), C.sizeof(_Properties),
                             BUILD_HINT))
    _lib = lib
    return lib


def error_text(code: int) -> str:
    lib = load_library()
    return "%s: %s" % (lib.spirula_cuda_error_name(code).decode(), lib.spirula_cuda_error_string(code).decode())


def check(code: int, what: str):
    """Raise :class:`CudaError` naming ``what`` if ``code`` is not cudaSuccess."""
    if code:
        raise CudaError("CUDA error in %s: %s" % (what, error_text(code)))


# ---- device info ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CudaDeviceInfo:
    """The fields of :class:`spirula.runtime.vkinfo.DeviceInfo`, for a CUDA device."""

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
    sm_count: int = 0
    compute_capability: tuple = (0, 0)

    @property
    def is_cpu(self) -> bool:
        return False


def _version(v: int) -> str:
    return "%d.%d" % (v // 1000, (v % 1000) // 10)


def device_count() -> int:
    """CUDA GPUs this process sees (0 without a driver or a GPU)."""
    lib = load_library()
    n = _I(0)
    return n.value if lib.spirula_cuda_device_count(C.byref(n)) == 0 else 0


def _open_info(index: int) -> CudaDeviceInfo:
    lib = load_library()
    n = _I(0)
    code = lib.spirula_cuda_device_count(C.byref(n))
    if code == _ERR_INSUFFICIENT_DRIVER:
        raise NoCudaError("no usable NVIDIA driver for the CUDA backend (%s); the Vulkan backend does "
                          "not need one" % error_text(code))
    if code == _ERR_NO_DEVICE or (code == 0 and n.value == 0):
        raise NoCudaError("no CUDA GPU on this machine; use the Vulkan backend")
    if code:
        raise NoCudaError("CUDA is not usable here (%s)" % error_text(code))
    if not 0 <= index < n.value:
        raise NoCudaError("CUDA device %d does not exist: this machine has %d CUDA GPU%s (0..%d)"
                          % (index, n.value, "s" if n.value != 1 else "", n.value - 1))
    p = _Properties()
    check(lib.spirula_cuda_device_properties(index, C.byref(p)), "cudaGetDeviceProperties(%d)" % index)
    check(lib.spirula_cuda_set_device(index), "cudaSetDevice(%d)" % index)
    return CudaDeviceInfo(
        index=index, name=p.name.decode(errors="replace"), device_type="discrete",
        driver="CUDA driver %s, runtime %s" % (_version(p.driver_version), _version(p.runtime_version)),
        api_version="sm_%d%d" % (p.cc_major, p.cc_minor), subgroup_size=p.warp_size, timestamps=True,
        timestamp_period_ns=1.0, timestamp_valid_bits=64, device_local_bytes=int(p.total_memory),
        max_storage_buffer_range=2 ** 62, max_shared_memory=int(p.shared_memory_per_block),
        max_workgroup_count=(2 ** 31 - 1, 65535, 65535), max_workgroup_invocations=p.max_threads_per_block,
        shader_int64=True, atomic_float_add=True, extensions=frozenset(), sm_count=p.sm_count,
        compute_capability=(p.cc_major, p.cc_minor))


# ---- memory ---------------------------------------------------------------------

class CudaMemory:
    """One cudaMalloc'd block: a pool buffer's ``tensor`` on this backend."""

    __slots__ = ("ptr", "nbytes", "__weakref__")

    def __init__(self, nbytes: int):
        lib = load_library()
        ptr = _P()
        check(lib.spirula_cuda_malloc(C.byref(ptr), max(int(nbytes), 4)), "cudaMalloc(%d bytes)" % nbytes)
        self.ptr = ptr.value
        self.nbytes = int(nbytes)

    def free(self):
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            check(_lib.spirula_cuda_free(ptr), "cudaFree")

    def __del__(self):
        try:
            if self.ptr and _lib is not None:
                _lib.spirula_cuda_free(self.ptr)
                self.ptr = 0
        except Exception:
            pass


class CudaHostMemory:
    """Pinned host memory mapped into the GPU's address space: the ``tensor`` of
    a ``pool.alloc(host=True)`` buffer. ``data()`` is the host's view of it
    (uint32 words), as a Kompute host tensor's; kernels use ``ptr``."""

    __slots__ = ("ptr", "nbytes", "_words", "__weakref__")

    def __init__(self, nbytes: int):
        lib = load_library()
        ptr = _P()
        check(lib.spirula_cuda_host_alloc(C.byref(ptr), max(int(nbytes), 4)), "cudaHostAlloc(%d bytes)" % nbytes)
        self.ptr = ptr.value
        self.nbytes = int(nbytes)
        self._words = np.ctypeslib.as_array((C.c_uint32 * (self.nbytes // 4)).from_address(self.ptr))

    def data(self) -> np.ndarray:
        return self._words

    def free(self):
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self._words = None
            check(_lib.spirula_cuda_host_free(ptr), "cudaFreeHost")

    def __del__(self):
        try:
            if self.ptr and _lib is not None:
                _lib.spirula_cuda_host_free(self.ptr)
                self.ptr = 0
        except Exception:
            pass


class _Launch:
    """One recorded dispatch: the launch function and its SpirulaLaunch,
    built when the dispatch is recorded (push words set when the sequence is made)."""

    __slots__ = ("name", "fn", "struct", "address")

    def __init__(self, name, fn, kernel: Kernel, flags: int, tensors, groups, spec_words, stream):
        s = SpirulaLaunch()
        s.grid[:] = groups
        s.n_buffers = len(tensors)
        s.buffers[:len(tensors)] = [t.ptr for t in tensors]
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
                hint = (" (does native_cuda/%s.cu still match shaders/%s.comp? this launch has %d buffers, "
                        "%d push words, %d spec constants)" % (self.name, self.name, s.n_buffers, s.n_push, s.n_spec))
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
        self.info = _open_info(int(index))
        self.defines = {"ATOMIC_FLOAT": 1}
        self._kernels = {}        # (name, defines) -> (Kernel, launch function, flags)
        stream = _P()
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
                elif k != "ATOMIC_FLOAT":
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
        free, total = _SZ(), _SZ()
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
            self._events = (_Event(), _Event())
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


class _Event:
    __slots__ = ("handle",)

    def __init__(self):
        h = _P()
        check(_lib.spirula_cuda_event_create(C.byref(h)), "cudaEventCreate")
        self.handle = h.value

    def record(self, stream):
        check(_lib.spirula_cuda_event_record(self.handle, stream), "cudaEventRecord")

    def since(self, start: "_Event") -> int:
        """Nanoseconds from ``start`` to this event (both completed)."""
        ms = C.c_float()
        check(_lib.spirula_cuda_event_elapsed(C.byref(ms), start.handle, self.handle), "cudaEventElapsedTime")
        return int(ms.value * 1e6)

    def __del__(self):
        try:
            if self.handle and _lib is not None:
                _lib.spirula_cuda_event_destroy(self.handle)
        except Exception:
            pass


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
        self._events = [(_Event(), _Event()) for _ in ops] if prof is not None else None
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
        gpu = moved = n = 0
        for op, (start, stop) in zip(self._ops, self._events):
            ns = stop.since(start)
            prof.kernel(op.name, ns)
            # recorded copies and fills count as D2D / memset, not as GPU-exec
            if op.kind == "copy":
                prof.transfer("D2D", op.nbytes, ns)
                moved += ns
            elif op.kind == "fill":
                prof.transfer("memset", op.nbytes, ns)
                moved += ns
            else:
                gpu += ns
                n += 1
        prof.device_wait(max(wall_ns - moved, 0), gpu, n)


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
        _open_info(index)
    except SpirulaError as exc:
        return str(exc)
    return None
