"""loss_fwd and loss_bwd: the loss value and d loss / d colors against the
float64 reference and its central finite differences."""

import numpy as np
import pytest
from reference.loss import loss_terms

from spirula.train.loss import LossBuffers, pack_rgba8
from spirula.train.step_params import STEP_PARAMS_WORDS, step_params


def gpu_loss(device, colors, gt_images, image_index, l1_weight=0.8, ssim_weight=0.2):
    V, H, W, _ = colors.shape
    pool = device.pool
    buf_colors = pool.alloc("t.colors", colors.shape, np.float32)
    device.upload(buf_colors, colors.astype(np.float32))
    gt = pool.alloc("t.gt", gt_images.shape[:3], np.uint32)
    device.upload(gt, pack_rgba8(gt_images))
    params = pool.alloc("t.params", (STEP_PARAMS_WORDS,), np.uint32)
    p = step_params(
        image_index=list(image_index) + [0] * (8 - V), l1_weight=l1_weight, ssim_weight=ssim_weight, n_views=V
    )
    device.upload(params, np.frombuffer(p.tobytes(), np.uint32))
    grads = pool.alloc("t.grads", colors.shape, np.float32)
    loss = LossBuffers(device, V, W, H)
    rec = device.recorder("loss")
    loss.record(rec, buf_colors, gt, params, grads)
    rec.finish().run()
    out = device.readback(loss.loss_out), device.readback(grads)
    for b in (buf_colors, gt, params, grads, loss.ssim_grads, loss.partials, loss.loss_out):
        pool.free(b)
    return out


def _case(V, H, W, seed):
    rng = np.random.default_rng(seed)
    gt_images = (rng.integers(0, 256, (V + 1, H, W, 3)) / 255.0).astype(np.float32)
    smooth = np.cumsum(rng.standard_normal((V, H, W, 3)) * 0.05, axis=2)
    colors = np.clip(gt_images[1:] * 0.7 + 0.2 + smooth, 0.01, 0.99)
    gt = pack_unpack(gt_images[1:])
    colors = np.where(np.abs(colors - gt) < 2e-3, colors + 5e-3, colors)  # keep L1 differentiable
    return colors.astype(np.float32), gt_images


@pytest.mark.parametrize("V,H,W", [(1, 29, 37), (2, 16, 16), (1, 12, 70)])
def test_loss_value_matches_reference(device, V, H, W):
    colors, gt_images = _case(V, H, W, seed=H)
    out, _ = gpu_loss(device, colors, gt_images, image_index=range(1, V + 1))
    ref = loss_terms(colors, np.asarray(pack_unpack(gt_images[1 : V + 1])))
    # float32 window sums of ~121 terms per moment: ~1e-6 relative
    np.testing.assert_allclose(out, [ref["loss"], ref["l1"], ref["ssim"], ref["mse"]], rtol=2e-5, atol=1e-6)


def pack_unpack(images):
    """The ground truth exactly as the GPU sees it (8 bits per channel)."""
    return np.clip(np.rint(images * 255), 0, 255) / 255.0


def test_loss_gradient_matches_finite_differences(device):
    V, H, W = 1, 18, 21
    colors, gt_images = _case(V, H, W, seed=3)
    _, grad = gpu_loss(device, colors, gt_images, image_index=[1])
    gt = pack_unpack(gt_images[1:2])
    x = colors.astype(np.float64)
    h = 1e-6
    fd = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        idx = it.multi_index
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        fd[idx] = (loss_terms(xp, gt)["loss"] - loss_terms(xm, gt)["loss"]) / (2 * h)
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
