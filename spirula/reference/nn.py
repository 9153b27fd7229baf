"""The neural-network runtime's layers (spirula/nn/), float64 references of
shaders/nn_linear.comp, nn_matmul.comp, nn_layer_norm.comp, nn_gelu.comp, nn_softmax.comp,
nn_upsample_bilinear.comp, nn_conv2d.comp and nn_conv_transpose2d.comp, each as torch
defines the layer (nn.Linear, torch.matmul, nn.LayerNorm, nn.GELU() with the erf, softmax
over the last axis, F.interpolate's bilinear mode, F.conv2d, F.conv_transpose2d), and
multi-head attention composed from them as torch.nn.functional.scaled_dot_product_attention
computes it. Weights are whatever the caller passes: the tests pass them exactly and rounded
to fp16 (``half``)."""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def half(w) -> np.ndarray:
    """``w`` rounded to fp16 (to nearest, ties to even) and back, as the runtime stores weights."""
    return np.asarray(w, np.float64).astype(np.float16).astype(np.float64)


def linear(x, w, b=None) -> np.ndarray:
    """x [..., in] @ w[out, in]^T + b[out]."""
    y = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T
    return y if b is None else y + np.asarray(b, np.float64)


def matmul(a, b) -> np.ndarray:
    return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))


def layer_norm(x, gamma, beta, eps=1e-5) -> np.ndarray:
    x = np.asarray(x, np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64)


