"""copy and fill (the runtime's transfers through staging memory, and the recorder's copies
and fills) against numpy, on each backend: bit for bit, word and vec4 variants, a folded
grid (the grid-stride step is the whole dispatch: gl_NumWorkGroups.x * .y * 256)."""

import numpy as np
import pytest
from kernel_cases import assert_exact, run_kernel


@pytest.mark.parametrize("nwords,offset", [(3001, 3), (4096 + 16, 8)], ids=["scalar", "vec4"])
def test_recorded_copy_and_fill_are_bit_exact(backend, nwords, offset):
    rng = np.random.default_rng(nwords)
    src = rng.integers(0, 2**32, nwords + 2 * offset, dtype=np.uint64).astype(np.uint32)
    a = backend.pool.alloc("test.copy.src", src.shape, np.uint32)
    b = backend.pool.alloc("test.copy.dst", src.shape, np.uint32)
    c = backend.pool.alloc("test.fill.dst", src.shape, np.float32)
    backend.upload(a, src)
    rec = backend.recorder("test.copy")
    d = offset // 2 * 2
    rec.copy(a, b, nbytes=4 * nwords, src_offset=4 * offset, dst_offset=4 * d)
    rec.fill(c, -1.5, nbytes=4 * nwords, offset=4 * offset)
    rec.finish().run()
    copied, filled = backend.readback(b), backend.readback(c)
    for buf in (a, b, c):
        backend.pool.free(buf)
    assert_exact(copied[d : d + nwords], src[offset : offset + nwords], "copy")
    assert (filled[offset : offset + nwords] == -1.5).all()


def test_copy_and_fill_kernels_with_a_folded_grid_are_bit_exact(backend):
    n = 50_000
    src = np.arange(n, dtype=np.uint32) * 7
    out = run_kernel(
        backend,
        "copy",
        (5, 3, 1),
        dict(src=src),
        dict(dst=((n,), np.uint32)),
        push=dict(src_offset=0, dst_offset=0, count=n),
        defines=dict(VEC4=0),
    )
    assert_exact(out["dst"], src, "copy")
    count = (n - 16) // 4
    out = run_kernel(
        backend,
        "fill",
        (2, 2, 1),
        {},
        dict(dst=((n,), np.uint32)),
        push=dict(offset=4, count=count, value=99),
        defines=dict(VEC4=1),
    )
    assert (out["dst"][16 : 16 + 4 * count] == 99).all()  # offset and count in uvec4s
    out = run_kernel(
        backend,
        "copy",
        (3, 1, 1),
        dict(src=src),
        dict(dst=((n,), np.uint32)),
        push=dict(src_offset=2, dst_offset=1, count=count),
        defines=dict(VEC4=1),
    )
    assert_exact(out["dst"][4 : 4 + 4 * count], src[8 : 8 + 4 * count], "copy vec4")
