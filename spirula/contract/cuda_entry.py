"""The CUDA entry points of the single-source kernels, generated from their shaders.

A kernel is single-source when ``native_cuda/<name>.cu`` does not exist (the
hand-written twins there are the hot kernels that need CUDA's own means for
speed). Its shader ``shaders/<name>.comp`` is then, after the contract (the
``layout`` declarations of the workgroup, specialization constants, buffers
and push constants), its body written in the dialect of
``shaders/include/dialect.glsl`` (``FN`` functions, ``f`` on float literals,
no swizzles, no shared memory, subgroups or barriers), and last a few-line
``main()``. ``python -m spirula.contract.cuda_entry OUTDIR`` (run by
``scripts/build_cuda.sh`` after :mod:`spirula.contract.headers`) writes
``OUTDIR/<name>.cu`` for each, beside its contract header ``<name>.h``:

- the CUDA wrappers of the shared maths the shader includes
  (``X.glsl`` -> ``common/X.cuh``; ``common.glsl`` -> ``common/launch.cuh``);
- per compile-time variant (:data:`~spirula.contract.headers.FLAGS`, each
  define set to 0 or 1 as in that variant), the shader's preprocessor lines
  among its declarations (``#if COMPACT``, ``#define WORD uvec4``...), then a
  struct ``Shader`` whose members are what GLSL sees as globals: one pointer
  per binding named and typed as in GLSL (``const`` where ``readonly``;
  ``vec4`` is ``float4``'s size and alignment, native_cuda/common/glsl.cuh),
  ``pc`` and the specialization constants; the body and ``main()`` are its
  member functions (``#line`` points nvcc's messages at the shader), a
  top-level ``const`` a ``static constexpr`` member, and an ``#include`` in
  the body (a file such as ``splat_finite.glsl`` that reads the kernel's
  buffers by name) is included inside it;
- a ``__global__`` kernel (``__launch_bounds__(LOCAL_THREADS)``) that fills a
  ``Shader`` from the generated ``Args``, ``Push`` and ``Spec`` and runs its
  ``main()``;
- the exported launch function ``int <name>(const SpirulaLaunch*)`` of
  native_cuda/common/launch.cuh: it picks the variant by ``L->flags``,
  checks and reads the record with the contract's ``unpack`` and launches.

A specialization constant named by ``#pragma spirula_cuda_template NAME v0
v1 ...`` in the shader is a template parameter on CUDA instead of a kernel
argument, one kernel per listed value (another value is
``cudaErrorInvalidValue``): for a constant that sizes loops over register
arrays (``SH_DEGREE``), as the hand-written twins did.
"""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

from spirula.contract.headers import CUDA_DEFINES, FLAGS, generator_main, variants, write_generated
from spirula.contract.kernel import shader_dir
from spirula.contract.preprocess import read_kernel
from spirula.errors import ShaderCompileError

# GLSL buffer element types a body may use (native_cuda/common/glsl.cuh defines
# the vector types with the size and alignment of the CUDA types in Args)
ELEMENT_TYPES = ("float", "uint", "int", "vec2", "vec4", "uvec2", "uvec4", "ivec2")
SPEC_TYPES = {"uint": "uint", "int": "int", "float": "float", "bool": "bool"}
# shared includes whose CUDA wrapper is not common/<stem>.cuh
CUDA_WRAPPERS = {"common.glsl": "common/launch.cuh"}

_RE_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_RE_LAYOUT = re.compile(r"^[ \t]*layout\s*\(", re.M)
_RE_MAIN = re.compile(r"^void\s+main\s*\(\s*\)", re.M)
_RE_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")
_RE_DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)
_RE_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_RE_TEMPLATE = re.compile(r"^\s*#\s*pragma\s+spirula_cuda_template\s+(\w+)((?:\s+\w+)+)\s*$", re.M)
_RE_CONST = re.compile(r"^const\s+(?=\w+\s+\w+\s*=)", re.M)
# what a body cannot hold: it needs a hand-written twin (or a new dialect entry)
_RE_REFUSED = re.compile(r"\b(shared|barrier|memoryBarrier\w*|subgroup\w+|gl_\w+)\b")
_RE_BARE_FLOAT = re.compile(r"(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)(?![\w.])")
_RE_SWIZZLE = re.compile(r"\.\b([xyzw]{2,4}|[rgba]{2,4})\b")


def native_dir(source_dir=None) -> Path:
    """``native_cuda/``: the hand-written twins, beside ``shaders/``."""
    return Path(source_dir or shader_dir()).parent / "native_cuda"


