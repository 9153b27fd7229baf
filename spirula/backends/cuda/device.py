"""The CUDA backend: ``build/libspirula_cuda.so`` (native_cuda/*.cu) through ctypes.

:class:`CudaDevice` implements :class:`spirula.runtime.device.Device`, so the
render and training code drive it as the Vulkan device. Each kernel is a C
function of the same name as its shader, launched with the dispatch the
render code recorded (workgroups, buffers in binding order, push-constant
words, specialization constants, compile-time flags:
``native_cuda/common/launch.cuh``). The contract of each kernel is read from
``shaders/<name>.comp`` (:mod:`spirula.contract.preprocess`), so both backends
check the same buffer names and constants.

Everything runs on one CUDA stream, in recording order, so the barriers a
Vulkan sequence needs are implicit. With the profiler on, every launch sits
between a pair of CUDA events, and the kernel rows, transfers and memsets are
accounted as on Vulkan (docs/design.md §5).

Every library call returns a ``cudaError_t``; :func:`check` raises
:class:`CudaError` with the driver's message for any that is not 0.
"""

from __future__ import annotations

import ctypes as C

import numpy as np

from spirula.backends.cuda import cudart
from spirula.backends.cuda.cudart import (
    BUILD_HINT,
    CudaError,
    CudaHostMemory,
    CudaMemory,
    Event,
    NoCudaError,
    SpirulaLaunch,
    check,
    error_text,
    load_library,
)
from spirula.contract.headers import CUDA_DEFINES, FLAGS
from spirula.contract.kernel import Kernel, shader_dir
from spirula.contract.preprocess import read_kernel
from spirula.errors import SpirulaError
from spirula.runtime import device as shared
from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import Sequence

_ERR_INVALID_VALUE = 1


class _Launch:
    """One recorded dispatch: the launch function and its SpirulaLaunch,
    built when the dispatch is recorded (push words set when the sequence is made)."""

    __slots__ = ("name", "fn", "struct", "address")

    def __init__(self, name, fn, kernel: Kernel, flags: int, tensors, groups, spec_words, stream):
        s = SpirulaLaunch()
        if len(tensors) > len(s.buffers):
            raise SpirulaError(
                "%s binds %d buffers; SpirulaLaunch holds %d (native_cuda/common/launch.cuh)"
                % (name, len(tensors), len(s.buffers))
            )
        s.grid[:] = groups
        s.n_buffers = len(tensors)
        s.buffers[: len(tensors)] = [t.ptr for t in tensors]
        s.sizes[: len(tensors)] = [t.nbytes for t in tensors]
        s.n_push = len(kernel.push)
        words = np.asarray(spec_words).view(np.uint32)
        s.n_spec = len(words)
        s.spec[: len(words)] = [int(w) for w in words]
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
                hint = (
                    " (does native_cuda/%s.cu still match shaders/%s.comp? this launch has %d buffers of %s "
                    "bytes, %d push words, %d spec constants)"
                    % (self.name, self.name, s.n_buffers, list(s.sizes[: s.n_buffers]), s.n_push, s.n_spec)
                )
            raise CudaError("CUDA error launching %s: %s%s" % (self.name, error_text(code), hint))


# ---- the device -------------------------------------------------------------------


def list_devices() -> list:
    """Every CUDA GPU (:class:`~spirula.backends.cuda.cudart.CudaDeviceInfo`), in
    CUDA's order; NoCudaError with one line where CUDA cannot run."""
    cudart.available_count()
    return cudart.list_devices()


def resolve_index(index=None) -> int:
    """The device index to use: the argument, else $SPIRULA_DEVICE, else 0
    (NoCudaError with one line where CUDA cannot run or it does not exist)."""
    count = cudart.available_count()
    return shared.resolve_index(index, count, 0, NoCudaError, "CUDA", "spirula devices --backend cuda")


def unavailable_reason(index=None):
    """None if CUDA device ``index`` can be opened here, else the one-line reason."""
    try:
        cudart.open_info(resolve_index(index))
    except SpirulaError as exc:
        return str(exc)
    return None