def gelu(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def softmax(x, scale=1.0) -> np.ndarray:
    z = scale * np.asarray(x, np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def multi_head_attention(x, w_qkv, b_qkv, w_proj, b_proj, heads: int) -> np.ndarray:
    """SAM's (and ViT's) self-attention of x [T, C]: qkv = linear(x) as [T, 3, heads, d],
    softmax(q k^T / sqrt(d)) v per head, the heads side by side [T, C], then the projection.
    x [B, T, C]: each of the B sequences attends within itself."""
    if np.ndim(x) == 3:
        return np.stack([multi_head_attention(s, w_qkv, b_qkv, w_proj, b_proj, heads) for s in x])
    T = np.shape(x)[0]
    C = np.shape(w_qkv)[0] // 3  # the output's width (Hiera's stage changes widen it)
    d = C // heads
    qkv = linear(x, w_qkv, b_qkv).reshape(T, 3, heads, d).transpose(1, 2, 0, 3)  # [3, heads, T, d]
    q, k, v = qkv
    p = softmax(matmul(q, k.transpose(0, 2, 1)), 1.0 / math.sqrt(d))
    o = matmul(p, v).transpose(1, 0, 2).reshape(T, C)
    return linear(o, w_proj, b_proj)


def max_pool2d(x, stride: int) -> np.ndarray:
    """nn.MaxPool2d(kernel_size=stride, stride=stride) over the spatial axes of a channels-last
    x [B, H, W, C] (Hiera's do_pool): [B, H // stride, W // stride, C]."""
    x = np.asarray(x, np.float64)
    B, H, W, C = x.shape
    oh, ow = H // stride, W // stride
    return x[:, : oh * stride, : ow * stride].reshape(B, oh, stride, ow, stride, C).max(axis=(2, 4))


def multiscale_attention(x, w_qkv, b_qkv, w_proj, b_proj, heads: int, q_stride: int = 0) -> np.ndarray:
    """Hiera's MultiScaleAttention (SAM 2) of x [B, H, W, C]: qkv = linear(x) as
    [B, H W, 3, heads, d]; with q_stride, q max-pooled over q_stride x q_stride tokens
    (do_pool); softmax(q k^T / sqrt(d)) v per head; [B, H', W', heads d]; the projection."""
    x = np.asarray(x, np.float64)
    B, H, W, _ = x.shape
    qkv = linear(x, w_qkv, b_qkv)
    Co = qkv.shape[-1] // 3
    d = Co // heads
    q, k, v = qkv[..., :Co], qkv[..., Co : 2 * Co], qkv[..., 2 * Co :]
    if q_stride:
        q = max_pool2d(q, q_stride)
    Hq, Wq = q.shape[1:3]

    def split(a):  # [B, h, w, Co] -> [B, heads, h w, d]
        return a.reshape(B, -1, heads, d).transpose(0, 2, 1, 3)

    p = softmax(matmul(split(q), split(k).transpose(0, 1, 3, 2)), 1.0 / math.sqrt(d))
    o = matmul(p, split(v)).transpose(0, 2, 1, 3).reshape(B, Hq, Wq, Co)
    return linear(o, w_proj, b_proj)


def window_partition(x, window: int) -> np.ndarray:
    """Hiera's window_partition (SAM 2): x [B, H, W, C] padded with zeros to multiples of the
    window, cut into [B * nh * nw, window, window, C] (view, permute (0, 1, 3, 2, 4, 5), view)."""
    x = np.asarray(x, np.float64)
    B, H, W, C = x.shape
    nh, nw = -(-H // window), -(-W // window)
    padded = np.zeros((B, nh * window, nw * window, C))
    padded[:, :H, :W] = x
    w = padded.reshape(B, nh, window, nw, window, C).transpose(0, 1, 3, 2, 4, 5)
    return w.reshape(B * nh * nw, window, window, C)


def window_unpartition(windows, window: int, size) -> np.ndarray:
    """Hiera's window_unpartition: [B * nh * nw, window, window, C] back to [B, H, W, C] (size =
    (H, W)), the padding cropped."""
    windows = np.asarray(windows, np.float64)
    H, W = size
    nh, nw = -(-H // window), -(-W // window)
    C = windows.shape[-1]
    B = windows.shape[0] // (nh * nw)
    x = windows.reshape(B, nh, nw, window, window, C).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(B, nh * window, nw * window, C)[:, :H, :W]


def windowed_attention(x, window: int, w_qkv, b_qkv, w_proj, b_proj, heads: int) -> np.ndarray:
    """Hiera's windowed self-attention of x [B, H, W, C]: each window of the zero-padded grid
    attends within itself (padding tokens included, as Hiera's), the grid put back."""
    B, H, W, C = np.shape(x)
    win = window_partition(x, window).reshape(-1, window * window, C)
    out = multi_head_attention(win, w_qkv, b_qkv, w_proj, b_proj, heads)
    return window_unpartition(out.reshape(-1, window, window, C), window, (H, W))


def _source(n_in: int, n_out: int, align_corners: bool) -> np.ndarray:
    """[n_out] float64: each output index's source coordinate (torch's
    area_pixel_compute_source_index for the linear modes, the size given)."""
    d = np.arange(n_out, dtype=np.float64)
    if align_corners:
        return d * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    return np.maximum((d + 0.5) * (n_in / n_out) - 0.5, 0.0)


def upsample_bilinear(x, size, align_corners=False) -> np.ndarray:
    """F.interpolate(x, size=size, mode="bilinear", align_corners=align_corners) over the
    last two axes of x (no antialiasing)."""
    x = np.asarray(x, np.float64)
    (h, w), (oh, ow) = x.shape[-2:], size
    sy, sx = _source(h, oh, align_corners), _source(w, ow, align_corners)
    y0, x0 = np.minimum(sy.astype(np.int64), h - 1), np.minimum(sx.astype(np.int64), w - 1)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    ly, lx = (sy - y0)[:, None], (sx - x0)[None, :]
    top = (1 - lx) * x[..., y0[:, None], x0[None, :]] + lx * x[..., y0[:, None], x1[None, :]]
    bottom = (1 - lx) * x[..., y1[:, None], x0[None, :]] + lx * x[..., y1[:, None], x1[None, :]]
    return (1 - ly) * top + ly * bottom


def upsample_nearest(x, size) -> np.ndarray:
    """F.interpolate(x, size=size, mode="nearest") over the last two axes: source index
    floor(d in / out) (torch's legacy nearest), clamped to the last."""
    x = np.asarray(x, np.float64)
    (h, w), (oh, ow) = x.shape[-2:], size
    # the product in f32, as torch's nearest_idx (and the kernel) take it
    rows = np.minimum(
        np.floor(np.arange(oh, dtype=np.float32) * (np.float32(h) / np.float32(oh))).astype(np.int64), h - 1
    )
    cols = np.minimum(
        np.floor(np.arange(ow, dtype=np.float32) * (np.float32(w) / np.float32(ow))).astype(np.int64), w - 1
    )
    return x[..., rows[:, None], cols[None, :]]


def _cubic_weights(t) -> np.ndarray:
    """[..., 4] Keys' cubic convolution weights (A = -0.75, torch's) of the taps at floor - 1 ..
    floor + 2 for the fraction t."""
    A = -0.75

    def near(x):  # |x| <= 1
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], -1)


def _cubic_source(n_in: int, n_out: int, align_corners: bool) -> np.ndarray:
    d = np.arange(n_out, dtype=np.float64)
    if align_corners:
        return d * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    return (d + 0.5) * (n_in / n_out) - 0.5  # not clamped at 0 (torch's cubic = true)


def upsample_bicubic(x, size, align_corners=False) -> np.ndarray:
    """F.interpolate(x, size=size, mode="bicubic", align_corners=align_corners) over the last
    two axes of x (no antialiasing): separable Keys cubic (A = -0.75) over the 4 x 4 taps from
    floor(s) - 1, each index clamped into the image."""
    x = np.asarray(x, np.float64)
    (h, w), (oh, ow) = x.shape[-2:], size

    def axis(n_in, n_out):  # [n_out, n_in]: the resampling matrix along one axis
        s = _cubic_source(n_in, n_out, align_corners)
        f = np.floor(s)
        m = np.zeros((n_out, n_in))
        for k, wk in enumerate(np.moveaxis(_cubic_weights(s - f), -1, 0)):
            np.add.at(m, (np.arange(n_out), np.clip(f.astype(np.int64) - 1 + k, 0, n_in - 1)), wk)
        return m

    return np.einsum("ih,...hw,jw->...ij", axis(h, oh), x, axis(w, ow))


def add(a, b) -> np.ndarray:
    """nn_add's a + b with b repeated over a's [planes, rows, cols] (b's sizes dividing a's),
    rounded to float32 as one f32 add is: the kernel is exact against it."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    reps = [n // m for n, m in zip(a.shape, b.shape)]
    return (a + np.tile(b, reps)).astype(np.float64)


def conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), groups=1) -> np.ndarray:
    """F.conv2d(x [N, C, H, W], w [O, C / groups, kh, kw], b, stride, padding, groups), zero
    padding, dilation 1."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    (sy, sx), (py, px) = stride, padding
    n, c, h, wd = x.shape
    o, cin, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * py, wd + 2 * px))
    xp[:, :, py : py + h, px : px + wd] = x
    oh, ow = (h + 2 * py - kh) // sy + 1, (wd + 2 * px - kw) // sx + 1
    # windows[n, c, i, j, u, v] = xp[n, c, i sy + u, j sx + v]
    windows = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::sy, ::sx][:, :, :oh, :ow]
    per = o // groups
    y = np.concatenate(
        [
            np.einsum("ncijuv,ocuv->noij", windows[:, g * cin : (g + 1) * cin], w[g * per : (g + 1) * per])
            for g in range(groups)
        ],
        axis=1,
    )
    return y if b is None else y + np.asarray(b, np.float64)[None, :, None, None]


