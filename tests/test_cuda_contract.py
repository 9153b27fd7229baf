"""The CUDA backend reads each kernel's contract from its GLSL source without
glslang (spirula/contract/preprocess.py); it must equal the Vulkan registry's,
for every shader and compile-time variant. The C++ header generated from it
(spirula/contract/headers.py) is the only place the CUDA twins get it."""

import pytest

from spirula.backends.vulkan.kernels import KernelRegistry
from spirula.contract.headers import CUDA_DEFINES, SCALARS, generate, main, write_all
from spirula.contract.kernel import shader_dir
from spirula.contract.preprocess import preprocess, read_kernel
from spirula.errors import ShaderCompileError

NAMES = sorted(p.stem for p in shader_dir().glob("*.comp"))


@pytest.fixture(scope="module")
def registry():
    return KernelRegistry()


@pytest.mark.parametrize(
    "defines",
    [dict(ATOMIC_FLOAT=1, VEC4=1), dict(ATOMIC_FLOAT=0, VEC4=0), {}, dict(ATOMIC_FLOAT=1, SH_VEC4=1, FLOAT=1)],
    ids=["atomic-vec4", "cas-scalar", "none", "atomic-shvec4-float"],
)
@pytest.mark.parametrize("name", NAMES)
def test_contract_read_without_glslang_equals_glslangs(registry, name, defines):
    want = registry.get(name, **defines)
    got = read_kernel(name, defines)
    assert (got.name, got.bindings, got.push, got.spec, got.local_size) == (
        want.name,
        want.bindings,
        want.push,
        want.spec,
        want.local_size,
    )
    assert got.key == want.key


def test_preprocessor_evaluates_conditions_and_expands_object_macros():
    text = preprocess("copy", dict(VEC4=1))
    assert "uvec4 src[]" in text and "uint src[]" not in text
    text = preprocess("copy", dict(VEC4=0))
    assert "uint src[]" in text and "uvec4" not in text
    text = preprocess("rasterize_bwd", dict(ATOMIC_FLOAT=1))
    assert "float grad_xy[]" in text
    text = preprocess("rasterize_bwd", dict(ATOMIC_FLOAT=0))
    assert "uint grad_xy[]" in text
    text = preprocess("fpbo", dict(ATOMIC_FLOAT=1, SH_VEC4=1))
    assert "vec4 sh[]" in text and "vec4 m_sh[]" in text and "float grad_xy[]" in text
    text = preprocess("fpbo", dict(ATOMIC_FLOAT=1, SH_VEC4=0))
    assert "float sh[]" in text and "vec4 sh[]" not in text


CUDA_NAMES = sorted(p.stem for p in (shader_dir().parent / "native_cuda").glob("*.cu") if p.stem != "runtime")


def _members(header: str, struct: str, start: int = 0) -> list:
    """(declaration, field name) of ``struct`` in a generated header, from ``start``."""
    i = header.index("struct %s {" % struct, start)
    body = header[i : header.index("};", i)].split("\n")[1:]
    out = []
    for line in body:
        decl = line.split("//")[0].strip().rstrip(";")
        if decl:
            decl = decl.split(" = ")[0]
            out.append((decl.rsplit(" ", 1)[0], decl.rsplit(" ", 1)[1]))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_generated_header_declares_the_shaders_contract(name):
    """Push, Spec and Args of build/contracts/<name>.h are the shader's, in order,
    and unpack checks the shader's counts."""
    k = read_kernel(name, CUDA_DEFINES)
    h = generate(name)
    assert [f for _, f in _members(h, "Push")] == [c.name for c in k.push]
    assert [t for t, _ in _members(h, "Push")] == [SCALARS[c.kind] for c in k.push]
    assert [f for _, f in _members(h, "Spec")] == [c.name for c in k.spec]
    assert [t for t, _ in _members(h, "Spec")] == [SCALARS[c.kind] for c in k.spec]
    args = _members(h, "Args")
    assert [f for _, f in args] == [b.name for b in k.bindings]
    assert [t.startswith("const ") for t, _ in args] == [not b.writes for b in k.bindings]
    assert "spirula::shape_ok(L, %du, sizeof(Push) / 4u, %du)" % (len(k.bindings), len(k.spec)) in h
    assert "static_assert(sizeof(Push) == %du" % (4 * len(k.push)) in h
    x, y, z = k.local_size
    assert "LOCAL_THREADS = %du;" % (x * y * z) in h
    assert "namespace contract = spirula::contracts::%s;" % name in h


