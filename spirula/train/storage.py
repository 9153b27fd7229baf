"""Storage layouts of the trained splats: what one splat's row of each buffer
holds, in float32 (default) or compact (``--compact``) storage.

The GPU twin is ``shaders/include/storage.glsl`` (kernels read and write the
compact rows through it); docs/design.md, "Compact storage", says why.

Compact rows (K SH coefficients per splat, 3K floats):

- ``sh`` (parameters): the 3 DC floats as float32 words, then the 3K - 3
  higher coefficients as fp16, two per 32-bit word (low half first), the
  last word's high half 0 when 3K - 3 is odd: 3 + ceil((3K - 3) / 2) words
  (K = 16: 26 words, 104 B instead of 192 B).
- ``m_sh`` / ``v_sh`` (Adam moments): bf16, two per word: the 3 DC moments
  in words 0-1 (word 1's high half 0), then the 3K - 3 higher ones from word
  2, so that moment word 2 + j holds the coefficients of ``sh`` word 3 + j:
  2 + ceil((3K - 3) / 2) words (K = 16: 25).
- the Adam moments of means, quats and scales: bf16, two per word, 2 words
  a row (means, scales: x | y << 16, z with a 0 high half; quats: w | x << 16,
  y | z << 16).
- means, quats, scales and opacities stay float32, and so do the opacities'
  moments (one value: a word either way, bf16 would save no byte).

Checkpoints and splat.ply always hold float32 (:func:`decode_sh`,
:func:`decode_moments`): a compact run resumes in either mode.
"""

from __future__ import annotations

import numpy as np

PARAM_NAMES = ("means", "quats", "scales", "opacities", "sh")
_WIDTHS = {"means": (3,), "quats": (4,), "scales": (3,), "opacities": ()}
# compact: the moments of these are bf16 rows of 2 words (storage.glsl's GEOM_MOMENT_WORDS)
GEOM_MOMENT_WORDS = 2
BF16_MOMENTS = ("means", "quats", "scales")


def sh_row_words(compact: bool, k: int) -> int:
    """32-bit words in one splat's ``sh`` row (storage.glsl's sh_row_words)."""
    return 3 + (3 * k - 2) // 2 if compact else 3 * k


def moment_row_words(compact: bool, k: int) -> int:
    """32-bit words in one splat's ``m_sh`` / ``v_sh`` row."""
    return 2 + (3 * k - 2) // 2 if compact else 3 * k


def row_layout(name: str, moment: bool, sh_coeffs: int, compact: bool) -> tuple:
    """(shape of one row, dtype) of buffer ``name`` (a parameter, or with
    ``moment`` an Adam moment of it)."""
    if name != "sh":
        if compact and moment and name in BF16_MOMENTS:
            return (GEOM_MOMENT_WORDS,), np.uint32
        return _WIDTHS[name], np.float32
    if not compact:
        return (sh_coeffs, 3), np.float32
    return ((moment_row_words if moment else sh_row_words)(True, sh_coeffs),), np.uint32


def row_bytes(name: str, moment: bool, sh_coeffs: int, compact: bool) -> int:
    shape, dtype = row_layout(name, moment, sh_coeffs, compact)
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def splat_bytes(sh_coeffs: int, compact: bool) -> int:
    """Bytes per splat of the parameters and both moments."""
    return sum(
        row_bytes(name, moment, sh_coeffs, compact) * (2 if moment else 1)
        for name in PARAM_NAMES
        for moment in (False, True)
    )


# -- 16-bit formats ----------------------------------------------------------------


