"""GPU backends behind one device interface (docs/design.md §4).

Each backend is a package here: ``vulkan`` (:class:`spirula.backends.vulkan.VulkanDevice`:
Kompute, SPIR-V from ``shaders/*.comp``) and ``cuda``
(:class:`spirula.backends.cuda.CudaDevice`: ``native_cuda/*.cu`` built into
``build/libspirula_cuda.so`` by ``make cuda``). Both implement
:class:`spirula.runtime.device.Device` and run the same kernel names over the
same buffer layouts, so the render and training code take either device.
:func:`open_device` is the one way to open one; it imports a backend's
package only when that backend is asked for, and finds its device class there
(the :class:`~spirula.runtime.device.Device` subclass whose ``backend`` is the
package's name), so a new backend is a package and its name in :data:`BACKENDS`.
"""

from __future__ import annotations

import importlib

from spirula.errors import SpirulaError

BACKENDS = ("vulkan", "cuda")
DEFAULT_BACKEND = "vulkan"


class UnknownBackendError(SpirulaError, ValueError):
    """A backend name that is not one of :data:`BACKENDS`."""

    exit_code = 2


def check_backend(backend: str) -> str:
    """``backend`` if it names a backend, else :class:`UnknownBackendError` with one line."""
    if backend not in BACKENDS:
        raise UnknownBackendError("unknown backend %r (one of %s)" % (backend, ", ".join(BACKENDS)))
    return backend


def backend_module(backend: str):
    """The package of ``backend`` (``list_devices``, ``resolve_index``,
    ``unavailable_reason`` and its Device class); imported on first use, so
    the CUDA one is never loaded by a Vulkan run."""
    return importlib.import_module("spirula.backends." + check_backend(backend))


def device_class(backend: str):
    """The :class:`~spirula.runtime.device.Device` subclass that ``backend``'s
    package exports (the one whose ``backend`` attribute is its name)."""
    from spirula.runtime.device import Device

    module = backend_module(backend)
    found = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Device) and c.backend == backend]
    if len(found) != 1:
        raise TypeError("spirula.backends.%s exports %d Device classes, not one" % (backend, len(found)))
    return found[0]


def open_device(backend: str = DEFAULT_BACKEND, index: int | None = None, **options):
    """A device of ``backend`` ('vulkan' or 'cuda').

    ``index`` numbers that backend's GPUs (``spirula devices --backend ...``);
    None: ``$SPIRULA_DEVICE``, else the backend's default (Vulkan: a discrete
    GPU before an integrated one before lavapipe; CUDA: 0). ``options`` go to
    the backend's device (Vulkan: ``manager``, a ``kp.Manager`` to borrow,
    ``float_atomics`` and ``float_controls``).

    Raises :class:`spirula.errors.SpirulaError` (exit code 2) with one line
    when the backend is unknown or cannot run here.
    """
    return device_class(backend)(index, **options)


def list_devices(backend: str = DEFAULT_BACKEND) -> tuple:
    """The :class:`~spirula.runtime.device.DeviceInfo` of every GPU of
    ``backend``; a one-line SpirulaError where the backend cannot run here."""
    return tuple(backend_module(backend).list_devices())


def unavailable_reason(backend: str = DEFAULT_BACKEND, index: int | None = None):
    """None if :func:`open_device` can open ``backend``'s device ``index`` here,
    else the one-line reason (for skipping tests and benchmarks)."""
    return backend_module(backend).unavailable_reason(index)


_default = None


def get_device():
    """The process's default device (Vulkan), opened on first use."""
    global _default
    if _default is None:
        _default = open_device(DEFAULT_BACKEND)
    return _default


def set_device(device):
    """Make ``device`` (either backend's) the process default (None: open a fresh one on next use)."""
    global _default
    _default = device