def test_generated_types_counts_and_variants_of_some_kernels():
    h = generate("copy")
    assert _members(h, "Args") == [("const uint32_t*", "src"), ("uint32_t*", "dst")]
    v = h.index("namespace VEC4 {")
    assert "constexpr uint32_t FLAG = 1u;" in h[v:]
    assert _members(h, "Args", v) == [("const uint4*", "src"), ("uint4*", "dst")]
    assert "LOCAL_SIZE_X = 256u;" in h and "Push) == 12u" in h

    h = generate("prefix_sum")
    assert _members(h, "Spec") == [("uint32_t", "PHASE")] and "uint32_t PHASE = 0u;" in h
    assert _members(h, "Args", h.index("namespace FLOAT {")) == [("float*", "data"), ("float*", "sums")]
    assert "sp.PHASE = L->spec[0];" in h

    h = generate("fpbo")
    assert '#include "common/step_params.cuh"' in h
    args = dict((f, t) for t, f in _members(h, "Args"))
    assert args["quats"] == "float4*" and args["sh"] == "float*" and args["radii"] == "const int2*"
    assert args["params"] == "const spirula::StepParams*"
    assert "spirula::bind(L, 21u, a.params, false)" in h  # one StepParams: at least its size
    assert "spirula::bind(L, 16u, a.radii, true)" in h  # an array: whole int2s
    spec = dict((f, t) for t, f in _members(h, "Spec"))
    assert spec == dict(
        SH_DEGREE="uint32_t",
        SH_COEFFS="uint32_t",
        MCMC_NOISE="bool",
        ADC_STATS="bool",
        N_VIEWS="uint32_t",
        ABSGRAD="bool",
        DEPTH_GRAD="bool",
        FLATTEN="bool",
        NORMALS="bool",
        LENSES="bool",
    )
    assert "sp.MCMC_NOISE = L->spec[2] != 0u;" in h and "bool ABSGRAD = false;" in h
    v = h.index("namespace SH_VEC4 {")
    sh4 = dict((f, t) for t, f in _members(h, "Args", v))
    assert sh4["sh"] == sh4["m_sh"] == sh4["v_sh"] == "float4*" and sh4["means"] == "float*"
    assert "FLAG = 4u;" in h[v:] and "LOCAL_THREADS = 128u;" in h

    h = generate("rasterize_bwd")
    assert "LOCAL_SIZE_X = 16u;" in h and "LOCAL_SIZE_Y = 16u;" in h and "LOCAL_THREADS = 256u;" in h
    assert "namespace VEC4" not in h and "namespace SH_VEC4" not in h
    assert ("const uint2*", "ranges") in _members(h, "Args")
    assert "// binding 10" in h and "binding 14 grad_xy_abs" in h  # the shader's binding comments


