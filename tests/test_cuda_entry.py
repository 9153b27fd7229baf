"""Single-source kernels (spirula/contract/cuda_entry.py): a simple kernel is written once, as
the body of its shader in the dialect of shaders/include/dialect.glsl, and CUDA's entry point
is generated from it next to its contract header; native_cuda/ keeps hand-written twins only
for the hot kernels, each saying in its first line why. The single-source kernels' results
on each backend: their tests against the numpy reference (the ``backend`` fixture); that the
generated entries compile and export every kernel: tests/test_cuda_build.py."""

import re

import pytest

from spirula.contract.cuda_entry import Parts, generate, hand_written, main, native_dir, single_source, write_all
from spirula.errors import ShaderCompileError

# the kernels whose CUDA twin is hand-written for speed (docs/cuda.md, "Hand-written twins")
HOT = (
    "fpbo",
    "loss_bwd",
    "loss_fwd",
    "prefix_sum",
    "radix_sort_count",
    "radix_sort_scatter",
    "rasterize_bwd",
    "rasterize_fwd",
)


def test_native_cuda_holds_only_the_hot_kernels_twins():
    assert tuple(hand_written()) == HOT
    assert len(single_source()) == 53 and not set(single_source()) & set(HOT)


@pytest.mark.parametrize("name", HOT)
def test_a_hand_written_twin_says_why_in_its_first_line(name):
    first = (native_dir() / (name + ".cu")).read_text().split("\n", 1)[0]
    assert first.startswith("// Hand-written for speed: "), first


@pytest.mark.parametrize("name", single_source())
def test_a_single_source_kernel_is_its_body_and_a_few_line_main(name):
    """The shader, below its declarations: ``FN void <name>_body(...)`` (with helpers it may
    need) in the dialect (Parts refuses anything else), then main() of at most five lines."""
    parts = Parts(name)
    assert re.search(r"^FN void %s_body\(" % name, "\n".join(parts.body), re.M)
    assert len([line for line in parts.main if line.strip()]) <= 5, parts.main
    text = generate(name)
    assert '#line %d "shaders/%s.comp"' % (parts.body_line, name) in text
    assert "SPIRULA_EXPORT int %s(const SpirulaLaunch* L) {" % name in text
    assert "__launch_bounds__(contract::LOCAL_THREADS)" in text


def test_the_entry_carries_the_contracts_types_variants_and_templates():
    text = generate("copy")
    assert "    const uint* src;\n    uint* dst;" in text and "    const uvec4* src;\n    uvec4* dst;" in text
    assert "#define VEC4 1" in text and "(L->flags & contract::VEC4::FLAG) == contract::VEC4::FLAG" in text
    text = generate("projection_fwd")
    assert "template <uint SH_DEGREE_>" in text and "static constexpr uint SH_DEGREE = SH_DEGREE_;" in text
    assert "    uint SH_COEFFS;\n    bool ACTIVATED;\n    bool NORMALS;" in text
    assert "    const uint* sh;" in text and "    const float* sh;" in text  # COMPACT and not
    for degree in range(4):
        assert "if (sp.SH_DEGREE == %d) {" % degree in text
    assert "FN void main()" in text and "static constexpr uint MAX_SHARE" in generate("densify_mcmc_relocate")
    assert '#include "zero_moments.glsl"' in generate("densify_mcmc_copy")  # inside the struct


def test_generator_writes_every_entry_and_removes_stale_ones(tmp_path):
    assert main([str(tmp_path)]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.cu")) == single_source()
    (tmp_path / "fpbo.cu").write_text("// now a hand-written twin's name")
    assert write_all(tmp_path) == []  # unchanged entries are left alone
    assert not (tmp_path / "fpbo.cu").exists()


SHADER = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer B { float v[]; };
layout(push_constant) uniform Push {
    uint n;
} pc;
%s
FN void bad_body(uint i) {
%s
}

void main() { bad_body(global_index()); }
"""


@pytest.mark.parametrize(
    "between,body,match",
    [
        ("", "    v[i] = 2.0 * v[i];", "without the f suffix: 2.0"),
        ("", "    vec4 q = vec4(v[i]);\n    v[i] = q.xy.x;", "swizzle .xy"),
        (
            "shared float tile[64];",
            "    v[i] = tile[i];",
            "shared in a single-source kernel: it needs a hand-written twin",
        ),
        ("", "    barrier();", "barrier in a single-source kernel"),
        ("", "    v[i] = subgroupAdd(v[i]);", "subgroupAdd"),
    ],
)
def test_generator_refuses_what_the_dialect_or_a_simple_kernel_cannot_hold(tmp_path, between, body, match):
    (tmp_path / "bad.comp").write_text(SHADER % (between, body))
    with pytest.raises(ShaderCompileError, match=re.escape(match)):
        generate("bad", tmp_path)


def test_generator_refuses_code_among_the_declarations(tmp_path):
    text = SHADER % ("", "    v[i] = 2.0f * v[i];")
    text = text.replace("layout(push_constant)", "float twice(float x) { return 2.0f * x; }\nlayout(push_constant)")
    (tmp_path / "bad.comp").write_text(text)
    with pytest.raises(ShaderCompileError, match="among the layout declarations"):
        generate("bad", tmp_path)
    (tmp_path / "bad.comp").write_text(SHADER % ("", "    v[i] = 2.0f * v[i];"))
    assert "v[i] = 2.0f * v[i];" in generate("bad", tmp_path)
