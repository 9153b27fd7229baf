"""Kernel registry: ``shaders/<name>.comp`` -> SPIR-V + its binding contract.

A kernel is one GLSL compute shader. Its name is its file name, its profiler
row and its C symbol on the CUDA backend. Compile-time variants (``defines``,
e.g. ``ATOMIC_FLOAT=1``) are separate SPIR-V modules under the same name;
run-time variants are specialization constants.

SPIR-V is compiled with ``glslangValidator`` on first use and cached by a hash
of the source, the includes, the defines and the compiler version, under
``$SPIRULA_CACHE_DIR`` (default ``~/.cache/spirula``), never in the source
tree. The binding contract is parsed from the preprocessed source:

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
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from spirula.cache import cache_home
from spirula.errors import ShaderCompileError
from spirula.runtime.spirv import preserve_inf_nan

GLSLANG = "glslangValidator"
# A shader that decides from whether values are finite declares this line; on a
# device with float controls it is compiled with SignedZeroInfNanPreserve
# (spirula/runtime/spirv.py)
PRESERVE_INF_NAN = b"#define SPIRULA_PRESERVE_INF_NAN"
TARGET_ENV = "vulkan1.1"  # SPIR-V 1.3: subgroup operations are core


def shader_dir() -> Path:
    """The folder of ``*.comp`` sources (``SPIRULA_SHADER_DIR`` overrides)."""
    env = os.environ.get("SPIRULA_SHADER_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent
    for cand in (here.parent / "shaders", here / "_shaders"):
        if cand.is_dir():
            return cand
    raise ShaderCompileError("shader sources not found next to %s (set SPIRULA_SHADER_DIR)" % here)


def cache_dir() -> Path:
    return cache_home() / "spirv"


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


# ---- compiling -----------------------------------------------------------------


def _compiler_version() -> str:
    exe = shutil.which(GLSLANG)
    if exe is None:
        raise ShaderCompileError("%s not found: install it with `apt-get install glslang-tools`" % GLSLANG)
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return out.split("\n", 1)[0]


def _clean_errors(text: str, root: Path) -> str:
    """glslang's ERROR lines, with paths relative to the project root."""
    lines = [
        ln.replace("ERROR: ", "", 1)
        for ln in text.splitlines()
        if ln.startswith("ERROR: ") and "compilation terminated" not in ln and "compilation errors" not in ln
    ]
    if lines:
        msg = "; ".join(ln.strip() for ln in lines)
    else:
        msg = text.strip().splitlines()[-1] if text.strip() else "unknown error"
    return msg.replace(str(root.parent) + os.sep, "")


class KernelRegistry:
    """Compiles and caches kernels by (name, defines)."""

    def __init__(self, source_dir: Path | None = None, cache: Path | None = None, include_dirs=None):
        self.source_dir = Path(source_dir) if source_dir else shader_dir()
        self.cache = Path(cache) if cache else cache_dir()
        self.include_dirs = [Path(p) for p in include_dirs] if include_dirs else [shader_dir() / "include"]
        self._kernels: dict = {}
        self._salt = None

    def _salt_hash(self) -> str:
        if self._salt is None:
            h = hashlib.sha256(_compiler_version().encode())
            for inc in self.include_dirs:
                for f in sorted(inc.glob("*.glsl")):
                    h.update(f.name.encode() + b"\0" + f.read_bytes())
            self._salt = h.hexdigest()
        return self._salt

    def get(self, name: str, **defines) -> Kernel:
        """The kernel ``shaders/<name>.comp`` compiled with ``-D`` defines."""
        key = (name, tuple(sorted((k, str(v)) for k, v in defines.items())))
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._compile(name, key[1])
            self._kernels[key] = kernel
        return kernel

    def names(self) -> list:
        return sorted(p.stem for p in self.source_dir.glob("*.comp"))

    def _compile(self, name: str, defines: tuple) -> Kernel:
        src = self.source_dir / (name + ".comp")
        if not src.is_file():
            raise ShaderCompileError("no shader %s" % src)
        text = src.read_bytes()
        h = hashlib.sha256(self._salt_hash().encode() + text + repr(defines).encode()).hexdigest()[:20]
        spv_path = self.cache / ("%s-%s.spv" % (name, h))
        pre_path = self.cache / ("%s-%s.glsl" % (name, h))
        if not (spv_path.is_file() and pre_path.is_file()):
            self._run_compiler(src, defines, spv_path, pre_path)
        pre = pre_path.read_text()
        bindings, push, spec, local = parse_contract(name, pre)
        spirv = spv_path.read_bytes()
        if dict(defines).get("INF_NAN_PRESERVE") == "1" and PRESERVE_INF_NAN in text:
            spirv = preserve_inf_nan(spirv)  # glslang has no option for it
        return Kernel(name, defines, spirv, bindings, push, spec, local, bool(_RE_NO_BOUNDS_CHECKS.search(pre)))

    def _run_compiler(self, src: Path, defines: tuple, spv_path: Path, pre_path: Path):
        self.cache.mkdir(parents=True, exist_ok=True)
        args = ["-I%s" % d for d in self.include_dirs] + ["-D%s=%s" % kv for kv in defines]
        exe = shutil.which(GLSLANG)
        if exe is None:
            _compiler_version()  # raises with the install hint
        # Write to unique temporary names, then rename: parallel processes never
        # see a half-written file, and a failed compile leaves no stale output.
        fd, tmp_spv = tempfile.mkstemp(dir=self.cache, suffix=".spv")
        os.close(fd)
        try:
            r = subprocess.run(
                [exe, "-V", "--target-env", TARGET_ENV, *args, "-o", tmp_spv, str(src)], capture_output=True, text=True
            )
            if r.returncode != 0:
                raise ShaderCompileError(
                    "shader compile failed: %s" % _clean_errors(r.stdout + r.stderr, self.source_dir)
                )
            r = subprocess.run([exe, "-E", *args, str(src)], capture_output=True, text=True)
            if r.returncode != 0:
                raise ShaderCompileError(
                    "shader preprocess failed: %s" % _clean_errors(r.stdout + r.stderr, self.source_dir)
                )
            fd, tmp_pre = tempfile.mkstemp(dir=self.cache, suffix=".glsl")
            with os.fdopen(fd, "w") as f:
                f.write(r.stdout)
            os.replace(tmp_pre, pre_path)
            os.replace(tmp_spv, spv_path)
        finally:
            if os.path.exists(tmp_spv):
                os.unlink(tmp_spv)