class CudaDevice(shared.Device):
    """One CUDA GPU and everything Spirula allocates on it.

    Args:
        index: CUDA device index (0 is the first GPU ``nvidia-smi`` lists,
            in CUDA's order); None: ``SPIRULA_DEVICE``, else 0.
    """

    backend = "cuda"
    float_atomics = True

    def __init__(self, index: int | None = None):
        self.lib = load_library()
        self.info = cudart.open_info(resolve_index(index))
        self.defines = dict(CUDA_DEFINES)
        self._kernels = {}  # (name, defines) -> (Kernel, launch function, flags)
        stream = C.c_void_p()
        check(self.lib.spirula_cuda_stream_create(C.byref(stream)), "cudaStreamCreate")
        self.stream = stream.value
        self._events = None  # the event pair for immediate operations
        self._init_device()

    # -- kernels ----------------------------------------------------------------------
    def kernel(self, name: str, **defines) -> Kernel:
        """Kernel ``name``'s contract (from shaders/<name>.comp) with its CUDA launch."""
        return self._kernel_entry(name, defines)[0]

    def _kernel_entry(self, name: str, defines: dict):
        merged = {**defines, **self.defines}  # float atomics are always native here
        key = (name, tuple(sorted((k, str(v)) for k, v in merged.items())))
        entry = self._kernels.get(key)
        if entry is None:
            flags = 0
            for k, v in merged.items():
                if k in FLAGS:
                    flags |= FLAGS[k] if int(v) else 0
                elif k not in CUDA_DEFINES:
                    raise SpirulaError(
                        "%s: the CUDA backend has no variant for the define %s=%s "
                        "(add a flag bit to SpirulaLaunch)" % (name, k, v)
                    )
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                raise SpirulaError(
                    "kernel %s has no CUDA port yet (native_cuda/%s.cu), or the library is "
                    "older than it: %s" % (name, name, BUILD_HINT)
                ) from None
            fn.restype, fn.argtypes = C.c_int, [C.c_void_p]
            entry = (read_kernel(name, merged), fn, flags)
            self._kernels[key] = entry
        return entry

    def kernel_names(self) -> list:
        """Shaders with a CUDA port in the loaded library."""
        return ported_kernels(self.lib)

    def algorithm(self, kernel: Kernel, tensors, groups: tuple, spec_words: np.ndarray) -> _Launch:
        """A launch record binding ``tensors`` to ``kernel`` (one per recorded dispatch)."""
        _, fn, flags = self._kernel_entry(kernel.name, dict(kernel.defines))
        return _Launch(kernel.name, fn, kernel, flags, tensors, groups, spec_words, self.stream)

    def sequence(self, plan: list, buffers: list, label: str = "") -> CudaSequence:
        return CudaSequence(self, plan, buffers, label)

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
        check(self.lib.spirula_cuda_memcpy_dtod(dst_tensor.ptr, src_tensor.ptr, nbytes, self.stream), "cudaMemcpy D2D")

    def process_memory_used(self):
        """Bytes in use on this GPU as cudaMemGetInfo reports them (total - free:
        this process's use on a GPU it has alone); None if the call fails or
        the device is closed."""
        if self.stream is None:
            return None
        free, total = C.c_size_t(), C.c_size_t()
        if self.lib.spirula_cuda_mem_get_info(C.byref(free), C.byref(total)):
            return None
        return int(total.value - free.value)

    # -- transfers ------------------------------------------------------------------------
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

    def _write(self, buf: Buffer, data: np.ndarray, offset: int):
        check(
            self.lib.spirula_cuda_memcpy_htod(buf.tensor.ptr + offset, data.ctypes.data, data.nbytes, self.stream),
            "upload to %s" % buf.name,
        )

    def _read(self, buf: Buffer, out: np.ndarray, offset: int):
        if out.nbytes:
            check(
                self.lib.spirula_cuda_memcpy_dtoh(out.ctypes.data, buf.tensor.ptr + offset, out.nbytes, self.stream),
                "readback of %s" % buf.name,
            )

    def _copy(self, src: Buffer, dst: Buffer, nbytes: int, src_offset: int, dst_offset: int):
        self._timed_now(
            "copy",
            lambda: check(
                self.lib.spirula_cuda_memcpy_dtod(
                    dst.tensor.ptr + dst_offset, src.tensor.ptr + src_offset, nbytes, self.stream
                ),
                "copy",
            ),
        )

    def _fill(self, buf: Buffer, word: int, nbytes: int, offset: int):
        self._timed_now(
            "fill",
            lambda: check(
                self.lib.spirula_cuda_memset32(buf.tensor.ptr + offset, word, nbytes // 4, self.stream), "fill"
            ),
        )

    def close(self):
        """Free every pool buffer and the stream (the device is unusable afterwards)."""
        if self.stream is None:
            return
        super().close()
        self._events = None
        check(self.lib.spirula_cuda_stream_destroy(self.stream), "cudaStreamDestroy")
        self.stream = None


def ported_kernels(lib) -> list:
    """Shaders with a CUDA port in the library ``lib``."""
    return [n for n in sorted(p.stem for p in shader_dir().glob("*.comp")) if hasattr(lib, n)]


# ---- running a recorded sequence ----------------------------------------------------------


class CudaSequence(Sequence):
    """A recorded sequence of launches on the device's stream (the CUDA
    backend's :class:`~spirula.runtime.sequence.Sequence`).

    The plan's barriers need no command here (one stream runs in order); they
    are counted in ``barriers`` as on Vulkan.
    """

    def __init__(self, device: CudaDevice, plan: list, buffers: list, label: str = ""):
        super().__init__(device, plan, buffers, label)
        ops = [op for op in plan if op != "barrier"]
        self._ops = ops
        self._launches = []
        for op in ops:
            op.algorithm.set_push(op.push)
            self._launches.append(op.algorithm)
        prof = device.profiler
        self._events = [(Event(), Event()) for _ in ops] if prof is not None else None
        self._done = None  # recorded after an asynchronous run's last launch

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

    def _await(self):
        if self._done is None:
            self.device._stream_sync("sequence %r" % self.label)
        else:
            # this run only: a later sequence may already be queued behind it (the pipelined trainer)
            self._done.sync("sequence %r" % self.label)

    def _eval(self):
        self._submit()
        self.device._stream_sync("sequence %r" % self.label)

    def _eval_async(self):
        self._submit()
        if self._done is None:
            self._done = Event(self.device.lib)
        self._done.record(self.device.stream)

    def _account(self, prof, wall_ns: int, waited: bool = True):
        if not self._ops:
            prof.device_wait(wall_ns, 0, 0, waited)
            return
        prof.sequence(wall_ns, ((op, stop.since(start)) for op, (start, stop) in zip(self._ops, self._events)), waited)

    def gpu_span_ns(self):
        if self._events is None or not self._ops:
            return None
        return self._events[-1][1].since(self._events[0][0])
