"""loss_fwd on CUDA (native_cuda/loss_fwd.cu, hand-written: shared-memory halo passes and
warp sums) against Vulkan: its SSIM derivatives and per-workgroup partial sums (loss_bwd's
inputs; its outputs: tests/test_loss_bwd_parity.py). tests/parity_cases.py says how the
backends are compared."""

import numpy as np
import pytest
from kernel_cases import assert_near
from parity_cases import loss_case, run_loss

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("V,H,W", [(2, 53, 75), (1, 32, 48), (1, 8, 9)], ids=["2views", "tile-aligned", "no-window"])
def test_loss_fwd_matches(backends, V, H, W):
    """The per-pixel SSIM derivatives divide by the window's (co)variances: 1e-4 of their
    largest + 1e-3 relative. The per-workgroup sums add 256 terms in warp order on CUDA and
    in the driver's subgroup order on Vulkan: 1e-5 of the largest + 1e-4 relative."""
    colors, gt, index = loss_case(V, H, W, seed=H * W)
    vk_out, cu_out = (run_loss(dev, colors, gt, index) for dev in backends)
    s = vk_out["ssim_grads"]
    assert_near(cu_out["ssim_grads"], s, 1e-4 * max(np.abs(s).max(), 1e-30), 1e-3, "ssim grads")
    p = vk_out["partials"]
    assert_near(cu_out["partials"], p, 1e-5 * np.abs(p).max(), 1e-4, "loss partials")
    assert (cu_out["partials"][:, 3] == 0).all()
    if H <= 10:
        assert (cu_out["ssim_grads"] == 0).all()


@pytest.mark.parametrize("V,H,W", [(2, 53, 75), (1, 32, 48)], ids=["2views", "tile-aligned"])
def test_masked_loss_fwd_matches(backends, V, H, W):
    """Loss masks (the ground truth's alpha byte 0 drops a pixel): the same tolerances as
    unmasked; on both backends a dropped pixel's SSIM derivatives are not written (0)."""
    from parity_cases import masked_loss_case

    colors, gt, index, keep, masked = masked_loss_case(V, H, W)
    vk_out, cu_out = (run_loss(dev, colors, gt, index, masked=masked) for dev in backends)
    s = vk_out["ssim_grads"]
    assert_near(cu_out["ssim_grads"], s, 1e-4 * max(np.abs(s).max(), 1e-30), 1e-3, "ssim grads")
    drop = ~keep[index]
    for out in (vk_out, cu_out):
        assert not out["ssim_grads"][drop].any()
