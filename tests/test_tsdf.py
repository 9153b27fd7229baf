"""tsdf_integrate: one view fused into a volume, against the float64 reference
(spirula/reference/tsdf.py), on each backend."""

import numpy as np
import pytest
from data_fixtures import look_at

from spirula.errors import SpirulaError
from spirula.mesh.fusion_config import DEFAULT
from spirula.mesh.tsdf import TSDFVolume


def _view(seed, W=40, H=30):
    """A depth/alpha/colour image with surface, half-transparent and empty pixels."""
    rng = np.random.default_rng(seed)
    depth = rng.uniform(2.5, 3.5, (H, W)).astype(np.float32)
    alpha = rng.choice([0.0, 0.02, 0.3, 0.7, 0.95], (H, W)).astype(np.float32)
    depth[alpha < 0.5] = 0.0
    color = (rng.uniform(0, 1, (H, W, 3)) * alpha[..., None]).astype(np.float32)
    K = np.array([[30.0, 0, W / 2 + 0.3], [0, 30.0, H / 2 - 0.2], [0, 0, 1]])
    return depth, alpha, color, K


def _reference(vol, views):
    from reference.tsdf import tsdf_integrate

    t = np.full(vol.dims, vol.truncation)
    w = np.zeros(vol.dims)
    c = np.zeros(vol.dims + (4,))
    cfg = vol.config
    for depth, alpha, color, vm, K in views:
        t, w, c = tsdf_integrate(
            t, w, c, depth, alpha, color, vm, K, vol.origin, vol.voxel_size, vol.truncation,
            cfg.alpha_surface, cfg.alpha_empty, cfg.carve_weight, vol.x_offset,
        )  # fmt: skip
    return t, w, c


@pytest.mark.parametrize("x_offset", [0, 3])
def test_tsdf_integrate_matches_reference(backend, x_offset):
    """Three views (numpy inputs) into a 20 x 17 x 23 volume. Tolerance: a running average of
    <= 3 float32 terms of size <= truncation (0.4) is off by a few ulps (~1e-7); 1e-5 absolute.
    A voxel centre within float32 rounding of a pixel edge may read the neighbouring pixel: at
    most 1e-3 of the voxels may differ (a 32-bit projection moves u by ~1e-5 px)."""
    vol = TSDFVolume(backend, [-1.3, -0.9, -1.1], 0.1, (20, 17, 23), truncation=0.4, x_offset=x_offset)
    try:
        views = []
        for s, eye in enumerate([(0, -3, 0.2), (2.9, 0.5, 0.3), (-0.4, 0.3, 3.0)]):
            depth, alpha, color, K = _view(s)
            vm = look_at(eye, (0.05, 0.0, -0.05))
            views.append((depth, alpha, color, vm, K))
            vol.integrate(depth, alpha, color, vm, K)
        t, w, c = vol.extract()
        rt, rw, rc = _reference(vol, views)
        assert t.shape == vol.dims and w.shape == vol.dims and c.shape == vol.dims + (3,)
        assert t.dtype == np.float32 and c.dtype == np.float32
        bad = (np.abs(t - rt) > 1e-5) | (np.abs(w - rw) > 1e-5) | (np.abs(c - rc[..., :3]) > 1e-5).any(-1)
        assert bad.mean() < 1e-3, "%d of %d voxels off" % (bad.sum(), bad.size)
        # every branch was taken: surface band, clamped free space, carving, untouched
        assert (rc[..., 3] > 0).any() and (rw == DEFAULT.carve_weight).any() and (rw == 0).any()
        assert (np.abs(rt) < 0.4 - 1e-6).sum() > 50
    finally:
        vol.free()


def test_tsdf_integrate_reads_one_view_of_device_images(device):
    """Device buffers of [C,H,W] images: view 1 of 2 fused without a host copy equals the
    numpy path on that view's images."""
    depth, alpha, color, K = [], [], [], None
    for s in (5, 6):
        d, a, c, K = _view(s)
        depth.append(d), alpha.append(a), color.append(c)
    pool = device.pool
    bufs = [pool.alloc("t.d", (2, 30, 40), np.float32), pool.alloc("t.a", (2, 30, 40), np.float32)]
    bufs.append(pool.alloc("t.c", (2, 30, 40, 3), np.float32))
    for b, arr in zip(bufs, (depth, alpha, color)):
        device.upload(b, np.stack(arr))
    vm = look_at((0.3, -3, 0.4), (0, 0, 0))
    a = TSDFVolume(device, [-1, -1, -1], 0.125, (16, 16, 16), name="tsdf.a")
    b = TSDFVolume(device, [-1, -1, -1], 0.125, (16, 16, 16), name="tsdf.b")
    try:
        a.integrate(*bufs, vm, K, index=1)
        b.integrate(depth[1], alpha[1], color[1], vm, K)
        for x, y in zip(a.extract(), b.extract()):
            np.testing.assert_array_equal(x, y)
        assert (a.extract()[1] > 0).any()
    finally:
        a.free(), b.free()
        for buf in bufs:
            pool.free(buf)


def test_tsdf_volume_rejects_bad_geometry(device):
    with pytest.raises(SpirulaError, match="dims"):
        TSDFVolume(device, [0, 0, 0], 0.1, (4, 0, 4))
    with pytest.raises(SpirulaError, match="origin"):
        TSDFVolume(device, [0, np.nan, 0], 0.1, (4, 4, 4))
