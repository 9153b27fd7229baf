"""prefix_sum: the multi-level exclusive scan against numpy, exact."""

import numpy as np
import pytest

from spirula.render.scan import PrefixSum, level_sizes


def _exclusive_scan(x):
    out = np.zeros_like(x)
    np.cumsum(x[:-1], dtype=np.uint32, out=out[1:])
    return out


@pytest.mark.parametrize("n", [0, 1, 7, 1023, 1024, 1025, 512 * 16 + 123, 1024 * 1024 + 5, 1 << 24])
def test_prefix_sum_matches_numpy_exactly(device, n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 1 << 32, max(n, 1), dtype=np.uint64).astype(np.uint32)  # wraps mod 2^32
    buf = device.pool.alloc("test.scan", (max(n, 1),), np.uint32)
    device.upload(buf, x)
    scan = PrefixSum(device, max(n, 1))
    rec = device.recorder("scan")
    scan.record(rec, buf, n)
    seq = rec.finish()
    seq.run()
    got = device.readback(buf)
    assert np.array_equal(got[:n], _exclusive_scan(x[:n]))
    total = device.readback(scan.scratch)[scan.total_offset(n)]
    assert total == np.uint32(int(x[:n].astype(np.uint64).sum()) % (1 << 32))
    assert seq.dispatches == 2 * len(level_sizes(n)) - 3
    device.pool.free(buf)
    device.pool.free(scan.scratch)


def test_prefix_sum_at_an_offset_leaves_the_rest_alone(device):
    x = np.arange(5000, dtype=np.uint32)
    buf = device.pool.alloc("test.scan.off", x.shape, np.uint32)
    device.upload(buf, x)
    scan = PrefixSum(device, 3000)
    rec = device.recorder()
    scan.record(rec, buf, 3000, data_offset=1000)
    rec.finish().run()
    got = device.readback(buf)
    assert np.array_equal(got[:1000], x[:1000]) and np.array_equal(got[4000:], x[4000:])
    assert np.array_equal(got[1000:4000], _exclusive_scan(x[1000:4000]))
    with pytest.raises(ValueError, match="exceeds"):
        scan.record(device.recorder(), buf, 3001)
    assert scan.reserve(4000) is True and scan.capacity >= 4000