def conv_transpose2d(x, w, b=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1) -> np.ndarray:
    """F.conv_transpose2d(x [N, C, H, W], w [C, O / groups, kh, kw], ...), dilation 1, as
    the scatter it is defined by: each input pixel adds x w into the output at (i sy - py +
    u, j sx - px + v)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    (sy, sx), (py, px), (ay, ax) = stride, padding, output_padding
    n, c, h, wd = x.shape
    _, per, kh, kw = w.shape
    cin = c // groups
    full = np.zeros((n, per * groups, (h - 1) * sy + kh + ay, (wd - 1) * sx + kw + ax))
    for g in range(groups):
        xs, ws = x[:, g * cin : (g + 1) * cin], w[g * cin : (g + 1) * cin]
        for u in range(kh):
            for v in range(kw):
                full[:, g * per : (g + 1) * per, u : u + (h - 1) * sy + 1 : sy, v : v + (wd - 1) * sx + 1 : sx] += (
                    np.einsum("ncij,co->noij", xs, ws[:, :, u, v])
                )
    y = full[:, :, py : full.shape[2] - py, px : full.shape[3] - px]
    return y if b is None else y + np.asarray(b, np.float64)[None, :, None, None]


# ---- error bounds of the kernels against these references ---------------------------------
# First-order float error analysis of the kernels' f32 arithmetic (u = 2^-24, the unit
# roundoff; an ulp is at most 2u of a value; Vulkan's precision rules: exp within 3 + 2|x|
# ulp, inversesqrt within 2 ulp, division within 2.5 ulp; CUDA's expf, rsqrtf and division
# without fast maths are within these), per output element. tests/test_nn.py and the
# selftest hold the kernels to them.

U = 2.0**-24
HALF_REL = 2.0**-11  # fp16 rounding to nearest: relative, for |w| >= 2^-14 (normal fp16)
HALF_ABS = 2.0**-25  # ... absolute, below (subnormal fp16 spacing 2^-24, half of it)
ERF_AS = 1.5e-7  # Abramowitz & Stegun 7.1.26's |error|
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
ERF_P = 0.3275911


def gamma(n) -> np.ndarray:
    """n u / (1 - n u): the relative bound of an n-term sum or product in f32 (Higham 3.1)."""
    n = np.asarray(n, np.float64)
    return n * U / (1.0 - n * U)


def linear_bound(x, w, b=None, exact_weights=False) -> np.ndarray:
    """nn_linear against linear(x, half(w), b): the dot product of K terms and the bias, an
    f32 sum of K + 1 terms in order: gamma(K + 1) sum |x_i w_i| + |b|. Against linear(x, w, b)
    (``exact_weights``) each weight also moved by its fp16 rounding: 2^-11 |w| (or 2^-25
    below 2^-14), through |x|."""
    x, w = np.abs(np.asarray(x, np.float64)), np.asarray(w, np.float64)
    k = x.shape[-1]
    bias = 0.0 if b is None else np.abs(np.asarray(b, np.float64))
    bound = gamma(k + 1) * (x @ np.abs(half(w)).T + bias)
    if exact_weights:
        bound = bound + x @ np.maximum(HALF_REL * np.abs(w), HALF_ABS).T
    return bound


def matmul_bound(a, b) -> np.ndarray:
    """nn_matmul: a K-term f32 dot product, gamma(K) |a| |b|."""
    a, b = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
    return gamma(a.shape[-1]) * np.matmul(a, b)


def layer_norm_bound(x, gamma_, beta, eps=1e-5) -> np.ndarray:
    """nn_layer_norm, width C: the mean's error e = (C + 1) u mean|x| (a C-term sum, then a
    division); the variance's absolute error (C + 3) u var + e^2 (the squared differences'
    sum, with the mean off by e: C e^2 / C), plus u of var + eps for the add, relative to
    var + eps = s^2: dv; inversesqrt's relative error dv / 2 + 2 ulp (4u). Then
    y = ((x - mean) inv) gamma + beta, each step one rounding: |dy| <= |gamma| / s (e + |d| (dv / 2
    + 7u)) + u (|y| + |beta|), d = x - mean."""
    x = np.asarray(x, np.float64)
    C = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    d = x - mean
    var = (d**2).mean(-1, keepdims=True)
    s2 = var + eps
    e = (C + 1) * U * np.abs(x).mean(-1, keepdims=True)
    dv = ((C + 3) * U * var + e**2) / s2 + U
    y = layer_norm(x, gamma_, beta, eps)
    g = np.abs(np.asarray(gamma_, np.float64))
    return g / np.sqrt(s2) * (e + np.abs(d) * (dv / 2 + 7 * U)) + U * (np.abs(y) + np.abs(np.asarray(beta, np.float64)))


def gelu_bound(x) -> np.ndarray:
    """nn_gelu with A&S 7.1.26's erf: z = |x| 0.70710678 (the constant within 1.2e-9 of
    1/sqrt(2), then two roundings: dz <= 3u z, moving erf by 2/sqrt(pi) e^(-z^2) dz);
    t = 1 / (1 + p z) (p's rounding, z's, the product, the add, the division: dt <= 11u t);
    the polynomial P = sum a_i t^i by Horner (ten roundings and the coefficients' own: 11u
    sum |a_i| t^i, plus sum i |a_i| t^i dt); E = exp(-z^2) (z^2 rounded and z off by 3u:
    7u z^2 in the argument; exp within (3 + 2 z^2) ulp): 6u + 11u z^2 relative; the product
    and 1 - P E one rounding each. erf's error: 1.5e-7 + E (11u sum |a_i| t^i + 11u sum i |a_i|
    t^i) + P E (6u + 11u z^2 + u) + u + the z term; gelu = 0.5 x (1 +- erf): 0.5 |x| (that +
    u (1 + erf)) + u |gelu| (the product)."""
    x = np.asarray(x, np.float64)
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + ERF_P * z)
    terms = np.stack([abs(a) * t ** (i + 1) for i, a in enumerate(ERF_A)])
    s_abs = terms.sum(0)
    s_i = sum((i + 1) * terms[i] for i in range(5))
    E = np.exp(-(z**2))
    P = np.abs(sum(a * t ** (i + 1) for i, a in enumerate(ERF_A)))
    d_z = 2.0 / math.sqrt(math.pi) * E * (3 * U * z + 1.2e-9 * z)
    d_erf = ERF_AS + E * (11 * U * s_abs + 11 * U * s_i) + P * E * (7 * U + 11 * U * z**2) + U + d_z
    g = gelu(x)
    return 0.5 * np.abs(x) * (d_erf + 2 * U) + U * np.abs(g)


def softmax_bound(x, scale=1.0) -> np.ndarray:
    """nn_softmax: a_j = fl(fl(s x_j) - m): off by u |s x_j| + u |a_j| (m's own rounding is
    common to the row and cancels in the ratio); exp(a_j) within (3 + 2 |a_j|) ulp: each
    e_j relative eps_j = u |s x_j| + u |a_j| + (6 + 4 |a_j|) u; the C-term sum adds
    gamma(C - 1) to the largest eps_k; 1 / sum 2.5 ulp (5u), the product u:
    |dy_j| <= y_j (eps_j + max eps_k + gamma(C - 1) + 6u)."""
    z = scale * np.asarray(x, np.float64)
    a = np.abs(z - z.max(-1, keepdims=True))
    eps = U * np.abs(z) + U * a + (6 + 4 * a) * U
    C = z.shape[-1]
    y = softmax(x, scale)
    return y * (eps + eps.max(-1, keepdims=True) + gamma(C - 1) + 6 * U)


def multi_head_attention_bound(x, w_qkv, b_qkv, w_proj, b_proj, heads: int) -> np.ndarray:
    """The composed layer against multi_head_attention(x, half(w_qkv), ..., half(w_proj), ...):
    each stage's own bound (above) plus its inputs' bounds carried through it to first order:
    a product's |da| |b| + |a| |db|; softmax's Jacobian dy_j = y_j (dz_j - sum_k y_k dz_k),
    so |dy_j| <= y_j c (|ds_j| + sum_k y_k |ds_k|) for scores s scaled by c. x [B, T, C]: each
    sequence's own."""
    x = np.asarray(x, np.float64)
    if x.ndim == 3:
        return np.stack([multi_head_attention_bound(s, w_qkv, b_qkv, w_proj, b_proj, heads) for s in x])
    T, C = x.shape[0], np.shape(w_qkv)[0] // 3
    d = C // heads
    c = 1.0 / math.sqrt(d)
    w1, w2 = half(w_qkv), half(w_proj)

    def split(a):  # [T, 3C] -> q, k, v each [heads, T, d]
        return a.reshape(T, 3, heads, d).transpose(1, 2, 0, 3)

    qkv = linear(x, w1, b_qkv)
    e_qkv = linear_bound(x, w_qkv, b_qkv)
    q, k, v = split(qkv)
    eq, ek, ev = split(e_qkv)
    s = matmul(q, k.transpose(0, 2, 1))
    e_s = matmul_bound(q, k.transpose(0, 2, 1)) + matmul(eq, np.abs(k).transpose(0, 2, 1))
    e_s = e_s + matmul(np.abs(q), ek.transpose(0, 2, 1))
    p = softmax(s, c)
    e_p = softmax_bound(s, c) + p * c * (e_s + (p * e_s).sum(-1, keepdims=True))
    o = matmul(p, v)
    e_o = matmul_bound(p, v) + matmul(e_p, np.abs(v)) + matmul(p, ev)
    o, e_o = (a.transpose(1, 0, 2).reshape(T, C) for a in (o, e_o))
    return linear_bound(o, w_proj, b_proj) + e_o @ np.abs(w2).T


