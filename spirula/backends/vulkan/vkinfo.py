"""What each Vulkan device is and can do, read straight from the Vulkan loader.

Kompute's ``list_devices()`` gives a name and work-group limits only; Spirula
also needs the driver, subgroup size, timestamp period, memory and optional
features to pick a device, choose shader variants and convert timestamps. This
module asks the loader itself through ctypes, with its own short-lived
``VkInstance``, so it also works (and fails clearly) before ``kp`` is imported.

Only the structures read here are declared; their layouts follow
``vulkan_core.h`` (Vulkan 1.1 core plus VK_KHR_driver_properties and
VK_EXT_shader_atomic_float).
"""

from __future__ import annotations

import ctypes as C
import dataclasses
import functools

from spirula.errors import NoVulkanError
from spirula.runtime.device import DeviceInfo

# The packages of the Vulkan loader and of Mesa's drivers (lavapipe, the CPU driver
# Spirula runs anywhere on; RADV for AMD, ANV for Intel) on the common distributions.
DRIVER_PACKAGES = (
    "Debian/Ubuntu: apt install mesa-vulkan-drivers; Fedora: dnf install mesa-vulkan-drivers;"
    " Arch: pacman -S vulkan-swrast (or vulkan-radeon, vulkan-intel); NVIDIA: its driver"
)
# no loader: both (one line, as every NoVulkanError)
INSTALL_HINT = (
    "install the Vulkan loader and a driver (Debian/Ubuntu: apt install libvulkan1 mesa-vulkan-drivers;"
    " Fedora: dnf install vulkan-loader mesa-vulkan-drivers; Arch: pacman -S vulkan-icd-loader vulkan-swrast;"
    " NVIDIA: its driver brings its own)"
)
# a loader that finds no driver: a driver
DRIVER_HINT = "install a Vulkan driver (%s)" % DRIVER_PACKAGES


@dataclasses.dataclass(frozen=True)
class VulkanDeviceInfo(DeviceInfo):
    """:class:`spirula.runtime.device.DeviceInfo` of a Vulkan device, with what
    :func:`missing_requirements` checks: the subgroup operations and shader
    stages (``VkPhysicalDeviceSubgroupProperties`` bit masks) and the range of
    subgroup sizes a compute shader may run with (VK_EXT_subgroup_size_control;
    without it, ``subgroup_size`` alone); and whether kernels may be compiled
    to keep IEEE's NaN and Inf (``inf_nan_preserve``:
    shaderSignedZeroInfNanPreserveFloat32 of VK_KHR_shader_float_controls;
    spirula/backends/vulkan/spirv.py)."""

    subgroup_operations: int = 0
    subgroup_stages: int = 0
    min_subgroup_size: int = 0
    max_subgroup_size: int = 0
    inf_nan_preserve: bool = False
    # VkPhysicalDeviceIDProperties.deviceUUID as 32 hex digits ("" if the driver
    # reports none): on NVIDIA the same UUID as CUDA's and NVML's ("GPU-" + the
    # digits in 8-4-4-4-12 groups), which maps a GPU Ray assigns through
    # CUDA_VISIBLE_DEVICES to its Vulkan index (spirula/partition/ray_run.py)
    device_uuid: str = ""
    # VkPhysicalDeviceProperties.vendorID (PCI vendor: VENDOR_NVIDIA, ...; Mesa's CPU drivers 0x10005)
    vendor_id: int = 0

    @property
    def subgroup_size_range(self) -> tuple:
        """(smallest, largest) subgroup size a compute shader may run with."""
        return (self.min_subgroup_size or self.subgroup_size, self.max_subgroup_size or self.subgroup_size)


VENDOR_NVIDIA = 0x10DE


# ---- what Spirula's kernels need (docs/design.md §4.2) ---------------------------------

