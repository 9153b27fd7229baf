"""The maths both backends use is written once (shaders/include/*.glsl in the
dialect of dialect.glsl) and compiled by glslang and nvcc; the host derives
the StepParams layout from the same file. These tests keep it that way: the
CUDA side defines none of the shared functions again, and the shared files
stay inside the common subset (an unsuffixed float literal would silently
turn float maths into double maths under nvcc)."""

import re

import numpy as np
import pytest

from spirula.contract.kernel import shader_dir
from spirula.contract.std430 import std430_dtype
from spirula.errors import ShaderCompileError

INCLUDE = shader_dir() / "include"
NATIVE = shader_dir().parent / "native_cuda"
# common.glsl includes the dialect for the kernels' bodies but is GLSL only (CUDA's
# global_index() and the rest are native_cuda/common/launch.cuh)
SHARED = sorted(
    p for p in INCLUDE.glob("*.glsl") if '#include "dialect.glsl"' in p.read_text() and p.name != "common.glsl"
)
_RE_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_RE_FUNCTION = re.compile(r"^FN\s+\w+\s+(\w+)\s*\(", re.M)
_RE_GLSL_ONLY = re.compile(r"^#if !defined\(__CUDACC__\).*?^#endif", re.M | re.S)


def _code(path):
    return _RE_COMMENT.sub("", path.read_text())


def test_the_shared_files_are_the_ones_the_issue_names():
    names = {p.stem for p in SHARED}
    assert {"sh", "projection", "adam", "finite", "ssim", "step_params", "raster", "random"} <= names


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_shared_file_stays_in_the_common_subset(path):
    code = _code(path)
    # float literals need the f suffix (1.0f, 1e-4f): C++ reads 1.0 as a double
    bare = re.findall(r"(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)(?![\w.])", code)
    assert not bare, "%s: float literals without the f suffix: %s" % (path.name, bare)
    # no swizzles (C++ has none); single components (.x) are fine
    swizzles = re.findall(r"\.\b([xyzw]{2,4}|[rgba]{2,4})\b", code)
    assert not swizzles, "%s: swizzles %s" % (path.name, swizzles)
    # every function carries FN (CUDA: __device__ __forceinline__)
    for m in re.finditer(r"^(\w+)\s+(\w+)\s*\([^;]*\)\s*\{", code, re.M):
        assert m.group(1) == "FN", "%s: function %s lacks FN" % (path.name, m.group(2))


def _cuda_code(path):
    """A shared file as nvcc reads it: without its GLSL-only blocks (which a
    .cuh may mirror under the same name, e.g. splat_finite)."""
    return _RE_GLSL_ONLY.sub("", _code(path))


def test_cuda_defines_none_of_the_shared_functions_again():
    shared = {name for p in SHARED for name in _RE_FUNCTION.findall(_cuda_code(p))}
    assert {"sh_basis", "projection_geometry_vjp", "adam_update", "pcg_hash", "gaussian_sigma"} <= shared
    for path in sorted(NATIVE.rglob("*.cu*")):
        code = _code(path)
        for name in shared:
            # a definition: a return type, the name, parameters, then a body
            assert not re.search(r"\b\w+[&*]?\s+%s\s*\([^;{]*\)\s*\{" % name, code), (
                "%s defines %s, which shaders/include already defines" % (path.name, name)
            )


def test_every_shared_file_is_compiled_for_cuda():
    wrappers = "\n".join(p.read_text() for p in (NATIVE / "common").glob("*.cuh"))
    for path in SHARED:
        if path.name == "dialect.glsl":
            continue
        assert '#include "%s"' % path.name in wrappers, path.name


def test_step_params_layout_comes_from_the_glsl_struct():
    from spirula.train.step_params import MAX_VIEWS, STEP_PARAMS_DTYPE, STEP_PARAMS_WORDS, step_params

    assert STEP_PARAMS_DTYPE.itemsize == 140 and STEP_PARAMS_WORDS == 35 and MAX_VIEWS == 8
    fields = STEP_PARAMS_DTYPE.fields
    assert fields["step"][1] == 0 and fields["n_splats"][1] == 12
    assert fields["image_index"][1] == 16 and fields["image_index"][0].shape == (8,)
    assert fields["lr_means"][1] == 48 and fields["masked_valid"][1] == 124 and fields["flatten_reg"][1] == 128
    assert fields["prev_capacity"][1] == 132 and fields["prev_isects"][1] == 136
    # every member of the GLSL struct, in order
    body = re.search(r"struct StepParams \{(.*?)\};", _code(INCLUDE / "step_params.glsl"), re.S).group(1)
    members = [re.match(r"\s*\w+\s+(\w+)", d).group(1) for d in body.split(";") if d.strip()]
    assert list(STEP_PARAMS_DTYPE.names) == members
    p = step_params(step=3, image_index=[5, 6, 7, 0, 0, 0, 0, 1], lr_shN=0.25)
    words = np.frombuffer(p.tobytes(), np.uint32)
    assert words[0] == 3 and list(words[4:12]) == [5, 6, 7, 0, 0, 0, 0, 1]
    assert words[4 + 8 + 5].view(np.float32) == np.float32(0.25)


def test_std430_alignment_of_vectors_and_arrays():
    dt = std430_dtype("struct S { float a; vec2 b; uint c; vec4 d; float e[3]; uvec2 f[2]; };", "S")
    assert [dt.fields[n][1] for n in "abcdef"] == [0, 8, 16, 32, 48, 64]
    assert dt.itemsize == 80  # a multiple of the largest alignment (vec4: 16)
    with pytest.raises(ShaderCompileError, match="vec3"):
        std430_dtype("struct S { vec3 a; };", "S")
    with pytest.raises(ShaderCompileError, match="no struct T"):
        std430_dtype("struct S { float a; };", "T")


@pytest.mark.parametrize(
    "name,include", [("ALPHA_THRESHOLD", "projection.glsl"), ("RADIUS_SIGMAS", "projection.glsl"), ("SH_C0", "sh.glsl")]
)
def test_the_rasterizers_host_constants_are_the_shaders(name, include):
    """The host code that must agree with what the kernels draw (the mesh's bounds
    and colours) reads these from spirula/render/rasterizer.py, never from the reference."""
    from spirula.render import rasterizer

    m = re.search(r"const float %s = ([^;]+);" % name, _code(INCLUDE / include))
    assert m, (name, include)
    parts = [np.float32(t.strip().rstrip("f")) for t in m.group(1).split("/")]
    glsl = parts[0] / parts[1] if len(parts) == 2 else parts[0]
    assert np.float32(getattr(rasterizer, name)) == glsl, (name, m.group(1))
