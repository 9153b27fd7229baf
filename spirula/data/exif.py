"""Exposure settings of photos from their EXIF (docs/training.md, "Appearance"): the
relative exposure of each training image, which starts PPISP's per-image exposure
offsets where the camera recorded how it exposed each photo (auto-exposure moving by
a stop between two photos is then known before the first step, not learned)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

# EXIF tags (CIPA DC-008): in the Exif IFD (0x8769)
EXIF_IFD, EXPOSURE_TIME, F_NUMBER, ISO = 0x8769, 0x829A, 0x829D, 0x8827


def exposure_stops(path: Path) -> float | None:
    """log2 of the light a photo's settings let through, relative to 1 s at f/1 and ISO
    1 (``exposure time x ISO / f-number^2``: a stop brighter is +1), or None when the
    file has no EXIF exposure time, f-number and ISO (a PNG, a video frame)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            ifd = im.getexif().get_ifd(EXIF_IFD)
    except (OSError, SyntaxError, ValueError):
        return None
    try:
        t, n, iso = float(ifd[EXPOSURE_TIME]), float(ifd[F_NUMBER]), ifd[ISO]
        iso = float(iso[0] if isinstance(iso, tuple) else iso)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError):
        return None
    if not (t > 0 and n > 0 and iso > 0) or not all(map(math.isfinite, (t, n, iso))):
        return None
    return math.log2(t * iso / (n * n))


def relative_exposures(frames) -> np.ndarray | None:
    """``[F] float32``: each frame's :func:`exposure_stops` less their mean (PPISP's
    exposure offsets, which its regulariser centres on zero), or None unless every frame
    (its ``image_path``) has them."""
    stops = []
    for f in frames:
        s = exposure_stops(f.image_path)
        if s is None:
            return None
        stops.append(s)
    if not stops:
        return None
    out = np.asarray(stops, np.float64)
    return (out - out.mean()).astype(np.float32)