STAGE_COMPUTE = 0x20  # VK_SHADER_STAGE_COMPUTE_BIT
# VkSubgroupFeatureFlagBits each kernel family uses (grep GL_KHR_shader_subgroup_ in shaders/)
SUBGROUP_OPERATIONS = {
    "basic": (0x1, "radix_sort_scatter, loss_fwd, loss_bwd, rasterize_bwd"),
    "vote": (0x2, "rasterize_bwd"),
    "arithmetic": (0x4, "loss_fwd, loss_bwd, rasterize_bwd, radix_sort_scatter"),
    "ballot": (0x8, "radix_sort_scatter"),
}
# optional: rasterize_bwd's SHUFFLE_SUMS=1 (VulkanDevice's shuffle_sums) only where the device has it
SUBGROUP_SHUFFLE = 0x10
# radix_sort_scatter keeps per-subgroup digit counts for SORT_WG / min subgroups,
# in 8-bit fields where a subgroup's slice fits (at most 8 lanes), else 16-bit: a
# range from 4 lanes to more than 8 would need twice the shared memory of any
# other (16 KB of counts); loss_fwd/bwd keep one sum per subgroup of a
# 256-thread workgroup in s_sum[64] (at least 4 lanes)
MIN_SUBGROUP_SIZE, MAX_SUBGROUP_SIZE = 4, 128
# the largest `shared` footprint of any kernel: loss_bwd's s_g 26x26 vec3 + s_h
# 26x16 vec3 + s_sum 64 vec4, a vec3 counted as 16 bytes as drivers pad it
# (10816 + 6656 + 1024 bytes; 14128 unpadded); tests/test_device_requirements.py
# derives it from every kernel's SPIR-V, so a kernel that grows it updates this
SHARED_MEMORY_KERNEL, SHARED_MEMORY_BYTES = "loss_bwd", 18496
# Vulkan's own minimum maxStorageBufferRange; each buffer larger than what the
# device offers is refused, naming it, when allocated (runtime/buffers.py)
STORAGE_BUFFER_RANGE = 1 << 27


def missing_requirements(info) -> list:
    """What Vulkan device ``info`` lacks that Spirula's kernels assume, one
    phrase each (empty: it has everything). Float atomics are not here: without
    them rasterize_bwd takes its compare-and-swap path."""
    missing = []
    if not info.subgroup_stages & STAGE_COMPUTE:
        missing.append("subgroup operations in compute shaders")
    else:
        for op, (bit, kernels) in SUBGROUP_OPERATIONS.items():
            if not info.subgroup_operations & bit:
                missing.append("subgroup %s operations (%s)" % (op, kernels))
    lo, hi = info.subgroup_size_range
    if lo < MIN_SUBGROUP_SIZE or hi > MAX_SUBGROUP_SIZE:
        missing.append(
            "a subgroup size within %d..%d (radix_sort_scatter, loss_fwd, loss_bwd; it runs %s)"
            % (MIN_SUBGROUP_SIZE, MAX_SUBGROUP_SIZE, lo if lo == hi else "%d..%d" % (lo, hi))
        )
    elif lo < 8 < hi:
        what = "subgroup sizes all up to 8 lanes or all from 8 (radix_sort_scatter; it runs %d..%d)"
        missing.append(what % (lo, hi))
    if info.max_shared_memory < SHARED_MEMORY_BYTES:
        missing.append(
            "%d bytes of compute shared memory (%s; it has %d)"
            % (SHARED_MEMORY_BYTES, SHARED_MEMORY_KERNEL, info.max_shared_memory)
        )
    if info.max_storage_buffer_range < STORAGE_BUFFER_RANGE:
        missing.append(
            "a storage buffer range of %d bytes (it has %d)" % (STORAGE_BUFFER_RANGE, info.max_storage_buffer_range)
        )
    return missing


def check_requirements(info):
    """Raise :class:`NoVulkanError` with one line naming what ``info`` lacks."""
    missing = missing_requirements(info)
    if missing:
        what = "; ".join(missing)
        msg = "Vulkan device %d (%s) cannot run Spirula's kernels: it lacks %s"
        raise NoVulkanError(msg % (info.index, info.name, what))


_TYPES = {
    "u32": C.c_uint32,
    "i32": C.c_int32,
    "u64": C.c_uint64,
    "usize": C.c_size_t,
    "f32": C.c_float,
    "u8": C.c_uint8,
    "ptr": C.c_void_p,
}


