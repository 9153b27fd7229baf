"""prefix_sum on CUDA (native_cuda/prefix_sum.cu, hand-written: warp shuffles) against Vulkan
(tests/parity_cases.py says how they are compared)."""

import numpy as np
import pytest
from kernel_cases import assert_exact
from parity_cases import R_PLAIN, assert_close

from spirula.render.scan import PrefixSum

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("n", [1, 1000, 1024 * 5 + 123, 1_100_000])
def test_prefix_sum_is_exact(backends, n):
    values = np.random.default_rng(n).integers(0, 16, n).astype(np.uint32)
    results = []
    for dev in backends:
        data = dev.pool.alloc("parity.scan", (n,), np.uint32)
        dev.upload(data, values)
        scan = PrefixSum(dev, n, name="parity.scan.scratch")
        rec = dev.recorder("parity.scan")
        scan.record(rec, data, n)
        rec.finish().run()
        total = dev.readback(scan.scratch, shape=(1,), offset=4 * scan.total_offset(n))
        results.append((dev.readback(data), total))
        dev.pool.free(data)
        dev.pool.free(scan.scratch)
    (vd, vt), (cd, ct) = results
    assert_exact(cd, vd, "scan")
    assert_exact(ct, vt, "total")
    assert np.array_equal(cd, np.cumsum(values, dtype=np.uint64)[:n].astype(np.uint32) - values)
    assert int(ct[0]) == int(values.sum())


def test_prefix_sum_of_floats_matches(backends):
    """FLOAT=1: the block sums add in another order (warp scans on both, with
    their own shuffles), so the plain-arithmetic tolerance applies."""
    n = 1024 * 3 + 77
    values = np.random.default_rng(5).uniform(0, 1, n).astype(np.float32)
    results = []
    for dev in backends:
        data = dev.pool.alloc("parity.fscan", (n,), np.float32)
        dev.upload(data, values)
        scan = PrefixSum(dev, n, name="parity.fscan.scratch", dtype=np.float32)
        rec = dev.recorder("parity.fscan")
        scan.record(rec, data, n)
        rec.finish().run()
        results.append(dev.readback(data))
        dev.pool.free(data)
        dev.pool.free(scan.scratch)
    assert_close(results[1], results[0], R_PLAIN, "float scan")
    assert_close(results[1], np.cumsum(values, dtype=np.float64) - values, R_PLAIN, "float scan vs numpy")
