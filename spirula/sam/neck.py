"""SAM 2's FPN neck on the nn runtime: the trunk's features to d_model channels, top-down.

As ``sam2/modeling/backbones/image_encoder.py``'s FpnNeck (read at facebookresearch/sam2
618a929): each level's 1x1 convolution (``convs.K.conv``, K counted from the coarsest level:
the trunk's channel list is reversed), and from the coarsest level down, at the levels of
``top_down_levels`` (SAM 2.1: [2, 3]), the coarser level's output upsampled 2x (nearest)
added to it. A 1x1 convolution of a channels-last grid is a linear layer over its channels,
so the trunk's outputs need no layout change before it; the outputs are channels-first
[B, d_model, H, W], as SAM 2's. Weights under the checkpoint's names with
``image_encoder.neck.`` removed. The sine position encoding is not here yet.
"""

from __future__ import annotations

import numpy as np

from spirula import nn


class FpnNeck:
    """The neck's weights on ``device`` and its forward pass."""

    def __init__(self, device, weights: dict, top_down_levels=(2, 3)):
        self.device = device
        self.top_down_levels = tuple(top_down_levels)
        self.levels = sum(1 for k in weights if k.endswith(".conv.weight"))
        self._held = {}
        for k in range(self.levels):
            w = np.asarray(weights["convs.%d.conv.weight" % k], np.float32)
            self._held["w%d" % k] = nn.HalfWeight(device, w.reshape(w.shape[0], -1), "sam.neck.w")
            self._held["b%d" % k] = nn.Tensor.from_numpy(device, weights["convs.%d.conv.bias" % k], "sam.neck.b")

    def free(self):
        for t in self._held.values():
            t.free()
        self._held = {}

    def forward(self, rec, xs: list) -> list:
        """``xs``: the trunk's outputs, finest first, channels-last [B, H, W, C]; returns the
        neck's, finest first, channels-first [B, d_model, H, W]. Intermediates hang on the
        outputs' ``scratch``."""
        n = len(xs) - 1
        out, prev = [None] * len(xs), None
        for i in range(n, -1, -1):
            B, H, W, _ = xs[i].shape
            lateral = nn.linear(rec, xs[i], self._held["w%d" % (n - i)], self._held["b%d" % (n - i)])
            first = nn.transpose(rec, nn.Tensor(rec.device, lateral.buffer, (B, H * W, lateral.shape[-1])))
            first.shape = (B, lateral.shape[-1], H, W)
            first.scratch = [lateral]
            if i in self.top_down_levels and prev is not None:
                up = nn.upsample_nearest(rec, prev, (H, W))
                fused = nn.add(rec, first, up)
                fused.scratch = [first, up]
                first = fused
            out[i] = prev = first
        return out
