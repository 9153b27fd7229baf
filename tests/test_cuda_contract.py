"""The CUDA backend reads each kernel's contract from its GLSL source without
glslang (spirula/backends/contract.py); it must equal the Vulkan registry's,
for every shader and compile-time variant."""
import pytest

from spirula.backends.contract import preprocess, read_kernel
from spirula.runtime.kernels import KernelRegistry, shader_dir

NAMES = sorted(p.stem for p in shader_dir().glob("*.comp"))


@pytest.fixture(scope="module")
def registry():
    return KernelRegistry()


@pytest.mark.parametrize("defines", [dict(ATOMIC_FLOAT=1, VEC4=1), dict(ATOMIC_FLOAT=0, VEC4=0), {},
                                     dict(ATOMIC_FLOAT=1, SH_VEC4=1, FLOAT=1)],
                         ids=["atomic-vec4", "cas-scalar", "none", "atomic-shvec4-float"])
@pytest.mark.parametrize("name", NAMES)
def test_contract_read_without_glslang_equals_glslangs(registry, name, defines):
    want = registry.get(name, **defines)
    got = read_kernel(name, defines)
    assert (got.name, got.bindings, got.push, got.spec, got.local_size) == \
        (want.name, want.bindings, want.push, want.spec, want.local_size)
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


@pytest.mark.parametrize("name", CUDA_NAMES)
def test_cuda_twin_declares_the_shaders_contract(registry, name):
    """Each native_cuda/<kernel>.cu checks its launch against SPIRULA_CONTRACT(L,
    buffers, push words, spec constants) and reads its push block as a struct:
    both must match the shader, or every launch fails (or reads garbage)."""
    import re
    src = (shader_dir().parent / "native_cuda" / (name + ".cu")).read_text()
    want = registry.get(name)
    m = re.search(r"SPIRULA_CONTRACT\(L, (\d+), (\d+), (\d+)\)", src)
    assert m, "%s.cu: no SPIRULA_CONTRACT" % name
    assert tuple(map(int, m.groups())) == (len(want.bindings), len(want.push), len(want.spec))
    body = re.sub(r"//[^\n]*", "", re.search(r"struct Push \{([^}]*)\}", src).group(1))
    fields = [name.strip() for decl in body.split(";") if decl.strip()
              for name in decl.strip().split(None, 1)[1].split(",")]
    assert fields == [c.name for c in want.push]
