"""The Vulkan backend: Kompute, SPIR-V compiled from ``shaders/*.comp``.

What :func:`spirula.backends.open_device` and ``spirula devices`` use of it:
:class:`VulkanDevice`, :func:`list_devices`, :func:`resolve_index` and
:func:`unavailable_reason` (spirula/backends/vulkan/device.py). Beside them:
``vkinfo.py`` (what each Vulkan device is and can do, through the loader),
``kernels.py`` (the glslang registry and its SPIR-V cache), ``spirv.py``
(SPIR-V edits glslang has no option for), ``pipeline_cache.py`` (compiled
pipelines kept between runs) and ``sequence.py`` (the recorded Kompute
sequence).
"""

from spirula.backends.vulkan.device import VulkanDevice, list_devices, resolve_index, unavailable_reason

__all__ = ["VulkanDevice", "list_devices", "resolve_index", "unavailable_reason"]
