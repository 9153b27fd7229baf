"""ctypes bindings of ``build/libspirula_cuda.so``'s runtime half (native_cuda/runtime.cu).

Every ``spirula_cuda_*`` prototype is declared once, in :data:`_PROTOTYPES`,
when the library is loaded; every call returns a ``cudaError_t``, and
:func:`check` raises :class:`CudaError` with the driver's message for any that
is not 0 (tinygrad's ``ops_cuda.py`` style). Also here: the ctypes mirrors of
the C structs (``SpirulaLaunch``, the device properties), device discovery,
device memory, mapped host memory and events. :mod:`spirula.backends.cuda.device`
builds the device on top.
"""

from __future__ import annotations

import ctypes as C
import dataclasses
import os
from pathlib import Path

import numpy as np

from spirula import settings
from spirula.errors import SpirulaError
from spirula.runtime.device import DeviceInfo

LIB_NAME = "libspirula_cuda.so"
PACKAGED_LIB = Path(__file__).resolve().parents[2] / "_lib" / LIB_NAME  # in a wheel built where nvcc was
CHECKOUT_LIB = Path(__file__).resolve().parents[3] / "build" / LIB_NAME  # `make cuda`
BUILD_HINT = "build it with `make cuda` (needs nvcc)"
_ERR_INVALID_VALUE = 1
_ERR_INSUFFICIENT_DRIVER = 35
_ERR_NO_DEVICE = 100


class NoCudaError(SpirulaError):
    """No CUDA backend library, no NVIDIA driver, or no CUDA GPU."""

    exit_code = 2


class CudaError(SpirulaError):
    """A CUDA call failed; the message names the call and the driver's error."""


# ---- the library ---------------------------------------------------------------------


class SpirulaLaunch(C.Structure):
    """Mirror of ``SpirulaLaunch`` in native_cuda/common/launch.cuh."""

    _fields_ = [
        ("grid", C.c_uint32 * 3),
        ("n_buffers", C.c_uint32),
        ("buffers", C.c_void_p * 32),
        ("sizes", C.c_uint64 * 32),
        ("n_push", C.c_uint32),
        ("push", C.c_uint32 * 32),
        ("n_spec", C.c_uint32),
        ("spec", C.c_uint32 * 16),
        ("flags", C.c_uint32),
        ("stream", C.c_void_p),
    ]


class _Properties(C.Structure):
    """Mirror of ``SpirulaDeviceProperties`` in native_cuda/runtime.cu."""

    _fields_ = [
        ("name", C.c_char * 256),
        ("total_memory", C.c_uint64),
        ("sm_count", C.c_int32),
        ("cc_major", C.c_int32),
        ("cc_minor", C.c_int32),
        ("warp_size", C.c_int32),
        ("max_threads_per_block", C.c_int32),
        ("max_grid", C.c_int32 * 3),
        ("shared_memory_per_block", C.c_uint64),
        ("driver_version", C.c_int32),
        ("runtime_version", C.c_int32),
        ("pci_bus_id", C.c_int32),
        ("pad", C.c_int32),
    ]


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
    """Where the library is: ``$SPIRULA_CUDA_LIB``, else the wheel's ``spirula/_lib/``
    (where nvcc built it with the wheel), else ``build/`` of the checkout."""
    env = settings.cuda_lib()
    if env is not None:
        return env
    return PACKAGED_LIB if PACKAGED_LIB.is_file() else CHECKOUT_LIB


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
        raise NoCudaError(
            "%s was built for another ABI (struct sizes %d/%d, expected %d/%d): %s"
            % (path, launch.value, props.value, C.sizeof(SpirulaLaunch), C.sizeof(_Properties), BUILD_HINT)
        )
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
class CudaDeviceInfo(DeviceInfo):
    """:class:`spirula.runtime.device.DeviceInfo` of a CUDA device, with its SMs
    and compute capability."""

    sm_count: int = 0
    compute_capability: tuple = (0, 0)