def _fields(spec: str):
    """'u32 a; f32[2] b' -> ctypes _fields_."""
    out = []
    for item in spec.split(";"):
        typ, name = item.split()
        if "[" in typ:
            base, n = typ[:-1].split("[")
            out.append((name, _TYPES[base] * int(n)))
        else:
            out.append((name, _TYPES[typ]))
    return out


class _Limits(C.Structure):
    _fields_ = _fields(
        "u32 maxImageDimension1D; u32 maxImageDimension2D; u32 maxImageDimension3D; "
        "u32 maxImageDimensionCube; u32 maxImageArrayLayers; u32 maxTexelBufferElements; "
        "u32 maxUniformBufferRange; u32 maxStorageBufferRange; u32 maxPushConstantsSize; "
        "u32 maxMemoryAllocationCount; u32 maxSamplerAllocationCount; u64 bufferImageGranularity; "
        "u64 sparseAddressSpaceSize; u32 maxBoundDescriptorSets; u32 maxPerStageDescriptorSamplers; "
        "u32 maxPerStageDescriptorUniformBuffers; u32 maxPerStageDescriptorStorageBuffers; "
        "u32 maxPerStageDescriptorSampledImages; u32 maxPerStageDescriptorStorageImages; "
        "u32 maxPerStageDescriptorInputAttachments; u32 maxPerStageResources; "
        "u32 maxDescriptorSetSamplers; u32 maxDescriptorSetUniformBuffers; "
        "u32 maxDescriptorSetUniformBuffersDynamic; u32 maxDescriptorSetStorageBuffers; "
        "u32 maxDescriptorSetStorageBuffersDynamic; u32 maxDescriptorSetSampledImages; "
        "u32 maxDescriptorSetStorageImages; u32 maxDescriptorSetInputAttachments; "
        "u32 maxVertexInputAttributes; u32 maxVertexInputBindings; u32 maxVertexInputAttributeOffset; "
        "u32 maxVertexInputBindingStride; u32 maxVertexOutputComponents; "
        "u32 maxTessellationGenerationLevel; u32 maxTessellationPatchSize; "
        "u32 maxTessellationControlPerVertexInputComponents; "
        "u32 maxTessellationControlPerVertexOutputComponents; "
        "u32 maxTessellationControlPerPatchOutputComponents; "
        "u32 maxTessellationControlTotalOutputComponents; "
        "u32 maxTessellationEvaluationInputComponents; u32 maxTessellationEvaluationOutputComponents; "
        "u32 maxGeometryShaderInvocations; u32 maxGeometryInputComponents; "
        "u32 maxGeometryOutputComponents; u32 maxGeometryOutputVertices; "
        "u32 maxGeometryTotalOutputComponents; u32 maxFragmentInputComponents; "
        "u32 maxFragmentOutputAttachments; u32 maxFragmentDualSrcAttachments; "
        "u32 maxFragmentCombinedOutputResources; u32 maxComputeSharedMemorySize; "
        "u32[3] maxComputeWorkGroupCount; u32 maxComputeWorkGroupInvocations; "
        "u32[3] maxComputeWorkGroupSize; u32 subPixelPrecisionBits; u32 subTexelPrecisionBits; "
        "u32 mipmapPrecisionBits; u32 maxDrawIndexedIndexValue; u32 maxDrawIndirectCount; "
        "f32 maxSamplerLodBias; f32 maxSamplerAnisotropy; u32 maxViewports; "
        "u32[2] maxViewportDimensions; f32[2] viewportBoundsRange; u32 viewportSubPixelBits; "
        "usize minMemoryMapAlignment; u64 minTexelBufferOffsetAlignment; "
        "u64 minUniformBufferOffsetAlignment; u64 minStorageBufferOffsetAlignment; "
        "i32 minTexelOffset; u32 maxTexelOffset; i32 minTexelGatherOffset; u32 maxTexelGatherOffset; "
        "f32 minInterpolationOffset; f32 maxInterpolationOffset; u32 subPixelInterpolationOffsetBits; "
        "u32 maxFramebufferWidth; u32 maxFramebufferHeight; u32 maxFramebufferLayers; "
        "u32 framebufferColorSampleCounts; u32 framebufferDepthSampleCounts; "
        "u32 framebufferStencilSampleCounts; u32 framebufferNoAttachmentsSampleCounts; "
        "u32 maxColorAttachments; u32 sampledImageColorSampleCounts; "
        "u32 sampledImageIntegerSampleCounts; u32 sampledImageDepthSampleCounts; "
        "u32 sampledImageStencilSampleCounts; u32 storageImageSampleCounts; u32 maxSampleMaskWords; "
        "u32 timestampComputeAndGraphics; f32 timestampPeriod; u32 maxClipDistances; "
        "u32 maxCullDistances; u32 maxCombinedClipAndCullDistances; u32 discreteQueuePriorities; "
        "f32[2] pointSizeRange; f32[2] lineWidthRange; f32 pointSizeGranularity; "
        "f32 lineWidthGranularity; u32 strictLines; u32 standardSampleLocations; "
        "u64 optimalBufferCopyOffsetAlignment; u64 optimalBufferCopyRowPitchAlignment; "
        "u64 nonCoherentAtomSize"
    )


