"""Kernel registry: SPIR-V compile and cache, the parsed binding contract, constants."""

from pathlib import Path

import numpy as np
import pytest

from spirula.backends.vulkan.kernels import KernelRegistry
from spirula.contract.kernel import parse_contract, shader_dir
from spirula.errors import ShaderCompileError


def test_every_product_shader_compiles_and_declares_a_contract():
    reg = KernelRegistry()
    names = reg.names()
    assert {"copy", "fill", "prefix_sum"} <= set(names)
    for name in names:
        k = reg.get(name)
        assert k.spirv[:4] == b"\x03\x02\x23\x07"  # SPIR-V magic, little-endian
        assert [b.index for b in k.bindings] == list(range(len(k.bindings)))
        assert k.local_size[0] >= 1


def test_contract_names_bindings_access_push_and_spec_constants(test_kernels):
    k = test_kernels.get("saxpy")
    assert [(b.name, b.reads, b.writes) for b in k.bindings] == [("x", True, False), ("y", True, True)]
    assert [(c.name, c.kind) for c in k.push] == [("n", "uint"), ("a", "float")]
    assert [(c.name, c.kind, c.default) for c in k.spec] == [("SCALE", "float", 1.0)]
    assert k.local_size == (64, 1, 1)
    assert [(b.type, b.array) for b in k.bindings] == [("float", True), ("float", True)]


def test_element_types_of_bindings_are_read_from_the_buffer_member():
    k = KernelRegistry().get("fpbo", ATOMIC_FLOAT=1, SH_VEC4=1)
    types = {b.name: (b.type, b.array) for b in k.bindings}
    assert types["quats"] == ("vec4", True) and types["sh"] == ("vec4", True)
    assert types["radii"] == ("ivec2", True) and types["grad_xy"] == ("float", True)
    assert types["params"] == ("StepParams", False)  # one struct, not an array


def test_workgroups_come_from_the_kernels_own_local_size(test_kernels):
    saxpy = test_kernels.get("saxpy")  # local size 64
    assert [saxpy.groups(n) for n in (0, 1, 64, 65)] == [0, 1, 1, 2]
    raster = KernelRegistry().get("rasterize_fwd")  # 16 x 16
    assert raster.groups((33, 16, 2)) == (3, 1, 2)
    with pytest.raises(ValueError, match="needs"):
        raster.groups(1000)


def test_constants_are_packed_as_exact_bit_patterns(test_kernels):
    k = test_kernels.get("saxpy")
    words = k.pack_push(dict(n=3_000_000_001, a=-2.5)).view(np.uint32)
    assert words[0] == 3_000_000_001 and words[1] == np.float32(-2.5).view(np.uint32)
    assert k.pack_spec(None).view(np.float32)[0] == 1.0
    with pytest.raises(TypeError, match="missing"):
        k.pack_push(dict(n=1))
    with pytest.raises(TypeError, match="no push constant"):
        k.pack_push(dict(n=1, a=1.0, b=2))
    with pytest.raises(TypeError, match="no specialization constant"):
        k.pack_spec(dict(NOPE=1))


def test_variants_compile_separately_and_hit_the_cache(tmp_path):
    reg = KernelRegistry(cache=tmp_path)
    a = reg.get("copy", VEC4=0)
    b = reg.get("copy", VEC4=1)
    assert a.spirv != b.spirv and a.name == b.name == "copy"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 4  # .spv + preprocessed .glsl per variant
    again = KernelRegistry(cache=tmp_path).get("copy", VEC4=1)
    assert again.spirv == b.spirv and sorted(p.name for p in tmp_path.iterdir()) == files


def test_compile_error_names_file_line_and_message(tmp_path):
    src = tmp_path / "shaders"
    src.mkdir()
    (src / "broken.comp").write_text(
        "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n    uint x = undefined_thing;\n}\n"
    )
    reg = KernelRegistry(source_dir=src, cache=tmp_path / "cache")
    with pytest.raises(ShaderCompileError) as err:
        reg.get("broken")
    msg = str(err.value)
    assert "broken.comp:4" in msg and "undefined_thing" in msg and "\n" not in msg
    assert not any((tmp_path / "cache").glob("*.spv"))  # nothing stale left behind


def test_missing_compiler_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ShaderCompileError, match="glslang-tools"):
        KernelRegistry(cache=tmp_path / "c").get("fill")


def test_parser_rejects_gaps_in_bindings_and_constant_ids():
    src = "layout(std430, binding = 0) buffer A { uint a[]; };\nlayout(std430, binding = 2) buffer B { uint b[]; };\n"
    with pytest.raises(ShaderCompileError, match="0..n-1"):
        parse_contract("gap", src)
    src = "layout(constant_id = 1) const uint X = 0;\n"
    with pytest.raises(ShaderCompileError, match="constant_id"):
        parse_contract("gap", src)


def test_shader_sources_live_in_the_top_level_shaders_folder():
    assert shader_dir() == Path(__file__).resolve().parent.parent / "shaders"
    assert not list(shader_dir().rglob("*.spv"))
