"""Recorded sequences: kernels against numpy, barrier placement, folding, chains."""

import numpy as np
import pytest

from spirula.runtime.sequence import Threads


def _saxpy(device, test_kernels, n, a, scale=1.0):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    bx = device.pool.alloc("test.x", (n,), np.float32)
    by = device.pool.alloc("test.y", (n,), np.float32)
    device.upload(bx, x)
    device.upload(by, y)
    rec = device.recorder("saxpy")
    rec.dispatch(
        test_kernels.get("saxpy"),
        groups=Threads(n),
        buffers=dict(x=bx, y=by),
        push=dict(n=n, a=a),
        spec=dict(SCALE=scale),
    )
    rec.finish().run()
    got = device.readback(by)
    device.pool.free(bx)
    device.pool.free(by)
    sax = np.float32(scale) * np.float32(a) * x
    return got, sax + y, np.maximum(np.abs(sax), np.abs(y))


@pytest.mark.parametrize("n", [1, 63, 1000, 4099])
def test_saxpy_kernel_matches_numpy(device, test_kernels, n):
    got, expect, mag = _saxpy(device, test_kernels, n, a=0.75, scale=2.0)
    # a fused multiply-add or separate roundings: the results differ by at most
    # an ulp of the larger term (2^-23 relative), x2 for the scale product
    assert np.all(np.abs(got - expect) <= 2**-22 * mag)


def test_dispatch_past_65535_workgroups_is_folded(device, test_kernels):
    n = 64 * 70_000 + 5  # 70,001 workgroups of 64
    assert device.fold_groups(70_001)[1] >= 1
    got, expect, mag = _saxpy(device, test_kernels, n, a=-1.25)
    assert np.all(np.abs(got - expect) <= 2**-22 * mag)


def test_long_chain_of_dependent_dispatches_is_exact(device, test_kernels):
    n, steps = 100_003, 500
    a = device.pool.alloc("test.chain.a", (n,), np.uint32)
    b = device.pool.alloc("test.chain.b", (n,), np.uint32)
    start = np.arange(n, dtype=np.uint32)
    device.upload(a, start)
    k = test_kernels.get("increment")
    rec = device.recorder("chain")
    for i in range(steps):
        src, dst = (a, b) if i % 2 == 0 else (b, a)
        rec.dispatch(k, groups=Threads(n), buffers=dict(src=src, dst=dst), push=dict(n=n))
    seq = rec.finish()
    assert seq.barriers == steps + 1  # one between each pair, plus the final one
    for rep in range(3):
        seq.run()
        assert np.array_equal(device.readback(a), start + (rep + 1) * steps)
    device.pool.free(a)
    device.pool.free(b)


def test_barriers_only_where_a_hazard_exists(device, test_kernels, monkeypatch):
    """A barrier where a dispatch reads or overwrites what an earlier one
    wrote or read; SPIRULA_BARRIER_ALL=1 (debugging) puts one before each."""
    k = test_kernels.get("increment")
    bufs = [device.pool.alloc("test.plan%d" % i, (16,), np.uint32, zero=True) for i in range(4)]
    a, b, c, d = bufs
    rec = device.recorder("plan")
    rec.dispatch(k, 1, dict(src=a, dst=b), push=dict(n=16))  # writes b
    rec.dispatch(k, 1, dict(src=c, dst=d), push=dict(n=16))  # independent: no barrier
    rec.dispatch(k, 1, dict(src=a, dst=c), push=dict(n=16))  # WAR on c: barrier
    rec.dispatch(k, 1, dict(src=b, dst=a), push=dict(n=16))  # WAR on a: barrier
    rec.dispatch(k, 1, dict(src=c, dst=d), push=dict(n=16))  # independent reads of c
    rec.dispatch(k, 1, dict(src=d, dst=b), push=dict(n=16))  # RAW on d: barrier
    plan = ["B" if op == "barrier" else "D" for op in rec.plan()]
    assert "".join(plan) == "BDDBDBDDBDB"
    monkeypatch.setenv("SPIRULA_BARRIER_ALL", "1")
    assert "".join("B" if op == "barrier" else "D" for op in rec.plan()) == "B" + "BD" * 6 + "B"
    for x in bufs:
        device.pool.free(x)