class _Properties(C.Structure):
    _fields_ = _fields(
        "u32 apiVersion; u32 driverVersion; u32 vendorID; u32 deviceID; "
        "i32 deviceType; u8[256] deviceName; u8[16] pipelineCacheUUID"
    ) + [("limits", _Limits), ("sparse", C.c_uint32 * 5)]


class _Properties2(C.Structure):
    _fields_ = [("sType", C.c_int32), ("pNext", C.c_void_p), ("properties", _Properties)]


class _SubgroupProperties(C.Structure):
    _fields_ = _fields(
        "i32 sType; ptr pNext; u32 subgroupSize; u32 supportedStages; "
        "u32 supportedOperations; u32 quadOperationsInAllStages"
    )


class _IDProperties(C.Structure):
    _fields_ = _fields(
        "i32 sType; ptr pNext; u8[16] deviceUUID; u8[16] driverUUID; u8[8] deviceLUID; "
        "u32 deviceNodeMask; u32 deviceLUIDValid"
    )


class _SubgroupSizeControlProperties(C.Structure):
    _fields_ = _fields(
        "i32 sType; ptr pNext; u32 minSubgroupSize; u32 maxSubgroupSize; "
        "u32 maxComputeWorkgroupSubgroups; u32 requiredSubgroupSizeStages"
    )


class _DriverProperties(C.Structure):
    _fields_ = _fields(
        "i32 sType; ptr pNext; i32 driverID; u8[256] driverName; u8[256] driverInfo; u8[4] conformanceVersion"
    )


class _FloatControlsProperties(C.Structure):
    # two enums, then 15 VkBool32s; shaderSignedZeroInfNanPreserveFloat32 is the 2nd
    _fields_ = [
        ("sType", C.c_int32),
        ("pNext", C.c_void_p),
        ("independence", C.c_int32 * 2),
        ("flags", C.c_uint32 * 15),
    ]


class _Features2(C.Structure):
    # VkPhysicalDeviceFeatures is 55 VkBool32s; shaderInt64 is the 41st
    _fields_ = [("sType", C.c_int32), ("pNext", C.c_void_p), ("features", C.c_uint32 * 55)]


class _AtomicFloatFeatures(C.Structure):
    _fields_ = [("sType", C.c_int32), ("pNext", C.c_void_p), ("flags", C.c_uint32 * 12)]


class _MemoryProperties(C.Structure):
    _fields_ = [
        ("memoryTypeCount", C.c_uint32),
        ("memoryTypes", C.c_uint32 * 64),
        ("memoryHeapCount", C.c_uint32),  # at offset 260: the heaps start 8-aligned
        ("memoryHeaps", C.c_uint64 * 32),
    ]  # 16 x {u64 size; u32 flags (+pad)}


class _QueueFamily(C.Structure):
    _fields_ = _fields("u32 queueFlags; u32 queueCount; u32 timestampValidBits; u32[3] granularity")


class _Extension(C.Structure):
    _fields_ = [("extensionName", C.c_char * 256), ("specVersion", C.c_uint32)]


class _AppInfo(C.Structure):
    _fields_ = [
        ("sType", C.c_int32),
        ("pNext", C.c_void_p),
        ("pApplicationName", C.c_char_p),
        ("applicationVersion", C.c_uint32),
        ("pEngineName", C.c_char_p),
        ("engineVersion", C.c_uint32),
        ("apiVersion", C.c_uint32),
    ]


