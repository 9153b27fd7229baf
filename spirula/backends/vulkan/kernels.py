"""The Vulkan kernel registry: ``shaders/<name>.comp`` -> SPIR-V + its contract.

Compile-time variants (``defines``, e.g. ``ATOMIC_FLOAT=1``) are separate
SPIR-V modules under the same name; run-time variants are specialization
constants. SPIR-V is compiled with ``glslangValidator`` on first use and
cached by a hash of the source, the includes, the defines and the compiler
version, under ``$SPIRULA_CACHE_DIR`` (default ``~/.cache/spirula``), never in
the source tree. An installed wheel ships every variant a device can ask for
precompiled (``spirula/_spirv/``, spirula/backends/vulkan/variants.py), so it
needs no glslang: the registry reads those unless ``SPIRULA_SHADER_DIR`` points
to sources, and compiles a variant the wheel lacks only where glslang is
installed (else a one-line error naming the kernel and its defines). The
contract (:class:`~spirula.contract.kernel.Kernel`) is parsed from glslang's
preprocessed source (:func:`spirula.contract.kernel.parse_contract`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from spirula import settings
from spirula.backends.vulkan import variants
from spirula.backends.vulkan.spirv import preserve_inf_nan
from spirula.cache import cache_home
from spirula.contract.kernel import Kernel, no_bounds_checks, parse_contract, shader_dir
from spirula.errors import ShaderCompileError

GLSLANG = "glslangValidator"
# A shader that decides from whether values are finite declares this line; on a
# device with float controls it is compiled with SignedZeroInfNanPreserve
# (spirula/backends/vulkan/spirv.py)
PRESERVE_INF_NAN = b"#define SPIRULA_PRESERVE_INF_NAN"
TARGET_ENV = variants.TARGET_ENV
INSTALL_GLSLANG = "install glslang (glslang-tools on Debian/Ubuntu, glslang on Fedora and Arch)"
# the wheel's precompiled kernels (scripts/precompile_shaders.py writes them at build time)
PACKAGED_SPIRV = Path(__file__).resolve().parents[2] / "_spirv"


def cache_dir() -> Path:
    return cache_home() / "spirv"


def packaged_spirv() -> Path | None:
    """The installed wheel's precompiled kernels, unless ``SPIRULA_SHADER_DIR``
    asks for sources (development); None in a checkout."""
    if settings.shader_dir() is not None or not (PACKAGED_SPIRV / "manifest.json").is_file():
        return None
    return PACKAGED_SPIRV


def _compiler_version() -> str:
    exe = shutil.which(GLSLANG)
    if exe is None:
        raise ShaderCompileError("%s not found: %s" % (GLSLANG, INSTALL_GLSLANG))
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
    """Compiles and caches kernels by (name, defines); ``spirv_dir``: a folder
    of precompiled variants (:func:`packaged_spirv` when no ``source_dir`` is given)."""

    def __init__(self, source_dir: Path | None = None, cache: Path | None = None, include_dirs=None, spirv_dir=None):
        self.spirv_dir = Path(spirv_dir) if spirv_dir else None if source_dir else packaged_spirv()
        self.source_dir = Path(source_dir) if source_dir else shader_dir()
        self.cache = Path(cache) if cache else cache_dir()
        self.include_dirs = [Path(p) for p in include_dirs] if include_dirs else [shader_dir() / "include"]
        self._kernels: dict = {}
        self._salt = None
        self._used: dict = {}  # kernel -> the identifiers of its sources (variants.source_names)

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
            kernel = self._precompiled(name, key[1]) if self.spirv_dir is not None else None
            if kernel is None:
                kernel = self._compile(name, key[1])
            self._kernels[key] = kernel
        return kernel

    def names(self) -> list:
        return sorted(p.stem for p in self.source_dir.glob("*.comp"))

    def _precompiled(self, name: str, defines: tuple) -> Kernel | None:
        """The variant from ``spirv_dir``; None where it is not there and glslang
        can compile it, a one-line ShaderCompileError where it cannot."""
        src = self.source_dir / (name + ".comp")
        if not src.is_file():
            raise ShaderCompileError("no shader %s" % src)
        if name not in self._used:
            self._used[name] = variants.source_names(self.source_dir, name, self.include_dirs)
        used = self._used[name]
        stem = variants.variant_stem(name, dict(defines), used)
        spv_path, pre_path = self.spirv_dir / (stem + ".spv"), self.spirv_dir / (stem + ".glsl")
        if spv_path.is_file() and pre_path.is_file():
            return self._load(name, defines, src.read_bytes(), spv_path, pre_path)
        if shutil.which(GLSLANG) is not None:
            return None
        kept = ", ".join(variants.kept_defines(dict(defines), used)) or "no defines"
        raise ShaderCompileError(
            "kernel %s with %s is not among this installation's precompiled kernels (%s), and compiling it"
            " needs %s: %s" % (name, kept, self.spirv_dir, GLSLANG, INSTALL_GLSLANG)
        )

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
        return self._load(name, defines, text, spv_path, pre_path)

    def _load(self, name: str, defines: tuple, text: bytes, spv_path: Path, pre_path: Path) -> Kernel:
        """The Kernel of a compiled variant: its SPIR-V and the contract read from its preprocessed source."""
        pre = pre_path.read_text()
        bindings, push, spec, local = parse_contract(name, pre)
        spirv = spv_path.read_bytes()
        if dict(defines).get("INF_NAN_PRESERVE") == "1" and PRESERVE_INF_NAN in text:
            spirv = preserve_inf_nan(spirv)  # glslang has no option for it
        return Kernel(name, defines, spirv, bindings, push, spec, local, no_bounds_checks(pre))

    def _run_compiler(self, src: Path, defines: tuple, spv_path: Path, pre_path: Path):
        self.cache.mkdir(parents=True, exist_ok=True)
        exe = shutil.which(GLSLANG)
        if exe is None:
            _compiler_version()  # raises with the install hint
        # Write to unique temporary names, then rename: parallel processes never
        # see a half-written file, and a failed compile leaves no stale output.
        fd, tmp_spv = tempfile.mkstemp(dir=self.cache, suffix=".spv")
        os.close(fd)
        compile_cmd, preprocess_cmd = variants.glslang_commands(exe, src, self.include_dirs, defines, tmp_spv)
        try:
            r = subprocess.run(compile_cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise ShaderCompileError(
                    "shader compile failed: %s" % _clean_errors(r.stdout + r.stderr, self.source_dir)
                )
            r = subprocess.run(preprocess_cmd, capture_output=True, text=True)
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
