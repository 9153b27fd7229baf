"""The kernel variants a wheel ships precompiled (``spirula/_spirv/``), and
the file a kernel's defines name there.

A kernel is compiled with the device's defines (:class:`VulkanDevice`'s
``defines``: ``ATOMIC_FLOAT``, ``INF_NAN_PRESERVE``, ``SUBGROUP_SIZE_MIN``/
``MAX`` and, where rasterize_bwd sums with shuffles, ``SHUFFLE_SUMS`` and
``SUBGROUP_LOG2``) plus its caller's (``VEC4``, ``FLOAT``, ``COMPACT``,
``SH_VEC4``). Most kernels read none of them, so a variant is named by the
defines its source (with its includes) mentions: ``fpbo.ATOMIC_FLOAT=1.SH_VEC4=0``,
``copy.VEC4=1``, ``nn_gelu``. :func:`variants` lists every one a device
(:data:`DEVICE_DEFINES`) and a caller (:data:`CALL_DEFINES`) can ask for:
95 modules of 48 kernels, where the full product of the defines would be thousands.
``INF_NAN_PRESERVE`` names none, since it is an edit of the compiled module
(spirula/backends/vulkan/spirv.py), not a define the shaders read.

Why the device's defines are not specialization constants: ``ATOMIC_FLOAT``
changes buffers' element types and needs an extension, ``SHUFFLE_SUMS`` an
extension, ``SUBGROUP_LOG2`` is a loop bound the compiler must see to unroll
(measured: the unrolled loop made rasterize_bwd 17% faster on an H100, a loop
15% slower). ``SUBGROUP_SIZE_MIN``/``MAX`` size radix_sort_scatter's shared
counts, which a spec constant could do (21 of the 95 modules); its CUDA twin
reads the same contract, so that change waits for a GPU run.

No numpy and no other spirula import: the wheel's build runs
``scripts/precompile_shaders.py`` with this file alone, before numpy exists.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

TARGET_ENV = "vulkan1.1"  # SPIR-V 1.3: subgroup operations are core
# A Vulkan subgroup size is a power of two; vkinfo.check_requirements accepts 4 to 128.
SUBGROUP_SIZES = (4, 8, 16, 32, 64, 128)


def _device_defines() -> list:
    """Every ``defines`` a VulkanDevice can compile with (spirula/backends/vulkan/device.py)."""
    out = []
    for atomic, preserve, (lo, hi) in itertools.product(
        (0, 1), (0, 1), [(lo, hi) for lo in SUBGROUP_SIZES for hi in SUBGROUP_SIZES if lo <= hi]
    ):
        base = dict(ATOMIC_FLOAT=atomic, INF_NAN_PRESERVE=preserve, SUBGROUP_SIZE_MIN=lo, SUBGROUP_SIZE_MAX=hi)
        out.append(base)
        if lo == hi:  # shuffle_sums_defines: only where the device runs one subgroup size
            out.append(dict(base, SHUFFLE_SUMS=1, SUBGROUP_LOG2=lo.bit_length() - 1))
    return out


DEVICE_DEFINES = _device_defines()

# The compile-time variants callers choose (rec.dispatch(..., defines=...), Device.kernel(name, ...));
# a kernel not listed is called without any. Adding a call site's variant here ships it.
CALL_DEFINES = {
    "copy": ({"VEC4": 0}, {"VEC4": 1}),  # VulkanDevice._copy_words, RecordedSequence.copy
    "fill": ({"VEC4": 0}, {"VEC4": 1}),
    "prefix_sum": ({"FLOAT": 0}, {"FLOAT": 1}),  # spirula/render/scan.py
    "projection_fwd": ({}, {"COMPACT": 1}),  # spirula/render/rasterizer.py
    "fpbo": ({"COMPACT": 1}, {"SH_VEC4": 0}, {"SH_VEC4": 1}),  # spirula/train/optimizer.py
}

_RE_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_RE_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_RE_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def source_names(source_dir, name: str, include_dirs=None) -> frozenset:
    """Every identifier of ``<source_dir>/<name>.comp`` and the files it
    includes (comments left out): the defines that can change its SPIR-V."""
    source_dir = Path(source_dir)
    include_dirs = [Path(p) for p in include_dirs] if include_dirs else [source_dir / "include"]
    names, todo, seen = set(), [source_dir / (name + ".comp")], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        text = _RE_COMMENT.sub(" ", path.read_text())
        names.update(_RE_IDENT.findall(text))
        for inc in _RE_INCLUDE.findall(text):
            found = [d / inc for d in [path.parent, *include_dirs] if (d / inc).is_file()]
            todo.extend(found[:1])
    return frozenset(names)


def kept_defines(defines: dict, used: frozenset) -> list:
    """``NAME=value`` of each of ``defines`` its kernel's source mentions (``used``: :func:`source_names`), sorted."""
    return ["%s=%s" % kv for kv in sorted((k, str(v)) for k, v in defines.items() if k in used)]


def variant_stem(name: str, defines: dict, used: frozenset) -> str:
    """The file name (without ``.spv``) of kernel ``name`` under ``defines``: ``fpbo.ATOMIC_FLOAT=1.SH_VEC4=0``."""
    return ".".join([name] + kept_defines(defines, used))


def variants(source_dir, include_dirs=None) -> dict:
    """``{stem: (kernel, defines)}``: every variant a device and its callers can ask for."""
    out = {}
    for path in sorted(Path(source_dir).glob("*.comp")):
        name = path.stem
        used = source_names(source_dir, name, include_dirs)
        for call in CALL_DEFINES.get(name, ({},)):
            for device in DEVICE_DEFINES:
                defines = {k: v for k, v in {**device, **call}.items() if k in used}
                out.setdefault(variant_stem(name, defines, used), (name, defines))
    return out


def glslang_commands(exe: str, src, include_dirs, defines, spv_out) -> tuple:
    """glslangValidator's two command lines for one variant: compile to
    ``spv_out`` and preprocess (to stdout, the text the contract is read from)."""
    args = ["-I%s" % d for d in include_dirs] + ["-D%s=%s" % kv for kv in defines]
    return (
        [exe, "-V", "--target-env", TARGET_ENV, *args, "-o", str(spv_out), str(src)],
        [exe, "-E", *args, str(src)],
    )
