"""The wheel's precompiled kernels (spirula/_spirv/, scripts/precompile_shaders.py):
the same SPIR-V and contract as compiling from source, found without glslang,
and a one-line error naming the kernel and its defines for a variant not shipped."""

import json
import subprocess
import sys

import pytest

from spirula.backends.vulkan import kernels, variants
from spirula.backends.vulkan.kernels import KernelRegistry
from spirula.contract.kernel import shader_dir
from spirula.errors import ShaderCompileError

ROOT = shader_dir().parent


@pytest.fixture(scope="module")
def spirv_dir(tmp_path_factory):
    """Every variant, compiled as the wheel's build does (about 10 s on 2 cores)."""
    out = tmp_path_factory.mktemp("spirv")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "precompile_shaders.py"), str(out)], check=True)
    return out


@pytest.fixture
def no_glslang(monkeypatch, tmp_path):
    """A machine without glslangValidator, as a wheel's user has."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))


# what a VulkanDevice merges into every kernel (spirula/backends/vulkan/device.py), on NVIDIA and on lavapipe
NVIDIA = dict(
    ATOMIC_FLOAT=1, INF_NAN_PRESERVE=1, SHUFFLE_SUMS=1, SUBGROUP_LOG2=5, SUBGROUP_SIZE_MIN=32, SUBGROUP_SIZE_MAX=32
)
LAVAPIPE = dict(ATOMIC_FLOAT=1, INF_NAN_PRESERVE=1, SUBGROUP_SIZE_MIN=8, SUBGROUP_SIZE_MAX=8)


def test_the_manifest_lists_every_variant_written(spirv_dir):
    manifest = json.loads((spirv_dir / "manifest.json").read_text())
    assert manifest["target_env"] == kernels.TARGET_ENV and manifest["glslang"].startswith("Glslang")
    assert sorted(p.stem for p in spirv_dir.glob("*.spv")) == manifest["variants"]
    assert set(manifest["variants"]) == set(variants.variants(shader_dir()))
    assert {"copy.VEC4=1", "nn_gelu", "fpbo.ATOMIC_FLOAT=0.SH_VEC4=1", "rasterize_bwd.ATOMIC_FLOAT=1"} <= set(
        manifest["variants"]
    )


def test_a_variant_is_named_by_the_defines_its_source_reads():
    used = variants.source_names(shader_dir(), "rasterize_bwd")
    assert variants.variant_stem("rasterize_bwd", NVIDIA, used) == (
        "rasterize_bwd.ATOMIC_FLOAT=1.SHUFFLE_SUMS=1.SUBGROUP_LOG2=5"
    )
    assert variants.variant_stem("nn_gelu", NVIDIA, variants.source_names(shader_dir(), "nn_gelu")) == "nn_gelu"
    # INF_NAN_PRESERVE is an edit of the compiled module, read by no shader
    assert not any("INF_NAN_PRESERVE" in stem for stem in variants.variants(shader_dir()))


@pytest.mark.parametrize("defines", [NVIDIA, LAVAPIPE], ids=["nvidia", "lavapipe"])
@pytest.mark.parametrize(
    "name, call",
    [("fpbo", dict(SH_VEC4=1)), ("fpbo", dict(COMPACT=1)), ("rasterize_bwd", {}), ("radix_sort_scatter", {})],
)
def test_precompiled_kernels_equal_the_ones_compiled_from_source(spirv_dir, tmp_path, name, call, defines):
    compiled = KernelRegistry(cache=tmp_path).get(name, **defines, **call)
    shipped = KernelRegistry(spirv_dir=spirv_dir).get(name, **defines, **call)
    assert shipped.spirv == compiled.spirv  # INF_NAN_PRESERVE's edit included
    assert (shipped.bindings, shipped.push, shipped.spec, shipped.local_size) == (
        compiled.bindings,
        compiled.push,
        compiled.spec,
        compiled.local_size,
    )
    assert shipped.defines == compiled.defines and shipped.no_bounds_checks == compiled.no_bounds_checks


def test_precompiled_kernels_need_no_glslang(spirv_dir, no_glslang):
    reg = KernelRegistry(spirv_dir=spirv_dir)
    for name in reg.names():
        for call in variants.CALL_DEFINES.get(name, ({},)):
            assert reg.get(name, **LAVAPIPE, **call).spirv[:4] == b"\x03\x02\x23\x07"


def test_a_variant_not_shipped_is_one_line_naming_kernel_and_defines(spirv_dir, no_glslang):
    with pytest.raises(ShaderCompileError) as err:
        KernelRegistry(spirv_dir=spirv_dir).get("fpbo", BLOCK_WORDS=8, INF_NAN_PRESERVE=1, SH_VEC4=1)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("kernel fpbo with BLOCK_WORDS=8, SH_VEC4=1 is not among")
    assert "INF_NAN_PRESERVE" not in msg and "glslang-tools" in msg


def test_a_variant_not_shipped_is_compiled_where_glslang_is_installed(spirv_dir, tmp_path):
    k = KernelRegistry(spirv_dir=spirv_dir, cache=tmp_path).get("fpbo", BLOCK_WORDS=8, SH_VEC4=1)
    assert k.spirv[:4] == b"\x03\x02\x23\x07" and list(tmp_path.glob("fpbo-*.spv"))


def test_shader_dir_setting_compiles_from_source_even_in_a_wheel(monkeypatch, tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    monkeypatch.setattr(kernels, "PACKAGED_SPIRV", tmp_path)
    assert kernels.packaged_spirv() == tmp_path and KernelRegistry().spirv_dir == tmp_path
    monkeypatch.setenv("SPIRULA_SHADER_DIR", str(shader_dir()))
    assert kernels.packaged_spirv() is None and KernelRegistry().spirv_dir is None


def test_a_checkout_compiles_from_source():
    assert KernelRegistry().spirv_dir is None  # no spirula/_spirv/ in the source tree


def test_every_define_a_device_sets_is_a_device_variant(device):
    """VulkanDevice.defines's names and values are among variants.DEVICE_DEFINES."""
    assert any(device.defines == d for d in variants.DEVICE_DEFINES)


def _call_site_defines():
    """(kernel, define) of every ``rec.dispatch("name", ..., defines=dict(D=...))`` and
    ``device.kernel("name", D=...)`` in spirula/: what callers compile besides the device's."""
    import ast

    found = set()
    for path in (ROOT / "spirula").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            name = node.args[0]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                continue
            if node.func.attr == "kernel":
                found |= {(name.value, k.arg) for k in node.keywords if k.arg}
            elif node.func.attr == "dispatch":
                for k in node.keywords:
                    if k.arg == "defines":
                        dicts = [
                            d
                            for d in ast.walk(k.value)
                            if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "dict"
                        ]
                        found |= {(name.value, kw.arg) for d in dicts for kw in d.keywords}
    return found


def test_every_define_a_caller_passes_is_a_precompiled_variant():
    """A new call-site define must be added to variants.CALL_DEFINES, or the wheel lacks it."""
    sites = _call_site_defines()
    assert {("copy", "VEC4"), ("prefix_sum", "FLOAT"), ("fpbo", "SH_VEC4"), ("projection_fwd", "COMPACT")} <= sites
    listed = {(kernel, d) for kernel, calls in variants.CALL_DEFINES.items() for call in calls for d in call}
    assert sites <= listed, "not in variants.CALL_DEFINES: %s" % sorted(sites - listed)
