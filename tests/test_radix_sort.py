"""radix_sort_count / radix_sort_scatter: a stable sort, exact, any key width."""

import numpy as np
import pytest

from spirula.render.sort import RadixSort


@pytest.mark.parametrize("n,bits", [(1, 32), (2047, 32), (2048 * 5 + 123, 12), (70_001, 20), (4096, 8), (3000, 1)])
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
    for b in bufs + [count, sort.hist, sort.scan.scratch]:
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