class _InstanceInfo(C.Structure):
    _fields_ = [
        ("sType", C.c_int32),
        ("pNext", C.c_void_p),
        ("flags", C.c_uint32),
        ("pApplicationInfo", C.POINTER(_AppInfo)),
        ("enabledLayerCount", C.c_uint32),
        ("ppEnabledLayerNames", C.c_void_p),
        ("enabledExtensionCount", C.c_uint32),
        ("ppEnabledExtensionNames", C.c_void_p),
    ]


_ST_PROPERTIES_2 = 1000059001
_ST_FEATURES_2 = 1000059000
_ST_SUBGROUP = 1000094000
_ST_DRIVER = 1000196000
_ST_SUBGROUP_SIZE_CONTROL = 1000225000
_ST_ATOMIC_FLOAT = 1000260000
_ST_FLOAT_CONTROLS = 1000197000
_ST_ID = 1000071004  # VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES (Vulkan 1.1 core)
_SHADER_INT64 = 40
_DEVICE_TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
_MEMORY_HEAP_DEVICE_LOCAL = 1
_VK_API_1_1 = (1 << 22) | (1 << 12)

ATOMIC_FLOAT_EXTENSION = "VK_EXT_shader_atomic_float"
FLOAT_CONTROLS_EXTENSION = "VK_KHR_shader_float_controls"
PIPELINE_ROBUSTNESS_EXTENSION = "VK_EXT_pipeline_robustness"


def _version(v: int) -> str:
    return "%d.%d.%d" % (v >> 22, (v >> 12) & 0x3FF, v & 0xFFF)


def _cstr(arr) -> str:
    return bytes(arr).split(b"\0", 1)[0].decode("utf-8", "replace")


def _load_loader():
    try:
        vk = C.CDLL("libvulkan.so.1")
    except OSError:
        raise NoVulkanError("no Vulkan loader (libvulkan.so.1) on this machine: " + INSTALL_HINT) from None
    vk.vkCreateInstance.argtypes = [C.c_void_p, C.c_void_p, C.POINTER(C.c_void_p)]
    vk.vkEnumeratePhysicalDevices.argtypes = [C.c_void_p, C.POINTER(C.c_uint32), C.c_void_p]
    vk.vkDestroyInstance.argtypes = [C.c_void_p, C.c_void_p]
    for fn in ("vkGetPhysicalDeviceProperties2", "vkGetPhysicalDeviceFeatures2", "vkGetPhysicalDeviceMemoryProperties"):
        getattr(vk, fn).argtypes = [C.c_void_p, C.c_void_p]
    vk.vkGetPhysicalDeviceQueueFamilyProperties.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p]
    vk.vkEnumerateDeviceExtensionProperties.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(C.c_uint32), C.c_void_p]
    return vk