def upsample_bilinear_bound(x, size, align_corners=False) -> np.ndarray:
    """nn_upsample_bilinear: each source coordinate s is f32 arithmetic on the index (a
    division within 2.5 ulp, a product, a difference: |ds| <= 9u (|s| + 1)), and the output
    moves with it by at most 2M |ds| per axis (M: the plane's largest |x|; the lerps are
    continuous across a cell's edge, where the truncation may land on either side); the
    three lerps round within 9u M. Per output element: M (2 |dsy| + 2 |dsx| + 9u)."""
    x = np.abs(np.asarray(x, np.float64))
    (h, w), (oh, ow) = x.shape[-2:], size
    m = x.reshape(x.shape[:-2] + (-1,)).max(-1)[..., None, None]
    dsy = 9 * U * (_source(h, oh, align_corners) + 1)[:, None]
    dsx = 9 * U * (_source(w, ow, align_corners) + 1)[None, :]
    return m * (2 * dsy + 2 * dsx + 9 * U)


def conv2d_bound(x, w, b=None, stride=(1, 1), padding=(0, 0), groups=1) -> np.ndarray:
    """nn_conv2d against conv2d(x, half(w), b, ...): as nn_linear's, a sum of at most
    K + 1 = C / groups kh kw + 1 terms in order: gamma(K + 1) (sum |x w| + |b|), the sum of
    |x w| being the convolution of |x| with |half(w)|."""
    w16 = np.abs(half(w))
    k = w16.shape[1] * w16.shape[2] * w16.shape[3]
    bias = None if b is None else np.abs(np.asarray(b, np.float64))
    return gamma(k + 1) * conv2d(np.abs(np.asarray(x, np.float64)), w16, bias, stride, padding, groups)


