"""Device requirements checked at open (spirula/backends/vulkan/vkinfo.py): a Vulkan
device without the subgroup operations, subgroup sizes, shared memory or
storage-buffer range the kernels assume is refused with one line naming
what it lacks."""

import dataclasses
import re
import struct

import pytest

from spirula.backends.vulkan import vkinfo
from spirula.backends.vulkan.kernels import KernelRegistry
from spirula.contract.kernel import shader_dir
from spirula.errors import NoVulkanError


def _lavapipe():
    return vkinfo.list_devices()[0]


def test_this_device_has_everything():
    for d in vkinfo.list_devices():
        assert vkinfo.missing_requirements(d) == [], d.name
        assert d.min_subgroup_size <= d.subgroup_size <= d.max_subgroup_size


@pytest.mark.parametrize(
    "change,words",
    [
        (dict(subgroup_operations=0xBF & ~0x8), ["ballot", "radix_sort_scatter"]),
        (dict(subgroup_operations=0xBF & ~0x4), ["arithmetic", "loss_fwd"]),
        (dict(subgroup_operations=0xBF & ~0x2), ["vote", "rasterize_bwd"]),
        (dict(subgroup_stages=0x10), ["subgroup operations in compute shaders"]),
        (dict(subgroup_size=2, min_subgroup_size=2, max_subgroup_size=2), ["subgroup size within 4..128", "runs 2"]),
        (dict(min_subgroup_size=8, max_subgroup_size=256), ["runs 8..256"]),
        (dict(subgroup_size=4, min_subgroup_size=4, max_subgroup_size=16), ["radix_sort_scatter", "runs 4..16"]),
        (dict(max_shared_memory=8192), ["shared memory", "it has 8192"]),
        (dict(max_storage_buffer_range=1 << 20), ["storage buffer range", "1048576"]),
    ],
)
def test_a_device_that_falls_short_is_one_line_naming_what_it_lacks(change, words):
    full = dict(subgroup_operations=0xBF, subgroup_stages=0x20, subgroup_size=32, min_subgroup_size=32)
    fake = dataclasses.replace(_lavapipe(), **{**full, "max_subgroup_size": 32, **change})
    missing = vkinfo.missing_requirements(fake)
    assert len(missing) == 1, missing
    with pytest.raises(NoVulkanError) as err:
        vkinfo.check_requirements(fake)
    line = str(err.value)
    assert "\n" not in line and fake.name in line and "lacks" in line
    for w in words:
        assert w in line, (w, line)
    assert err.value.exit_code == 2


def test_opening_a_device_that_falls_short_fails_before_kompute(monkeypatch):
    from spirula.backends import open_device, vulkan

    poor = dataclasses.replace(_lavapipe(), subgroup_operations=0x1)
    monkeypatch.setattr(vkinfo, "list_devices", lambda: (poor,))
    with pytest.raises(NoVulkanError, match="lacks subgroup vote operations .*; subgroup arithmetic"):
        open_device("vulkan", 0)
    assert "subgroup ballot operations (radix_sort_scatter)" in vulkan.unavailable_reason(0)


# ---- the shared-memory figure, derived from every kernel's SPIR-V -----------------------


def _shared_bytes(spirv: bytes) -> int:
    """Bytes of the Workgroup-storage variables of a SPIR-V module; a
    3-component vector counts as 4 components (drivers pad it so); an array sized by a
    specialization constant counts at its largest choice."""
    words = struct.unpack("<%dI" % (len(spirv) // 4), spirv)
    size, consts, pointers, total = {}, {}, {}, 0
    i = 5
    while i < len(words):
        op, n = words[i] & 0xFFFF, words[i] >> 16
        a = words[i + 1 : i + n]
        if op in (21, 22):  # OpTypeInt, OpTypeFloat
            size[a[0]] = a[1] // 8
        elif op == 20:  # OpTypeBool
            size[a[0]] = 4
        elif op == 24:  # OpTypeMatrix
            size[a[0]] = size[a[1]] * a[2]
        elif op == 23:  # OpTypeVector
            size[a[0]] = size[a[1]] * (4 if a[2] == 3 else a[2])
        elif op == 28:  # OpTypeArray
            size[a[0]] = size.get(a[1], 0) * consts[a[2]]
        elif op == 30:  # OpTypeStruct
            size[a[0]] = sum(size.get(m, 0) for m in a[1:])  # (buffer blocks: not shared)
        elif op in (43, 50):  # OpConstant, OpSpecConstant (its default)
            consts[a[1]] = a[2]
        elif op == 52 and a[2] == 169:  # OpSpecConstantOp OpSelect (an array sized by a
            # specialization constant, rasterize_fwd's and rasterize_bwd's
            # NORMAL_SLOTS): the larger of the two
            consts[a[1]] = max(consts.get(a[4], 0), consts.get(a[5], 0))
        elif op == 32:  # OpTypePointer
            pointers[a[0]] = a[2]
        elif op == 59 and a[2] == 4:  # OpVariable in Workgroup storage
            total += size[pointers[a[0]]]
        i += n
    return total


def test_shared_memory_requirement_is_the_largest_kernels():
    reg = KernelRegistry()
    used = {}
    for path in sorted(shader_dir().glob("*.comp")):
        name = path.stem
        variants = [{}]
        if re.search(r"\bATOMIC_FLOAT\b", path.read_text()):
            variants = [dict(ATOMIC_FLOAT=0), dict(ATOMIC_FLOAT=1)]
        used[name] = max(_shared_bytes(reg.get(name, **v).spirv) for v in variants)
    assert used["radix_sort_count"] == 256 * 4  # the parser sees what the source declares
    name = max(used, key=used.get)
    assert used[name] == vkinfo.SHARED_MEMORY_BYTES, (name, used[name])
    assert "(%s;" % name in vkinfo.missing_requirements(dataclasses.replace(_lavapipe(), max_shared_memory=1024))[0]
