"""C++ headers of the kernels' contracts, generated from the shaders.

Each kernel's CUDA source (a hand-written twin ``native_cuda/<name>.cu``, or the
entry point :mod:`spirula.contract.cuda_entry` generates) includes ``<name>.h``, written by
``python -m spirula.contract.headers OUTDIR`` (``scripts/build_cuda.sh``
runs it into ``build/contracts/`` before compiling). From the contract of
``shaders/<name>.comp`` (:func:`spirula.contract.preprocess.read_kernel`, with
the defines the CUDA backend always sets) it holds, in
``namespace spirula::contracts::<name>`` (aliased ``contract``):

- ``LOCAL_SIZE_X/Y/Z``, ``LOCAL_THREADS`` and ``LOCAL_SIZE`` (a ``dim3``): the
  workgroup of the shader, the block of every launch;
- ``Push``: the push-constant block, its fields named and typed as in GLSL;
- ``Spec``: the specialization constants by constant_id, named as in GLSL
  (``bool`` as ``bool``), with the shader's defaults;
- ``Args``: one pointer per binding in binding order, named after the
  buffer's member, typed by its GLSL element type (``TYPES``/``STRUCTS``),
  ``const`` when the binding is ``readonly``;
- ``unpack(L, args, push, spec)``: checks a SpirulaLaunch record against the
  contract (counts of buffers, push words and constants; every buffer's size
  a whole number of its elements, and not null) and reads it; it returns 0,
  or cudaErrorInvalidValue.

Compile-time variants: a define of :data:`FLAGS`
that changes the shader's preprocessed source gets a nested namespace named
like it (``copy::VEC4``) with its ``FLAG`` bit and its own ``Args`` and
``unpack`` (the element types it changes, e.g. ``uvec4`` for ``uint``); Push,
Spec and the local size must be the same in every variant. The launch
function picks the variant by ``L->flags``.

The shader's header comment (what each binding holds) is copied into the
header, so the ``.cu`` file needs no copy of it.
"""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

from spirula.contract.kernel import shader_dir
from spirula.contract.preprocess import preprocess, read_kernel
from spirula.errors import ShaderCompileError

# The CUDA backend always has native float atomics; the other defines a
# kernel is compiled with become bits of SpirulaLaunch.flags
# (native_cuda/common/launch.cuh), and each generated header names its
# variants' bits.
CUDA_DEFINES = {"ATOMIC_FLOAT": 1}
FLAGS = {"VEC4": 1, "FLOAT": 2, "SH_VEC4": 4, "COMPACT": 8}

# GLSL element type -> CUDA type (std430 arrays of these have the CUDA type's
# size and alignment; vec3/uvec3/ivec3 arrays do not, and are refused)
TYPES = {
    "float": "float",
    "uint": "uint32_t",
    "int": "int32_t",
    "vec2": "float2",
    "vec4": "float4",
    "uvec2": "uint2",
    "uvec4": "uint4",
    "ivec2": "int2",
    "ivec4": "int4",
}
# GLSL structs bound as buffers -> (CUDA type, the header defining it)
STRUCTS = {"StepParams": ("spirula::StepParams", "common/step_params.cuh")}
SCALARS = {"uint": "uint32_t", "int": "int32_t", "float": "float", "bool": "bool"}


def _cuda_type(name: str, glsl: str) -> str:
    if glsl in TYPES:
        return TYPES[glsl]
    if glsl in STRUCTS:
        return STRUCTS[glsl][0]
    raise ShaderCompileError(
        "shaders/%s.comp: no CUDA type for buffer elements of type %s (add it to TYPES or "
        "STRUCTS in spirula/contract/headers.py)" % (name, glsl)
    )


def header_comment(name: str, source_dir=None) -> list:
    """The comment lines at the top of ``shaders/<name>.comp`` (after ``#version``)."""
    lines = (Path(source_dir or shader_dir()) / (name + ".comp")).read_text().splitlines()
    out = []
    for line in lines[1:] if lines and lines[0].startswith("#version") else lines:
        if not line.startswith("//"):
            break
        out.append(line)
    return out


def field_comments(name: str, source_dir=None) -> dict:
    """Trailing comments of the push-constant fields and specialization
    constants in ``shaders/<name>.comp``: name -> comment."""
    text = (Path(source_dir or shader_dir()) / (name + ".comp")).read_text()
    out = {}
    block = re.search(r"layout\s*\(\s*push_constant\s*\)\s*uniform\s+\w+\s*\{(.*?)\}", text, re.S)
    for line in block.group(1).splitlines() if block else []:
        m = re.match(r"\s*\w+\s+(\w+)\s*;\s*//\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    for m in re.finditer(r"constant_id\s*=\s*\d+\s*\)\s*const\s+\w+\s+(\w+)[^;]*;[ \t]*//[ \t]*(.*)", text):
        out[m.group(1)] = m.group(2).strip()
    return out


