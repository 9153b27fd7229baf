"""loss_fwd and loss_bwd: the loss value and d loss / d colors against the
float64 reference and its central finite differences."""

import numpy as np
import pytest
from reference.loss import loss_terms

from spirula.selftest import gpu_loss, pack_unpack
from spirula.selftest import loss_case as _case


@pytest.mark.parametrize("V,H,W", [(1, 29, 37), (2, 16, 16), (1, 12, 70)])
def test_loss_value_matches_reference(device, V, H, W):
    colors, gt_images = _case(V, H, W, seed=H)
    out, _ = gpu_loss(device, colors, gt_images, image_index=range(1, V + 1))
    ref = loss_terms(colors, np.asarray(pack_unpack(gt_images[1 : V + 1])))
    # float32 window sums of ~121 terms per moment: ~1e-6 relative
    np.testing.assert_allclose(out, [ref["loss"], ref["l1"], ref["ssim"], ref["mse"]], rtol=2e-5, atol=1e-6)


def loss_finite_differences(x, gt, mask=None, h=1e-6):
    """Central differences of the float64 reference loss in every colour of ``x``."""
    fd = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        idx = it.multi_index
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        fd[idx] = (loss_terms(xp, gt, mask=mask)["loss"] - loss_terms(xm, gt, mask=mask)["loss"]) / (2 * h)
    return fd


def test_loss_gradient_matches_finite_differences(device):
    V, H, W = 1, 18, 21
    colors, gt_images = _case(V, H, W, seed=3)
    _, grad = gpu_loss(device, colors, gt_images, image_index=[1])
    gt = pack_unpack(gt_images[1:2])
    x = colors.astype(np.float64)
    fd = loss_finite_differences(x, gt)
    # float32 gradients of a float64 loss: ~1e-6 relative to the largest entry
    # (the L1 sign term is exact away from x == y, which the case avoids)
    assert np.abs(x - gt).min() > 1e-3
    np.testing.assert_allclose(grad, fd, atol=1e-5 * np.abs(fd).max(), rtol=1e-3)


def test_images_without_valid_ssim_windows_use_l1_only(device):
    colors, gt_images = _case(1, 8, 9, seed=5)
    out, grad = gpu_loss(device, colors, gt_images, image_index=[1])
    gt = pack_unpack(gt_images[1:2])
    l1 = np.abs(colors - gt).mean()
    np.testing.assert_allclose(out[:3], [0.8 * l1, l1, 1.0], rtol=1e-5)
    np.testing.assert_allclose(grad, 0.8 * np.sign(colors - gt) / colors.size, rtol=1e-6)


def test_ssim_gradient_stays_finite_where_the_covariance_term_rounds_to_zero(device):
    """SSIM's dS/dmu has s / a2 in it, a2 = 2 cov(x, y) + C2, and s is a
    multiple of a2: in dark, anti-correlated windows a2 can round to exactly
    0 (0 / 0). This image sweeps cov through -C2/2 and, on lavapipe, hits an
    exact zero: the old formula put NaN into the 11x11 window around it (as
    it did in one training run on the H200, then into every splat there)."""
    H = W = 512
    rng = np.random.default_rng(3)
    p = rng.choice([-1.0, 1.0], (1, H, W, 3))
    a = np.linspace(0.02, 0.06, W)[None, None, :, None]
    colors = (0.04 + a * p).astype(np.float32)
    gt_images = np.concatenate([np.zeros((1, H, W, 3)), (5 - 3 * p) / 255.0]).astype(np.float32)
    out, grad = gpu_loss(device, colors, gt_images, image_index=[1])
    assert np.isfinite(out).all()
    assert np.isfinite(grad).all(), "%d non-finite" % (~np.isfinite(grad)).sum()
