"""Tile intersections of projected Gaussians (float64 reference).

A Gaussian with pixel radii (rx, ry) around mean2d has the tile box
    tile_min = floor(mean2d/ts - radius/ts),  tile_max = ceil(mean2d/ts + radius/ts)
(exclusive max), each component clamped to [0, tile_width] / [0, tile_height].
Given its conic and opacity, it touches the tiles of that box whose pixel-centre
rectangle [ts*t + 0.5, ts*t + ts - 0.5] (both axes) meets its ellipse
sigma(d) <= ln(255 o) (alpha >= 1/255), widened by the margins of
shaders/include/raster.glsl (tile culling, docs/design.md §2.4); without them,
every tile of the box.
Intersections are sorted lexicographically by (camera, tile, depth, Gaussian id),
so every tile owns a contiguous, front-to-back range of the sorted list.
"""

from __future__ import annotations

import numpy as np

TILE_SIZE = 16
MIN_ALPHA = 1.0 / 255.0
CULL_FORM_MARGIN = 1.0 / 4096.0  # eta: the conic's diagonal shrinks by 2 eta
CULL_SIGMA_MARGIN = 1.0 / 1024.0  # added to the threshold ln(o / MIN_ALPHA)


def tile_grid(width: int, height: int, tile_size: int = TILE_SIZE) -> tuple[int, int]:
    """(tile_width, tile_height) = (ceil(W/ts), ceil(H/ts))."""
    return -(-int(width) // tile_size), -(-int(height) // tile_size)


def tile_bounds(means2d, radii, width: int, height: int, tile_size: int = TILE_SIZE):
    """Tile box of every Gaussian.

    means2d [..., 2] float, radii [..., 2] int. Returns (tmin, tmax), each [..., 2]
    int64 (x, y), max exclusive. Culled Gaussians (both radii 0) get an empty box
    (tmin = tmax = 0).
    """
    tw, th = tile_grid(width, height, tile_size)
    m = np.asarray(means2d, dtype=np.float64) / tile_size
    r = np.asarray(radii, dtype=np.float64) / tile_size
    # Written as mean/ts -/+ radius/ts (not (mean -/+ radius)/ts), as the convention states.
    lo = np.floor(m - r)
    hi = np.ceil(m + r)
    upper = np.array([tw, th], dtype=np.float64)
    lo = np.clip(lo, 0.0, upper).astype(np.int64)
    hi = np.clip(hi, 0.0, upper).astype(np.int64)
    culled = ~np.any(np.asarray(radii) > 0, axis=-1)
    lo[culled] = 0
    hi[culled] = 0
    return lo, hi


def cull_ellipse(conics, opacities) -> np.ndarray:
    """The tested ellipse 0.5 a x^2 + b x y + 0.5 c y^2 <= t, margins included.

    conics [..., 3] (a, b, c), opacities [...] (activated). Returns [..., 4] float64
    (a', b, c', t): a' = a (1 - 2 eta), c' = c (1 - 2 eta), t = ln(o / (1/255)) + tau.
    """
    q = np.asarray(conics, dtype=np.float64)
    o = np.asarray(opacities, dtype=np.float64)
    s = 1.0 - 2.0 * CULL_FORM_MARGIN
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.log(o / MIN_ALPHA) + CULL_SIGMA_MARGIN
    return np.stack(np.broadcast_arrays(q[..., 0] * s, q[..., 1], q[..., 2] * s, t), -1)


def cull_row(mean2d, ellipse, ty: int, box_x0: int, box_x1: int, tile_size: int = TILE_SIZE) -> tuple[int, int]:
    """Tiles [x0, x1) of tile row ``ty`` inside [box_x0, box_x1) that the ellipse reaches.

    mean2d (x, y), ellipse (a, b, c, t) from :func:`cull_ellipse`. The x-range of the
    ellipse over the row's pixel-centre strip, then the tiles whose pixel-centre
    columns meet it; the whole box row when the form is not positive definite.
    """
    a, b, c, t = (float(v) for v in ellipse)
    det = a * c - b * b
    if not (det > 0 and a > 0 and t > 0):
        return box_x0, box_x1
    y_ext = np.sqrt(2 * t * a / det)
    lo = max(ty * tile_size + 0.5 - mean2d[1], -y_ext)
    hi = min(ty * tile_size + tile_size - 0.5 - mean2d[1], y_ext)
    if not lo <= hi:
        return box_x0, box_x0
    y_tan = -b * np.sqrt(2 * t * c / det) / c  # the rightmost point's y; the leftmost's is -y_tan
    yr, yl = np.clip(y_tan, lo, hi), np.clip(-y_tan, lo, hi)
    xr = (-b * yr + np.sqrt(max(2 * a * t - det * yr * yr, 0.0))) / a + mean2d[0]
    xl = (-b * yl - np.sqrt(max(2 * a * t - det * yl * yl, 0.0))) / a + mean2d[0]
    x0 = int(np.clip(np.ceil((xl - (tile_size - 0.5)) / tile_size), box_x0, box_x1))
    x1 = int(np.clip(np.floor((xr - 0.5) / tile_size) + 1, x0, box_x1))
    return x0, x1


def tile_lists(means2d, radii, width: int, height: int, conics=None, opacities=None, tile_size: int = TILE_SIZE):
    """The tiles each Gaussian touches, row by row: [C,N] object array of int64 tile ids.

    means2d [C,N,2], radii [C,N,2]; conics [C,N,3] and opacities [N] or [C,N] turn
    tile culling on (None: every tile of the box).
    """
    means2d = np.asarray(means2d, dtype=np.float64)
    lo, hi = tile_bounds(means2d, radii, width, height, tile_size)
    tw, _ = tile_grid(width, height, tile_size)
    C, N = means2d.shape[:2]
    ell = None
    if conics is not None:
        ell = cull_ellipse(conics, np.broadcast_to(np.asarray(opacities, dtype=np.float64), (C, N)))
    out = np.empty((C, N), dtype=object)
    for c in range(C):
        for g in range(N):
            rows = []
            for ty in range(lo[c, g, 1], hi[c, g, 1]):
                x0, x1 = lo[c, g, 0], hi[c, g, 0]
                if ell is not None:
                    x0, x1 = cull_row(means2d[c, g], ell[c, g], ty, x0, x1, tile_size)
                rows.append(ty * tw + np.arange(x0, x1))
            out[c, g] = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)
    return out


