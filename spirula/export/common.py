"""What the share formats have in common: the splats as one dict (the
:func:`spirula.data.ply.read_splat_ply` layout), activations, axis changes,
spatial (Morton) order, smallest-three quaternions and 1-D k-means codebooks.

A splat dict holds float32 ``means [N,3]``, ``quats [N,4]`` (wxyz, as
splat.ply's ``rot_0..3``), ``log_scales [N,3]``, ``opacity_logits [N]``,
``sh_coeffs [N,K,3]`` (coefficient-major, K = (degree+1)^2) and ``sh_degree``.
Everything here is numpy: exporting runs on the CPU."""

from __future__ import annotations

import numpy as np

from spirula.errors import DatasetError, UsageError

SH_C0 = 0.28209479177387814  # Y_0^0: colour = SH_C0 * f_dc + 0.5

# Which axes each real SH basis function is odd in, coefficient k = 0..15 in the
# 3DGS order (degree 1: y, z, x; degree 2: xy, yz, 3z^2-1, xz, x^2-y^2; degree 3:
# y(3x^2-y^2), xyz, y(5z^2-1), z(5z^2-3), x(5z^2-1), z(x^2-y^2), x(x^2-3y^2)).
# A change of axes that negates some of x, y, z negates coefficient k when it
# negates an odd number of the axes its function is odd in.
SH_PARITY = np.array(
    [
        (0, 0, 0),
        (0, 1, 0),
        (0, 0, 1),
        (1, 0, 0),
        (1, 1, 0),
        (0, 1, 1),
        (0, 0, 0),
        (1, 0, 1),
        (0, 0, 0),
        (0, 1, 0),
        (1, 1, 1),
        (0, 1, 0),
        (0, 0, 1),
        (1, 0, 0),
        (0, 0, 1),
        (1, 0, 0),
    ],
    dtype=np.int64,
)

# The 3DGS PLY (COLMAP's camera axes: x right, y down, z forward, "RDF") into
# SPZ's right-up-back (RUB): a half turn about x; into glTF's +Y up, +Z forward,
# -X right: a half turn about z. Each is its own inverse.
RDF_TO_RUB = (1.0, -1.0, -1.0)
RDF_TO_GLTF = (-1.0, -1.0, 1.0)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def logit(p, eps: float = 1e-6):
    """The opacity logit of ``p``, kept off the asymptotes (0 and 1 decode to finite logits)."""
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1.0 - eps)
    return np.log(p / (1.0 - p))


def round_half_up(x):
    """C's ``round`` for the values a writer clamps to a byte range (halves away from zero)."""
    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def to_u8(x):
    """``clamp(round(x), 0, 255)`` as uint8."""
    return np.clip(round_half_up(x), 0, 255).astype(np.uint8)


def unit_quats(q) -> np.ndarray:
    """Quaternions scaled to unit length (float64); a zero or non-finite one becomes the identity."""
    q = np.asarray(q, dtype=np.float64)
    n = np.linalg.norm(q, axis=1, keepdims=True)
    bad = ~(np.isfinite(n[:, 0]) & (n[:, 0] > 0))
    out = q / np.where(bad[:, None], 1.0, n)
    out[bad] = (1.0, 0.0, 0.0, 0.0)
    return out


def splats_of(p: dict, sh_degree: int | None = None) -> dict:
    """A checked copy of a splat dict (float32), its SH cut to ``sh_degree`` when given."""
    means = np.asarray(p["means"], dtype=np.float32).reshape(-1, 3)
    n = len(means)
    sh = np.asarray(p["sh_coeffs"], dtype=np.float32)
    degree = int(round(np.sqrt(sh.shape[1]))) - 1
    if sh_degree is not None:
        if not 0 <= sh_degree <= 3:
            raise UsageError("--sh-degree %d: one of 0, 1, 2, 3" % sh_degree)
        if sh_degree > degree:
            raise UsageError("--sh-degree %d: the splats have SH degree %d only" % (sh_degree, degree))
        degree = sh_degree
        sh = sh[:, : (degree + 1) ** 2]
    out = dict(
        means=means,
        quats=np.asarray(p["quats"], dtype=np.float32).reshape(n, 4),
        log_scales=np.asarray(p["log_scales"], dtype=np.float32).reshape(n, 3),
        opacity_logits=np.asarray(p["opacity_logits"], dtype=np.float32).reshape(n),
        sh_coeffs=np.ascontiguousarray(sh),
        sh_degree=degree,
    )
    return out


