"""The neural-network runtime's layers (spirula/nn/), float64 references of
shaders/nn_linear.comp, nn_matmul.comp, nn_layer_norm.comp, nn_gelu.comp and nn_softmax.comp,
each as torch defines the layer (nn.Linear, torch.matmul, nn.LayerNorm, nn.GELU() with the
erf, softmax over the last axis), and multi-head attention composed from them as
torch.nn.functional.scaled_dot_product_attention computes it. Weights are whatever the
caller passes: the tests pass them exactly and rounded to fp16 (``half``)."""

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
    softmax(q k^T / sqrt(d)) v per head, the heads side by side [T, C], then the projection."""
    T, C = np.shape(x)
    d = C // heads
    qkv = linear(x, w_qkv, b_qkv).reshape(T, 3, heads, d).transpose(1, 2, 0, 3)  # [3, heads, T, d]
    q, k, v = qkv
    p = softmax(matmul(q, k.transpose(0, 2, 1)), 1.0 / math.sqrt(d))
    o = matmul(p, v).transpose(1, 0, 2).reshape(T, C)
    return linear(o, w_proj, b_proj)
