"""loss_bwd on CUDA (native_cuda/loss_bwd.cu, hand-written: shared-memory halo passes and
warp sums) against Vulkan: the gradient of the loss and the loss values, from the same
images (loss_fwd's outputs: tests/test_loss_fwd_parity.py). tests/parity_cases.py says how
the backends are compared."""

import numpy as np
import pytest
from kernel_cases import assert_near
from parity_cases import loss_case, masked_loss_case, run_loss

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("V,H,W", [(2, 53, 75), (1, 32, 48), (1, 8, 9)], ids=["2views", "tile-aligned", "no-window"])
def test_loss_bwd_matches(backends, V, H, W):
    """The loss and its gradient. Tolerances: tests/test_loss.py holds the Vulkan kernels to
    the float64 loss within rtol 2e-5 (values) and its finite differences within
    1e-5 max|g| + 1e-3|g| (gradient); two backends within twice that of each other."""
    colors, gt, index = loss_case(V, H, W, seed=H * W)
    vk_out, cu_out = (run_loss(dev, colors, gt, index) for dev in backends)
    assert_near(cu_out["loss_out"], vk_out["loss_out"], 1e-6, 5e-5, "loss values")
    g = vk_out["grad_colors"]
    assert_near(cu_out["grad_colors"], g, 2e-5 * np.abs(g).max(), 2e-3, "grad colors")
    # sanity: the loss is the one of these images (view v against image V - v)
    y = (gt[1:][::-1][..., None] >> np.array([0, 8, 16], np.uint32) & 255) / 255.0
    l1 = np.abs(colors - y).mean()
    assert abs(cu_out["loss_out"][1] - l1) < 1e-4 * l1
    if H <= 10:
        assert cu_out["loss_out"][2] == 1.0


@pytest.mark.parametrize("V,H,W", [(2, 53, 75), (1, 32, 48)], ids=["2views", "tile-aligned"])
def test_masked_loss_bwd_matches(backends, V, H, W):
    """Loss masks: the same tolerances as unmasked; on both backends a dropped pixel's
    gradient is exactly 0, and L1 is over the kept pixels."""
    colors, gt, index, keep, masked = masked_loss_case(V, H, W)
    vk_out, cu_out = (run_loss(dev, colors, gt, index, masked=masked) for dev in backends)
    assert_near(cu_out["loss_out"], vk_out["loss_out"], 1e-6, 5e-5, "loss values")
    g = vk_out["grad_colors"]
    assert_near(cu_out["grad_colors"], g, 2e-5 * np.abs(g).max(), 2e-3, "grad colors")
    drop = ~keep[index]
    for out in (vk_out, cu_out):
        assert not out["grad_colors"][drop].any()
    # sanity: L1 over the kept pixels only
    y = (gt[index][..., None] >> np.array([0, 8, 16], np.uint32) & 255) / 255.0
    l1 = np.abs(colors - y)[~drop].mean()
    assert abs(cu_out["loss_out"][1] - l1) < 1e-4 * l1
