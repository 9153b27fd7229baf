"""Tile intersections of projected Gaussians (float64 reference).

A Gaussian with pixel radii (rx, ry) around mean2d touches the tiles of the box
    tile_min = floor(mean2d/ts - radius/ts),  tile_max = ceil(mean2d/ts + radius/ts)
(exclusive max), each component clamped to [0, tile_width] / [0, tile_height].
Intersections are sorted lexicographically by (camera, tile, depth, Gaussian id),
so every tile owns a contiguous, front-to-back range of the sorted list.
"""

from __future__ import annotations

import numpy as np

TILE_SIZE = 16


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


def tile_counts(means2d, radii, width: int, height: int, tile_size: int = TILE_SIZE) -> np.ndarray:
    """Number of tiles each Gaussian touches, [...] int64 (0 if culled)."""
    lo, hi = tile_bounds(means2d, radii, width, height, tile_size)
    ext = np.maximum(hi - lo, 0)
    return ext[..., 0] * ext[..., 1]


def intersect(means2d, radii, depths, width: int, height: int, tile_size: int = TILE_SIZE) -> dict:
    """Sorted tile intersections.

    means2d [C,N,2] float, radii [C,N,2] int, depths [C,N] float.
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
    lo, hi = tile_bounds(means2d, radii, width, height, tile_size)
    counts = tile_counts(means2d, radii, width, height, tile_size)

    cams, tiles, gids = [], [], []
    for c in range(C):
        for g in np.nonzero(counts[c] > 0)[0]:
            ys = np.arange(lo[c, g, 1], hi[c, g, 1])
            xs = np.arange(lo[c, g, 0], hi[c, g, 0])
            t = (ys[:, None] * tw + xs[None, :]).ravel()
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