def conv_transpose2d_bound(x, w, b=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1):
    """nn_conv_transpose2d against conv_transpose2d(x, half(w), ...): a sum of at most K + 1 =
    C / groups kh kw + 1 terms in order, gamma(K + 1) (sum |x w| + |b|)."""
    w16 = np.abs(half(w))
    k = w16.shape[0] // groups * w16.shape[2] * w16.shape[3]
    bias = None if b is None else np.abs(np.asarray(b, np.float64))
    x = np.abs(np.asarray(x, np.float64))
    return gamma(k + 1) * conv_transpose2d(x, w16, bias, stride, padding, output_padding, groups)


def windowed_attention_bound(x, window: int, w_qkv, b_qkv, w_proj, b_proj, heads: int) -> np.ndarray:
    """windowed_attention's: each window's multi_head_attention_bound (the partition is exact)."""
    B, H, W, C = np.shape(x)
    win = window_partition(x, window).reshape(-1, window * window, C)
    e = multi_head_attention_bound(win, w_qkv, b_qkv, w_proj, b_proj, heads)
    return window_unpartition(e.reshape(-1, window, window, C), window, (H, W))


def multiscale_attention_bound(x, w_qkv, b_qkv, w_proj, b_proj, heads: int, q_stride: int = 0) -> np.ndarray:
    """multiscale_attention's against multiscale_attention(x, half(w_qkv), ..., half(w_proj),
    ...), composed as multi_head_attention_bound's; the max pool is exact on its inputs and
    moves each by at most the largest bound in its window (|max(a + e) - max(a)| <= max |e|)."""
    x = np.asarray(x, np.float64)
    B, H, W, _ = x.shape
    w1, w2 = half(w_qkv), half(w_proj)
    qkv, e_qkv = linear(x, w1, b_qkv), linear_bound(x, w_qkv, b_qkv)
    Co = qkv.shape[-1] // 3
    d = Co // heads
    c = 1.0 / math.sqrt(d)
    q, k, v = qkv[..., :Co], qkv[..., Co : 2 * Co], qkv[..., 2 * Co :]
    eq, ek, ev = e_qkv[..., :Co], e_qkv[..., Co : 2 * Co], e_qkv[..., 2 * Co :]
    if q_stride:
        q, eq = max_pool2d(q, q_stride), max_pool2d(eq, q_stride)
    Hq, Wq = q.shape[1:3]

    def split(a):
        return a.reshape(B, -1, heads, d).transpose(0, 2, 1, 3)

    q, k, v, eq, ek, ev = (split(a) for a in (q, k, v, eq, ek, ev))
    kt, ekt = k.transpose(0, 1, 3, 2), ek.transpose(0, 1, 3, 2)
    s = matmul(q, kt)
    e_s = matmul_bound(q, kt) + matmul(eq, np.abs(kt)) + matmul(np.abs(q), ekt)
    p = softmax(s, c)
    e_p = softmax_bound(s, c) + p * c * (e_s + (p * e_s).sum(-1, keepdims=True))
    o = matmul(p, v)
    e_o = matmul_bound(p, v) + matmul(e_p, np.abs(v)) + matmul(p, ev)
    o, e_o = (a.transpose(0, 2, 1, 3).reshape(B, Hq, Wq, Co) for a in (o, e_o))
    return linear_bound(o, w_proj, b_proj) + e_o @ np.abs(w2).T