def test_generator_writes_every_header_once(tmp_path):
    assert main([str(tmp_path)]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.h")) == NAMES
    (tmp_path / "gone.h").write_text("// a kernel whose shader was removed")
    assert write_all(tmp_path) == []  # unchanged headers are left alone
    assert not (tmp_path / "gone.h").exists()


def test_generator_refuses_element_types_without_a_cuda_twin(tmp_path):
    (tmp_path / "bad.comp").write_text(
        "#version 450\nlayout(local_size_x = 64) in;\n"
        "layout(std430, binding = 0) buffer B { vec3 v[]; };\nvoid main() {}\n"
    )
    with pytest.raises(ShaderCompileError, match="vec3"):
        generate("bad", tmp_path)


def test_no_cuda_kernel_writes_its_contract_by_hand():
    """The contract of every native_cuda/<kernel>.cu comes from its generated
    header: no hand-written Push/Args/Spec struct, count, spec position or block size."""
    import re

    for name in CUDA_NAMES:
        src = (shader_dir().parent / "native_cuda" / (name + ".cu")).read_text()
        code = re.sub(r"//[^\n]*", "", src)
        for pattern in (
            r"struct\s+(Push|Args|Spec)\b",
            r"SPIRULA_CONTRACT\(",
            r"L->spec\[",
            r"dim3\(",
            r"__launch_bounds__\(\d",
            r"//\s+binding \d",
        ):
            assert not re.search(pattern, code if "//" not in pattern else src), (name, pattern)
        assert '#include "%s.h"' % name in src, name


UNPACK_PROGRAM = r"""
#include <cstddef>
#include <cstdio>
#include "common/launch.cuh"
#include "fpbo.h"

int main() {
    std::printf("layout %zu %zu %zu %zu %zu %zu %zu\n", offsetof(SpirulaLaunch, buffers),
                offsetof(SpirulaLaunch, sizes), offsetof(SpirulaLaunch, n_push), offsetof(SpirulaLaunch, push),
                offsetof(SpirulaLaunch, spec), offsetof(SpirulaLaunch, flags), sizeof(SpirulaLaunch));
    static float mem[64];
    SpirulaLaunch L{};
    L.n_buffers = 28u;
    for (int i = 0; i < 28; ++i) { L.buffers[i] = mem; L.sizes[i] = 48u; }
    L.sizes[21] = 140u;                               // one StepParams
    L.n_push = 7u;
    L.push[4] = 0x3e99999au;                          // eps2d = 0.3f
    L.n_spec = 10u;
    L.spec[0] = 3u; L.spec[1] = 16u; L.spec[2] = 1u; L.spec[4] = 2u;
    contract::Args a;
    contract::Push pc;
    contract::Spec sp;
    int err = contract::unpack(&L, a, pc, sp);
    std::printf("ok %d %d %.6g %u %u %d %d %u\n", err, a.params != nullptr, pc.eps2d, sp.SH_DEGREE, sp.SH_COEFFS,
                sp.MCMC_NOISE, sp.ADC_STATS, sp.N_VIEWS);
    L.sizes[21] = 64u;                                // too small for a StepParams
    std::printf("params %d\n", contract::unpack(&L, a, pc, sp));
    L.sizes[21] = 140u;
    L.sizes[1] = 40u;                                 // not whole float4s (quats)
    std::printf("quats %d\n", contract::unpack(&L, a, pc, sp));
    L.sizes[1] = 48u;
    L.sizes[4] = 36u;                                 // whole floats, not whole float4s
    contract::SH_VEC4::Args a4;
    std::printf("sh %d %d\n", contract::unpack(&L, a, pc, sp), contract::SH_VEC4::unpack(&L, a4, pc, sp));
    L.buffers[0] = nullptr;                           // null with bytes
    std::printf("null %d\n", contract::unpack(&L, a, pc, sp));
    L.buffers[0] = mem;
    L.n_push = 6u;
    std::printf("push %d\n", contract::unpack(&L, a, pc, sp));
    L.n_push = 7u;
    L.n_buffers = 27u;
    std::printf("buffers %d\n", contract::unpack(&L, a, pc, sp));
    return 0;
}
"""


def test_unpack_checks_a_launch_record_and_the_ctypes_mirror_matches(tmp_path):
    """The generated unpack (host code, no GPU needed) accepts a record that fits
    fpbo's contract and refuses wrong counts and sizes; SpirulaLaunch's ctypes
    mirror (spirula/backends/cuda/cudart.py) has the C layout."""
    import ctypes
    import os
    import shutil
    import subprocess

    nvcc = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.access(nvcc, os.X_OK):
        pytest.skip("nvcc not found")
    from spirula.backends.cuda.cudart import SpirulaLaunch

    root = shader_dir().parent
    write_all(tmp_path / "contracts", ["fpbo"])
    (tmp_path / "t.cu").write_text(UNPACK_PROGRAM)
    exe = tmp_path / "t"
    subprocess.run(
        [
            nvcc,
            "-std=c++17",
            "-I%s" % (root / "native_cuda"),
            "-I%s" % (tmp_path / "contracts"),
            "-I%s" % (root / "shaders" / "include"),
            str(tmp_path / "t.cu"),
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    out = dict(
        line.split(" ", 1)
        for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    )
    assert out["layout"].split() == [
        str(v)
        for v in (
            SpirulaLaunch.buffers.offset,
            SpirulaLaunch.sizes.offset,
            SpirulaLaunch.n_push.offset,
            SpirulaLaunch.push.offset,
            SpirulaLaunch.spec.offset,
            SpirulaLaunch.flags.offset,
            ctypes.sizeof(SpirulaLaunch),
        )
    ]
    invalid = "1"  # cudaErrorInvalidValue
    assert out["ok"].split() == ["0", "1", "0.3", "3", "16", "1", "0", "2"]
    assert out["params"] == invalid and out["quats"] == invalid
    assert out["sh"].split() == ["0", invalid]  # floats for Args, not float4s for SH_VEC4::Args
    assert out["null"] == invalid and out["push"] == invalid and out["buffers"] == invalid
