"""GPU backends behind one device interface (docs/design.md §4).

``vulkan``: :class:`spirula.runtime.device.Device` (Kompute, SPIR-V from
``shaders/*.comp``); ``cuda``: :class:`spirula.backends.cuda.CudaDevice`
(``native_cuda/*.cu`` built into ``build/libspirula_cuda.so`` by ``make cuda``).
Both run the same kernel names over the same buffer layouts, so the render
and training code take either device.
"""
from __future__ import annotations

BACKENDS = ("vulkan", "cuda")


def open_device(backend: str = "vulkan", index: int | None = None):
    """A device of ``backend`` ('vulkan' or 'cuda'); ``index`` as that backend numbers its GPUs.

    Raises :class:`spirula.errors.SpirulaError` (exit code 2) with one line
    when the backend cannot run here.
    """
    if backend == "vulkan":
        from spirula.runtime.device import Device
        return Device(index)
    if backend == "cuda":
        from spirula.backends.cuda import open_cuda_device
        return open_cuda_device(index)
    raise ValueError("unknown backend %r (one of %s)" % (backend, ", ".join(BACKENDS)))