def variants(name: str, source_dir=None) -> list:
    """The combinations of FLAGS defines that change ``shaders/<name>.comp``:
    [(defines set to 1, ...), ...], the base variant () first."""
    base = preprocess(name, CUDA_DEFINES, source_dir)
    own = [d for d in FLAGS if preprocess(name, {**CUDA_DEFINES, d: 1}, source_dir) != base]
    return [combo for k in range(len(own) + 1) for combo in itertools.combinations(own, k)]


def _args_struct(name: str, kernel, indent: str) -> list:
    fields = []
    for b in kernel.bindings:
        ctype = ("const " if not b.writes else "") + _cuda_type(name, b.type) + "*"
        what = "readonly" if not b.writes else ("writeonly" if not b.reads else "read/write")
        fields.append((ctype, b.name, "binding %d, %s%s %s" % (b.index, b.type, "[]" if b.array else "", what)))
    width = max((len(t) + len(n) for t, n, _ in fields), default=0) + 2
    out = [indent + "struct Args {"]
    for ctype, fname, note in fields:
        decl = "%s %s;" % (ctype, fname)
        out.append("%s    %s  // %s" % (indent, decl.ljust(width), note))
    out.append(indent + "};")
    return out


def _unpack(kernel, indent: str) -> list:
    i = indent
    binds = [
        "spirula::bind(L, %du, a.%s, %s)" % (b.index, b.name, "true" if b.array else "false") for b in kernel.bindings
    ]
    cond = ["!spirula::shape_ok(L, %du, sizeof(Push) / 4u, %du)" % (len(kernel.bindings), len(kernel.spec))]
    cond += ["!" + s for s in binds]
    out = [
        i + "// Checks L against the contract and reads it: 0, or cudaErrorInvalidValue.",
        i + "inline int unpack(const SpirulaLaunch* L, Args& a, Push& pc, Spec& sp) {",
        i + "    if (" + ("\n" + i + "        || ").join(cond) + ") {",
        i + "        return spirula::INVALID_LAUNCH;",
        i + "    }",
    ]
    if kernel.push:
        out.append(i + "    std::memcpy(&pc, L->push, sizeof(Push));")
    else:
        out.append(i + "    (void)pc;")
    for k, c in enumerate(kernel.spec):
        word = "L->spec[%d]" % k
        value = {
            "bool": word + " != 0u",
            "uint": word,
            "int": "static_cast<int32_t>(%s)" % word,
            "float": "spirula::spec_float(%s)" % word,
        }[c.kind]
        out.append(i + "    sp.%s = %s;" % (c.name, value))
    if not kernel.spec:
        out.append(i + "    (void)sp;")
    out += [i + "    return 0;", i + "}"]
    return out


def _literal(kind: str, value) -> str:
    if kind == "bool":
        return "true" if value else "false"
    if kind == "float":
        return repr(float(value)) + "f"
    if kind == "uint":
        return "%du" % int(value)
    return str(int(value))


