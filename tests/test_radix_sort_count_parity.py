"""radix_sort_count on CUDA (native_cuda/radix_sort_count.cu, hand-written: shared-memory
histograms) against Vulkan (tests/parity_cases.py says how they are compared)."""

import numpy as np
import pytest
from kernel_cases import assert_exact
from parity_cases import both

pytestmark = pytest.mark.cuda


def test_radix_sort_count_is_exact(backends):
    n, blocks = 2048 * 3 + 517, 5  # one block past the keys writes zeros
    keys = np.random.default_rng(1).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    for shift in (0, 24):
        vk_out, cu_out = both(
            backends,
            "radix_sort_count",
            blocks,
            dict(keys=keys, num_keys=np.array([0, n], np.uint32)),
            dict(hist=((256 * blocks,), np.uint32)),
            push=dict(n_max=n + 5, count_offset=1, shift=shift, num_blocks=blocks),
        )
        assert_exact(cu_out["hist"], vk_out["hist"], "hist")
        digits = (keys >> shift) & 255
        want = np.zeros((256, blocks), np.uint32)
        np.add.at(want, (digits, np.arange(n) // 2048), 1)
        assert np.array_equal(cu_out["hist"].reshape(256, blocks), want)