def hand_written(source_dir=None) -> list:
    """The kernels with a hand-written twin ``native_cuda/<name>.cu``."""
    shaders = {p.stem for p in Path(source_dir or shader_dir()).glob("*.comp")}
    return sorted(p.stem for p in native_dir(source_dir).glob("*.cu") if p.stem in shaders)


def single_source(source_dir=None) -> list:
    """The kernels whose CUDA entry point is generated: every shader without a hand-written twin."""
    twins = set(hand_written(source_dir))
    return sorted(p.stem for p in Path(source_dir or shader_dir()).glob("*.comp") if p.stem not in twins)


def _blank_comments(text: str) -> str:
    """``text`` with its comments as spaces (offsets and line breaks kept)."""
    return _RE_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _declaration_end(code: str, start: int, where: str) -> int:
    """The offset just after the ``;`` that ends the declaration at ``start``
    (outside braces: a buffer or push-constant block holds ``;`` of its own)."""
    depth = 0
    for i in range(start, len(code)):
        ch = code[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            return i + 1
    raise ShaderCompileError("%s: a layout declaration without its ;" % where)


class Parts:
    """A single-source shader cut into what the generator needs.

    ``header``: the lines up to the end of the last ``layout`` declaration (the
    contract); ``body``: the lines after it, up to ``main()``; ``main``: the
    lines of ``main()``; ``body_line``/``main_line``: their first line numbers.
    """

    def __init__(self, name: str, source_dir=None):
        self.name = name
        self.path = Path(source_dir or shader_dir()) / (name + ".comp")
        where = "shaders/%s.comp" % name
        text = self.path.read_text()
        code = _blank_comments(text)
        lines = text.split("\n")
        ends = [_declaration_end(code, m.start(), where) for m in _RE_LAYOUT.finditer(code)]
        mains = list(_RE_MAIN.finditer(code))
        if not ends or len(mains) != 1:
            raise ShaderCompileError(
                "%s: a single-source shader has layout declarations, then its body, then main()" % where
            )
        header_end = code.count("\n", 0, max(ends))  # the line holding the last ';'
        main_start = code.count("\n", 0, mains[0].start())
        if main_start <= header_end:
            raise ShaderCompileError("%s: main() must follow the layout declarations" % where)
        self.header = lines[: header_end + 1]
        self.body_line = header_end + 2  # 1-based
        self.body = lines[header_end + 1 : main_start]
        self.main_line = main_start + 1
        self.main = lines[main_start:]
        self._check_header(code.split("\n")[: header_end + 1], where)
        self._check_body(where)

    def _check_header(self, code_lines, where):
        """Only layout declarations, preprocessor lines and comments among the declarations."""
        text = "\n".join(code_lines)
        text = re.sub(r"^\s*#[^\n]*", "", text, flags=re.M)  # directives
        pos = 0
        rest = []
        for m in _RE_LAYOUT.finditer(text):
            rest.append(text[pos : m.start()])
            pos = _declaration_end(text, m.start(), where)
        rest.append(text[pos:])
        stray = " ".join("".join(rest).split())
        if stray:
            raise ShaderCompileError(
                "%s: %r among the layout declarations: a single-source shader keeps code below them"
                % (where, stray[:60])
            )

    def _check_body(self, where):
        for number, line in self.code_lines():
            m = _RE_REFUSED.search(line)
            if m:
                raise ShaderCompileError(
                    "%s:%d: %s in a single-source kernel: it needs a hand-written twin native_cuda/%s.cu"
                    % (where, number, m.group(1), self.name)
                )
        for number, line in self.code_lines(with_includes=True):
            problem = dialect_problem(line)
            if problem:
                raise ShaderCompileError("%s:%d: %s (dialect.glsl)" % (where, number, problem))

    def code_lines(self, with_includes=False):
        """(where, line) of the body and main() without comments; with
        ``with_includes``, also of the files the body includes."""
        start = self.body_line
        code = _blank_comments("\n".join(self.body + self.main)).split("\n")
        out = [(start + i, line) for i, line in enumerate(code)]
        if with_includes:
            for inc in self.body_includes():
                text = _blank_comments(inc.read_text()).split("\n")
                out += [("%s:%d" % (inc.name, i + 1), line) for i, line in enumerate(text)]
        return out

    def header_includes(self) -> list:
        """The files the contract part includes (shared maths): their names."""
        return _RE_INCLUDE.findall("\n".join(self.header))

    def body_includes(self) -> list:
        """The files the body includes (functions over the kernel's buffers): their paths."""
        out = []
        for inc in _RE_INCLUDE.findall(_blank_comments("\n".join(self.body))):
            path = self.path.parent / "include" / inc
            if not path.is_file():
                raise ShaderCompileError("shaders/%s.comp: #include %s not found" % (self.name, inc))
            out.append(path)
        return out

    def header_directives(self) -> list:
        """The preprocessor lines among the declarations that CUDA needs too
        (``#if``, ``#define``...; not ``#version``, ``#extension``, ``#include``, ``#pragma``)."""
        out = []
        for line in "\n".join(self.header).replace("\\\n", " ").split("\n"):
            m = _RE_DIRECTIVE.match(line)
            if m and m.group(1) not in ("version", "extension", "include", "pragma"):
                out.append(line.strip())
        return out

    def templates(self) -> dict:
        """``#pragma spirula_cuda_template NAME v...``: {NAME: [values]}."""
        text = "\n".join(self.header + self.body)
        return {m.group(1): m.group(2).split() for m in _RE_TEMPLATE.finditer(text)}

    def macros(self) -> list:
        """The macros the shader defines (undefined again after each variant)."""
        names = _RE_DEFINE.findall("\n".join(self.header_directives() + self.body))
        return sorted(set(names))


def dialect_problem(code_line: str):
    """What in one line of body code (comments removed) is outside the dialect, or None."""
    bare = _RE_BARE_FLOAT.findall(code_line)
    if bare and not code_line.lstrip().startswith("#version"):
        return "float literal without the f suffix: %s" % ", ".join(bare)
    swz = _RE_SWIZZLE.findall(code_line)
    if swz:
        return "swizzle .%s" % swz[0]
    return None


def _cuda_include(name: str, inc: str) -> str:
    if inc in CUDA_WRAPPERS:
        return CUDA_WRAPPERS[inc]
    wrapper = "common/%s.cuh" % Path(inc).stem
    if not (native_dir() / wrapper).is_file():
        raise ShaderCompileError(
            "shaders/%s.comp includes %s, which has no CUDA wrapper native_cuda/%s" % (name, inc, wrapper)
        )
    return wrapper


def _variant_id(combo) -> str:
    return "__".join(combo) if combo else "base"


def _members(name: str, kernel, templates: dict) -> list:
    out = ["    // the buffers, by binding"]
    for b in kernel.bindings:
        if b.type not in ELEMENT_TYPES or not b.array:
            raise ShaderCompileError(
                "shaders/%s.comp: binding %s (%s%s) has no single-source CUDA type: write a hand-written "
                "twin, or add it to ELEMENT_TYPES" % (name, b.name, b.type, "[]" if b.array else "")
            )
        out.append("    %s%s* %s;" % ("" if b.writes else "const ", b.type, b.name))
    out.append("    contract::Push pc;")
    if kernel.spec:
        out.append("    // the specialization constants")
    for c in kernel.spec:
        if c.name in templates:
            out.append("    static constexpr %s %s = %s_;" % (SPEC_TYPES[c.kind], c.name, c.name))
        else:
            out.append("    %s %s;" % (SPEC_TYPES[c.kind], c.name))
    return out


def _template_params(kernel, templates) -> list:
    return [(c, templates[c.name]) for c in kernel.spec if c.name in templates]


def generate(name: str, source_dir=None) -> str:
    """The CUDA entry point (``.cu``) of single-source kernel ``name``."""
    parts = Parts(name, source_dir)
    templates = parts.templates()
    combos = variants(name, source_dir)
    kernels = [read_kernel(name, {**CUDA_DEFINES, **{d: 1 for d in combo}}, source_dir) for combo in combos]
    spec_names = {c.name for c in kernels[0].spec}
    for t in templates:
        if t not in spec_names:
            raise ShaderCompileError(
                "shaders/%s.comp: spirula_cuda_template %s is no specialization constant" % (name, t)
            )
    own_flags = sorted({d for combo in combos for d in combo}, key=list(FLAGS).index)
    params = _template_params(kernels[0], templates)
    tpl_decl = ", ".join("%s %s_" % (SPEC_TYPES[c.kind], c.name) for c, _ in params)
    tpl_args = ", ".join("%s_" % c.name for c, _ in params)
    shader = "shaders/%s.comp" % name

    out = [
        "// Generated by spirula/contract/cuda_entry.py from %s: do not edit." % shader,
        "// The CUDA entry point of a single-source kernel: the shader's body, compiled as member",
        "// functions of a struct whose members are the shader's buffers, push and specialization",
        "// constants, and the exported launch function. Contract: %s.h." % name,
        '#include "common/glsl.cuh"',
        '#include "common/launch.cuh"',
        '#include "dialect.glsl"',
    ]
    includes = []
    for inc in parts.header_includes():
        cuh = _cuda_include(name, inc)
        if cuh not in includes and cuh != "common/launch.cuh":
            includes.append(cuh)
    out += ['#include "%s"' % inc for inc in includes]
    out += ['#include "%s.h"' % name, "", "namespace {", "", "using namespace spirula;"]
    for combo in combos:
        ns = ("contract::" + "__".join(combo) + "::") if combo else "contract::"
        out.append("using Args_%s = %sArgs;" % (_variant_id(combo), ns))
    out.append("")

    for combo, kernel in zip(combos, kernels):
        vid = _variant_id(combo)
        for d in own_flags:
            out.append("#define %s %d" % (d, 1 if d in combo else 0))
        out += parts.header_directives()
        out += ["namespace v_%s {" % vid, ""]
        if params:
            out.append("template <%s>" % tpl_decl)
        out += ["struct Shader {"]
        out += _members(name, kernel, templates)
        out.append("")
        out.append('#line %d "%s"' % (parts.body_line, shader))
        body = _RE_CONST.sub("static constexpr ", "\n".join(parts.body))
        out += body.split("\n")
        out.append('#line %d "%s"' % (parts.main_line, shader))
        main = _RE_MAIN.sub("FN void main()", "\n".join(parts.main), count=1)
        out += main.rstrip("\n").split("\n")
        out += ["};", ""]
        shader_t = "Shader<%s>" % tpl_args if params else "Shader"
        if params:
            out.append("template <%s>" % tpl_decl)
        out += [
            "__global__ void __launch_bounds__(contract::LOCAL_THREADS)",
            "    %s_kernel(Args_%s a, contract::Push pc, contract::Spec sp) {" % (name, vid),
            "    %s s;" % shader_t,
        ]
        for b in kernel.bindings:
            out.append(
                "    s.%s = reinterpret_cast<%s%s*>(a.%s);" % (b.name, "" if b.writes else "const ", b.type, b.name)
            )
        out.append("    s.pc = pc;")
        for c in kernel.spec:
            if c.name not in templates:
                out.append("    s.%s = sp.%s;" % (c.name, c.name))
        if not [c for c in kernel.spec if c.name not in templates]:
            out.append("    (void)sp;")
        out += ["    s.main();", "}", "", "}  // namespace v_%s" % vid]
        for m in sorted(set(own_flags) | set(parts.macros())):
            out.append("#undef %s" % m)
        out.append("")

    for combo in combos:
        vid = _variant_id(combo)
        ns = ("contract::" + "__".join(combo) + "::") if combo else "contract::"
        out += [
            "int launch_%s(const SpirulaLaunch* L) {" % vid,
            "    Args_%s a;" % vid,
            "    contract::Push pc;",
            "    contract::Spec sp;",
            "    if (int err = %sunpack(L, a, pc, sp)) {" % ns,
            "        return err;",
            "    }",
        ]
        kernel_fn = "v_%s::%s_kernel" % (vid, name)
        if not params:
            out.append("    return spirula::launch(L, contract::LOCAL_SIZE, %s, a, pc, sp);" % kernel_fn)
        else:
            for values in itertools.product(*[v for _, v in params]):
                cond = " && ".join("sp.%s == %s" % (c.name, v) for (c, _), v in zip(params, values))
                out += [
                    "    if (%s) {" % cond,
                    "        return spirula::launch(L, contract::LOCAL_SIZE, %s<%s>, a, pc, sp);"
                    % (kernel_fn, ", ".join(values)),
                    "    }",
                ]
            allowed = "; ".join("%s in %s" % (c.name, " ".join(v)) for c, v in params)
            out.append("    return spirula::INVALID_LAUNCH;  // CUDA instantiates %s (spirula_cuda_template)" % allowed)
        out += ["}", ""]
    out += ["}  // namespace", "", "SPIRULA_EXPORT int %s(const SpirulaLaunch* L) {" % name]
    # the most specific variant whose flags are all set
    for combo in sorted(combos[1:], key=len, reverse=True):
        flag = "contract::%s::FLAG" % "__".join(combo)
        out += [
            "    if (L != nullptr && (L->flags & %s) == %s) {" % (flag, flag),
            "        return launch_%s(L);" % _variant_id(combo),
            "    }",
        ]
    out += ["    return launch_base(L);", "}", ""]
    return "\n".join(out)


def write_all(out_dir, names=None, source_dir=None) -> list:
    """Write ``<name>.cu`` for every single-source kernel (or ``names``) into
    ``out_dir``, leaving unchanged files alone and removing those of kernels
    that are gone or now have a hand-written twin. Returns the paths written."""
    return write_generated(out_dir, names, lambda: single_source(source_dir), ".cu", generate, source_dir)


def main(argv=None) -> int:
    return generator_main("spirula.contract.cuda_entry", write_all, argv)


if __name__ == "__main__":
    sys.exit(main())