def upsample_bicubic_bound(x, size, align_corners=False) -> np.ndarray:
    """nn_upsample_bicubic. The source coordinate s = (d + 0.5) (in / out) - 0.5 takes three f32
    roundings (|ds| <= 3 u (n_in + 1), u = 2^-24), which move each tap weight by at most the
    Keys kernel's largest slope (1.35 for A = -0.75; 1.5 here) times |ds| (the interpolant is
    continuous, so a floor that flips changes nothing more); each weight's own f32 evaluation
    is ~7 operations on values below 8: 64 u. The products and the two 4-term sums: gamma(10)
    of sum |w_y| |w_x| |x|; the weights' errors: 4 dw times the other axis's sum of |w|, times
    max |x| of the plane."""
    x = np.asarray(x, np.float64)
    (h, w), (oh, ow) = x.shape[-2:], size
    u = 2.0**-24

    def axis(n_in, n_out):  # the |weights| matrix and one weight's error along an axis
        s = _cubic_source(n_in, n_out, align_corners)
        f = np.floor(s)
        m = np.zeros((n_out, n_in))
        for k, wk in enumerate(np.moveaxis(np.abs(_cubic_weights(s - f)), -1, 0)):
            np.add.at(m, (np.arange(n_out), np.clip(f.astype(np.int64) - 1 + k, 0, n_in - 1)), wk)
        return m, 1.5 * 3 * u * (n_in + 1) + 64 * u

    (my, dwy), (mx, dwx) = axis(h, oh), axis(w, ow)
    ax = np.abs(x)
    weighted = np.einsum("ih,...hw,jw->...ij", my, ax, mx)
    amax = ax.max(axis=(-2, -1), keepdims=True)
    sy, sx = my.sum(1)[:, None], mx.sum(1)[None, :]  # [oh, 1], [1, ow]
    taps = (4 * dwy * sx + 4 * dwx * sy + 16 * dwy * dwx) * amax
    return taps + gamma(10) * weighted


