"""Float controls (spirula/backends/vulkan/spirv.py): where the device offers
shaderSignedZeroInfNanPreserveFloat32, every kernel carries the
SignedZeroInfNanPreserve execution mode for float32, so the driver's compiler
keeps IEEE's NaN and Inf; the edited module is valid SPIR-V."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from spirula.backends.vulkan.spirv import EXECUTION_MODE_SIGNED_ZERO_INF_NAN_PRESERVE, preserve_inf_nan

OP_EXECUTION_MODE = 16


def _modes(spirv: bytes) -> list:
    """(entry id, mode, operands) of every OpExecutionMode."""
    words = np.frombuffer(spirv, "<u4")
    i, out = 5, []
    while i < len(words):
        count, op = int(words[i]) >> 16, int(words[i]) & 0xFFFF
        if op == OP_EXECUTION_MODE:
            out.append((int(words[i + 1]), int(words[i + 2]), words[i + 3 : i + count].tolist()))
        i += count
    return out


def _preserves(spirv: bytes) -> bool:
    return any(m == EXECUTION_MODE_SIGNED_ZERO_INF_NAN_PRESERVE and ops == [32] for _, m, ops in _modes(spirv))


@pytest.mark.parametrize(
    "name", ["projection_fwd", "densify_mcmc_weights", "rasterize_bwd", "radix_sort_scatter", "loss_fwd"]
)
def test_the_edited_kernel_is_valid_spirv_with_the_mode_once(name, tmp_path):
    from spirula.backends.vulkan.kernels import KernelRegistry

    plain = KernelRegistry().get(name, ATOMIC_FLOAT=0).spirv
    edited = preserve_inf_nan(plain)
    assert not _preserves(plain) and _preserves(edited)
    assert preserve_inf_nan(edited) == edited  # idempotent
    assert [m for m in _modes(edited) if m[1] == EXECUTION_MODE_SIGNED_ZERO_INF_NAN_PRESERVE] == [
        (_modes(plain)[0][0], EXECUTION_MODE_SIGNED_ZERO_INF_NAN_PRESERVE, [32])
    ]
    val = shutil.which("spirv-val")
    if val is None:
        pytest.skip("spirv-val (spirv-tools) not installed")
    path = tmp_path / (name + ".spv")
    path.write_bytes(edited)
    r = subprocess.run([val, "--target-env", "vulkan1.1", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_not_spirv_is_refused():
    with pytest.raises(ValueError, match="not a SPIR-V module"):
        preserve_inf_nan(b"\0" * 32)


def test_a_device_that_offers_float_controls_compiles_the_kernels_that_test_finiteness_with_them(device):
    from spirula.backends import open_device

    if not device.info.inf_nan_preserve:
        pytest.skip("%s does not offer shaderSignedZeroInfNanPreserveFloat32" % device.info.name)
    assert device.float_controls and device.defines["INF_NAN_PRESERVE"] == 1
    deciding = {"projection_fwd", "densify_mcmc_weights", "densify_mcmc_copy", "densify_adc_classify"}
    for name in deciding:
        assert _preserves(device.kernel(name).spirv), name
    # not the arithmetic kernels: the mode cost fpbo 6% on the H200
    for name in ("fpbo", "rasterize_fwd", "loss_fwd"):
        assert not _preserves(device.kernel(name).spirv), name
    off = open_device("vulkan", device.info.index, float_controls=False)
    assert off.float_controls is False and not _preserves(off.kernel("projection_fwd").spirv)


def test_buffer_robustness_is_per_kernel_where_the_device_offers_pipeline_robustness(device, monkeypatch):
    from spirula.backends import open_device
    from spirula.backends.vulkan import vkinfo

    offered = vkinfo.PIPELINE_ROBUSTNESS_EXTENSION in device.info.extensions
    # the session's device follows SPIRULA_NO_BUFFER_ROBUSTNESS (the whole suite may run with it
    # set), else its vendor's default: per kernel on NVIDIA, the driver's checks elsewhere
    env = os.environ.get("SPIRULA_NO_BUFFER_ROBUSTNESS", "")
    nvidia = device.info.vendor_id == vkinfo.VENDOR_NVIDIA
    expected = "kernels" if env == "kernels" or (not env and nvidia) else True
    assert device.buffer_robustness == (expected if offered else True)
    with pytest.raises(ValueError, match="True or 'kernels'"):
        open_device("vulkan", device.info.index, buffer_robustness=False)  # the all-kernels experiment is gone
    if not offered:
        pytest.skip("%s has no VK_EXT_pipeline_robustness" % device.info.name)
    x = np.arange(1024, dtype=np.float32)
    monkeypatch.setenv("SPIRULA_NO_BUFFER_ROBUSTNESS", "0")
    assert open_device("vulkan", device.info.index).buffer_robustness is True
    # only the kernels whose shader says so: kp's toggle before each algorithm
    monkeypatch.setenv("SPIRULA_NO_BUFFER_ROBUSTNESS", "kernels")
    some = open_device("vulkan", device.info.index)
    assert some.buffer_robustness == "kernels"
    buf = some.pool.alloc("test.robustness", x.shape, np.float32)
    some.upload(buf, x)
    np.testing.assert_array_equal(some.readback(buf), x)
    some.close()


def test_default_buffer_robustness_is_per_kernel_on_nvidia_and_the_switch_overrides_it(monkeypatch):
    from types import SimpleNamespace

    from spirula.backends.vulkan import vkinfo
    from spirula.backends.vulkan.device import default_buffer_robustness
    from spirula.errors import UsageError

    nvidia, other = SimpleNamespace(vendor_id=vkinfo.VENDOR_NVIDIA), SimpleNamespace(vendor_id=0x1002)
    for env in (None, ""):
        if env is None:
            monkeypatch.delenv("SPIRULA_NO_BUFFER_ROBUSTNESS", raising=False)
        else:
            monkeypatch.setenv("SPIRULA_NO_BUFFER_ROBUSTNESS", env)
        assert default_buffer_robustness(nvidia) == "kernels"
        assert default_buffer_robustness(other) is True
    for env, want in (("0", True), ("kernels", "kernels")):
        monkeypatch.setenv("SPIRULA_NO_BUFFER_ROBUSTNESS", env)
        assert default_buffer_robustness(nvidia) == want and default_buffer_robustness(other) == want
    monkeypatch.setenv("SPIRULA_NO_BUFFER_ROBUSTNESS", "1")  # off for every kernel: a finished experiment
    with pytest.raises(UsageError, match="SPIRULA_NO_BUFFER_ROBUSTNESS='1': expected 0 or kernels"):
        default_buffer_robustness(nvidia)


def test_kp_robustness_toggle_changes_nothing_where_the_feature_is_off(device):
    """kp's Manager.set_buffer_robustness_disabled (the "kernels" mode's switch
    before each algorithm) is ignored where VK_EXT_pipeline_robustness was not
    enabled: algorithms created after it still run."""
    if device.buffer_robustness is not True:
        pytest.skip("this session's device compiles without robustness")
    x = np.arange(777, dtype=np.float32)
    device.mgr.set_buffer_robustness_disabled(True)
    try:
        buf = device.pool.alloc("test.toggle", x.shape, np.float32)
        device.upload(buf, x)  # a new algorithm of the staging copy kernel
        np.testing.assert_array_equal(device.readback(buf), x)
    finally:
        device.mgr.set_buffer_robustness_disabled(False)
        device.pool.free(buf)


def test_kernels_say_in_their_shader_whether_they_may_run_without_bounds_checks():
    """`#pragma spirula_no_bounds_checks` (rasterize_bwd: measured faster
    without the driver's buffer robustness) reaches Kernel.no_bounds_checks;
    kernels without it keep the checks in buffer_robustness="kernels"."""
    from spirula.backends.vulkan.kernels import KernelRegistry

    reg = KernelRegistry()
    flagged = {name for name in reg.names() if reg.get(name).no_bounds_checks}
    assert flagged == {"rasterize_bwd"}
