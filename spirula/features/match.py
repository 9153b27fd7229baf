"""Descriptor matching on the GPU, as COLMAP's brute-force SIFT matcher matches (docs/sfm.md).

One recorded sequence per capacity matches two images' descriptors
(``shaders/match_*.comp``):

- ``match_top2`` twice: each of a's rows against all of b's, then each of b's against
  a's: the best row by the dot product of the uint8 descriptors and the two largest
  dots (exact integer sums);
- ``match_mutual``: COLMAP's ratio test (``max_ratio`` 0.8) and distance test
  (``max_distance`` 0.7 rad, the angle of the dot) in both directions, and the cross
  check (each the other's best).

The host uploads the two descriptor sets and their sizes, runs the sequence and reads
one word per row of a (b's row, or none). A set larger than the capacity grows the
buffers and records again. The float64 reference is :mod:`spirula.reference.match`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from spirula.errors import UsageError
from spirula.runtime.sequence import Threads

NONE = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class MatchOptions:
    """pycolmap's SiftMatchingOptions that change which matches are kept (their defaults;
    ``cross_check`` is always on)."""

    max_ratio: float = 0.8
    max_distance: float = 0.7


class DescriptorMatcher:
    """Matches pairs of descriptor sets on ``device``; buffers and the sequence made once per capacity."""

    def __init__(self, device, options: MatchOptions = MatchOptions(), capacity: int = 4096):
        self.device, self.opts = device, options
        self._bufs = {}
        self._seq = None
        self._capacity(capacity)

    def _capacity(self, cap: int):
        pool = self.device.pool
        for buf in self._bufs.values():
            pool.free(buf)
        cap = int(-(-cap // 64) * 64)
        self.capacity = cap
        self._bufs = dict(
            descriptors=pool.alloc("match.descriptors", (2 * cap, 32), np.uint32, "image"),
            sizes=pool.alloc("match.sizes", (2,), np.uint32, "image"),
            forward=pool.alloc("match.forward", (cap, 4), np.uint32, "image"),
            backward=pool.alloc("match.backward", (cap, 4), np.uint32, "image"),
            matches=pool.alloc("match.matches", (cap,), np.uint32, "image"),
        )
        self._seq = None

    def record(self):
        b, cap = self._bufs, self.capacity
        rec = self.device.recorder("match")
        for direction, out in ((0, b["forward"]), (1, b["backward"])):
            rec.dispatch(
                "match_top2",
                Threads(cap),
                dict(descriptors=b["descriptors"], sizes=b["sizes"], top2=out),
                push=dict(capacity=cap, direction=direction),
            )
        rec.dispatch(
            "match_mutual",
            Threads(cap),
            dict(forward=b["forward"], backward=b["backward"], sizes=b["sizes"], matches=b["matches"]),
            push=dict(capacity=cap, max_ratio=self.opts.max_ratio, max_distance=self.opts.max_distance),
        )
        return rec.finish()

    def match(self, desc_a, desc_b) -> np.ndarray:
        """``[M, 2]`` int32 (a's row, b's row) of the mutual nearest neighbours that pass
        COLMAP's ratio and distance tests, in a's order."""
        a, b = _words(desc_a), _words(desc_b)
        if len(a) == 0 or len(b) == 0:
            return np.zeros((0, 2), np.int32)
        if max(len(a), len(b)) > self.capacity:
            self._capacity(int(max(len(a), len(b)) * 1.25))
        dev, bufs = self.device, self._bufs
        dev.upload(bufs["descriptors"], a)
        dev.upload(bufs["descriptors"], b, offset=128 * self.capacity)
        dev.upload(bufs["sizes"], np.array([len(a), len(b)], np.uint32))
        if self._seq is None or self._seq.stale:
            self._seq = self.record()
        self._seq.run()
        m = dev.readback(bufs["matches"], (len(a),))
        rows = np.flatnonzero(m != NONE)
        return np.stack([rows, m[rows]], 1).astype(np.int32).reshape(-1, 2)

    def close(self):
        for buf in self._bufs.values():
            self.device.pool.free(buf)
        self._bufs, self._seq = {}, None


def _words(desc) -> np.ndarray:
    d = np.ascontiguousarray(desc)
    if d.dtype != np.uint8 or d.ndim != 2 or d.shape[1] != 128:
        raise UsageError("matching: descriptors are uint8 [N,128], not %s %s" % (d.dtype, d.shape))
    return d.view(np.uint32)


_MATCHERS = {}


def match_features(device, desc_a, desc_b, options: MatchOptions | None = None) -> np.ndarray:
    """Matches of two images' SIFT descriptors (uint8 ``[N, 128]``) on ``device``:
    ``[M, 2]`` int32 (row of a, row of b), as COLMAP's matcher with cross check keeps
    them. A matcher per (device, options) is kept for the next pair."""
    options = options or MatchOptions()
    key = (id(device), options)
    m = _MATCHERS.get(key)
    if m is None or m.device is not device:
        m = _MATCHERS[key] = DescriptorMatcher(device, options)
    return m.match(desc_a, desc_b)


def release(device) -> None:
    """Free the buffers of the matchers kept for ``device``."""
    for key in [k for k, m in _MATCHERS.items() if m.device is device]:
        _MATCHERS.pop(key).close()
