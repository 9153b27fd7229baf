"""Stable GPU radix sort of (uint32 key, uint32 value) pairs.

LSD radix sort with digits of at most 8 bits: per pass, ``radix_sort_count``
builds a digit-major histogram per block of 2048 keys, ``prefix_sum`` turns
it into output offsets, and ``radix_sort_scatter`` moves each key stably.
Only the bits that vary are sorted (``bits``), in ceil(bits / 8) passes of
equal width (:func:`digit_widths`): the rasterizer's tile sort of 12 bits
takes 2 passes of 6 bits (64-digit histograms, a quarter of the scan work of
8 + 4 bits), the depth sort 4 of 8.

``drop_max`` (32-bit sorts): the first pass puts every key 0xffffffff (the
largest key, so its place is the end, in input order) after the others, and
the later passes sort only the others; the last of an even number of passes
copies the set-aside pairs into the output. The depth sort's culled splats
carry that key, so 3 of its 4 passes see only the visible ones.

The number of keys is read on the GPU (from ``count_buf[count_offset]``), so
a sequence can be recorded before the count is known; dispatches are sized
for ``capacity`` keys and surplus blocks return at once. No 64-bit integers,
no float atomics, any subgroup size.
"""

from __future__ import annotations

import numpy as np

from spirula.render.scan import PrefixSum

RADIX_BITS = 8  # the widest digit (shaders/include/radix.glsl)
RADIX_SLOTS = (1 << RADIX_BITS) + 1  # histogram rows: the digits and the dropped keys
BLOCK = 2048  # keys per workgroup (shaders/include/radix.glsl)
DROPPED_KEY = 0xFFFFFFFF


def num_blocks(capacity: int) -> int:
    return max(1, -(-int(capacity) // BLOCK))


def digit_widths(bits: int) -> list:
    """The digit width of each pass, low digit first: ceil(bits / 8) passes,
    as equal as can be (12 -> [6, 6], 20 -> [7, 7, 6], 32 -> [8, 8, 8, 8])."""
    bits = max(1, int(bits))
    passes = -(-bits // RADIX_BITS)
    return [bits // passes + (1 if p < bits % passes else 0) for p in range(passes)]


class RadixSort:
    """Sorts up to ``capacity`` pairs; owns the histogram and its scan.

    The histogram, scan scratch and ``live`` (the kept-key count after a
    ``drop_max`` first pass, and n) are scratch buffers of the pool (shown as
    scratch in the VRAM report); :meth:`reserve` grows them.
    """

    def __init__(self, device, capacity: int, name: str = "sort"):
        self.device = device
        self.name = name
        self.capacity = max(int(capacity), 1)
        blocks = num_blocks(self.capacity)
        self.hist = device.pool.alloc(name + ".hist", (RADIX_SLOTS * blocks,), np.uint32, scratch=True)
        self.live = device.pool.alloc(name + ".live", (2,), np.uint32, scratch=True)
        self.scan = PrefixSum(device, RADIX_SLOTS * blocks, name=name + ".scan")

    def buffers(self) -> list:
        """The buffers this sort owns (to free them)."""
        return [self.hist, self.live, self.scan.scratch]

    def reserve(self, capacity: int) -> bool:
        """Room for ``capacity`` pairs; True if buffers were reallocated."""
        if capacity <= self.capacity:
            return False
        self.capacity = max(int(capacity), int(self.capacity * 1.5))
        blocks = num_blocks(self.capacity)
        grew = self.device.pool.resize(self.hist, (RADIX_SLOTS * blocks,), keep=False)
        grew |= self.scan.reserve(RADIX_SLOTS * blocks)
        return grew

    def record(
        self,
        rec,
        keys,
        values,
        keys_tmp,
        values_tmp,
        capacity: int,
        bits: int,
        count_buf,
        count_offset: int = 0,
        drop_max: bool = False,
    ):
        """Record the sort of the first n = min(count_buf[count_offset], capacity)
        pairs of (keys, values) by the low ``bits`` bits of the keys.

        ``drop_max`` (only with bits == 32): sort the keys 0xffffffff in the
        first pass only (same result, less work when many keys are
        0xffffffff). Returns (keys, values) buffers holding the sorted pairs:
        the inputs after an even number of passes, the temporaries after an
        odd one.
        """
        if capacity > self.capacity:
            raise ValueError("%s: sort of %d pairs exceeds the reserved %d" % (self.name, capacity, self.capacity))
        if drop_max and bits != 32:
            raise ValueError("%s: drop_max needs a 32-bit sort, not %d bits" % (self.name, bits))
        blocks = num_blocks(capacity)
        widths = digit_widths(bits)
        src = (keys, values)
        dst = (keys_tmp, values_tmp)
        shift = 0
        counts, offset = count_buf, count_offset
        for p, width in enumerate(widths):
            drop = int(drop_max and p == 0)
            tail = int(drop_max and p == len(widths) - 1 and len(widths) % 2 == 0)
            push = dict(n_max=capacity, count_offset=offset, shift=shift, num_blocks=blocks, digit_bits=width)
            rec.dispatch(
                "radix_sort_count",
                blocks,
                dict(keys=src[0], num_keys=counts, hist=self.hist),
                push=dict(push, drop=drop),
            )
            self.scan.record(rec, self.hist, ((1 << width) + drop) * blocks)
            rec.dispatch(
                "radix_sort_scatter",
                blocks,
                dict(
                    keys_in=src[0],
                    vals_in=src[1],
                    hist=self.hist,
                    num_keys=counts,
                    keys_out=dst[0],
                    vals_out=dst[1],
                    live=self.live,
                ),
                push=dict(push, drop=drop, tail=tail),
            )
            if drop:
                counts, offset = self.live, 0  # the later passes sort the kept keys
            src, dst = dst, src
            shift += width
        return src
