"""The CUDA backend: ``build/libspirula_cuda.so`` (native_cuda/*.cu, ``make cuda``) through ctypes.

What :func:`spirula.backends.open_device` and ``spirula devices`` use of it:
:class:`CudaDevice`, :func:`list_devices`, :func:`resolve_index` and
:func:`unavailable_reason` (spirula/backends/cuda/device.py). Beside them:
``cudart.py``, the ctypes prototypes of the library's runtime half, device
discovery and memory (docs/cuda.md).
"""

from spirula.backends.cuda.device import CudaDevice, list_devices, resolve_index, unavailable_reason

__all__ = ["CudaDevice", "list_devices", "resolve_index", "unavailable_reason"]