def tile_counts(
    means2d, radii, width: int, height: int, conics=None, opacities=None, tile_size: int = TILE_SIZE
) -> np.ndarray:
    """Number of tiles each Gaussian touches, [...] int64 (0 if culled).

    Without ``conics``/``opacities``: every tile of the box (any leading shape);
    with them: tile culling, [C,N] (as :func:`tile_lists`).
    """
    if conics is not None:
        lists = tile_lists(means2d, radii, width, height, conics, opacities, tile_size)
        return np.vectorize(len, otypes=[np.int64])(lists)
    lo, hi = tile_bounds(means2d, radii, width, height, tile_size)
    ext = np.maximum(hi - lo, 0)
    return ext[..., 0] * ext[..., 1]


def intersect(
    means2d, radii, depths, width: int, height: int, conics=None, opacities=None, tile_size: int = TILE_SIZE
) -> dict:
    """Sorted tile intersections.

    means2d [C,N,2] float, radii [C,N,2] int, depths [C,N] float; conics [C,N,3] and
    opacities [N] or [C,N] turn tile culling on (the GPU's rule; None: whole boxes).
    Returns a dict:
      tiles        [C,N] int64: tiles touched per Gaussian;
      isects       list of (c, tile, depth, g) tuples (int, int, float, int), sorted by
                   (c, tile, depth, g) lexicographically;
      isect_cams, isect_tiles, isect_gids [M] int64 and isect_depths [M] float64: the same, as arrays;
      flatten_ids  [M] int64: c*N + g in sorted order;
      tile_ranges  [C,T,2] int64: (start, end) into the sorted list, global over cameras
                   (as gsplat's offsets); an empty tile has start == end (the position
                   where its intersections would be);
      tile_width, tile_height: the tile grid.
    """
    means2d = np.asarray(means2d, dtype=np.float64)
    radii = np.asarray(radii)
    depths = np.asarray(depths, dtype=np.float64)
    C, N = depths.shape
    tw, th = tile_grid(width, height, tile_size)
    T = tw * th
    lists = tile_lists(means2d, radii, width, height, conics, opacities, tile_size)
    counts = np.vectorize(len, otypes=[np.int64])(lists).reshape(C, N)

    cams, tiles, gids = [], [], []
    for c in range(C):
        for g in np.nonzero(counts[c] > 0)[0]:
            t = lists[c, g]
            tiles.append(t)
            cams.append(np.full(t.shape, c))
            gids.append(np.full(t.shape, g))
    cat = (lambda xs: np.concatenate(xs).astype(np.int64)) if tiles else (lambda xs: np.zeros(0, np.int64))
    cams, tiles, gids = cat(cams), cat(tiles), cat(gids)
    dep = depths[cams, gids]
    # np.lexsort sorts by the last key first: primary camera, then tile, depth, id.
    order = np.lexsort((gids, dep, tiles, cams))
    cams, tiles, gids, dep = cams[order], tiles[order], gids[order], dep[order]

    key = cams * T + tiles  # sorted, since the list is sorted by (camera, tile)
    all_keys = np.arange(C * T)
    starts = np.searchsorted(key, all_keys, side="left")
    ends = np.searchsorted(key, all_keys, side="right")
    ranges = np.stack([starts, ends], -1).reshape(C, T, 2).astype(np.int64)
    return dict(
        tiles=counts,
        isects=[(int(c), int(t), float(d), int(g)) for c, t, d, g in zip(cams, tiles, dep, gids)],
        isect_cams=cams,
        isect_tiles=tiles,
        isect_depths=dep,
        isect_gids=gids,
        flatten_ids=cams * N + gids,
        tile_ranges=ranges,
        tile_width=tw,
        tile_height=th,
    )
