"""CUDA vs Vulkan: every ported kernel runs the same recorded work on both
backends, from the same seeded, awkward inputs (N not a multiple of the
workgroup, 75x53 images, two cameras), and the outputs are compared.

Tolerances (element-wise, ``ref`` = the Vulkan result):
- integer outputs (counts, keys, offsets, ids, sorted order, histograms): exact;
- float outputs of plain arithmetic: |d| <= 5e-3 + 5e-4 |ref| (both compilers
  keep IEEE float32 but fuse multiply-adds and approximate exp/rsqrt in their
  own ways, a few ulps apart);
- float outputs built from atomic sums (rasterize_bwd's gradients, and all
  that flows from them): |d| <= 5e-3 + 1e-3 |ref|, with at most 2e-3 of the
  elements outside (atomics add in a different order on each run, and a sum
  with cancellation keeps only its absolute error);
- where a float decides a branch (a Gaussian right at the cull, radius, alpha
  >= 1/255 or T <= 1e-4 cut-off), the ulps above can flip it: such rows and
  pixels are counted, at most 2e-3 of them, and left out of the comparisons
  that follow from the branch.

Skipped where there is no CUDA GPU or no built library (``make cuda``).
"""
import os

import numpy as np
import pytest

from render_cases import random_scene
from spirula.render.rasterizer import EPS2D, FAR_PLANE, NEAR_PLANE, Rasterizer, Splats, pack_cameras, tile_grid
from spirula.render.scan import PrefixSum
from spirula.render.sort import RadixSort
from spirula.runtime.sequence import grid_stride_groups

pytestmark = pytest.mark.cuda

ABS = 5e-3
R_PLAIN = 5e-4
R_ATOMIC = 1e-3
FLIP_FRACTION = 2e-3
ATOMIC_VIOLATIONS = 2e-3
REPORT = os.environ.get("SPIRULA_PARITY_REPORT", "") not in ("", "0")   # print what each check saw (-s)


@pytest.fixture(scope="module")
def cuda():
    from spirula.backends.cuda import cuda_unavailable_reason, open_cuda_device
    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip("CUDA backend unavailable: %s" % reason)
    return open_cuda_device()


@pytest.fixture(scope="module")
def backends(cuda, device):
    """(Vulkan device, CUDA device)."""
    return device, cuda


# ---- helpers ----------------------------------------------------------------------

def run_kernel(dev, name, groups, inputs: dict, outputs: dict, read=(), push=None, spec=None, defines=None,
               zero=()):
    """Upload ``inputs`` (name -> array), allocate ``outputs`` (name -> (shape,
    dtype), NaN-poisoned, or zeroed when named in ``zero``), record one dispatch,
    run it, and return every output and every input named in ``read``."""
    bufs = {}
    for n, arr in inputs.items():
        arr = np.ascontiguousarray(arr)
        bufs[n] = dev.pool.alloc("parity." + n, arr.shape, arr.dtype)
        dev.upload(bufs[n], arr)
    for n, (shape, dtype) in outputs.items():
        bufs[n] = dev.pool.alloc("parity." + n, shape, dtype, zero=n in zero)
    rec = dev.recorder("parity." + name)
    rec.dispatch(name, groups, bufs, push=push, spec=spec, defines=defines)
    rec.finish().run()
    out = {n: dev.readback(bufs[n]) for n in list(outputs) + list(read)}
    for b in bufs.values():
        dev.pool.free(b)
    return out


def both(backends, *args, **kwargs):
    vk, cu = backends
    return run_kernel(vk, *args, **kwargs), run_kernel(cu, *args, **kwargs)