def half_to_float(h) -> np.ndarray:
    """fp16 bits (uint) -> float32, exact."""
    return np.asarray(h, np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def bf16_to_float(h) -> np.ndarray:
    """bf16 bits (uint) -> float32, exact."""
    return (np.asarray(h, np.uint32) << np.uint32(16)).view(np.float32)


def float_to_half_sr(x, r) -> np.ndarray:
    """float32 -> fp16 bits, rounded stochastically with the uniform bits
    ``r`` (uint32), as storage.glsl's float_to_half_sr (bit for bit)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = np.asarray(r, np.uint32).astype(np.uint64)
    s = (b >> 16) & 0x8000
    mag = b & 0x7FFFFFFF
    normal = np.minimum((mag - 0x38000000 + (r & 0x1FFF)) >> 13, 0x7C00)
    shift = np.clip(126 - (mag >> 23).astype(np.int64), 0, 63).astype(np.uint64)
    mant = (mag & 0x7FFFFF) | 0x800000
    sub = np.where(
        shift > 31, np.uint64(0), (mant + (r & ((np.uint64(1) << np.minimum(shift, 31)) - 1))) >> np.minimum(shift, 31)
    )
    out = np.where(mag >= 0x38800000, normal, sub)
    out = np.where(mag >= 0x7F800000, np.where(mag > 0x7F800000, np.uint64(0x7E00), np.uint64(0x7C00)), out)
    return (s | out).astype(np.uint32)


def float_to_bf16_sr(x, r) -> np.ndarray:
    """float32 -> bf16 bits, rounded stochastically with ``r``'s low 16 bits."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = np.asarray(r, np.uint32).astype(np.uint64)
    special = (b & 0x7F800000) == 0x7F800000
    out = np.where(
        special, (b >> 16) | np.where((b & 0x7FFFFF) != 0, np.uint64(0x40), np.uint64(0)), (b + (r & 0xFFFF)) >> 16
    )
    return out.astype(np.uint32)


def _rne_half(x) -> np.ndarray:
    with np.errstate(over="ignore"):  # past 65504: Inf, as intended
        return np.asarray(x, np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)


def _rne_bf16(x) -> np.ndarray:
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    special = (b & 0x7F800000) == 0x7F800000
    rne = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return np.where(special, (b >> 16) | np.where((b & 0x7FFFFF) != 0, np.uint64(0x40), np.uint64(0)), rne).astype(
        np.uint32
    )


def _pairs(halves: np.ndarray, words: int) -> np.ndarray:
    """[N, M] 16-bit values -> [N, words] uint32, two per word, low first, 0-padded."""
    n = halves.shape[0]
    padded = np.zeros((n, 2 * words), np.uint32)
    padded[:, : halves.shape[1]] = halves
    return padded[:, 0::2] | (padded[:, 1::2] << np.uint32(16))


def _unpairs(words: np.ndarray, count: int) -> np.ndarray:
    w = np.asarray(words, np.uint32)
    out = np.empty((w.shape[0], 2 * w.shape[1]), np.uint32)
    out[:, 0::2] = w & 0xFFFF
    out[:, 1::2] = w >> np.uint32(16)
    return out[:, :count]


def encode_sh(sh) -> np.ndarray:
    """[N,K,3] float32 -> compact rows [N, sh_row_words] uint32 (round to nearest:
    an upload, not an accumulation)."""
    sh = np.asarray(sh, np.float32)
    n, k = sh.shape[0], sh.shape[1]
    flat = sh.reshape(n, 3 * k)
    out = np.zeros((n, sh_row_words(True, k)), np.uint32)
    out[:, :3] = flat[:, :3].view(np.uint32)
    out[:, 3:] = _pairs(_rne_half(flat[:, 3:]), sh_row_words(True, k) - 3)
    return out


def decode_sh(rows, k: int) -> np.ndarray:
    """Compact rows [N, W] uint32 -> [N,K,3] float32, exact."""
    rows = np.asarray(rows, np.uint32).reshape(-1, sh_row_words(True, k))
    n = rows.shape[0]
    flat = np.empty((n, 3 * k), np.float32)
    flat[:, :3] = rows[:, :3].view(np.float32)
    flat[:, 3:] = half_to_float(_unpairs(rows[:, 3:], 3 * k - 3))
    return flat.reshape(n, k, 3)


def encode_moments(x) -> np.ndarray:
    """[N,K,3] float32 -> bf16 rows [N, moment_row_words] uint32 (round to nearest)."""
    x = np.asarray(x, np.float32)
    n, k = x.shape[0], x.shape[1]
    halves = _rne_bf16(x.reshape(n, 3 * k))
    return np.concatenate([_pairs(halves[:, :3], 2), _pairs(halves[:, 3:], moment_row_words(True, k) - 2)], axis=1)


def decode_moments(rows, k: int) -> np.ndarray:
    """bf16 rows [N, moment_row_words] uint32 -> [N,K,3] float32, exact."""
    rows = np.asarray(rows, np.uint32).reshape(-1, moment_row_words(True, k))
    halves = np.concatenate([_unpairs(rows[:, :2], 3), _unpairs(rows[:, 2:], 3 * k - 3)], axis=1)
    return bf16_to_float(halves).reshape(-1, k, 3)


def encode_geom_moments(x) -> np.ndarray:
    """[N, 3 or 4] float32 moments of means, scales or quats -> bf16 rows
    [N, 2] uint32 (round to nearest)."""
    x = np.asarray(x, np.float32)
    x = x.reshape(x.shape[0], -1)
    return _pairs(_rne_bf16(x), GEOM_MOMENT_WORDS)


def decode_geom_moments(rows, width: int) -> np.ndarray:
    """bf16 rows [N, 2] uint32 -> [N, width] float32, exact."""
    rows = np.asarray(rows, np.uint32).reshape(-1, GEOM_MOMENT_WORDS)
    return bf16_to_float(_unpairs(rows, width))


def encode(name: str, x, moment: bool, k: int) -> np.ndarray:
    """float32 values of buffer ``name`` (a parameter, or an Adam moment of
    it) -> its compact layout (round to nearest)."""
    x = np.asarray(x, np.float32)
    if name == "sh":
        x = x.reshape(-1, k, 3)
        return encode_moments(x) if moment else encode_sh(x)
    if moment and name in BF16_MOMENTS:
        return encode_geom_moments(x)
    return x


def decode(name: str, rows, moment: bool, k: int) -> np.ndarray:
    """The compact layout of buffer ``name`` -> float32 (sh: [N,K,3]), exact."""
    if name == "sh":
        return (decode_moments if moment else decode_sh)(rows, k)
    if moment and name in BF16_MOMENTS:
        return decode_geom_moments(rows, _WIDTHS[name][0])
    return np.asarray(rows)


def quantize(name: str, x, moment: bool, k: int) -> np.ndarray:
    """The float32 values compact storage holds for ``x`` (an upload's rounding)."""
    x = np.asarray(x, np.float32)
    return decode(name, encode(name, x, moment, k), moment, k).reshape(x.shape)


# -- the random bits (random.glsl's pcg_hash; storage.glsl's storage_bits) ----------


def pcg_hash(v) -> np.ndarray:
    v = np.asarray(v, np.uint64) & 0xFFFFFFFF
    state = (v * 747796405 + 2891336453) & 0xFFFFFFFF
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & 0xFFFFFFFF
    return ((word >> 22) ^ word).astype(np.uint32)


def storage_bits(seed: int, row, element) -> np.ndarray:
    """The 32 random bits storage.glsl rounds element ``element`` of splat ``row`` with."""
    index = (np.asarray(row, np.uint64) * 128 + np.asarray(element, np.uint64)) & 0xFFFFFFFF
    return pcg_hash(np.uint64(seed & 0xFFFFFFFF) ^ index)
