"""The buffer pool and the four transfer operations (upload, readback, copy, fill)."""

import numpy as np
import pytest

from spirula.errors import OutOfMemoryError
from spirula.runtime.buffers import CATEGORIES, NAN_WORD

DTYPES = [np.float32, np.int32, np.uint32, np.uint8, np.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_upload_readback_round_trip_is_exact(device, dtype):
    rng = np.random.default_rng(1)
    n = 4 * 1237  # a whole number of 32-bit words for every dtype
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    data = (
        rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
        if info
        else rng.standard_normal(n).astype(dtype)
    )
    buf = device.pool.alloc("test.roundtrip", (n,), dtype)
    device.upload(buf, data)
    got = device.readback(buf)
    assert got.dtype == np.dtype(dtype) and got.shape == (n,)
    assert got.tobytes() == data.tobytes()
    device.pool.free(buf)


def test_new_buffers_are_poisoned_with_nan_in_tests(device):
    buf = device.pool.alloc("test.poison", (37,), np.float32)
    assert np.all(np.isnan(device.readback(buf)))
    assert device.readback(buf, dtype=np.uint32)[0] == NAN_WORD
    device.pool.free(buf)


def test_upload_and_readback_at_offsets(device):
    buf = device.pool.alloc("test.offsets", (100,), np.uint32, zero=True)
    device.upload(buf, np.arange(10, dtype=np.uint32), offset=4 * 33)
    got = device.readback(buf)
    assert np.array_equal(got[33:43], np.arange(10)) and got[:33].sum() == 0 and got[43:].sum() == 0
    assert np.array_equal(device.readback(buf, shape=(5,), offset=4 * 35), np.arange(2, 7))
    device.pool.free(buf)


def test_transfer_larger_than_staging_goes_in_chunks(device, monkeypatch):
    from spirula.backends.vulkan import device as devmod

    monkeypatch.setattr(devmod, "STAGING_MAX_BYTES", 4096)
    data = np.arange(10_000, dtype=np.float32)
    buf = device.pool.alloc("test.chunks", data.shape, np.float32)
    device.upload(buf, data)
    assert np.array_equal(device.readback(buf), data)
    device.pool.free(buf)


@pytest.mark.parametrize("n,offset", [(1000, 0), (1001, 3), (4096, 16), (7, 1)])
def test_fill_sets_exactly_the_range(device, n, offset):
    buf = device.pool.alloc("test.fill", (n + offset + 5,), np.uint32, zero=True)
    device.fill(buf, 0xDEADBEEF, nbytes=4 * n, offset=4 * offset)
    got = device.readback(buf)
    expect = np.zeros(n + offset + 5, np.uint32)
    expect[offset : offset + n] = 0xDEADBEEF
    assert np.array_equal(got, expect)
    device.fill(buf, 1.5)
    assert np.all(device.readback(buf, dtype=np.float32) == 1.5)
    device.pool.free(buf)


@pytest.mark.parametrize("n,src_off,dst_off", [(4096, 0, 0), (1001, 2, 5), (64, 4, 8)])
def test_copy_moves_exactly_the_range(device, n, src_off, dst_off):
    src = device.pool.alloc("test.src", (n + src_off,), np.uint32)
    dst = device.pool.alloc("test.dst", (n + dst_off + 3,), np.uint32, zero=True)
    data = np.arange(n + src_off, dtype=np.uint32) * 7
    device.upload(src, data)
    device.copy(src, dst, nbytes=4 * n, src_offset=4 * src_off, dst_offset=4 * dst_off)
    got = device.readback(dst)
    assert np.array_equal(got[dst_off : dst_off + n], data[src_off:])
    assert got[:dst_off].sum() == 0 and got[dst_off + n :].sum() == 0
    device.pool.free(src)
    device.pool.free(dst)


def test_out_of_range_transfer_is_refused(device):
    buf = device.pool.alloc("test.range", (8,), np.float32)
    with pytest.raises(ValueError, match="outside"):
        device.upload(buf, np.zeros(16, np.float32))
    with pytest.raises(ValueError, match="multiples of 4"):
        device.readback(buf, shape=(3,), dtype=np.uint8)
    device.pool.free(buf)
    with pytest.raises(ValueError, match="freed"):
        device.readback(buf)


def test_resize_within_capacity_keeps_the_tensor(device):
    buf = device.pool.alloc("test.resize", (10,), np.float32, capacity=4096)
    tensor = buf.tensor
    assert device.pool.resize(buf, (1000,)) is False
    assert buf.tensor is tensor and buf.version == 0 and buf.shape == (1000,)
    device.pool.free(buf)


def test_growth_reallocates_with_headroom_and_keeps_contents(device):
    buf = device.pool.alloc("test.grow", (100,), np.float32)
    data = np.arange(100, dtype=np.float32)
    device.upload(buf, data)
    rec = device.recorder("uses test.grow")
    rec.fill(buf, 0.0)
    seq = rec.finish()
    assert not seq.stale
    assert device.pool.resize(buf, (1000,)) is True
    assert buf.version == 1 and buf.capacity >= 1000 * 4
    assert np.array_equal(device.readback(buf)[:100], data)
    assert seq.stale
    with pytest.raises(RuntimeError, match="record it again"):
        seq.run()
    cap = buf.capacity
    device.pool.resize(buf, (1001,))  # within the headroom: no new tensor
    assert buf.capacity == cap and buf.version == 1
    device.pool.free(buf)


def test_pool_accounts_bytes_by_category_and_keeps_the_high_water(device):
    pool = device.pool
    before = pool.usage()
    a = pool.alloc("test.acct.a", (1 << 16,), np.float32, category="splat")
    b = pool.alloc("test.acct.b", (1000,), np.uint32, category="image", capacity=1 << 14)
    use = pool.usage()
    n0, used0, cap0 = before.get("splat", (0, 0, 0))
    assert use["splat"] == (n0 + 1, used0 + (1 << 18), cap0 + (1 << 18))
    n1, used1, cap1 = before.get("image", (0, 0, 0))
    assert use["image"] == (n1 + 1, used1 + 4000, cap1 + (1 << 14))
    high = pool.total_capacity()
    pool.free(a)
    pool.free(b)
    assert pool.total_capacity() == high - (1 << 18) - (1 << 14)
    assert sum(c for _, _, c in pool.high_water["categories"].values()) >= high
    with pytest.raises(ValueError, match="category"):
        pool.alloc("test.bad", (4,), np.float32, category="nope")
    assert "splat x img" in CATEGORIES


def test_a_buffer_past_the_device_binding_limit_is_a_clear_error(device):
    limit = device.info.max_storage_buffer_range
    with pytest.raises(OutOfMemoryError, match=r"test\.huge.*binds at most"):
        device.pool.alloc("test.huge", (limit // 4 + 16,), np.float32)