def _device_info(vk, index: int, pdev) -> DeviceInfo:
    n = C.c_uint32(0)
    vk.vkEnumerateDeviceExtensionProperties(pdev, None, C.byref(n), None)
    exts = (_Extension * n.value)()
    vk.vkEnumerateDeviceExtensionProperties(pdev, None, C.byref(n), exts)
    extensions = frozenset(e.extensionName.decode() for e in exts)

    subgroup = _SubgroupProperties(sType=_ST_SUBGROUP)
    driver = _DriverProperties(sType=_ST_DRIVER)
    size_control = _SubgroupSizeControlProperties(sType=_ST_SUBGROUP_SIZE_CONTROL)
    ids = _IDProperties(sType=_ST_ID)
    props2 = _Properties2(sType=_ST_PROPERTIES_2, pNext=C.cast(C.pointer(ids), C.c_void_p))
    ids.pNext = C.cast(C.pointer(subgroup), C.c_void_p)
    float_controls = _FloatControlsProperties(sType=_ST_FLOAT_CONTROLS)
    tail = subgroup
    if "VK_KHR_driver_properties" in extensions:
        tail.pNext = C.cast(C.pointer(driver), C.c_void_p)
        tail = driver
    if "VK_EXT_subgroup_size_control" in extensions:
        tail.pNext = C.cast(C.pointer(size_control), C.c_void_p)
        tail = size_control
    if FLOAT_CONTROLS_EXTENSION in extensions:
        tail.pNext = C.cast(C.pointer(float_controls), C.c_void_p)
    vk.vkGetPhysicalDeviceProperties2(pdev, C.byref(props2))
    p = props2.properties
    # without the extension (or where it reports nothing), the one size there is
    min_sg = size_control.minSubgroupSize or subgroup.subgroupSize
    max_sg = size_control.maxSubgroupSize or subgroup.subgroupSize

    atomic = _AtomicFloatFeatures(sType=_ST_ATOMIC_FLOAT)
    feats = _Features2(sType=_ST_FEATURES_2)
    if ATOMIC_FLOAT_EXTENSION in extensions:
        feats.pNext = C.cast(C.pointer(atomic), C.c_void_p)
    vk.vkGetPhysicalDeviceFeatures2(pdev, C.byref(feats))

    mem = _MemoryProperties()
    vk.vkGetPhysicalDeviceMemoryProperties(pdev, C.byref(mem))
    local = sum(
        mem.memoryHeaps[2 * i]
        for i in range(mem.memoryHeapCount)
        if mem.memoryHeaps[2 * i + 1] & _MEMORY_HEAP_DEVICE_LOCAL
    )

    nq = C.c_uint32(0)
    vk.vkGetPhysicalDeviceQueueFamilyProperties(pdev, C.byref(nq), None)
    families = (_QueueFamily * nq.value)()
    vk.vkGetPhysicalDeviceQueueFamilyProperties(pdev, C.byref(nq), families)
    compute = [f for f in families if f.queueFlags & 2]  # VK_QUEUE_COMPUTE_BIT
    valid_bits = compute[0].timestampValidBits if compute else 0

    drv = _cstr(driver.driverName)
    info = _cstr(driver.driverInfo)
    return VulkanDeviceInfo(
        index=index,
        name=_cstr(p.deviceName),
        device_type=_DEVICE_TYPES.get(p.deviceType, "other"),
        driver=(drv + (" " + info if info else "")) or "?",
        api_version=_version(p.apiVersion),
        subgroup_size=subgroup.subgroupSize,
        timestamps=bool(p.limits.timestampComputeAndGraphics) and valid_bits > 0,
        timestamp_period_ns=float(p.limits.timestampPeriod),
        timestamp_valid_bits=valid_bits,
        device_local_bytes=int(local),
        max_storage_buffer_range=int(p.limits.maxStorageBufferRange),
        max_shared_memory=int(p.limits.maxComputeSharedMemorySize),
        max_workgroup_count=tuple(p.limits.maxComputeWorkGroupCount),
        max_workgroup_invocations=int(p.limits.maxComputeWorkGroupInvocations),
        shader_int64=bool(feats.features[_SHADER_INT64]),
        atomic_float_add=bool(atomic.flags[1]),  # shaderBufferFloat32AtomicAdd
        extensions=extensions,
        subgroup_operations=int(subgroup.supportedOperations),
        subgroup_stages=int(subgroup.supportedStages),
        min_subgroup_size=int(min_sg),
        max_subgroup_size=int(max_sg),
        inf_nan_preserve=bool(float_controls.flags[1]),  # shaderSignedZeroInfNanPreserveFloat32
        device_uuid=bytes(ids.deviceUUID).hex() if any(ids.deviceUUID) else "",
        vendor_id=int(p.vendorID),
    )


class _LayerProperties(C.Structure):
    _fields_ = [
        ("layerName", C.c_char * 256),
        ("specVersion", C.c_uint32),
        ("implementationVersion", C.c_uint32),
        ("description", C.c_char * 256),
    ]


def instance_layers() -> frozenset:
    """Names of the instance layers the loader finds (VK_LAYER_PATH and the
    other layer search paths of this process's environment)."""
    vk = _load_loader()
    vk.vkEnumerateInstanceLayerProperties.argtypes = [C.POINTER(C.c_uint32), C.c_void_p]
    n = C.c_uint32(0)
    if vk.vkEnumerateInstanceLayerProperties(C.byref(n), None) != 0:
        return frozenset()
    layers = (_LayerProperties * n.value)()
    vk.vkEnumerateInstanceLayerProperties(C.byref(n), layers)
    return frozenset(layers[i].layerName.decode("utf-8", "replace") for i in range(n.value))


