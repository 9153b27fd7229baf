"""radix_sort_count / radix_sort_scatter: a stable sort, exact, any key width."""

import numpy as np
import pytest

from spirula.render.sort import RadixSort, digit_widths


# keys that need 1 (bits 1, 6, 8), 2 (12, 16), 3 (20, 24) and 4 (32) passes
@pytest.mark.parametrize(
    "n,bits",
    [(1, 32), (2047, 32), (2048 * 5 + 123, 12), (70_001, 20), (4096, 8), (3000, 1), (2500, 6), (5000, 16), (9000, 24)],
)
def test_radix_sort_is_stable_and_exact(device, n, bits):
    rng = np.random.default_rng(n + bits)
    keys = rng.integers(0, 1 << bits, n, dtype=np.uint64).astype(np.uint32)
    keys[: n // 2] = keys[: n // 2] % 7  # many ties
    vals = np.arange(n, dtype=np.uint32)
    bufs = [device.pool.alloc("test.sort%d" % i, (n,), np.uint32) for i in range(4)]
    count = device.pool.alloc("test.sort.count", (2,), np.uint32)
    device.upload(bufs[0], keys)
    device.upload(bufs[1], vals)
    device.upload(count, np.array([0, n], np.uint32))
    sort = RadixSort(device, n + 100)
    rec = device.recorder()
    out_k, out_v = sort.record(rec, *bufs, n + 100, bits, count, count_offset=1)
    rec.finish().run()
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(device.readback(out_k), keys[order])
    assert np.array_equal(device.readback(out_v), order.astype(np.uint32))
    for b in bufs + [count] + sort.buffers():
        device.pool.free(b)


def test_sort_reads_the_key_count_on_the_gpu(device):
    """Dispatched for 10,000 keys, told 5,000: the rest is left untouched."""
    n, cap = 5000, 10_000
    keys = np.arange(cap, dtype=np.uint32)[::-1].copy()
    bufs = [device.pool.alloc("test.sortc%d" % i, (cap,), np.uint32) for i in range(4)]
    count = device.pool.alloc("test.sortc.count", (1,), np.uint32)
    device.upload(bufs[0], keys)
    device.upload(bufs[1], keys)
    device.upload(count, np.array([n], np.uint32))
    device.fill(bufs[2], 0xFFFFFFFF)
    sort = RadixSort(device, cap)
    rec = device.recorder()
    out_k, _ = sort.record(rec, *bufs, cap, 16, count)
    rec.finish().run()
    got = device.readback(out_k)
    assert np.array_equal(got[:n], np.sort(keys[:n]))


def test_digit_widths_are_balanced():
    assert digit_widths(1) == [1]
    assert digit_widths(8) == [8]
    assert digit_widths(9) == [5, 4]
    assert digit_widths(12) == [6, 6]  # the rasterizer's tile sort at raster_bench's 4,056 tiles
    assert digit_widths(20) == [7, 7, 6]
    assert digit_widths(32) == [8, 8, 8, 8]
    for bits in range(1, 33):
        w = digit_widths(bits)
        assert sum(w) == bits and len(w) == -(-bits // 8) and max(w) - min(w) <= 1 and max(w) <= 8


def _sort(device, keys, capacity, drop_max):
    """Sort ``keys`` (values: their indices) with a sort dispatched for
    ``capacity`` keys; returns the whole output buffers (keys, values)."""
    n = keys.size
    size = max(capacity, 1)
    bufs = [device.pool.alloc("test.sortd%d" % i, (size,), np.uint32) for i in range(4)]
    count = device.pool.alloc("test.sortd.count", (1,), np.uint32)
    for b in bufs:
        device.fill(b, 0x12345678)
    if n:
        device.upload(bufs[0], keys)
        device.upload(bufs[1], np.arange(n, dtype=np.uint32))
    device.upload(count, np.array([n], np.uint32))
    sort = RadixSort(device, size)
    rec = device.recorder()
    out_k, out_v = sort.record(rec, *bufs, size, 32, count, drop_max=drop_max)
    rec.finish().run()
    got = device.readback(out_k), device.readback(out_v)
    for b in bufs + [count] + sort.buffers():
        device.pool.free(b)
    return got


@pytest.mark.parametrize(
    "n,culled",
    [(0, 0.0), (1, 0.0), (1, 1.0), (2, 0.5), (2048, 0.5), (2049, 0.3), (5000, 1.0), (9000, 0.0), (20_011, 0.45)],
)
def test_drop_max_sorts_as_a_full_sort(device, n, culled):
    """The depth sort's culled keys (0xffffffff) set aside after the first
    pass: the same output as the full 32-bit sort, keys and order, over the
    whole count, for none, some or all keys culled and counts of 0 and 1."""
    rng = np.random.default_rng(n + int(100 * culled))
    depth = rng.uniform(0.01, 50.0, n).astype(np.float32)
    depth[: n // 3] = np.round(depth[: n // 3])  # ties
    keys = depth.view(np.uint32).copy()
    keys[rng.random(n) < culled] = 0xFFFFFFFF
    cap = n + 3000  # more blocks dispatched than keys
    got_k, got_v = _sort(device, keys, cap, drop_max=True)
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(got_k[:n], keys[order])
    assert np.array_equal(got_v[:n], order.astype(np.uint32))
    want_k, want_v = _sort(device, keys, cap, drop_max=False)
    assert np.array_equal(got_k[:n], want_k[:n]) and np.array_equal(got_v[:n], want_v[:n])


def test_drop_max_needs_32_bits(device):
    sort = RadixSort(device, 16)
    with pytest.raises(ValueError, match="32-bit"):
        sort.record(device.recorder(), None, None, None, None, 16, 20, None, drop_max=True)
    for b in sort.buffers():
        device.pool.free(b)


@pytest.mark.parametrize("width,shift,drop", [(6, 0, 0), (6, 6, 0), (8, 24, 1), (3, 29, 1)])
def test_histogram_pass_equals_numpy(device, width, shift, drop):
    """radix_sort_count of one digit of ``width`` bits (plus the dropped-key
    slot with drop) equals numpy's histogram per block of 2048 keys; blocks
    past the count write zeros."""
    n, blocks = 2048 * 2 + 77, 4
    keys = np.random.default_rng(width + shift).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    keys[::7] = 0xFFFFFFFF
    slots = (1 << width) + drop
    kb = device.pool.alloc("test.hist.keys", (n,), np.uint32)
    cb = device.pool.alloc("test.hist.count", (1,), np.uint32)
    hb = device.pool.alloc("test.hist", (slots * blocks,), np.uint32)
    device.upload(kb, keys)
    device.upload(cb, np.array([n], np.uint32))
    device.fill(hb, 0xFFFFFFFF)
    rec = device.recorder()
    push = dict(n_max=n, count_offset=0, shift=shift, num_blocks=blocks, digit_bits=width, drop=drop)
    rec.dispatch("radix_sort_count", blocks, dict(keys=kb, num_keys=cb, hist=hb), push=push)
    rec.finish().run()
    digits = (keys >> shift) & ((1 << width) - 1)
    if drop:
        digits[keys == 0xFFFFFFFF] = 1 << width
    want = np.zeros((slots, blocks), np.uint32)
    np.add.at(want, (digits, np.arange(n) // 2048), 1)
    assert np.array_equal(device.readback(hb).reshape(slots, blocks), want)
    for b in (kb, cb, hb):
        device.pool.free(b)
