"""Stable GPU radix sort of (uint32 key, uint32 value) pairs.

LSD radix sort with 8-bit digits: per pass, ``radix_sort_count`` builds a
digit-major histogram per block of 2048 keys, ``prefix_sum`` turns it into
output offsets, and ``radix_sort_scatter`` moves each key stably (each
subgroup ranks a slice of the block, the block is put in digit order in
shared memory and written out in runs of consecutive addresses). Only the
bits that vary are sorted (``bits``), so the tile sort of the rasterizer
takes 2 passes and the depth sort 4. The number of keys is read on the GPU
(from ``count_buf[count_offset]``), so a sequence can be recorded before the
count is known; dispatches are sized for ``capacity`` keys and surplus blocks
return at once. No 64-bit integers, no float atomics, any subgroup size.
"""

from __future__ import annotations

import numpy as np

from spirula.contract.constants import shader_constant
from spirula.render.scan import PrefixSum

# the kernels' own (shaders/include/radix.glsl): bits a pass sorts, its digits, keys per workgroup
RADIX_BITS = shader_constant("include/radix.glsl", "RADIX_BITS")
RADIX = shader_constant("include/radix.glsl", "RADIX")
BLOCK = shader_constant("include/radix.glsl", "SORT_BLOCK")


def num_blocks(capacity: int) -> int:
    return max(1, -(-int(capacity) // BLOCK))


class RadixSort:
    """Sorts up to ``capacity`` pairs; owns the histogram and its scan.

    The histogram and scan scratch are scratch buffers of the pool (shown as
    scratch in the VRAM report); :meth:`reserve` grows them.
    """

    def __init__(self, device, capacity: int, name: str = "sort"):
        self.device = device
        self.name = name
        self.capacity = max(int(capacity), 1)
        blocks = num_blocks(self.capacity)
        self.hist = device.pool.alloc(name + ".hist", (RADIX * blocks,), np.uint32, scratch=True)
        self.scan = PrefixSum(device, RADIX * blocks, name=name + ".scan")

    def reserve(self, capacity: int) -> bool:
        """Room for ``capacity`` pairs; True if buffers were reallocated."""
        if capacity <= self.capacity:
            return False
        self.capacity = max(int(capacity), int(self.capacity * 1.5))
        blocks = num_blocks(self.capacity)
        grew = self.device.pool.resize(self.hist, (RADIX * blocks,), keep=False)
        grew |= self.scan.reserve(RADIX * blocks)
        return grew

    def record(
        self, rec, keys, values, keys_tmp, values_tmp, capacity: int, bits: int, count_buf, count_offset: int = 0
    ):
        """Record the sort of the first n = min(count_buf[count_offset], capacity)
        pairs of (keys, values) by the low ``bits`` bits of the keys.

        Returns (keys, values) buffers holding the sorted pairs: the inputs
        after an even number of passes, the temporaries after an odd one.
        """
        if capacity > self.capacity:
            raise ValueError("%s: sort of %d pairs exceeds the reserved %d" % (self.name, capacity, self.capacity))
        blocks = num_blocks(capacity)
        passes = max(1, -(-int(bits) // RADIX_BITS))
        src = (keys, values)
        dst = (keys_tmp, values_tmp)
        for p in range(passes):
            push = dict(n_max=capacity, count_offset=count_offset, shift=RADIX_BITS * p, num_blocks=blocks)
            rec.dispatch("radix_sort_count", blocks, dict(keys=src[0], num_keys=count_buf, hist=self.hist), push=push)
            self.scan.record(rec, self.hist, RADIX * blocks)
            rec.dispatch(
                "radix_sort_scatter",
                blocks,
                dict(
                    keys_in=src[0], vals_in=src[1], hist=self.hist, num_keys=count_buf, keys_out=dst[0], vals_out=dst[1]
                ),
                push=push,
            )
            src, dst = dst, src
        return src
