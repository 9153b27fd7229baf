"""A kernel's contract: ``shaders/<name>.comp``'s bindings, constants and workgroup.

A kernel is one GLSL compute shader. Its name is its file name, its profiler
row and its C symbol on the CUDA backend. Both backends check their dispatches
against the same :class:`Kernel` contract, parsed here from the preprocessed
source (glslang's ``-E`` on Vulkan, spirula/contract/preprocess.py for CUDA):

- storage buffers ``layout(binding = i) [readonly|writeonly] buffer B { T name[]; };``
  are named by their first member (``name``), whose GLSL type ``T`` (``uint``,
  ``vec4``, a struct such as ``StepParams``...) is the element type; bindings
  must be 0..n-1;
- the push-constant block's members are 32-bit scalars (``uint``/``int``/``float``),
  packed in declaration order;
- specialization constants ``layout(constant_id = i) const T NAME = v;`` must
  use ids 0..n-1 (Kompute numbers them by position).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from spirula import settings
from spirula.errors import ShaderCompileError


def shader_dir() -> Path:
    """The folder of ``*.comp`` sources (``SPIRULA_SHADER_DIR`` overrides)."""
    env = settings.shader_dir()
    if env is not None:
        return env
    here = Path(__file__).resolve().parent.parent
    for cand in (here.parent / "shaders", here / "_shaders"):
        if cand.is_dir():
            return cand
    raise ShaderCompileError("shader sources not found next to %s (set SPIRULA_SHADER_DIR)" % here)


@dataclasses.dataclass(frozen=True)
class Binding:
    index: int
    name: str
    reads: bool
    writes: bool
    restrict: bool = False  # the shader assumes no other binding aliases it
    type: str = ""  # GLSL type of the member: 'float', 'uvec2', 'StepParams', ...
    array: bool = True  # the member is an unsized array (else one value of ``type``)


@dataclasses.dataclass(frozen=True)
class Constant:
    name: str
    kind: str  # 'uint' | 'int' | 'float' | 'bool'
    default: float = 0


def _word(kind: str, value) -> np.uint32:
    if kind == "float":
        return np.float32(value).view(np.uint32)
    if kind == "int":
        return np.int32(value).view(np.uint32)
    return np.uint32(int(value))


@dataclasses.dataclass
class Kernel:
    """A compiled kernel and its contract. ``name`` is the profiler row."""

    name: str
    defines: tuple
    spirv: bytes
    bindings: tuple  # Binding, by index
    push: tuple  # Constant, in block order
    spec: tuple  # Constant, by constant_id
    local_size: tuple  # (x, y, z); 0 where set by a spec constant
    # `#pragma spirula_no_bounds_checks` in the shader: every access is in range by
    # construction and the kernel was measured faster without the driver's buffer
    # robustness; VulkanDevice(buffer_robustness="kernels") compiles it without
    no_bounds_checks: bool = False

    def __post_init__(self):
        self.key = (self.name, self.defines)
        self._push_index = {c.name: i for i, c in enumerate(self.push)}
        self._spec_index = {c.name: i for i, c in enumerate(self.spec)}

    def groups(self, threads):
        """Workgroups of this kernel's local size that cover ``threads``
        invocations: an int (a 1D dispatch, one invocation per item) or (x, y, z)."""
        if 0 in self.local_size:
            raise ValueError("%s: its local size is set by a specialization constant" % self.name)
        if isinstance(threads, (tuple, list)):
            t = tuple(int(v) for v in threads) + (1,) * (3 - len(threads))
            return tuple(-(-n // s) for n, s in zip(t, self.local_size))
        if self.local_size[1:] != (1, 1):
            raise ValueError(
                "%s: a %dx%dx%d workgroup needs (x, y, z) threads" % ((self.name,) + tuple(self.local_size))
            )
        return -(-int(threads) // self.local_size[0])

    def pack_push(self, values: dict | None) -> np.ndarray:
        """Push constants as float32-typed words holding the exact bit patterns."""
        values = values or {}
        unknown = set(values) - set(self._push_index)
        if unknown:
            raise TypeError("%s: no push constant %s" % (self.name, ", ".join(sorted(unknown))))
        missing = [c.name for c in self.push if c.name not in values]
        if missing:
            raise TypeError("%s: push constants missing: %s" % (self.name, ", ".join(missing)))
        words = np.array([_word(c.kind, values[c.name]) for c in self.push], np.uint32)
        return words.view(np.float32)

    def pack_spec(self, values: dict | None) -> np.ndarray:
        values = values or {}
        unknown = set(values) - set(self._spec_index)
        if unknown:
            raise TypeError("%s: no specialization constant %s" % (self.name, ", ".join(sorted(unknown))))
        words = np.array([_word(c.kind, values.get(c.name, c.default)) for c in self.spec], np.uint32)
        return words.view(np.float32)


# ---- parsing -------------------------------------------------------------------

_RE_BUFFER = re.compile(
    r"layout\s*\(([^)]*)\)\s*((?:(?:readonly|writeonly|restrict|coherent|volatile)\s+)*)"
    r"buffer\s+\w+\s*\{\s*([^}]*)\}",
    re.S,
)
_RE_MEMBER = re.compile(r"(?:\w+\s+)*?(\w+)\s+(\w+)\s*(\[[^\]]*\])?\s*;")
_RE_NO_BOUNDS_CHECKS = re.compile(r"^\s*#\s*pragma\s+spirula_no_bounds_checks\s*$", re.M)
_RE_PUSH = re.compile(r"layout\s*\(\s*push_constant\s*\)\s*uniform\s+\w+\s*\{([^}]*)\}", re.S)
_RE_SPEC = re.compile(
    r"layout\s*\(\s*constant_id\s*=\s*(\d+)\s*\)\s*const\s+(uint|int|float|bool)\s+(\w+)\s*=\s*([^;]+);"
)
_RE_LOCAL = re.compile(r"layout\s*\(([^)]*local_size[^)]*)\)\s*in\s*;")


def _layout_args(text: str) -> dict:
    out = {}
    for part in text.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
        else:
            out[part.strip()] = True
    return out


def _parse_default(kind: str, text: str):
    text = text.strip().rstrip("uU")
    if kind == "bool":
        return 1 if text == "true" else 0
    if kind == "float":
        return float(text.rstrip("fF"))
    return int(text, 0)


def parse_contract(name: str, source: str):
    """Bindings, push constants, spec constants and local size of preprocessed GLSL."""
    bindings = []
    for m in _RE_BUFFER.finditer(source):
        args = _layout_args(m.group(1))
        if "binding" not in args:
            continue
        quals = m.group(2).split()
        member = _RE_MEMBER.search(m.group(3))
        if not member:
            raise ShaderCompileError("shaders/%s.comp: cannot read the member of a buffer block" % name)
        bindings.append(
            Binding(
                int(args["binding"]),
                member.group(2),
                reads="writeonly" not in quals,
                writes="readonly" not in quals,
                restrict="restrict" in quals,
                type=member.group(1),
                array=member.group(3) is not None,
            )
        )
    bindings.sort(key=lambda b: b.index)
    if [b.index for b in bindings] != list(range(len(bindings))):
        raise ShaderCompileError(
            "shaders/%s.comp: buffer bindings must be 0..n-1, got %s" % (name, [b.index for b in bindings])
        )

    push = []
    pm = _RE_PUSH.search(source)
    if pm:
        for decl in pm.group(1).split(";"):
            decl = decl.strip()
            if not decl:
                continue
            kind, fname = decl.split()[-2:]
            if kind not in ("uint", "int", "float"):
                raise ShaderCompileError("shaders/%s.comp: push constant %s must be a 32-bit scalar" % (name, fname))
            push.append(Constant(fname, kind))

    spec = sorted(
        ((int(i), Constant(n, k, _parse_default(k, d))) for i, k, n, d in _RE_SPEC.findall(source)), key=lambda t: t[0]
    )
    if [i for i, _ in spec] != list(range(len(spec))):
        raise ShaderCompileError("shaders/%s.comp: constant_id values must be 0..n-1" % name)

    local = [1, 1, 1]
    lm = _RE_LOCAL.search(source)
    if lm:
        args = _layout_args(lm.group(1))
        for axis, key in enumerate(("local_size_x", "local_size_y", "local_size_z")):
            if key in args:
                local[axis] = int(args[key])
            elif key + "_id" in args:
                local[axis] = 0
    return tuple(bindings), tuple(push), tuple(c for _, c in spec), tuple(local)


def no_bounds_checks(source: str) -> bool:
    """Whether preprocessed GLSL ``source`` says ``#pragma spirula_no_bounds_checks``
    (:attr:`Kernel.no_bounds_checks`)."""
    return bool(_RE_NO_BOUNDS_CHECKS.search(source))