def assert_exact(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, what
    g = got.view(np.uint32) if got.dtype.itemsize == 4 else got
    w = want.view(np.uint32) if want.dtype.itemsize == 4 else want
    bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
    assert bad.size == 0, "%s: %d of %d differ, first at %d: cuda %r, vulkan %r" % (
        what, bad.size, g.size, bad[0], got.reshape(-1)[bad[0]], want.reshape(-1)[bad[0]])


def assert_close(got, want, r, what, violations=0.0, mask=None):
    """|got - want| <= ABS + r |want| (NaN only where both are NaN), on ``mask``
    rows if given, allowing a fraction ``violations`` of the elements outside."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    if mask is not None:
        got, want = got[mask], want[mask]
    both_nan = np.isnan(got) & np.isnan(want)
    err = np.where(both_nan, 0.0, np.abs(got - want))
    bad = ~(err <= ABS + r * np.abs(want))
    frac = bad.mean() if bad.size else 0.0
    worst = np.nanmax(np.where(both_nan, 0, err / (ABS + r * np.abs(want)))) if bad.size else 0.0
    if REPORT:
        print("\nparity %-18s outside %d/%d, worst %.3g x bound, max|d| %.3g, max|ref| %.3g" % (
            what, bad.sum(), bad.size, worst, np.nanmax(err) if err.size else 0, np.nanmax(np.abs(want))
            if want.size else 0))
    assert frac <= violations, "%s: %d of %d elements outside %g + %g|ref| (worst %.3g x the bound)" % (
        what, bad.sum(), bad.size, ABS, r, worst)


def assert_few(flips, total, what):
    if REPORT:
        print("\nparity %-18s flipped %d/%d" % (what, flips, total))
    assert flips <= FLIP_FRACTION * total, "%s: %d of %d flipped (at most %g)" % (what, flips, total, FLIP_FRACTION)


def scene_inputs(scene, activated=True):
    """projection_fwd/bwd inputs of a render_cases scene."""
    scales, opac = scene["scales"], scene["opacities"]
    if not activated:
        scales, opac = np.log(scales), np.log(opac / (1 - opac))
    return dict(means=scene["means"], quats=scene["quats"], scales=scales.astype(np.float32),
                opacities=opac.astype(np.float32), sh=scene["sh_coeffs"],
                cameras=pack_cameras(scene["viewmats"], scene["Ks"]))


def project(dev, scene, sh_degree, activated=True):
    """projection_fwd of ``scene`` on ``dev``: the outputs by binding name."""
    n, C = len(scene["means"]), len(scene["viewmats"])
    W, H = scene["width"], scene["height"]
    tw, th = tile_grid(W, H)
    rows = C * n
    return run_kernel(
        dev, "projection_fwd", -(-rows // 256), scene_inputs(scene, activated),
        dict(xyop=((rows, 4), np.float32), conics=((rows, 4), np.float32), rgb=((rows, 4), np.float32),
             radii=((rows, 2), np.int32), tile_counts=((rows,), np.uint32), depth_keys=((rows,), np.uint32),
             depth_ids=((rows,), np.uint32)),
        push=dict(n=n, n_cameras=C, width=W, height=H, tile_width=tw, tile_height=th, eps2d=EPS2D,
                  near_plane=NEAR_PLANE, far_plane=FAR_PLANE),
        spec=dict(SH_DEGREE=sh_degree, SH_COEFFS=scene["sh_coeffs"].shape[1], ACTIVATED=int(activated)))


@pytest.fixture(scope="module")
def forward_inputs(backends):
    """A scene rendered on Vulkan: the inputs rasterize_fwd/bwd read, as numpy."""
    vk, _ = backends
    scene = random_scene(n=400, sh_degree=3, seed=5)
    splats = Splats.from_numpy(vk, scene["means"], scene["quats"], scene["scales"], scene["opacities"],
                               scene["sh_coeffs"], prefix="parity.splat")
    raster = Rasterizer(vk, scene["width"], scene["height"], 2, capacity=len(scene["means"]), name="parity.raster")
    raster.set_cameras(scene["viewmats"], scene["Ks"])
    raster.set_backgrounds(np.array([[0.2, 0.4, 0.6], [1.0, 0.0, 0.5]], np.float32))
    m = raster.forward(splats, 3)
    rows = 2 * len(scene["means"])
    out = dict(ranges=vk.readback(raster.ranges), isect_ids=raster.intersections()[1],
               xyop=vk.readback(raster.xyop, shape=(rows, 4)), conics=vk.readback(raster.conics, shape=(rows, 4)),
               rgb=vk.readback(raster.rgb, shape=(rows, 4)), backgrounds=vk.readback(raster.backgrounds),
               out_alphas=vk.readback(raster.out_alphas), out_last=vk.readback(raster.out_last),
               width=scene["width"], height=scene["height"], rows=rows, m=m)
    raster.free()
    splats.free(vk)
    return out


def raster_push(f):
    tw, th = tile_grid(f["width"], f["height"])
    return dict(width=f["width"], height=f["height"], tile_width=tw, tile_height=th), (tw, th, 2)


# ---- copy, fill, transfers ----------------------------------------------------------------

@pytest.mark.parametrize("nwords,offset", [(3001, 3), (4096 + 16, 8)], ids=["scalar", "vec4"])
def test_recorded_copy_and_fill_are_bit_exact(backends, nwords, offset):
    rng = np.random.default_rng(nwords)
    src = rng.integers(0, 2 ** 32, nwords + 2 * offset, dtype=np.uint64).astype(np.uint32)
    results = []
    for dev in backends:
        a = dev.pool.alloc("parity.copy.src", src.shape, np.uint32)
        b = dev.pool.alloc("parity.copy.dst", src.shape, np.uint32)
        c = dev.pool.alloc("parity.fill.dst", src.shape, np.float32)
        dev.upload(a, src)
        rec = dev.recorder("parity.copy")
        rec.copy(a, b, nbytes=4 * nwords, src_offset=4 * offset, dst_offset=4 * (offset // 2 * 2))
        rec.fill(c, -1.5, nbytes=4 * nwords, offset=4 * offset)
        rec.finish().run()
        results.append((dev.readback(b), dev.readback(c)))
        for buf in (a, b, c):
            dev.pool.free(buf)
    (vb, vc), (cb, cc) = results
    assert_exact(cb, vb, "copy")
    assert_exact(cc, vc, "fill")
    d = offset // 2 * 2
    assert np.array_equal(cb[d:d + nwords], src[offset:offset + nwords])
    assert (cc[offset:offset + nwords] == -1.5).all()


def test_copy_and_fill_kernels_with_a_folded_grid_are_bit_exact(backends):
    """The grid-stride step is gl_NumWorkGroups.x * .y * 256 on both backends."""
    n = 50_000
    src = np.arange(n, dtype=np.uint32) * 7
    vk_out, cu_out = both(backends, "copy", (5, 3, 1), dict(src=src), dict(dst=((n,), np.uint32)),
                          push=dict(src_offset=0, dst_offset=0, count=n), defines=dict(VEC4=0))
    assert_exact(cu_out["dst"], vk_out["dst"], "copy")
    assert np.array_equal(cu_out["dst"], src)
    vk_out, cu_out = both(backends, "fill", (2, 2, 1), {}, dict(dst=((n,), np.uint32)),
                          push=dict(offset=4, count=(n - 16) // 4, value=99), defines=dict(VEC4=1))
    assert_exact(cu_out["dst"], vk_out["dst"], "fill vec4")


def test_transfers_and_pool_growth_keep_every_byte(backends):
    _, cu = backends
    rng = np.random.default_rng(3)
    data = rng.standard_normal(10_001).astype(np.float32)
    buf = cu.pool.alloc("parity.transfer", data.shape, np.float32)
    cu.upload(buf, data)
    cu.upload(buf, data[:5], offset=4 * 100)
    want = data.copy()
    want[100:105] = data[:5]
    assert np.array_equal(cu.readback(buf), want)
    assert np.array_equal(cu.readback(buf, shape=(7,), offset=4 * 9), want[9:16])
    assert cu.pool.resize(buf, (50_000,), keep=True)                  # copy_tensors + free
    assert np.array_equal(cu.readback(buf, shape=(10_001,)), want)
    other = cu.pool.alloc("parity.transfer2", (10_001,), np.float32)
    cu.copy(buf, other, nbytes=4 * 10_001)
    cu.fill(other, 2.5, nbytes=16, offset=4 * 8)
    want[8:12] = 2.5
    assert np.array_equal(cu.readback(other), want)
    cu.pool.free(buf)
    cu.pool.free(other)


# ---- scan and sort -----------------------------------------------------------------------

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


def test_host_buffers_are_shared_with_kernels(backends):
    for dev in backends:
        h = dev.pool.alloc("parity.host", (64,), np.uint32, host=True)
        d = dev.pool.alloc("parity.dev", (64,), np.uint32)
        h.host_view()[:] = np.arange(64)
        rec = dev.recorder("parity.host")
        rec.copy(h, d)
        rec.fill(h, 5, nbytes=16)
        rec.finish().run()
        assert np.array_equal(dev.readback(d), np.arange(64))
        assert np.array_equal(h.host_view()[:6], [5, 5, 5, 5, 4, 5])
        dev.pool.free(h)
        dev.pool.free(d)


def test_radix_sort_count_is_exact(backends):
    n, blocks = 2048 * 3 + 517, 5                          # one block past the keys writes zeros
    keys = np.random.default_rng(1).integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    for shift in (0, 24):
        vk_out, cu_out = both(backends, "radix_sort_count", blocks,
                              dict(keys=keys, num_keys=np.array([0, n], np.uint32)),
                              dict(hist=((256 * blocks,), np.uint32)),
                              push=dict(n_max=n + 5, count_offset=1, shift=shift, num_blocks=blocks))
        assert_exact(cu_out["hist"], vk_out["hist"], "hist")
        digits = (keys >> shift) & 255
        want = np.zeros((256, blocks), np.uint32)
        np.add.at(want, (digits, np.arange(n) // 2048), 1)
        assert np.array_equal(cu_out["hist"].reshape(256, blocks), want)


def test_radix_sort_scatter_is_exact_and_stable(backends):
    n, blocks, shift = 2048 * 2 + 999, 3, 8
    rng = np.random.default_rng(2)
    keys = rng.integers(0, 2 ** 16, n).astype(np.uint32)
    keys[: n // 3] &= 0x0300                               # many equal digits
    vals = np.arange(n, dtype=np.uint32) * 3
    digits = (keys >> shift) & 255
    hist = np.zeros((256, blocks), np.uint64)
    np.add.at(hist, (digits, np.arange(n) // 2048), 1)
    flat = hist.reshape(-1)
    offsets = (np.cumsum(flat) - flat).astype(np.uint32)
    vk_out, cu_out = both(backends, "radix_sort_scatter", blocks,
                          dict(keys_in=keys, vals_in=vals, hist=offsets, num_keys=np.array([n], np.uint32)),
                          dict(keys_out=((n,), np.uint32), vals_out=((n,), np.uint32)),
                          push=dict(n_max=n, count_offset=0, shift=shift, num_blocks=blocks))
    assert_exact(cu_out["keys_out"], vk_out["keys_out"], "keys_out")
    assert_exact(cu_out["vals_out"], vk_out["vals_out"], "vals_out")
    order = np.argsort(digits, kind="stable")
    assert np.array_equal(cu_out["vals_out"], vals[order])


def test_whole_radix_sort_is_exact(backends):
    n = 70_001
    keys = np.random.default_rng(4).integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    keys[: n // 2] %= 11
    results = []
    for dev in backends:
        bufs = [dev.pool.alloc("parity.sort%d" % i, (n,), np.uint32) for i in range(4)]
        count = dev.pool.alloc("parity.sort.count", (1,), np.uint32)
        dev.upload(bufs[0], keys)
        dev.upload(bufs[1], np.arange(n, dtype=np.uint32))
        dev.upload(count, np.array([n], np.uint32))
        sort = RadixSort(dev, n, name="parity.sort")
        rec = dev.recorder("parity.sort")
        out_k, out_v = sort.record(rec, *bufs, n, 32, count)
        rec.finish().run()
        results.append((dev.readback(out_k), dev.readback(out_v)))
        for b in bufs + [count, sort.hist, sort.scan.scratch]:
            dev.pool.free(b)
    assert_exact(results[1][0], results[0][0], "sorted keys")
    assert_exact(results[1][1], results[0][1], "sorted order")
    assert np.array_equal(results[1][1], np.argsort(keys, kind="stable").astype(np.uint32))


# ---- projection ----------------------------------------------------------------------

@pytest.mark.parametrize("activated", [True, False], ids=["activated", "log-logit"])
@pytest.mark.parametrize("sh_degree", [0, 1, 2, 3])
def test_projection_fwd_matches(backends, sh_degree, activated):
    scene = random_scene(n=1001, sh_degree=3, seed=30 + sh_degree, spread=1.6)
    vk_out, cu_out = (project(dev, scene, sh_degree, activated) for dev in backends)
    assert_exact(cu_out["depth_ids"], vk_out["depth_ids"], "depth_ids")
    # a radius or cull decision at a float boundary may flip; count those rows
    flipped = (cu_out["radii"] != vk_out["radii"]).any(-1) | (cu_out["tile_counts"] != vk_out["tile_counts"])
    assert_few(flipped.sum(), flipped.size, "radii / tile counts")
    same = ~flipped
    vis = same & (vk_out["radii"] != 0).any(-1)
    assert vis.sum() > 0.3 * vis.size
    for name in ("xyop", "conics", "rgb"):
        assert_close(cu_out[name], vk_out[name], R_PLAIN, name, mask=vis)
    culled = same & ~vis
    assert_exact(cu_out["depth_keys"][culled], vk_out["depth_keys"][culled], "culled depth keys")
    kv = vis & (vk_out["depth_keys"] != 0xFFFFFFFF)
    assert_close(cu_out["depth_keys"][kv].view(np.float32), vk_out["depth_keys"][kv].view(np.float32), R_PLAIN,
                 "depth keys (as float)")


@pytest.mark.parametrize("activated", [True, False], ids=["activated", "log-logit"])
@pytest.mark.parametrize("sh_degree", [0, 1, 2, 3])
def test_projection_bwd_matches(backends, sh_degree, activated):
    vk, _ = backends
    scene = random_scene(n=777, sh_degree=3, seed=40 + sh_degree)
    n, C = len(scene["means"]), 2
    radii = project(vk, scene, sh_degree, activated)["radii"]           # one input for both
    rng = np.random.default_rng(sh_degree)
    grads = dict(grad_xy=rng.standard_normal((C * n, 2)), grad_conics=rng.standard_normal((C * n, 3)),
                 grad_rgb=rng.standard_normal((C * n, 3)), grad_opacity=rng.standard_normal(C * n))
    inputs = dict(scene_inputs(scene, activated), radii=radii,
                  **{k: v.astype(np.float32) for k, v in grads.items()})
    K = scene["sh_coeffs"].shape[1]
    outs = dict(grad_means=((n, 3), np.float32), grad_quats=((n, 4), np.float32), grad_scales=((n, 3), np.float32),
                grad_opacities=((n,), np.float32), grad_sh=((n, K, 3), np.float32))
    vk_out, cu_out = both(backends, "projection_bwd", -(-n // 128), inputs, outs,
                          push=dict(n=n, n_cameras=C, width=scene["width"], height=scene["height"], eps2d=EPS2D),
                          spec=dict(SH_DEGREE=sh_degree, SH_COEFFS=K, ACTIVATED=int(activated)))
    for name in outs:
        assert_close(cu_out[name], vk_out[name], R_PLAIN, name)
    assert (cu_out["grad_sh"][:, (sh_degree + 1) ** 2:] == 0).all()


# ---- intersections -----------------------------------------------------------------

def test_intersect_tile_count_is_exact_on_a_folded_grid(backends):
    n = 21 * 256 - 5                                        # groups (7, 3): linear id = y * 7 + x
    rng = np.random.default_rng(6)
    ids, counts = rng.permutation(n).astype(np.uint32), rng.integers(0, 7, n).astype(np.uint32)
    vk_out, cu_out = both(backends, "intersect_tile_count", (7, 3, 1), dict(sorted_ids=ids, tile_counts=counts),
                          dict(offsets=((n,), np.uint32)), push=dict(n=n))
    assert_exact(cu_out["offsets"], vk_out["offsets"], "offsets")
    assert np.array_equal(cu_out["offsets"], counts[ids])


def test_intersect_tile_write_is_exact(backends):
    vk, _ = backends
    scene = random_scene(n=700, seed=8, spread=1.5)
    p = project(vk, scene, 0)                              # one projection, input to both
    n = len(scene["means"])
    order = np.argsort(p["depth_keys"], kind="stable").astype(np.uint32)
    counts = p["tile_counts"][order]
    offsets = (np.cumsum(counts, dtype=np.uint64) - counts).astype(np.uint32)
    total = int(counts.sum())
    cap = total - 10                                        # the last pairs are dropped
    tw, th = tile_grid(scene["width"], scene["height"])
    vk_out, cu_out = both(backends, "intersect_tile_write", -(-cap // 256),
                          dict(sorted_ids=order, offsets=offsets, totals=np.array([0, total], np.uint32),
                               xyop=p["xyop"], radii=p["radii"]),
                          dict(isect_keys=((cap,), np.uint32), isect_ids=((cap,), np.uint32)),
                          push=dict(n=2 * n, n_gaussians=n, tile_width=tw, tile_height=th, capacity=cap,
                                    count_offset=1))
    assert_exact(cu_out["isect_keys"], vk_out["isect_keys"], "isect_keys")
    assert_exact(cu_out["isect_ids"], vk_out["isect_ids"], "isect_ids")
    assert total > 1000


def test_tile_ranges_is_exact(backends):
    tiles, m_max, m = 600, 5000, 4321                       # m read on the GPU, below the dispatch size
    keys = np.sort(np.random.default_rng(9).choice(tiles, m_max)).astype(np.uint32)
    results = []
    for dev in backends:
        k = dev.pool.alloc("parity.keys", (m_max,), np.uint32)
        num = dev.pool.alloc("parity.num", (3,), np.uint32)
        ranges = dev.pool.alloc("parity.ranges", (tiles, 2), np.uint32)
        dev.upload(k, keys)
        dev.upload(num, np.array([0, 0, m], np.uint32))
        rec = dev.recorder("parity.ranges")
        rec.fill(ranges, 0)
        rec.dispatch("tile_ranges", -(-m_max // 256), dict(isect_keys=k, num_isects=num, ranges=ranges),
                     push=dict(m_max=m_max, count_offset=2))
        rec.finish().run()
        results.append(dev.readback(ranges))
        for b in (k, num, ranges):
            dev.pool.free(b)
    assert_exact(results[1], results[0], "ranges")
    r = results[1]
    for t in np.unique(keys[:m])[:50]:
        assert np.array_equal(r[t], [np.searchsorted(keys[:m], t), np.searchsorted(keys[:m], t, "right")])


# ---- rasterization --------------------------------------------------------------------

def test_rasterize_fwd_matches(backends, forward_inputs):
    f = forward_inputs
    push, groups = raster_push(f)
    C, H, W = 2, f["height"], f["width"]
    outs = dict(out_colors=((C, H, W, 3), np.float32), out_alphas=((C, H, W), np.float32),
                out_depths=((C, H, W), np.float32), out_last=((C, H, W), np.uint32))
    ins = {k: f[k] for k in ("ranges", "isect_ids", "xyop", "conics", "rgb", "backgrounds")}
    vk_out, cu_out = both(backends, "rasterize_fwd", groups, ins, outs, push=push)
    # a Gaussian at the alpha >= 1/255 or T <= 1e-4 cut-off may flip: count those pixels
    same = cu_out["out_last"] == vk_out["out_last"]
    assert_few((~same).sum(), same.size, "out_last")
    assert_close(cu_out["out_colors"], vk_out["out_colors"], R_PLAIN, "colors", FLIP_FRACTION)
    assert_close(cu_out["out_alphas"], vk_out["out_alphas"], R_PLAIN, "alphas", FLIP_FRACTION)
    assert_close(cu_out["out_depths"], vk_out["out_depths"], R_PLAIN, "depths", FLIP_FRACTION)
    assert (vk_out["out_alphas"] > 0.5).mean() > 0.2


@pytest.mark.parametrize("absgrad", [False, True], ids=["plain", "absgrad"])
def test_rasterize_bwd_matches(backends, forward_inputs, absgrad):
    f = forward_inputs
    push, groups = raster_push(f)
    C, H, W, rows = 2, f["height"], f["width"], f["rows"]
    rng = np.random.default_rng(11)
    ins = {k: f[k] for k in ("ranges", "isect_ids", "xyop", "conics", "rgb", "backgrounds", "out_alphas",
                             "out_last")}
    ins.update(grad_colors=rng.standard_normal((C, H, W, 3)).astype(np.float32),
               grad_alphas=rng.standard_normal((C, H, W)).astype(np.float32))
    outs = dict(grad_xy=((rows, 2), np.float32), grad_conics=((rows, 3), np.float32),
                grad_rgb=((rows, 3), np.float32), grad_opacity=((rows,), np.float32),
                grad_xy_abs=((rows, 2), np.float32))
    vk_out, cu_out = both(backends, "rasterize_bwd", groups, ins, outs, push=push, spec=dict(ABSGRAD=int(absgrad)),
                          zero=tuple(outs))
    for name in outs:            # atomic sums: a looser, labelled channel
        assert_close(cu_out[name], vk_out[name], R_ATOMIC, name, ATOMIC_VIOLATIONS)
    assert np.abs(vk_out["grad_xy"]).max() > 0
    if absgrad:
        assert np.abs(cu_out["grad_xy_abs"]).max() > 0


# ---- the whole rasterizer ---------------------------------------------------------------

def test_whole_render_and_backward_match(backends):
    from spirula.render.api import rasterization, rasterization_backward
    scene = random_scene(n=300, sh_degree=3, seed=12)
    bg = np.array([[0.3, 0.1, 0.0], [0.0, 0.5, 1.0]], np.float32)
    rng = np.random.default_rng(13)
    results = []
    for dev in backends:
        colors, alphas, depths, meta = rasterization(**scene, backgrounds=bg, device=dev)
        if not results:
            gc = rng.standard_normal(colors.shape).astype(np.float32)
            ga = rng.standard_normal(alphas.shape).astype(np.float32)
        grads = rasterization_backward(meta, gc, ga, absgrad=True)
        results.append((colors, alphas, depths, meta, grads))
        del meta
    (vc, va, vd, vm, vg), (cc, ca, cd, cm, cg) = results
    flipped = (cm["radii"] != vm["radii"]).any(-1)
    assert_few(flipped.sum(), flipped.size, "radii")
    assert abs(cm["n_isects"] - vm["n_isects"]) <= FLIP_FRACTION * vm["n_isects"]
    assert_close(cc, vc, R_PLAIN, "colors", FLIP_FRACTION)
    assert_close(ca, va, R_PLAIN, "alphas", FLIP_FRACTION)
    assert_close(cd, vd, R_PLAIN, "depths", FLIP_FRACTION)
    for name in ("means", "quats", "scales", "opacities", "sh_coeffs", "means2d", "means2d_absgrad"):
        assert_close(cg[name], vg[name], R_ATOMIC, name, ATOMIC_VIOLATIONS)


def test_training_form_sequence_runs_async_and_repeats(backends):
    """Phase 1 + 2 + backward recorded once (intersections read on the GPU),
    run twice and once asynchronously on CUDA; the images match Vulkan's."""
    scene = random_scene(n=200, sh_degree=2, seed=14)
    images = []
    for dev in backends:
        splats = Splats.from_numpy(dev, scene["means"], scene["quats"], np.log(scene["scales"]),
                                   np.log(scene["opacities"] / (1 - scene["opacities"])), scene["sh_coeffs"],
                                   activated=False, prefix="parity.train")
        grads = Splats.alloc(dev, splats.n, splats.sh_coeffs, prefix="parity.grad")
        raster = Rasterizer(dev, scene["width"], scene["height"], 2, capacity=splats.n, isect_capacity=20_000,
                            name="parity.train.raster")
        raster.set_cameras(scene["viewmats"], scene["Ks"])
        raster.set_backgrounds(None)
        dev.fill(raster.grad_colors, 0.5)
        rec = dev.recorder("parity.train-step")
        raster.record_project(rec, splats, 2)
        raster.record_raster(rec)
        raster.record_backward(rec, splats, 2, grads, absgrad=True)
        seq = rec.finish()
        seq.run()
        first = dev.readback(raster.out_colors)
        seq.run_async()
        seq.wait()
        seq.run_async()
        again = dev.readback(raster.out_colors)              # waits for the async run
        assert np.array_equal(first, again)
        assert np.isfinite(dev.readback(grads.means)).all()
        assert raster.num_intersections() < 20_000
        images.append(first)
        raster.free()
        splats.free(dev)
        grads.free(dev)
    assert_close(images[1], images[0], R_PLAIN, "colors", FLIP_FRACTION)


def test_profiler_rows_on_cuda_use_the_kernel_names(cuda):
    """SS_PROFILE=1 on CUDA: kernel rows under the Vulkan names, the timing
    breakdown, and the VRAM report with cudaMemGetInfo's process row."""
    import os
    import subprocess
    import sys
    from conftest import ROOT
    code = ("import sys; sys.path.insert(0, 'tests'); import numpy as np\n"
            "from render_cases import random_scene\n"
            "from spirula.backends.cuda import open_cuda_device\n"
            "from spirula.render.api import rasterization, rasterization_backward\n"
            "dev = open_cuda_device()\n"
            "s = random_scene(n=150)\n"
            "c, a, _, meta = rasterization(**s, device=dev)\n"
            "rasterization_backward(meta, np.ones_like(c), np.ones_like(a))\n")
    env = dict(os.environ, SS_PROFILE="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=str(ROOT),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    for row in ("projection_fwd", "radix_sort_count", "radix_sort_scatter", "prefix_sum", "intersect_tile_count",
                "intersect_tile_write", "tile_ranges", "rasterize_fwd", "rasterize_bwd", "projection_bwd", "fill"):
        assert "\n%s " % row in err, row
    for line in ("H2D  (upload)", "D2H  (readback)", "memset", "of which GPU-exec", "process (driver)",
                 "pool total"):
        assert line in err, line