def test_wrong_or_missing_buffer_names_are_refused(device, test_kernels):
    x = device.pool.alloc("test.names", (4,), np.float32)
    rec = device.recorder()
    with pytest.raises(TypeError, match=r"missing buffers \['y'\]"):
        rec.dispatch(test_kernels.get("saxpy"), 1, dict(x=x), push=dict(n=4, a=1.0))
    with pytest.raises(TypeError, match="unknown buffers"):
        rec.dispatch(test_kernels.get("saxpy"), 1, dict(x=x, y=x, z=x), push=dict(n=4, a=1.0))
    device.pool.free(x)


def test_async_run_then_readback_waits_for_the_gpu(device, test_kernels):
    n = 4096
    a = device.pool.alloc("test.async.a", (n,), np.uint32, zero=True)
    b = device.pool.alloc("test.async.b", (n,), np.uint32)
    k = test_kernels.get("increment")
    rec = device.recorder("async")
    rec.dispatch(k, Threads(n), dict(src=a, dst=b), push=dict(n=n))
    rec.dispatch(k, Threads(n), dict(src=b, dst=a), push=dict(n=n))
    seq = rec.finish()
    seq.run_async()
    assert np.all(device.readback(a) == 2)  # readback syncs first
    seq.run_async()
    seq.wait()
    assert np.all(device.readback(a) == 4)
    device.pool.free(a)
    device.pool.free(b)


def test_recorded_copy_and_fill_inside_a_sequence(device):
    a = device.pool.alloc("test.rc.a", (1001,), np.float32)
    b = device.pool.alloc("test.rc.b", (1001,), np.float32)
    rec = device.recorder("copyfill")
    rec.fill(a, 3.0)
    rec.copy(a, b)
    rec.fill(a, 1.0, nbytes=8, offset=4)
    rec.finish().run()
    assert np.all(device.readback(b) == 3.0)
    got = device.readback(a)
    assert got[0] == 3.0 and got[1] == got[2] == 1.0 and np.all(got[3:] == 3.0)
    device.pool.free(a)
    device.pool.free(b)


def test_one_buffer_twice_in_a_restrict_kernel_is_refused(device):
    """tile_ranges declares its bindings restrict: the same buffer as its input
    keys and its output ranges would be undefined behaviour, so it is refused."""
    buf = device.pool.alloc("test.alias", (64,), np.uint32, zero=True)
    count = device.pool.alloc("test.alias_count", (4,), np.uint32, zero=True)
    rec = device.recorder("alias")
    with pytest.raises(ValueError, match="bound to both isect_keys and ranges"):
        rec.dispatch(
            "tile_ranges", 1, dict(isect_keys=buf, num_isects=count, ranges=buf), push=dict(m_max=64, count_offset=0)
        )
    device.pool.free(buf)
    device.pool.free(count)


def test_only_the_last_barrier_names_the_host(device, test_kernels, monkeypatch):
    """Barriers between dispatches are device-only (on NVIDIA a host-inclusive
    one costs GPU time); the sequence's last makes its writes visible to the
    host, which reads the results."""
    made = []
    real = device.kp.OpBarrier

    def spy(host=True):
        made.append(host)
        return real(host)

    monkeypatch.setattr(device.kp, "OpBarrier", spy)
    n = 4099
    a = device.pool.alloc("test.hostbar.a", (n,), np.uint32, zero=True)
    b = device.pool.alloc("test.hostbar.b", (n,), np.uint32)
    k = test_kernels.get("increment")
    device.sync()
    made.clear()  # the zero fill's own barriers
    rec = device.recorder("hostbar")
    for i in range(3):
        rec.dispatch(k, Threads(n), dict(src=a, dst=b) if i % 2 == 0 else dict(src=b, dst=a), push=dict(n=n))
    seq = rec.finish()
    assert made == [False, False, False, True]
    seq.run()
    assert np.all(device.readback(b) == 3)
    device.pool.free(a)
    device.pool.free(b)
