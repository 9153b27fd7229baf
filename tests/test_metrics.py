"""Evaluation metrics (spirula/train/metrics.py): SSIM against the loss
reference's full 2D window (spirula/reference/loss.py, an independent,
non-separable implementation), PSNR against its formula."""

import numpy as np
import pytest
from reference.loss import ssim_map

from spirula.train.metrics import psnr, ssim


def _images(h, w, seed):
    rng = np.random.default_rng(seed)
    gt = rng.random((h, w, 3)).astype(np.float32)
    img = np.clip(gt + rng.normal(0, 0.1, gt.shape) + np.linspace(0, 0.2, w)[None, :, None], 0, 1)
    return img.astype(np.float32), gt


@pytest.mark.parametrize("h,w", [(11, 11), (29, 37), (48, 64)])
def test_ssim_matches_the_reference_window(h, w):
    img, gt = _images(h, w, seed=h)
    want = np.mean([ssim_map(img[..., c].astype(np.float64), gt[..., c].astype(np.float64)) for c in range(3)])
    # both float64; separable vs full window sums differ by rounding only
    assert ssim(img, gt) == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert ssim(img, gt) < 0.99


def test_ssim_of_constant_images_is_the_luminance_term():
    a, b = 0.3, 0.7
    x, y = np.full((20, 20, 3), a), np.full((20, 20, 3), b)
    c1 = 0.01**2
    assert ssim(x, y) == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-12)


def test_ssim_is_symmetric():
    img, gt = _images(30, 25, seed=1)
    assert ssim(img, gt) == pytest.approx(ssim(gt, img), rel=1e-12)


def test_identical_images_give_ssim_one_and_psnr_inf():
    img, _ = _images(24, 31, seed=2)
    assert ssim(img, img) == pytest.approx(1.0, abs=1e-12)
    assert psnr(img, img) == float("inf")


def test_psnr_is_ten_log10_of_one_over_mse():
    img, gt = _images(20, 30, seed=3)
    mse = np.mean((img.astype(np.float64) - gt) ** 2)
    assert psnr(img, gt) == pytest.approx(10 * np.log10(1 / mse), rel=1e-12)
    # a uniform error of 0.1: MSE 0.01, 20 dB
    gt = np.full((8, 8, 3), 0.5)
    assert psnr(gt + 0.1, gt) == pytest.approx(20.0, rel=1e-9)
    assert psnr(gt - 0.01, gt) == pytest.approx(40.0, rel=1e-9)
