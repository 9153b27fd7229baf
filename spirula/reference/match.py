"""Descriptor matching as COLMAP's brute-force SIFT matcher computes it, in numpy.

Each function is what a kernel is tested against (``shaders/match_*.comp``):

- :func:`top2` (``match_top2``): for each query descriptor, the train descriptor with
  the largest dot product of the uint8 vectors and the two largest dots (exact int64
  sums; a tie keeps the first row, as COLMAP's strict ``>`` does);
- :func:`passes` and :func:`mutual` (``match_mutual``): COLMAP's ``FindBestMatches``
  with ``cross_check``: the distance of a dot is the angle ``acos(min(dot / 512^2, 1))``
  (SIFT descriptors are unit vectors times 512); a query keeps its best when that
  distance is at most ``max_distance`` and below ``max_ratio`` times the second best's,
  in both directions, and the two rows are each other's best;
- :func:`match` composes them: ``[M, 2]`` int32 rows (a's row, b's row), a's order.

Written from COLMAP's sift.cc (what it computes, not its code), float64 throughout.
"""

from __future__ import annotations

import numpy as np

MAX_RATIO = 0.8  # COLMAP's SiftMatchingOptions defaults
MAX_DISTANCE = 0.7
NONE = 0xFFFFFFFF  # no best row (every dot 0)
DOT_SCALE = 512.0 * 512.0


def dots(query: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``[n_query, n_train]`` int64 dot products of uint8 ``[n, 128]`` descriptors."""
    return np.asarray(query, np.int64) @ np.asarray(train, np.int64).T


def top2(query: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``[n_query, 3]`` int64: best train row (:data:`NONE` when every dot is 0), best
    dot, second dot (0 when there is none)."""
    n = len(query)
    out = np.zeros((n, 3), np.int64)
    out[:, 0] = NONE
    if n == 0 or len(train) == 0:
        return out
    d = dots(query, train)
    best = np.argmax(d, axis=1)  # the first of equal maxima
    bd = d[np.arange(n), best]
    d[np.arange(n), best] = -1
    sd = np.maximum(d.max(axis=1), 0) if d.shape[1] > 1 else np.zeros(n, np.int64)
    out[:, 0] = np.where(bd > 0, best, NONE)
    out[:, 1] = bd
    out[:, 2] = np.where(bd > 0, sd, 0)
    return out


def distance(dot) -> np.ndarray:
    """COLMAP's descriptor distance: the angle (radians) of a dot product of two SIFT descriptors."""
    return np.arccos(np.minimum(np.asarray(dot, np.float64) / DOT_SCALE, 1.0))


def passes(t: np.ndarray, max_ratio: float = MAX_RATIO, max_distance: float = MAX_DISTANCE) -> np.ndarray:
    """Rows of :func:`top2`'s output whose best passes the distance and ratio tests."""
    d1, d2 = distance(t[:, 1]), distance(t[:, 2])
    return (t[:, 0] != NONE) & (d1 <= max_distance) & (d1 < max_ratio * d2)


def mutual(forward: np.ndarray, backward: np.ndarray, max_ratio=MAX_RATIO, max_distance=MAX_DISTANCE) -> np.ndarray:
    """``[n_a]`` int64: b's row matched to each of a's rows, or -1 (both directions
    pass, and each is the other's best)."""
    out = np.full(len(forward), -1, np.int64)
    ok_f = passes(forward, max_ratio, max_distance)
    ok_b = passes(backward, max_ratio, max_distance) if len(backward) else np.zeros(0, bool)
    for i in np.flatnonzero(ok_f):
        j = int(forward[i, 0])
        if ok_b[j] and backward[j, 0] == i:
            out[i] = j
    return out


def match(desc_a: np.ndarray, desc_b: np.ndarray, max_ratio=MAX_RATIO, max_distance=MAX_DISTANCE) -> np.ndarray:
    """``[M, 2]`` int32 matches (a's row, b's row) of two uint8 descriptor sets."""
    m = mutual(top2(desc_a, desc_b), top2(desc_b, desc_a), max_ratio, max_distance)
    rows = np.flatnonzero(m >= 0)
    return np.stack([rows, m[rows]], 1).astype(np.int32).reshape(-1, 2)