def flip_axes(p: dict, signs) -> dict:
    """The splats in axes that negate some of x, y, z (``signs``, an even number
    of -1: a rotation by a half turn): positions, quaternions (wxyz: each vector
    part negated by the other two axes' signs) and SH coefficients (by
    :data:`SH_PARITY`). Scales and opacities do not change."""
    s = np.asarray(signs, dtype=np.float64)
    if np.prod(s) != 1 or not np.all(np.abs(s) == 1):
        raise ValueError("flip_axes: signs %s is not a rotation" % (signs,))
    q_sign = np.array([1.0, s[1] * s[2], s[0] * s[2], s[0] * s[1]])
    K = p["sh_coeffs"].shape[1]
    sh_sign = np.prod(np.where(SH_PARITY[:K] == 1, s[None, :], 1.0), axis=1)
    out = dict(p)
    out["means"] = (p["means"] * s).astype(np.float32)
    out["quats"] = (p["quats"] * q_sign).astype(np.float32)
    out["sh_coeffs"] = (p["sh_coeffs"] * sh_sign[None, :, None]).astype(np.float32)
    return out


def take(p: dict, order) -> dict:
    """The splats in ``order`` (an index array)."""
    out = dict(p)
    for k in ("means", "quats", "log_scales", "opacity_logits", "sh_coeffs"):
        out[k] = p[k][order]
    return out


def _spread3(v: np.ndarray) -> np.ndarray:
    """The bits of 10-bit ``v`` spread to every third bit (Morton interleave)."""
    v = v.astype(np.uint64) & 0x3FF
    v = (v | (v << 16)) & 0x030000FF
    v = (v | (v << 8)) & 0x0300F00F
    v = (v | (v << 4)) & 0x030C30C3
    v = (v | (v << 2)) & 0x09249249
    return v


def morton_order(means) -> np.ndarray:
    """Indices that sort the splats along a Morton (Z-order) curve of their
    positions on a 1024^3 grid of their bounds: neighbours in space end up
    neighbours in the file (compressed PLY's chunks, SOG's images)."""
    m = np.asarray(means, dtype=np.float64)
    if len(m) == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = m.min(axis=0), m.max(axis=0)
    ext = np.where(hi > lo, hi - lo, 1.0)
    g = np.clip(np.floor((m - lo) / ext * 1024.0), 0, 1023).astype(np.uint64)
    code = _spread3(g[:, 0]) | (_spread3(g[:, 1]) << 1) | (_spread3(g[:, 2]) << 2)
    return np.argsort(code, kind="stable")


def kmeans_1d(values, k: int = 256, iterations: int = 12) -> tuple:
    """A codebook of at most ``k`` sorted float values for ``values`` (Lloyd's
    algorithm in one dimension: cells split at the midpoints) and each value's
    label (uint8 for k <= 256). Starts from the quantiles."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return np.zeros(1, np.float32), np.zeros(0, np.uint8)
    uniq = np.unique(v)
    if len(uniq) <= k:
        centres = uniq
    else:
        centres = np.unique(np.quantile(v, (np.arange(k) + 0.5) / k))
        for _ in range(iterations):
            labels = np.searchsorted((centres[1:] + centres[:-1]) / 2, v)
            sums = np.bincount(labels, weights=v, minlength=len(centres))
            counts = np.bincount(labels, minlength=len(centres))
            keep = counts > 0
            centres = np.unique(np.where(keep, sums / np.maximum(counts, 1), centres)[keep])
    centres = centres.astype(np.float32)
    labels = np.searchsorted((centres[1:].astype(np.float64) + centres[:-1]) / 2, v)
    return centres, labels.astype(np.uint8 if len(centres) <= 256 else np.uint16)


def kmeans(x, k: int, iterations: int = 10, seed: int = 0, chunk: int = 16384) -> tuple:
    """``k`` centroids of the rows of ``x`` [N,D] (Lloyd's algorithm from a
    seeded sample of rows; the nearest centroid by squared distance, in chunks
    of rows) and each row's label. With k >= N every row is its own centroid."""
    x = np.asarray(x, dtype=np.float32)
    n = len(x)
    if k >= n:
        return x.copy(), np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    c = x[rng.choice(n, size=k, replace=False)].copy()
    labels = np.zeros(n, dtype=np.int64)
    for it in range(iterations + 1):
        cc = np.einsum("ij,ij->i", c, c)
        for s in range(0, n, chunk):
            xs = x[s : s + chunk]
            labels[s : s + chunk] = np.argmin(cc[None, :] - 2.0 * (xs @ c.T), axis=1)
        if it == iterations:
            break
        counts = np.bincount(labels, minlength=k)
        keep = counts > 0
        for d in range(x.shape[1]):
            sums = np.bincount(labels, weights=x[:, d], minlength=k)
            c[keep, d] = (sums[keep] / counts[keep]).astype(np.float32)
    return c, labels


def check_count(n: int, path, limit: int, what: str):
    if n > limit:
        raise DatasetError("%s: %d splats, more than %s holds (%d)" % (path, n, what, limit))
