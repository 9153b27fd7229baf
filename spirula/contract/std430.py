"""numpy dtypes of the structs that the GPU reads, parsed from their GLSL.

A struct shared by the host and the kernels (``StepParams`` in
``shaders/include/step_params.glsl``) is defined once, in GLSL; the CUDA
kernels include the same file (``dialect.glsl``) and the host derives the
numpy layout from it here, by std430's rules. Only what such a struct needs
is supported: 32-bit scalars (``uint``, ``int``, ``float``), ``vec2``/
``vec4`` and their integer forms, and fixed arrays of those.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from spirula.contract.kernel import shader_dir
from spirula.contract.preprocess import Preprocessor
from spirula.errors import ShaderCompileError

# GLSL type -> (numpy base type, components); std430 aligns a vecN to N * 4
# bytes (vec3 to 16, which no host struct uses: it is refused)
_TYPES = {
    "uint": ("<u4", 1),
    "int": ("<i4", 1),
    "float": ("<f4", 1),
    "vec2": ("<f4", 2),
    "uvec2": ("<u4", 2),
    "ivec2": ("<i4", 2),
    "vec4": ("<f4", 4),
    "uvec4": ("<u4", 4),
    "ivec4": ("<i4", 4),
}
_RE_MEMBER = re.compile(r"^(\w+)\s+(\w+)\s*(?:\[\s*(\d+)\s*\])?$")


def std430_dtype(source: str, struct: str, where: str = "shader") -> np.dtype:
    """The numpy dtype of ``struct <struct> { ... };`` in preprocessed GLSL
    ``source``, with std430 offsets, alignment and size."""
    m = re.search(r"\bstruct\s+%s\s*\{([^}]*)\}\s*;" % re.escape(struct), source)
    if m is None:
        raise ShaderCompileError("%s: no struct %s" % (where, struct))
    names, formats, offsets = [], [], []
    offset, align_max = 0, 4
    for decl in m.group(1).split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        dm = _RE_MEMBER.match(decl)
        if dm is None or dm.group(1) not in _TYPES:
            raise ShaderCompileError(
                "%s: struct %s: member '%s' is not a 32-bit scalar, vec2/vec4 or an array "
                "of them" % (where, struct, decl)
            )
        base, comps = _TYPES[dm.group(1)]
        align = 4 * comps
        align_max = max(align_max, align)
        offset = -(-offset // align) * align
        shape = (int(dm.group(3)),) if dm.group(3) else ()
        if comps > 1:
            shape = shape + (comps,)
        names.append(dm.group(2))
        formats.append((base, shape) if shape else base)
        offsets.append(offset)
        count = int(dm.group(3)) if dm.group(3) else 1
        offset += count * align
    size = -(-offset // align_max) * align_max
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})


def include_dtype(include: str, struct: str, include_dir=None) -> np.dtype:
    """The dtype of ``struct`` defined in ``shaders/include/<include>``."""

    inc = Path(include_dir) if include_dir else shader_dir() / "include"
    path = inc / include
    if not path.is_file():
        raise ShaderCompileError("no include file %s" % path)
    source = "\n".join(Preprocessor({}, [inc]).run(path))
    return std430_dtype(source, struct, "shaders/include/%s" % include)
