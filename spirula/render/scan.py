"""Exclusive prefix sum of uint32 on the GPU (kernel ``prefix_sum``).

A multi-level scan: level 0 scans blocks of 1024 values and writes one total
per block into a scratch buffer; the totals are scanned the same way, level by
level, until one block remains; then each level's scanned totals are added
back to the level below. For n = 2^24 that is 3 scan and 2 add dispatches,
each depending on the one before. The grand total ends in ``total_offset``.
"""

from __future__ import annotations

import numpy as np

from spirula.contract.constants import shader_constant

BLOCK = shader_constant("prefix_sum.comp", "BLOCK")  # values per workgroup (shaders/prefix_sum.comp)


def level_sizes(n: int) -> list:
    """Values scanned at each level: [n, ceil(n/1024), ..., 1]."""
    sizes = [max(int(n), 1)]
    while sizes[-1] > 1:
        sizes.append(-(-sizes[-1] // BLOCK))
    if len(sizes) == 1:
        sizes.append(1)
    return sizes


class PrefixSum:
    """Records an in-place exclusive prefix sum of up to ``capacity`` uint32
    (or float32, ``dtype=np.float32``: sums then depend on the order).

    The scratch buffer (category ``other``, marked scratch) holds every
    level's block totals; it grows with :meth:`reserve`.
    """

    def __init__(self, device, capacity: int = BLOCK, name: str = "scan.scratch", dtype=np.uint32):
        self.device = device
        self.float = np.dtype(dtype) == np.float32
        self.capacity = 0
        self.scratch = device.pool.alloc(name, (self._scratch_words(capacity),), dtype, scratch=True)
        self.capacity = capacity

    @staticmethod
    def _scratch_words(n: int) -> int:
        return sum(level_sizes(n)[1:])

    def reserve(self, n: int) -> bool:
        """Make room for n values; True if the scratch was reallocated."""
        if n <= self.capacity:
            return False
        self.capacity = max(n, int(self.capacity * 1.5))
        return self.device.pool.resize(self.scratch, (self._scratch_words(self.capacity),), keep=False)

    def total_offset(self, n: int) -> int:
        """Word offset in ``scratch`` of the grand total after a scan of n values."""
        return self._scratch_words(n) - 1

    def record(self, rec, data, n: int, data_offset: int = 0):
        """Record the scan of ``data[data_offset : data_offset + n]`` (uint32, in place)."""
        if n > self.capacity:
            raise ValueError("prefix sum of %d values exceeds the reserved %d" % (n, self.capacity))
        sizes = level_sizes(n)
        # offsets[k]: where level k's values live (level 0: the data itself)
        offsets = [data_offset]
        o = 0
        for size in sizes[1:]:
            offsets.append(o)
            o += size
        bufs = [data] + [self.scratch] * (len(sizes) - 1)
        for k in range(len(sizes) - 1):
            rec.dispatch(
                "prefix_sum",
                groups=sizes[k + 1],
                buffers=dict(data=bufs[k], sums=self.scratch),
                push=dict(n=sizes[k] if k else n, data_offset=offsets[k], sums_offset=offsets[k + 1]),
                spec=dict(PHASE=0),
                defines=dict(FLOAT=int(self.float)),
            )
        for k in range(len(sizes) - 3, -1, -1):
            rec.dispatch(
                "prefix_sum",
                groups=sizes[k + 1],
                buffers=dict(data=bufs[k], sums=self.scratch),
                push=dict(n=sizes[k] if k else n, data_offset=offsets[k], sums_offset=offsets[k + 1]),
                spec=dict(PHASE=1),
                defines=dict(FLOAT=int(self.float)),
            )