@functools.lru_cache(maxsize=1)
def list_devices() -> tuple:
    """All Vulkan devices, in the loader's order. Raises NoVulkanError if none."""
    vk = _load_loader()
    app = _AppInfo(sType=0, pApplicationName=b"spirula", pEngineName=b"spirula", apiVersion=_VK_API_1_1)
    ci = _InstanceInfo(sType=1, pApplicationInfo=C.pointer(app))
    instance = C.c_void_p()
    res = vk.vkCreateInstance(C.byref(ci), None, C.byref(instance))
    if res != 0:
        raise NoVulkanError(
            "the Vulkan loader found no usable driver (vkCreateInstance returned %d): %s" % (res, DRIVER_HINT)
        )
    try:
        n = C.c_uint32(0)
        vk.vkEnumeratePhysicalDevices(instance, C.byref(n), None)
        handles = (C.c_void_p * n.value)()
        vk.vkEnumeratePhysicalDevices(instance, C.byref(n), handles)
        devices = tuple(_device_info(vk, i, C.c_void_p(h)) for i, h in enumerate(handles))
    finally:
        vk.vkDestroyInstance(instance, None)
    if not devices:
        raise NoVulkanError("the Vulkan loader found no device: " + DRIVER_HINT)
    return devices


def default_index(devices) -> int:
    """The device Spirula uses unless told: a discrete GPU, then integrated,
    then anything but the CPU driver, then the CPU driver (lavapipe)."""
    rank = {"discrete": 0, "integrated": 1, "virtual": 2, "other": 3, "cpu": 4}
    return min(devices, key=lambda d: (rank[d.device_type], d.index)).index


class _MemoryProperties2(C.Structure):
    _fields_ = [("sType", C.c_int32), ("pNext", C.c_void_p), ("properties", _MemoryProperties)]


class _MemoryBudget(C.Structure):
    _fields_ = [
        ("sType", C.c_int32),
        ("pNext", C.c_void_p),
        ("heapBudget", C.c_uint64 * 16),
        ("heapUsage", C.c_uint64 * 16),
    ]


_ST_MEMORY_PROPERTIES_2 = 1000059006
_ST_MEMORY_BUDGET = 1000237000


def process_heap_usage(index: int):
    """Device-local bytes this process uses on device ``index``, as the driver
    reports it through VK_EXT_memory_budget; None where the driver does not."""
    if "VK_EXT_memory_budget" not in list_devices()[index].extensions:
        return None
    vk = _load_loader()
    app = _AppInfo(sType=0, pApplicationName=b"spirula", pEngineName=b"spirula", apiVersion=_VK_API_1_1)
    ci = _InstanceInfo(sType=1, pApplicationInfo=C.pointer(app))
    instance = C.c_void_p()
    if vk.vkCreateInstance(C.byref(ci), None, C.byref(instance)) != 0:
        return None
    try:
        n = C.c_uint32(0)
        vk.vkEnumeratePhysicalDevices(instance, C.byref(n), None)
        handles = (C.c_void_p * n.value)()
        vk.vkEnumeratePhysicalDevices(instance, C.byref(n), handles)
        budget = _MemoryBudget(sType=_ST_MEMORY_BUDGET)
        props = _MemoryProperties2(sType=_ST_MEMORY_PROPERTIES_2, pNext=C.cast(C.pointer(budget), C.c_void_p))
        vk.vkGetPhysicalDeviceMemoryProperties2.argtypes = [C.c_void_p, C.c_void_p]
        vk.vkGetPhysicalDeviceMemoryProperties2(C.c_void_p(handles[index]), C.byref(props))
        mem = props.properties
        return int(
            sum(
                budget.heapUsage[i]
                for i in range(mem.memoryHeapCount)
                if mem.memoryHeaps[2 * i + 1] & _MEMORY_HEAP_DEVICE_LOCAL
            )
        )
    finally:
        vk.vkDestroyInstance(instance, None)
