"""The spatial split of a scene into blocks (VastGaussian / CityGaussian style).

The ground plane is the two world axes along which the training cameras'
centres spread most (``axes``; no rotation, so a block is an axis-aligned box
in those two coordinates and unbounded along the third). It is cut into a
grid of A x B *cores* by quantiles of the seed points: first A columns along
``axes[0]``, each holding the same number of points, then each column into B
cells along ``axes[1]``, again by that column's points. The outermost cores
extend to infinity, so every seed point lies in exactly one core (a core is
half-open: ``lo <= x < hi``).

Each block trains on its core grown by ``margin`` x the core's size on every
side (its *region*; an unbounded side is measured on the points' bounding
box), with the seed points inside the region and the training cameras that
see it: a camera whose centre lies in the region, or of whose seed points in
view (in front of it and inside its image) at least ``min_visible`` fall in
the region.

Shapes: points ``[P,3]``, viewmats ``[C,4,4]`` world->camera (OpenCV),
Ks ``[C,3,3]``, sizes ``[C,2]`` (width, height), pixel centres at +0.5.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from spirula.errors import SpirulaError


class PartitionError(SpirulaError):
    """Bad input to a partition command (options, a manifest, missing blocks) or
    no Ray: one line, exit status 2."""

    exit_code = 2


DEFAULT_MARGIN = 0.2  # VastGaussian's 20% expansion of each cell
DEFAULT_MIN_VISIBLE = 0.25  # VastGaussian's visibility threshold, on seed points in view


@dataclasses.dataclass
class Block:
    """One block: ``core_lo``/``core_hi`` and ``lo``/``hi`` are [2] bounds along
    the partition's ``axes`` (±inf on the outer sides of the core);
    ``cameras``: indices into the cameras given to :func:`split`;
    ``points``: indices of the seed points in the region."""

    index: int
    core_lo: np.ndarray
    core_hi: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    cameras: np.ndarray
    points: np.ndarray

    @property
    def name(self) -> str:
        return "block-%02d" % self.index

    def in_core(self, xy) -> np.ndarray:
        """[N] bool: which of the [N,2] ground-plane positions lie in the core (half-open)."""
        xy = np.asarray(xy, np.float64)
        return np.all((xy >= self.core_lo) & (xy < self.core_hi), axis=1)

    def in_region(self, xy) -> np.ndarray:
        xy = np.asarray(xy, np.float64)
        return np.all((xy >= self.lo) & (xy <= self.hi), axis=1)


def grid_shape(n_blocks: int, spread) -> tuple:
    """(A, B) with A * B == n_blocks whose cells are closest to square on a
    ground plane of ``spread`` ([2], the extent along axes[0] and axes[1]);
    of equally square ones, the most even split."""
    if n_blocks < 1:
        raise PartitionError("--blocks %d: expected at least 1" % n_blocks)
    sx, sy = (max(float(s), 1e-12) for s in spread)
    shapes = [(n_blocks // b, b) for b in range(1, n_blocks + 1) if n_blocks % b == 0]
    return min(shapes, key=lambda ab: (round(abs(math.log((sx / ab[0]) / (sy / ab[1]))), 9), abs(ab[0] - ab[1])))


def ground_axes(centres) -> tuple:
    """The two world axes (0 x, 1 y, 2 z) of largest spread of the [C,3] camera
    centres, the larger first."""
    var = np.var(np.asarray(centres, np.float64), axis=0)
    order = np.argsort(-var, kind="stable")
    return int(order[0]), int(order[1])


def _cuts(values, n: int) -> np.ndarray:
    """[n+1] cell edges: -inf, the n-1 inner quantiles of ``values``, +inf."""
    inner = np.quantile(values, np.arange(1, n) / n) if len(values) else np.zeros(n - 1)
    return np.concatenate([[-np.inf], inner, [np.inf]])


def visible_fraction(points, viewmat, K, size, region_mask) -> float:
    """Of the seed points camera (viewmat, K, size) sees (in front, inside the
    image), the fraction that ``region_mask`` ([P] bool) marks; 0 when it sees none."""
    p = np.asarray(points, np.float64) @ viewmat[:3, :3].T + viewmat[:3, 3]
    front = p[:, 2] > 1e-6
    z = np.where(front, p[:, 2], 1.0)
    u = K[0, 0] * p[:, 0] / z + K[0, 2]
    v = K[1, 1] * p[:, 1] / z + K[1, 2]
    seen = front & (u >= 0) & (u < size[0]) & (v >= 0) & (v < size[1])
    n = int(seen.sum())
    return float((seen & region_mask).sum()) / n if n else 0.0


def split(
    points,
    viewmats,
    Ks,
    sizes,
    grid: tuple,
    margin: float = DEFAULT_MARGIN,
    min_visible: float = DEFAULT_MIN_VISIBLE,
    axes: tuple | None = None,
) -> tuple:
    """(axes, [Block]) for an A x B ``grid`` (see the module docstring)."""
    points = np.asarray(points, np.float64)
    viewmats = np.asarray(viewmats, np.float64)
    if len(points) == 0:
        raise PartitionError("the dataset has no seed points to partition")
    if margin < 0:
        raise PartitionError("--margin %g: expected >= 0" % margin)
    centres = -np.einsum("nji,nj->ni", viewmats[:, :3, :3], viewmats[:, :3, 3])
    axes = tuple(axes) if axes is not None else ground_axes(centres)
    xy = points[:, list(axes)]
    cam_xy = centres[:, list(axes)]
    box_lo, box_hi = xy.min(0), xy.max(0)
    a, b = grid
    blocks = []
    xcuts = _cuts(xy[:, 0], a)
    for i in range(a):
        col = xy[(xy[:, 0] >= xcuts[i]) & (xy[:, 0] < xcuts[i + 1]), 1]
        ycuts = _cuts(col, b)
        for j in range(b):
            core_lo = np.array([xcuts[i], ycuts[j]])
            core_hi = np.array([xcuts[i + 1], ycuts[j + 1]])
            # the size of an unbounded core: measured on the points' box
            size = np.minimum(core_hi, box_hi) - np.maximum(core_lo, box_lo)
            grow = margin * np.maximum(size, 0.0)
            lo, hi = core_lo - grow, core_hi + grow
            blk = Block(len(blocks), core_lo, core_hi, lo, hi, np.zeros(0, np.int64), np.zeros(0, np.int64))
            region = blk.in_region(xy)
            blk.points = np.flatnonzero(region)
            inside = blk.in_region(cam_xy)
            cams = [
                c
                for c in range(len(viewmats))
                if inside[c] or visible_fraction(points, viewmats[c], Ks[c], sizes[c], region) >= min_visible
            ]
            blk.cameras = np.array(cams, np.int64)
            blocks.append(blk)
    return axes, blocks
