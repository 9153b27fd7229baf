"""SAM 2's image encoder trunk, Hiera, in float64 from the layer references
(spirula/reference/nn.py), as SAM 2's ``sam2/modeling/backbones/hieradet.py`` computes it:
the reference of :mod:`spirula.sam.hiera`. Its blocks come as arguments (the runtime's
``block_specs``: dim, dim_out, heads, q_stride, window), its weights under the checkpoint's
names with ``image_encoder.trunk.`` removed; linear and convolution weights as the caller
passes them (the tests pass them rounded to fp16, as the runtime stores them)."""

from __future__ import annotations

import numpy as np

from spirula.reference import nn as ref


def hiera(image, weights: dict, blocks, ends) -> list:
    """The features at each block index of ``ends`` ([B, H, W, C] channels-last, float64) of
    ``image`` [B, 3, H, W]. ``blocks``: (dim, dim_out, heads, q_stride, window) per block."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    x = ref.conv2d(image, w["patch_embed.proj.weight"], w["patch_embed.proj.bias"], (4, 4), (3, 3))
    x = x.transpose(0, 2, 3, 1)  # [B, H, W, C]
    x = x + ref.hiera_pos_embed(w["pos_embed"][0], w["pos_embed_window"][0], x.shape[1:3])[None]
    outs = []
    for i, (dim, dim_out, heads, q_stride, window) in enumerate(blocks):
        x = _block(x, w, "blocks.%d." % i, dim, dim_out, heads, q_stride, window)
        if i in ends:
            outs.append(x)
    return outs


def _layer_norm(x, w, name):
    return ref.layer_norm(x, w[name + ".weight"], w[name + ".bias"], 1e-6)


def _block(x, w, p, dim, dim_out, heads, q_stride, window):
    """MultiScaleBlock.forward."""
    shortcut = x
    h = _layer_norm(x, w, p + "norm1")
    if dim != dim_out:
        shortcut = ref.linear(h, w[p + "proj.weight"], w[p + "proj.bias"])
        if q_stride:
            shortcut = ref.max_pool2d(shortcut, q_stride)
    attn_in = ref.window_partition(h, window) if window else h
    a = ref.multiscale_attention(
        attn_in, w[p + "attn.qkv.weight"], w[p + "attn.qkv.bias"], w[p + "attn.proj.weight"],
        w[p + "attn.proj.bias"], heads, q_stride,
    )  # fmt: skip
    if window:
        a = ref.window_unpartition(a, window // q_stride if q_stride else window, shortcut.shape[1:3])
    x = shortcut + a
    m = ref.linear(_layer_norm(x, w, p + "norm2"), w[p + "mlp.layers.0.weight"], w[p + "mlp.layers.0.bias"])
    return x + ref.linear(ref.gelu(m), w[p + "mlp.layers.1.weight"], w[p + "mlp.layers.1.bias"])


def fpn_neck(xs, weights: dict, top_down_levels=(2, 3)) -> list:
    """FpnNeck.forward of the trunk's outputs ``xs`` (finest first, channels-last [B, H, W, C]):
    channels-first [B, d_model, H, W] outputs, finest first (spirula/sam/neck.py)."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    n = len(xs) - 1
    out, prev = [None] * len(xs), None
    for i in range(n, -1, -1):
        x = np.asarray(xs[i], np.float64).transpose(0, 3, 1, 2)
        lateral = ref.conv2d(x, w["convs.%d.conv.weight" % (n - i)], w["convs.%d.conv.bias" % (n - i)])
        if i in top_down_levels and prev is not None:
            lateral = lateral + ref.upsample_nearest(prev, lateral.shape[-2:])
        out[i] = prev = lateral
    return out
