"""Image quality metrics for evaluation (numpy, off the training path):
PSNR and SSIM with the loss's 11x11 Gaussian window (sigma 1.5, 'valid')."""

from __future__ import annotations

import numpy as np
from scipy.ndimage import correlate1d

_K = np.arange(11) - 5
_W = np.exp(-(_K**2) / (2 * 1.5**2))
_W /= _W.sum()


def psnr(img, gt) -> float:
    """[H,W,3] images in [0,1]: 10 log10(1 / MSE)."""
    mse = float(np.mean((np.asarray(img, np.float64) - np.asarray(gt, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(1.0 / mse)


def _blur_valid(x):
    x = correlate1d(x, _W, axis=0, mode="constant")[5:-5]
    return correlate1d(x, _W, axis=1, mode="constant")[:, 5:-5]


def ssim(img, gt) -> float:
    """Mean SSIM over channels and the valid window positions of [H,W,3] images."""
    x = np.asarray(img, np.float64)
    y = np.asarray(gt, np.float64)
    c1, c2 = 0.01**2, 0.03**2
    vals = []
    for ch in range(x.shape[-1]):
        a, b = x[..., ch], y[..., ch]
        mx, my = _blur_valid(a), _blur_valid(b)
        sxx = _blur_valid(a * a) - mx * mx
        syy = _blur_valid(b * b) - my * my
        sxy = _blur_valid(a * b) - mx * my
        vals.append(((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2)))
    return float(np.mean(vals))
