"""radix_sort_scatter on CUDA (native_cuda/radix_sort_scatter.cu, hand-written: warp ballots)
against Vulkan (tests/parity_cases.py says how they are compared)."""

import numpy as np
import pytest
from kernel_cases import assert_exact
from parity_cases import both

pytestmark = pytest.mark.cuda


def test_radix_sort_scatter_is_exact_and_stable(backends):
    n, blocks, shift = 2048 * 2 + 999, 3, 8
    rng = np.random.default_rng(2)
    keys = rng.integers(0, 2**16, n).astype(np.uint32)
    keys[: n // 3] &= 0x0300  # many equal digits
    vals = np.arange(n, dtype=np.uint32) * 3
    digits = (keys >> shift) & 255
    hist = np.zeros((256, blocks), np.uint64)
    np.add.at(hist, (digits, np.arange(n) // 2048), 1)
    flat = hist.reshape(-1)
    offsets = (np.cumsum(flat) - flat).astype(np.uint32)
    vk_out, cu_out = both(
        backends,
        "radix_sort_scatter",
        blocks,
        dict(keys_in=keys, vals_in=vals, hist=offsets, num_keys=np.array([n], np.uint32)),
        dict(keys_out=((n,), np.uint32), vals_out=((n,), np.uint32)),
        push=dict(n_max=n, count_offset=0, shift=shift, num_blocks=blocks),
    )
    assert_exact(cu_out["keys_out"], vk_out["keys_out"], "keys_out")
    assert_exact(cu_out["vals_out"], vk_out["vals_out"], "vals_out")
    order = np.argsort(digits, kind="stable")
    assert np.array_equal(cu_out["vals_out"], vals[order])
