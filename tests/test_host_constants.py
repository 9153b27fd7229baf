"""Numbers host code shares with the kernels are the kernels' own, read from
the shaders (spirula/contract/constants.py), and the buffers bind by name in
groups (Splats.bindings, SplatModel.bindings, RasterBuffers.bindings)."""

import re

import numpy as np
import pytest

from spirula.contract.constants import shader_constant, shader_constants
from spirula.contract.kernel import shader_dir
from spirula.errors import ShaderCompileError


def _glsl(path, name):
    """The value text of ``const <type> name = ...;`` or ``#define name ...`` in a shader file."""
    text = (shader_dir() / path).read_text()
    m = re.search(r"const\s+\w+\s+%s\s*=\s*([^;]+);|#define\s+%s\s+(\S+)" % (name, name), text)
    assert m, (path, name)
    return m.group(1) or m.group(2)


def test_host_constants_are_the_shaders():
    from spirula.render import raster_buffers, rasterizer, scan, sort

    assert raster_buffers.TILE == rasterizer.TILE == 16 and _glsl("include/raster.glsl", "TILE") == "16u"
    assert raster_buffers.CAMERA_FLOATS == 32 and _glsl("include/camera.glsl", "CAMERA_FLOATS") == "32u"
    assert raster_buffers.DIST_PARAMS == 12 and raster_buffers.CAMERA_MODELS["EQUIRECTANGULAR"] == 3
    assert (sort.RADIX_BITS, sort.RADIX, sort.BLOCK) == (8, 256, 2048)
    assert _glsl("include/radix.glsl", "SORT_BLOCK") == "SORT_WG * SORT_CHUNKS"  # 128 x 16
    assert scan.BLOCK == 1024 and _glsl("prefix_sum.comp", "BLOCK") == "256u * ITEMS"
    assert rasterizer.CHUNK_NONE == shader_constant("include/raster.glsl", "CHUNK_NONE") == 0xFFFFFFFF
    assert rasterizer.ALPHA_THRESHOLD == 1.0 / 255.0 and rasterizer.RADIUS_SIGMAS == 3.33
    assert rasterizer.SH_C0 == 0.2820947917738781
    # the camera record the host packs is the one the kernels load
    assert rasterizer.pack_cameras(np.eye(4)[None], np.eye(3)[None]).shape == (1, raster_buffers.CAMERA_FLOATS)


def test_the_reader_evaluates_const_and_define_arithmetic(tmp_path, monkeypatch):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "a.glsl").write_text(
        "#define WIDTH 4u\n"
        "const uint A = WIDTH * 3u;  // 12\n"
        "const uint B = (A + 4u) / 3u;  // integer division: 5\n"
        "const uint MASK = 0xFFu << 8u;\n"
        "const float HALF = 1.0f / 2.0f;\n"
    )
    (tmp_path / "k.comp").write_text(
        '#include "a.glsl"\n'
        "#define FLOATY 2.5f\n"
        "const int NEG = -A;\n"
        "void main() { const float t = sin(HALF); const uint A2 = 1u; }\n"
        "void f() { const uint A2 = 2u; }\n"
    )
    monkeypatch.setenv("SPIRULA_SHADER_DIR", str(tmp_path))
    got = shader_constants("k.comp")
    assert got == dict(WIDTH=4, A=12, B=5, MASK=0xFF00, HALF=0.5, FLOATY=2.5, NEG=-12)
    assert type(got["HALF"]) is float and type(got["B"]) is int
    with pytest.raises(ShaderCompileError, match="no numeric constant t"):
        shader_constant("k.comp", "t")  # a call, not a number
    with pytest.raises(ShaderCompileError, match="no shader file"):
        shader_constants("missing.comp")


def test_buffers_bind_in_groups_by_name(device):
    from spirula.render.rasterizer import Rasterizer
    from spirula.render.splats import Splats
    from spirula.train.model import SplatModel

    model = SplatModel(device, 10, 10, 4)
    names = ("means", "quats", "scales", "opacities", "sh")
    assert model.params.bindings() == dict(zip(names, model.params.buffers()))
    assert model.params.bindings("grad_", ("sh",)) == {"grad_sh": model.params.sh}
    both = model.bindings()
    assert list(both) == list(names) + ["m_" + n for n in names] + ["v_" + n for n in names]
    assert both["m_quats"] is model.exp_avg.quats and both["v_sh"] is model.exp_avg_sq.sh
    assert model.bindings("opacities") == dict(
        opacities=model.params.opacities, m_opacities=model.exp_avg.opacities, v_opacities=model.exp_avg_sq.opacities
    )
    raster = Rasterizer(device, 20, 18, capacity=10)
    b = raster.bindings("xyop", "grad_depth", "normals", "grad_normals", "out_colors", "isect_keys", "chunk_state")
    assert b["xyop"] is raster.xyop and b["out_colors"] is raster.out_colors and b["isect_keys"] is raster.isect_keys
    # placeholders where the variant (no geometry, no normals) has no such buffer
    assert b["grad_depth"].shape == (1,) and b["normals"].shape == (4,) and b["grad_normals"].shape == (1,)
    with pytest.raises(KeyError, match="no buffer tile_size"):
        raster.bindings("tile_size")
    splats = Splats.alloc(device, 3, 1)
    assert set(splats.bindings("src_")) == {"src_" + n for n in names}
    for thing in (raster, splats):
        thing.free(device) if thing is splats else thing.free()
    model.free()
