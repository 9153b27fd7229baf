"""A kernel's binding contract read from its GLSL source, without glslang.

The CUDA backend launches each kernel (a hand-written ``native_cuda/<name>.cu``
or the entry point generated from the shader) with the same buffers, push
constants and specialization constants as ``shaders/<name>.comp``, so it
needs the same :class:`~spirula.contract.kernel.Kernel` contract the Vulkan
registry builds, on machines that may have no ``glslangValidator``. This
module preprocesses the shader just enough for
:func:`spirula.contract.kernel.parse_contract`: ``#include "x.glsl"`` is
inlined from the include folder, ``#define``/``#undef`` are tracked,
``#if``/``#ifdef``/``#ifndef``/``#elif``/``#else``/``#endif`` are evaluated
with the given defines, and object-like macros are expanded in the code
(function-like ones are left as they are; no contract line uses one).
``tests/test_cuda_contract.py`` checks the result against glslang's own
preprocessor for every shader and variant.
"""

from __future__ import annotations

import re
from pathlib import Path

from spirula.contract.kernel import Kernel, parse_contract, shader_dir
from spirula.errors import ShaderCompileError

_RE_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_RE_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
_RE_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_RE_DEFINE = re.compile(r"(\w+)(\([^)]*\))?\s*(.*)$", re.S)
_RE_DEFINED = re.compile(r"\bdefined\s*(?:\(\s*(\w+)\s*\)|(\w+))")
_RE_INT = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uU]?\b")


class Preprocessor:
    """Just enough of the C preprocessor for a shader's contract (module docstring)."""

    def __init__(self, defines: dict, include_dirs):
        # name -> (params or None, body); command-line defines are object-like
        self.macros = {k: (None, str(v)) for k, v in defines.items()}
        self.include_dirs = [Path(p) for p in include_dirs]
        self.depth = 0

    # -- macros -------------------------------------------------------------------
    def expand(self, text: str, seen: frozenset = frozenset()) -> str:
        def sub(m):
            name = m.group(0)
            macro = self.macros.get(name)
            if macro is None or macro[0] is not None or name in seen:
                return name
            return self.expand(macro[1], seen | {name})

        return _RE_IDENT.sub(sub, text)

    def evaluate(self, expr: str, where: str) -> bool:
        expr = _RE_DEFINED.sub(lambda m: "1" if (m.group(1) or m.group(2)) in self.macros else "0", expr)
        expr = self.expand(expr)
        expr = _RE_IDENT.sub("0", expr)  # undefined names are 0
        expr = _RE_INT.sub(lambda m: str(int(m.group(1), 0)), expr)
        py = (
            expr.replace("&&", " and ")
            .replace("||", " or ")
            .replace("/", "//")
            .replace("!=", "\0")
            .replace("!", " not ")
            .replace("\0", "!=")
        )
        try:
            return bool(eval(py, {"__builtins__": {}}, {}))  # digits and operators only
        except Exception:
            raise ShaderCompileError("%s: cannot evaluate #if %s" % (where, expr.strip())) from None

    # -- files --------------------------------------------------------------------
    def run(self, path: Path) -> list:
        self.depth += 1
        if self.depth > 32:
            raise ShaderCompileError("%s: #include nested too deeply" % path)
        text = path.read_text()
        text = text.replace("\\\r\n", "").replace("\\\n", "")  # line continuations
        text = _RE_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        out = []
        stack = []  # per open #if: [this branch active, a branch was taken, parent active]
        for number, line in enumerate(text.split("\n"), 1):
            where = "%s:%d" % (path.name, number)
            active = all(frame[0] for frame in stack)
            m = _RE_DIRECTIVE.match(line)
            if not m:
                if active:
                    out.append(self.expand(line))
                continue
            word, rest = m.group(1), m.group(2).strip()
            if word in ("if", "ifdef", "ifndef"):
                if not active:
                    stack.append([False, True, False])
                    continue
                if word == "if":
                    cond = self.evaluate(rest, where)
                else:
                    cond = (rest.split()[0] in self.macros) == (word == "ifdef")
                stack.append([cond, cond, True])
            elif word in ("elif", "else"):
                if not stack:
                    raise ShaderCompileError("%s: #%s without #if" % (where, word))
                frame = stack[-1]
                if frame[1] or not frame[2]:
                    frame[0] = False
                else:
                    frame[0] = word == "else" or self.evaluate(rest, where)
                    frame[1] = frame[0]
            elif word == "endif":
                if not stack:
                    raise ShaderCompileError("%s: #endif without #if" % where)
                stack.pop()
            elif not active:
                continue
            elif word == "define":
                dm = _RE_DEFINE.match(rest)
                params = dm.group(2)
                self.macros[dm.group(1)] = (params, dm.group(3).strip())
            elif word == "undef":
                self.macros.pop(rest.split()[0], None)
            elif word == "include":
                name = rest.strip('"<>')
                found = next((d / name for d in [path.parent] + self.include_dirs if (d / name).is_file()), None)
                if found is None:
                    raise ShaderCompileError("%s: #include %s not found" % (where, rest))
                out.extend(self.run(found))
            elif word == "error":
                raise ShaderCompileError("%s: #error %s" % (where, rest))
            # #version, #extension, #pragma, #line: nothing the contract needs
        if stack:
            raise ShaderCompileError("%s: #if without #endif" % path.name)
        self.depth -= 1
        return out


def preprocess(name: str, defines: dict | None = None, source_dir=None, include_dirs=None) -> str:
    """``shaders/<name>.comp`` preprocessed with ``defines`` (a close stand-in
    for ``glslangValidator -E``, good enough for the contract)."""
    source_dir = Path(source_dir) if source_dir else shader_dir()
    include_dirs = include_dirs or [source_dir / "include"]
    src = source_dir / (name + ".comp")
    if not src.is_file():
        raise ShaderCompileError("no shader %s" % src)
    return "\n".join(Preprocessor(defines or {}, include_dirs).run(src))


def read_kernel(name: str, defines: dict | None = None, source_dir=None, include_dirs=None) -> Kernel:
    """The :class:`Kernel` contract of ``shaders/<name>.comp`` under ``defines``,
    with no SPIR-V (``spirv`` is empty)."""
    defines = defines or {}
    key = tuple(sorted((k, str(v)) for k, v in defines.items()))
    bindings, push, spec, local = parse_contract(name, preprocess(name, defines, source_dir, include_dirs))
    return Kernel(name, key, b"", bindings, push, spec, local)
