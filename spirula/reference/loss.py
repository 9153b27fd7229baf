"""The training loss, float64 reference of kernels loss_fwd and loss_bwd.

loss = l1_weight * mean|x - y| + ssim_weight * (1 - mean SSIM(x, y)) over all
views, pixels and channels; SSIM with an 11x11 Gaussian window (sigma 1.5),
C1 = 0.01^2, C2 = 0.03^2, 'valid' positions only (the window inside the
image), as fused_ssim(padding='valid'). Written with a full 2D window
(no separable passes), so it checks the kernels' separable form too.

With a mask ([V,H,W] bool, True = keep): dropped pixels are 0 in x and y
(so the loss does not depend on their values: their gradient is 0), L1 and
MSE are means over the kept pixels, SSIM the mean over the kept valid
positions (windows around a kept centre still reach dropped neighbours, as 0).
"""

from __future__ import annotations

import numpy as np

_K = np.arange(11) - 5
_G = np.exp(-(_K**2) / (2 * 1.5**2))
WINDOW = np.outer(_G, _G) / np.outer(_G, _G).sum()


def _window_means(a):
    """Window-weighted mean at every valid position of [H,W] (float64)."""
    H, W = a.shape
    out = np.zeros((H - 10, W - 10))
    for dy in range(11):
        for dx in range(11):
            out += WINDOW[dy, dx] * a[dy : dy + H - 10, dx : dx + W - 10]
    return out


def ssim_map(x, y):
    """SSIM at every valid position of one channel, [H-10, W-10]."""
    c1, c2 = 0.01**2, 0.03**2
    mx, my = _window_means(x), _window_means(y)
    sxx = _window_means(x * x) - mx * mx
    syy = _window_means(y * y) - my * my
    sxy = _window_means(x * y) - mx * my
    return ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))


def loss_terms(colors, gt, l1_weight=0.8, ssim_weight=0.2, mask=None) -> dict:
    """colors, gt [V,H,W,3], mask [V,H,W] bool or None -> dict(loss, l1, ssim, mse)."""
    x = np.asarray(colors, np.float64)
    y = np.asarray(gt, np.float64)
    m = np.ones(x.shape[:3], bool) if mask is None else np.asarray(mask, bool)
    x = np.where(m[..., None], x, 0.0)
    y = np.where(m[..., None], y, 0.0)
    n = 3 * m.sum()
    l1 = np.abs(x - y).sum() / n if n else 0.0
    mse = ((x - y) ** 2).sum() / n if n else 0.0
    H, W = m.shape[1:]
    vals = [ssim_map(x[v, ..., c], y[v, ..., c])[m[v, 5 : H - 5, 5 : W - 5]] for v in range(len(x)) for c in range(3)]
    vals = np.concatenate(vals) if vals else np.zeros(0)
    ssim = vals.mean() if vals.size else 1.0
    return dict(loss=l1_weight * l1 + ssim_weight * (1 - ssim), l1=l1, ssim=ssim, mse=mse)