def generate(name: str, source_dir=None) -> str:
    """The C++ header of ``shaders/<name>.comp``'s contract."""
    combos = variants(name, source_dir)
    kernels = [read_kernel(name, {**CUDA_DEFINES, **{d: 1 for d in combo}}, source_dir) for combo in combos]
    base = kernels[0]
    for combo, k in zip(combos[1:], kernels[1:]):
        if (k.push, k.spec, k.local_size) != (base.push, base.spec, base.local_size):
            raise ShaderCompileError(
                "shaders/%s.comp: %s changes the push constants, specialization constants or "
                "local size; the header generator supports element types only" % (name, combo)
            )
    if 0 in base.local_size:
        raise ShaderCompileError(
            "shaders/%s.comp: a local size set by a specialization constant "
            "(local_size_x_id) has no CUDA contract yet" % name
        )
    includes = ["common/launch.cuh"] + sorted(
        {STRUCTS[b.type][1] for k in kernels for b in k.bindings if b.type in STRUCTS}
    )
    notes = field_comments(name, source_dir)
    guard = "SPIRULA_CONTRACT_%s_H" % name.upper()
    x, y, z = base.local_size
    out = [
        "// Generated by spirula/contract/headers.py from shaders/%s.comp: do not edit." % name,
        "// The contract of %s's CUDA kernel. The shader's description:" % name,
        "//",
    ]
    out += header_comment(name, source_dir)
    out += ["#ifndef " + guard, "#define " + guard, ""]
    out += ['#include "%s"' % inc for inc in includes]
    out += [
        "",
        "namespace spirula::contracts::%s {" % name,
        "",
        "// layout(local_size_x = %d, local_size_y = %d, local_size_z = %d) in;" % (x, y, z),
        "constexpr uint32_t LOCAL_SIZE_X = %du;" % x,
        "constexpr uint32_t LOCAL_SIZE_Y = %du;" % y,
        "constexpr uint32_t LOCAL_SIZE_Z = %du;" % z,
        "constexpr uint32_t LOCAL_THREADS = %du;  // threads per workgroup (__launch_bounds__)" % (x * y * z),
        "constexpr dim3 LOCAL_SIZE{LOCAL_SIZE_X, LOCAL_SIZE_Y, LOCAL_SIZE_Z};  // the block of every launch",
        "",
        "// layout(push_constant) uniform Push: 32-bit words in block order",
        "struct Push {",
    ]
    decls = ["%s %s;" % (SCALARS[c.kind], c.name) for c in base.push]
    width = max(map(len, decls), default=0)
    out += [
        ("    %s  // %s" % (d.ljust(width), notes[c.name]) if c.name in notes else "    " + d)
        for d, c in zip(decls, base.push)
    ]
    out += [
        "};",
        'static_assert(sizeof(Push) == %du, "the push block is %d words");' % (4 * len(base.push), len(base.push)),
        "",
        "// layout(constant_id = i) const: by constant_id, with the shader's defaults",
        "struct Spec {",
    ]
    decls = ["%s %s = %s;" % (SCALARS[c.kind], c.name, _literal(c.kind, c.default)) for c in base.spec]
    width = max(map(len, decls), default=0)
    out += [
        "    %s  // constant_id %d%s" % (d.ljust(width), i, ": " + notes[c.name] if c.name in notes else "")
        for i, (d, c) in enumerate(zip(decls, base.spec))
    ]
    out += ["};", "", "// the storage buffers by binding (const: readonly in the shader)"]
    out += _args_struct(name, base, "")
    out += [""] + _unpack(base, "")
    for combo, k in zip(combos[1:], kernels[1:]):
        ns = "__".join(combo)
        flag = sum(FLAGS[d] for d in combo)
        out += [
            "",
            "// compile-time variant %s: SpirulaLaunch.flags & %d" % (", ".join("%s=1" % d for d in combo), flag),
            "namespace %s {" % ns,
            "constexpr uint32_t FLAG = %du;" % flag,
            "",
        ]
        out += _args_struct(name, k, "")
        out += [""] + _unpack(k, "")
        out += ["}  // namespace %s" % ns]
    out += [
        "",
        "}  // namespace spirula::contracts::%s" % name,
        "",
        "namespace contract = spirula::contracts::%s;" % name,
        "",
        "#endif",
        "",
    ]
    return "\n".join(out)


def write_generated(out_dir, names, all_names, suffix: str, generate, source_dir=None) -> list:
    """Write ``generate(name, source_dir)`` as ``<name><suffix>`` into ``out_dir`` for
    ``names`` (default ``all_names()``, then removing the files of names no longer
    there); files whose text is unchanged are left alone. Returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not names:
        names = all_names()
        for stale in set(p.stem for p in out_dir.glob("*" + suffix)) - set(names):
            (out_dir / (stale + suffix)).unlink()  # its shader is gone (or has a hand-written twin)
    written = []
    for name in names:
        text = generate(name, source_dir)
        path = out_dir / (name + suffix)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


def generator_main(module: str, write_all, argv=None) -> int:
    """``python -m MODULE OUTDIR [KERNEL...]``: ``write_all(OUTDIR, KERNELS)``; a shader
    the generator cannot read is one line and exit status 1."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        print("usage: python -m %s OUTDIR [KERNEL...]" % module, file=sys.stderr)
        return 2
    try:
        write_all(argv[0], argv[1:] or None)
    except ShaderCompileError as exc:
        print("%s: %s" % (module, exc), file=sys.stderr)
        return 1
    return 0


def write_all(out_dir, names=None, source_dir=None) -> list:
    """Write ``<name>.h`` for every shader (or ``names``) into ``out_dir``;
    files whose text is unchanged are left alone. Returns the paths written."""

    def every():
        return sorted(p.stem for p in Path(source_dir or shader_dir()).glob("*.comp"))

    return write_generated(out_dir, names, every, ".h", generate, source_dir)


def main(argv=None) -> int:
    return generator_main("spirula.contract.headers", write_all, argv)


if __name__ == "__main__":
    sys.exit(main())
