"""radix_sort_count / radix_sort_scatter: a stable sort, exact, any key width."""

import numpy as np
import pytest

from spirula.render.sort import RadixSort


def _check_sort(device, keys, bits, capacity):
    """Sorts (keys, their indices) on the device, the count read from the GPU
    (count_offset 1), dispatched for ``capacity`` pairs; checks it against
    numpy's stable argsort."""
    n = len(keys)
    bufs = [device.pool.alloc("test.sort%d" % i, (n,), np.uint32) for i in range(4)]
    count = device.pool.alloc("test.sort.count", (2,), np.uint32)
    device.upload(bufs[0], keys)
    device.upload(bufs[1], np.arange(n, dtype=np.uint32))
    device.upload(count, np.array([0, n], np.uint32))
    sort = RadixSort(device, capacity)
    rec = device.recorder()
    out_k, out_v = sort.record(rec, *bufs, capacity, bits, count, count_offset=1)
    rec.finish().run()
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(device.readback(out_k), keys[order])
    assert np.array_equal(device.readback(out_v), order.astype(np.uint32))
    for b in bufs + [count, sort.hist, sort.scan.scratch]:
        device.pool.free(b)


@pytest.mark.parametrize("n,bits", [(1, 32), (2047, 32), (2048 * 5 + 123, 12), (70_001, 20), (4096, 8), (3000, 1)])
def test_radix_sort_is_stable_and_exact(device, n, bits):
    rng = np.random.default_rng(n + bits)
    keys = rng.integers(0, 1 << bits, n, dtype=np.uint64).astype(np.uint32)
    keys[: n // 2] = keys[: n // 2] % 7  # many ties
    _check_sort(device, keys, bits, n + 100)


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


@pytest.mark.parametrize(
    "sizes",
    [
        (8, 128),  # the shader's defaults: 16 subgroup rows of 16-bit counts
        (4, 8),  # 32 rows of 8-bit counts (subgroups of at most 8 lanes)
        (8, 8),  # 16 rows of 8-bit counts
    ],
)
def test_radix_sort_scatter_for_each_layout_of_its_subgroup_counts(device, monkeypatch, sizes):
    """radix_sort_scatter sizes its per-subgroup digit counts from the device's
    subgroup sizes (SUBGROUP_SIZE_MIN/MAX); every layout that admits this
    device's subgroups sorts the same."""
    lo, hi = device.info.subgroup_size_range
    if not (sizes[0] <= lo and hi <= sizes[1]):
        pytest.skip("this device runs subgroups of %d..%d lanes" % (lo, hi))
    monkeypatch.setitem(device.defines, "SUBGROUP_SIZE_MIN", sizes[0])
    monkeypatch.setitem(device.defines, "SUBGROUP_SIZE_MAX", sizes[1])
    n = 2048 * 3 + 777
    keys = np.random.default_rng(7).integers(0, 1 << 16, n, dtype=np.uint32)
    keys[2048:4096] = 5  # one block of one key: a digit's count is a slice's whole size
    _check_sort(device, keys, 16, n)