def hiera_pos_embed(pos_embed, window_embed, size) -> np.ndarray:
    """Hiera's _get_pos_embed (SAM 2) without its batch axis: pos_embed [C, h, w] resized
    bicubically to size (H, W), plus window_embed [C, w0, w0] tiled, permuted to [H, W, C]."""
    H, W = size
    w = np.asarray(window_embed, np.float64)
    p = upsample_bicubic(pos_embed, (H, W)) + np.tile(w, (1, H // w.shape[1], W // w.shape[2]))
    return p.transpose(1, 2, 0)


def hiera_pos_embed_bound(pos_embed, window_embed, size) -> np.ndarray:
    """hiera_pos_embed's: the resize's bound e, then the f32 add's rounding of the sum,
    e + u (|exact sum| + e), u = 2^-24 (the transpose is a copy)."""
    e = upsample_bicubic_bound(pos_embed, size).transpose(1, 2, 0)
    return e + 2.0**-24 * (np.abs(hiera_pos_embed(pos_embed, window_embed, size)) + e)


def pos_sine(channels: int, size, temperature: float = 10000.0) -> np.ndarray:
    """SAM 2's PositionEmbeddingSine(channels, normalize=True, scale 2 pi) of an H x W grid,
    [channels, H, W]: rows in the first half, columns in the second; within each half, the
    k-th channel sin (even k) or cos (odd k) of t / temperature^(2 floor(k / 2) / half),
    t = (index + 1) / (n + 1e-6) 2 pi."""
    H, W = size
    half = channels // 2
    k = np.arange(half)
    dim_t = temperature ** (2 * (k // 2) / half)
    ty = np.arange(1, H + 1) / (H + 1e-6) * 2 * np.pi
    tx = np.arange(1, W + 1) / (W + 1e-6) * 2 * np.pi
    vy = ty[None, :, None] / dim_t[:, None, None] * np.ones((1, 1, W))
    vx = tx[None, None, :] / dim_t[:, None, None] * np.ones((1, H, 1))
    even = (k % 2 == 0)[:, None, None]
    return np.concatenate([np.where(even, np.sin(vy), np.cos(vy)), np.where(even, np.sin(vx), np.cos(vx))])


def pos_sine_bound(channels: int, size, temperature: float = 10000.0) -> np.ndarray:
    """nn_pos_sine: t takes three f32 roundings (3 u relative, u = 2^-24) and the 2 pi scale's
    own; 1 / dim_t = exp2(-e log2 T) carries log2 T's f32 rounding times e (<= 2: 2 u of
    |e log2 T|, absolute in the exponent) and exp2's error, 3 + 2 |x| ulp by Vulkan's
    precision rules (|x| = e log2 T), so v is off by |v| (5 u + (3 + 2 |x|) u + 2 u |x| ln 2);
    the kernel moves v > pi down by 2 pi (f32: 2 u of it) into [-pi, pi], where Vulkan bounds
    sin and cos to 2^-11 absolute: that term dominates (lavapipe's and NVIDIA's are far
    closer; a device may use all of it)."""
    H, W = size
    half = channels // 2
    u = 2.0**-24
    e = 2 * (np.arange(half) // 2) / half
    x = e * np.log2(temperature)
    v = pos_sine(channels, size, temperature)  # only its shape
    ty = np.arange(1, H + 1) / H * 2 * np.pi
    tx = np.arange(1, W + 1) / W * 2 * np.pi
    rel = 5 * u + (3 + 2 * x) * u + 2 * u * x * np.log(2)  # [half]
    vy = (ty[None, :, None] * 2.0 ** -x[:, None, None]) * np.ones((1, 1, W))
    vx = (tx[None, None, :] * 2.0 ** -x[:, None, None]) * np.ones((1, H, 1))
    dv = np.concatenate([vy * rel[:, None, None], vx * rel[:, None, None]])
    return np.broadcast_to(dv + 4 * u * np.pi + 2.0**-11, v.shape).copy()
