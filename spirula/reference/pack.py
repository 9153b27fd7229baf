"""The viewers' RGBA8 frame (reference of shaders/pack_rgba8.comp).

Not float64: the kernel is defined as float32 clip to [0, 1], one float32
multiply by 255, round half to even, bit for bit, so the reference is that
rounding, packed: the numbers of :func:`spirula.render.video.to_uint8`, which
the videos and PNGs use (tests/test_pack_rgba8.py holds the kernel to both).
NaN channels become 0 (``to_uint8`` leaves NaN's cast to numpy; the kernel
defines it).
"""

import numpy as np


def to_uint8(rgb) -> np.ndarray:
    """float RGB -> uint8: float32 clip to [0, 1], times 255 in float32, rounded half to even."""
    return np.rint(np.clip(np.asarray(rgb, np.float32), 0, 1) * 255).astype(np.uint8)


def pack_rgba8(rgb) -> np.ndarray:
    """[..., 3] float RGB -> [...] uint32 words r | g << 8 | b << 16 | 255 << 24."""
    rgb = np.asarray(rgb, np.float32)
    u8 = to_uint8(np.nan_to_num(rgb, nan=0.0, posinf=np.inf, neginf=-np.inf)).astype(np.uint32)
    return u8[..., 0] | (u8[..., 1] << 8) | (u8[..., 2] << 16) | np.uint32(0xFF000000)


def rgb8_case(height: int = 37, width: int = 53, seed: int = 0) -> np.ndarray:
    """[H,W,3] float32 test image for pack_rgba8: uniform values in [-0.2, 1.2], every
    rounding tie k + 0.5 of x * 255 (and its float32 neighbours), 0, 1, -0, NaN and
    +-inf. H*W must be at least 2048 for every special value to fit."""
    rng = np.random.default_rng(seed)
    img = rng.uniform(-0.2, 1.2, height * width * 3).astype(np.float32)
    ties = np.float32((np.arange(255) + 0.5) / 255)
    near = np.concatenate([ties, np.nextafter(ties, np.float32(1)), np.nextafter(ties, np.float32(0))])
    special = np.array([0.0, 1.0, -0.0, np.nan, np.inf, -np.inf, 1.0 + 2**-23, 2**-149], np.float32)
    picks = np.concatenate([near, special])
    img[rng.choice(img.size, picks.size, replace=False)] = picks
    return img.reshape(height, width, 3)
