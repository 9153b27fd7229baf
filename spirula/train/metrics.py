"""Image quality metrics for evaluation (numpy, off the training path):
PSNR and SSIM with the loss's 11x11 Gaussian window (sigma 1.5, 'valid').

With a loss mask ([H,W] bool, True = keep) both exclude the dropped pixels
as the loss does: PSNR over the kept pixels; SSIM with dropped pixels 0 in
both images, averaged over the kept valid positions."""

from __future__ import annotations

import numpy as np
from scipy.ndimage import correlate1d

_K = np.arange(11) - 5
_W = np.exp(-(_K**2) / (2 * 1.5**2))
_W /= _W.sum()


def psnr(img, gt, mask=None) -> float:
    """[H,W,3] images in [0,1]: 10 log10(1 / MSE) (MSE over the kept pixels of ``mask``)."""
    d2 = (np.asarray(img, np.float64) - np.asarray(gt, np.float64)) ** 2
    if mask is not None:
        d2 = d2[np.asarray(mask, bool)]
        if d2.size == 0:
            return float("nan")
    mse = float(np.mean(d2))
    return float("inf") if mse == 0 else 10.0 * np.log10(1.0 / mse)


def _blur_valid(x):
    x = correlate1d(x, _W, axis=0, mode="constant")[5:-5]
    return correlate1d(x, _W, axis=1, mode="constant")[:, 5:-5]


def ssim(img, gt, mask=None) -> float:
    """Mean SSIM over channels and the valid window positions of [H,W,3] images
    (with ``mask``: the kept positions, dropped pixels 0 in both images)."""
    x = np.asarray(img, np.float64)
    y = np.asarray(gt, np.float64)
    keep = None
    if mask is not None:
        m = np.asarray(mask, bool)
        x, y = x * m[..., None], y * m[..., None]
        keep = m[5:-5, 5:-5]
        if not keep.any():
            return float("nan")
    c1, c2 = 0.01**2, 0.03**2
    vals = []
    for ch in range(x.shape[-1]):
        a, b = x[..., ch], y[..., ch]
        mx, my = _blur_valid(a), _blur_valid(b)
        sxx = _blur_valid(a * a) - mx * mx
        syy = _blur_valid(b * b) - my * my
        sxy = _blur_valid(a * b) - mx * my
        s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
        vals.append(s if keep is None else s[keep])
    return float(np.mean(vals))


def color_corrected(img, gt, mask=None) -> np.ndarray:
    """``img`` [H,W,3] after the least-squares affine colour fit to ``gt`` (a 3x4 matrix on
    [r, g, b, 1], over the kept pixels of ``mask``), clamped to [0, 1]: the colour-corrected
    metrics of BilaRF and PPISP."""
    x = np.asarray(img, np.float64).reshape(-1, 3)
    y = np.asarray(gt, np.float64).reshape(-1, 3)
    keep = np.ones(len(x), bool) if mask is None else np.asarray(mask, bool).reshape(-1)
    a = np.concatenate([x, np.ones((len(x), 1))], 1)
    if keep.sum() < 4:
        return np.clip(np.asarray(img, np.float64), 0, 1)
    m, *_ = np.linalg.lstsq(a[keep], y[keep], rcond=None)
    return np.clip(a @ m, 0, 1).reshape(np.shape(img))


def evaluate_views(scene, indices, render) -> dict:
    """PSNR, SSIM and the colour-corrected PSNR (``psnr_cc``: :func:`color_corrected`) of
    ``render(i)`` ([H,W,3], clamped to [0, 1] here) against each image ``i`` of ``scene``,
    per image and mean."""
    from spirula.progress import track

    per = []
    for i in track(indices, "evaluating", unit="view"):
        f = scene.frames[i]
        img = np.clip(render(i), 0, 1)
        gt, mask = scene.load_image(i), scene.load_mask(i)
        cc = color_corrected(img, gt, mask)
        per.append(dict(image=f.name, psnr=psnr(img, gt, mask), ssim=ssim(img, gt, mask), psnr_cc=psnr(cc, gt, mask)))
    mean = {k: float(np.mean([p[k] for p in per])) if per else float("nan") for k in ("psnr", "ssim", "psnr_cc")}
    return dict(per_image=per, **mean)
