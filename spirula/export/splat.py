"""antimatter15's ``.splat`` (https://github.com/antimatter15/splat: convert.py
writes it, main.js reads it): no header, 32 bytes a splat, little-endian:
position float32 x3, scale float32 x3 (linear: ``exp(log scale)``), colour
uint8 x4 (``(0.5 + SH_C0 * f_dc) * 255`` and ``sigmoid(opacity) * 255``),
rotation uint8 x4 (the unit quaternion wxyz, ``q * 128 + 128``). No SH
beyond the base colour. Axes are the PLY's. The splats keep their order
(convert.py sorts by size times opacity, for streaming; no reader needs it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spirula.errors import DatasetError
from spirula.export.common import SH_C0, logit, sigmoid, to_u8, unit_quats
from spirula.files import atomic_write

RECORD = np.dtype([("position", "<f4", 3), ("scale", "<f4", 3), ("color", "u1", 4), ("rot", "u1", 4)])
assert RECORD.itemsize == 32


def encode(p: dict) -> bytes:
    n = len(p["means"])
    rec = np.zeros(n, dtype=RECORD)
    rec["position"] = p["means"]
    rec["scale"] = np.exp(p["log_scales"].astype(np.float64))
    rec["color"][:, :3] = to_u8((0.5 + SH_C0 * p["sh_coeffs"][:, 0, :].astype(np.float64)) * 255.0)
    rec["color"][:, 3] = to_u8(sigmoid(p["opacity_logits"]) * 255.0)
    rec["rot"] = to_u8(unit_quats(p["quats"]) * 128.0 + 128.0)
    return rec.tobytes()


def write(path, p: dict) -> Path:
    return atomic_write(Path(path), encode(p))


def read(path) -> dict:
    path = Path(path)
    data = path.read_bytes()
    if len(data) % 32:
        raise DatasetError("%s: %d bytes, not a whole number of 32-byte .splat records" % (path, len(data)))
    rec = np.frombuffer(data, dtype=RECORD)
    scale = rec["scale"].astype(np.float64)
    if not np.all(np.isfinite(rec["position"])) or not np.all(scale > 0):
        raise DatasetError("%s: not a .splat file (non-finite positions or non-positive scales)" % path)
    n = len(rec)
    sh = np.zeros((n, 1, 3), dtype=np.float32)
    sh[:, 0, :] = (rec["color"][:, :3].astype(np.float64) / 255.0 - 0.5) / SH_C0
    q = (rec["rot"].astype(np.float64) - 128.0) / 128.0
    return dict(
        means=rec["position"].astype(np.float32),
        quats=unit_quats(q).astype(np.float32),
        log_scales=np.log(scale).astype(np.float32),
        opacity_logits=logit(rec["color"][:, 3] / 255.0, 0.5 / 255).astype(np.float32),
        sh_coeffs=sh,
        sh_degree=0,
    )
