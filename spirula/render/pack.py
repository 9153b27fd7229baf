"""Rendered images packed to 8 bits a channel on the GPU (``shaders/pack_rgba8.comp``).

A viewer's frame is uint8 RGB; converting on the device reads back H*W uint32 words
(4 bytes a pixel) instead of H*W*3 float32 (12 bytes) and skips the host's
clip/round pass. The numbers are :func:`spirula.render.video.to_uint8`'s, bit for
bit (reference: :mod:`spirula.reference.pack`).
"""

from __future__ import annotations

import numpy as np

from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import grid_stride_groups


def record_pack_rgba8(rec, rgb: Buffer, packed: Buffer, count: int, src_offset: int = 0):
    """Record the packing of pixels [src_offset, src_offset + count) of ``rgb``
    ([>= 3 * (src_offset + count)] float32, row-major RGB) into ``packed``
    ([>= count] uint32 words r | g << 8 | b << 16 | 255 << 24)."""
    kernel = rec.device.kernel("pack_rgba8")
    rec.dispatch(
        kernel,
        grid_stride_groups(kernel, int(count)),
        dict(rgb=rgb, packed=packed),
        push=dict(src_offset=int(src_offset), count=int(count)),
    )
    return rec


def rgb8_view(words: np.ndarray) -> np.ndarray:
    """[H,W] uint32 packed words -> [H,W,3] uint8 RGB, a view (no copy; its rows
    stride 4 bytes a pixel: ``np.ascontiguousarray`` when a packed buffer is needed)."""
    words = np.ascontiguousarray(words, np.uint32)
    u8 = words.view(np.uint8).reshape(words.shape + (4,))
    if np.little_endian:
        return u8[..., :3]
    return u8[..., 3:0:-1]  # big-endian hosts see the word's bytes reversed