def _version(v: int) -> str:
    return "%d.%d" % (v // 1000, (v % 1000) // 10)


def device_count() -> int:
    """CUDA GPUs this process sees (0 without a driver or a GPU; raises
    :class:`NoCudaError` without the library)."""
    lib = load_library()
    n = _I(0)
    return n.value if lib.spirula_cuda_device_count(C.byref(n)) == 0 else 0


def available_count() -> int:
    """CUDA GPUs this process sees; :class:`NoCudaError` with the reason (no
    library, no usable driver, no GPU) where there is none."""
    lib = load_library()
    n = _I(0)
    code = lib.spirula_cuda_device_count(C.byref(n))
    if code == _ERR_INSUFFICIENT_DRIVER:
        raise NoCudaError(
            "no usable NVIDIA driver for the CUDA backend (%s); the Vulkan backend does not need one" % error_text(code)
        )
    if code == _ERR_NO_DEVICE or (code == 0 and n.value == 0):
        raise NoCudaError("no CUDA GPU on this machine; use the Vulkan backend")
    if code:
        raise NoCudaError("CUDA is not usable here (%s)" % error_text(code))
    return n.value


def open_info(index: int) -> CudaDeviceInfo:
    """CUDA device ``index``'s info, made the current device of this thread."""
    lib = load_library()
    n = available_count()
    if not 0 <= index < n:
        raise NoCudaError(
            "CUDA device %d does not exist: this machine has %d CUDA GPU%s (0..%d)"
            % (index, n, "s" if n != 1 else "", n - 1)
        )
    info = _device_info(index)
    check(lib.spirula_cuda_set_device(index), "cudaSetDevice(%d)" % index)
    return info


def list_devices() -> list:
    """:class:`CudaDeviceInfo` of every CUDA GPU, in CUDA's order; empty when
    the library cannot be loaded, there is no usable driver or no GPU (for
    listings: it raises nothing and selects no device)."""
    try:
        return [_device_info(i) for i in range(device_count())]
    except SpirulaError:
        return []


def _device_info(index: int) -> CudaDeviceInfo:
    lib = load_library()
    p = _Properties()
    check(lib.spirula_cuda_device_properties(index, C.byref(p)), "cudaGetDeviceProperties(%d)" % index)
    return CudaDeviceInfo(
        index=index,
        name=p.name.decode(errors="replace"),
        device_type="discrete",
        driver="CUDA driver %s, runtime %s" % (_version(p.driver_version), _version(p.runtime_version)),
        api_version="sm_%d%d" % (p.cc_major, p.cc_minor),
        subgroup_size=p.warp_size,
        timestamps=True,
        timestamp_period_ns=1.0,
        timestamp_valid_bits=64,
        device_local_bytes=int(p.total_memory),
        max_storage_buffer_range=2**62,
        max_shared_memory=int(p.shared_memory_per_block),
        max_workgroup_count=(2**31 - 1, 65535, 65535),
        max_workgroup_invocations=p.max_threads_per_block,
        shader_int64=True,
        atomic_float_add=True,
        extensions=frozenset(),
        sm_count=p.sm_count,
        compute_capability=(p.cc_major, p.cc_minor),
    )


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


class Event:
    """A CUDA event; ``lib``: the library to call (default: the loaded one)."""

    __slots__ = ("handle", "lib")

    def __init__(self, lib=None):
        self.lib = lib or _lib
        h = _P()
        check(self.lib.spirula_cuda_event_create(C.byref(h)), "cudaEventCreate")
        self.handle = h.value

    def record(self, stream):
        check(self.lib.spirula_cuda_event_record(self.handle, stream), "cudaEventRecord")

    def sync(self, what: str = "cudaEventSynchronize"):
        """Wait until the work recorded before this event has finished."""
        check(self.lib.spirula_cuda_event_sync(self.handle), what)

    def since(self, start: Event) -> int:
        """Nanoseconds from ``start`` to this event (both completed)."""
        ms = C.c_float()
        check(self.lib.spirula_cuda_event_elapsed(C.byref(ms), start.handle, self.handle), "cudaEventElapsedTime")
        return int(ms.value * 1e6)

    def __del__(self):
        try:
            if self.handle and self.lib is not None:
                self.lib.spirula_cuda_event_destroy(self.handle)
        except Exception:
            pass
