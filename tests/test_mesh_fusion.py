"""Fusion-level shape tests: splats sampled on an analytic surface, fused from a sphere of
virtual cameras (spirula.mesh.fuse_splats), must put the TSDF's zero crossing on that surface."""

import numpy as np
import pytest

from spirula.errors import SpirulaError
from spirula.mesh.cameras import Cameras, fibonacci_directions, scene_bounds, sphere_cameras
from spirula.mesh.fuse import fuse_splats, plan_slabs, volume_grid
from spirula.mesh.fusion_config import FusionConfig

SH_C0 = 0.2820947917738781
RGB = np.array([0.8, 0.3, 0.2])
RES, SIZE, VIEWS = 48, 64, 32


def _disc_quats(normals):
    """wxyz quaternions turning +z onto each unit normal (a flat disc tangent to the surface)."""
    n = np.asarray(normals, np.float64)
    q = np.stack([1.0 + n[:, 2], -n[:, 1], n[:, 0], np.zeros(len(n))], 1)
    flip = n[:, 2] < -1 + 1e-9
    q[flip] = [0.0, 1.0, 0.0, 0.0]
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _splats(points, normals, spacing):
    """Opaque-ish flat discs (radius ~ spacing, thickness 2% of it) of one colour."""
    n = len(points)
    sh = np.zeros((n, 1, 3), np.float32)
    sh[:, 0] = (RGB - 0.5) / SH_C0
    s = 0.7 * spacing
    return dict(
        means=np.asarray(points, np.float32),
        quats=_disc_quats(normals).astype(np.float32),
        scales=np.tile([[s, s, 0.02 * s]], (n, 1)).astype(np.float32),
        opacities=np.full(n, 0.9, np.float32),
        sh_coeffs=sh,
    )


def sphere_splats(radius=1.0, n=6000):
    d = fibonacci_directions(n)
    return _splats(radius * d, d, np.sqrt(4 * np.pi / n) * radius)


def box_splats(half=0.8, per_side=40):
    g = (np.arange(per_side) + 0.5) / per_side * 2 * half - half
    u, v = (a.ravel() for a in np.meshgrid(g, g, indexing="ij"))
    pts, nrm = [], []
    for axis in range(3):
        for sign in (-1.0, 1.0):
            p = np.zeros((len(u), 3))
            p[:, axis] = sign * half
            p[:, (axis + 1) % 3], p[:, (axis + 2) % 3] = u, v
            nv = np.zeros(3)
            nv[axis] = sign
            pts.append(p), nrm.append(np.tile(nv, (len(u), 1)))
    return _splats(np.concatenate(pts), np.concatenate(nrm), 2 * half / per_side)


def axis_crossings(vol, axis, sign):
    """Where the TSDF goes from inside (< 0) to outside (>= 0) along the half-axis from the
    volume's centre: the voxel row nearest the axis, between observed voxels (weight > 0),
    linearly interpolated. Returns the world positions (one expected)."""
    X = np.array(vol.tsdf.shape)
    centre_idx = np.round(-vol.origin / vol.voxel_size - 0.5).astype(int)  # voxel nearest 0
    line = [slice(None) if a == axis else int(centre_idx[a]) for a in range(3)]
    t, w = vol.tsdf[tuple(line)], vol.weight[tuple(line)]
    pos = vol.origin[axis] + (np.arange(X[axis]) + 0.5) * vol.voxel_size
    order = np.argsort(sign * pos)
    order = order[sign * pos[order] >= 0]
    out = []
    for a, b in zip(order[:-1], order[1:]):
        if w[a] > 0 and w[b] > 0 and t[a] < 0 <= t[b]:
            f = t[a] / (t[a] - t[b])
            out.append(pos[a] + f * (pos[b] - pos[a]))
    return out


@pytest.mark.parametrize("shape", ["sphere", "box"])
def test_fused_zero_crossing_lies_on_the_surface(device, shape):
    """48^3 voxels, 32 views of 64 x 64. Tolerance: one voxel (the sampling of the SDF, and
    the nearest-pixel depth lookup: a pixel's footprint at the surface is ~1.2 voxels here,
    half of it on average) plus the disc radius (0.7 x the splat spacing: between disc
    centres the median depth is the front-most disc's tangent plane, and discs overlap by
    up to their radius at a silhouette)."""
    if shape == "sphere":
        splats, true = sphere_splats(), lambda a, s: 1.0
        spacing = np.sqrt(4 * np.pi / 6000)
    else:
        splats, true = box_splats(), lambda a, s: 0.8
        spacing = 1.6 / 40
    cams = sphere_cameras(splats["means"], n=VIEWS, size=SIZE)
    vol = fuse_splats(device, splats, cams, resolution=RES, progress=False)
    assert vol.tsdf.shape == vol.weight.shape and vol.color.shape == vol.tsdf.shape + (3,)
    assert max(vol.tsdf.shape) == RES and vol.tsdf.dtype == np.float32
    tol = vol.voxel_size + 0.7 * spacing
    for axis in range(3):
        for sign in (-1.0, 1.0):
            xs = axis_crossings(vol, axis, sign)
            assert len(xs) == 1, (axis, sign, xs)
            assert abs(abs(xs[0]) - true(axis, sign)) < tol, (axis, sign, xs[0], tol)
    # the band's colour is the splats' colour (each pixel's colour / alpha, averaged)
    band = (vol.weight > 0) & (np.abs(vol.tsdf) < vol.truncation) & (vol.color.sum(-1) > 0)
    assert band.sum() > 100
    np.testing.assert_allclose(vol.color[band], np.broadcast_to(RGB, (band.sum(), 3)), atol=2e-3)
    # free space far outside is carved (observed, positive), never left unobserved
    assert vol.weight[0, 0, 0] > 0 and vol.tsdf[0, 0, 0] > 0


def test_volume_grid_and_slabs(device):
    """resolution voxels along the longest side of the percentile box; a budget of a few
    planes splits the volume in slabs covering every x once."""
    rng = np.random.default_rng(0)
    means = rng.uniform([-1, -0.5, -0.25], [1, 0.5, 0.25], (5000, 3))
    means[:5] = 1e6  # floaters beyond the 99.5th percentile do not grow the box
    origin, voxel, dims = volume_grid(means, 40)
    lo, hi = scene_bounds(means)
    m = FusionConfig().margin_voxels  # the truncation band and one voxel on each side
    assert max(dims) == 40 and dims[1] < dims[0] and voxel == pytest.approx((hi - lo).max() / (40 - 2 * m))
    assert np.all(origin <= lo - m * voxel + 1e-9) and np.all(origin + voxel * np.array(dims) >= hi + m * voxel - 1e-9)
    # each splat's drawn radius grows the box by as much (the percentiles of mean -/+ radius)
    lo2, hi2 = scene_bounds(means, support=np.full(len(means), 0.1))
    np.testing.assert_allclose(lo2, lo - 0.1, atol=1e-9)
    np.testing.assert_allclose(hi2, hi + 0.1, atol=1e-9)
    cfg = FusionConfig(slab_budget_bytes=24 * dims[1] * dims[2] * 7)
    slabs = plan_slabs(dims, device, cfg)
    assert slabs[0][0] == 0 and slabs[-1][1] == dims[0] and len(slabs) == 6
    assert all(a[1] == b[0] and b[1] - b[0] <= 7 for a, b in zip(slabs, slabs[1:]))


def test_fusion_in_slabs_equals_one_volume(device):
    """The same fusion in 4 slabs (a budget of 12 x-planes) and in one volume: identical."""
    splats = sphere_splats(n=1500)
    cams = sphere_cameras(splats["means"], n=6, size=32)
    one = fuse_splats(device, splats, cams, resolution=24, progress=False)
    cfg = FusionConfig(slab_budget_bytes=24 * 24 * 24 * 7)
    tiled = fuse_splats(device, splats, cams, resolution=24, config=cfg, progress=False)
    assert len(plan_slabs(one.tsdf.shape, device, cfg)) == 4
    for a, b in ((one.tsdf, tiled.tsdf), (one.weight, tiled.weight), (one.color, tiled.color)):
        np.testing.assert_array_equal(a, b)


def test_bad_input_fails_with_one_line(device):
    cams = Cameras(np.eye(4)[None], np.eye(3)[None], np.array([[8, 8]]))
    s = sphere_splats(n=50)
    with pytest.raises(SpirulaError, match="no Gaussians"):
        fuse_splats(device, {k: v[:0] for k, v in s.items()}, cams, progress=False)
    bad = dict(s, means=s["means"].copy())
    bad["means"][3, 1] = np.nan
    with pytest.raises(SpirulaError, match="means hold a non-finite"):
        fuse_splats(device, bad, cams, progress=False)
    with pytest.raises(SpirulaError, match="resolution"):
        fuse_splats(device, s, cams, resolution=1, progress=False)


def test_dataset_cameras_are_the_frames_scaled(tmp_path):
    """A COLMAP dataset's cameras (every frame), scaled so the longest side is 32 pixels:
    focal lengths and principal point scale with the image, poses are unchanged."""
    from data_fixtures import make_truth, write_colmap

    from spirula.mesh.cameras import dataset_cameras

    truth = make_truth()
    root = write_colmap(tmp_path / "ds", truth)
    cams = dataset_cameras(root, size=32)
    assert len(cams) == len(truth.viewmats)
    np.testing.assert_allclose(cams.viewmats, truth.viewmats, atol=1e-6)
    H, W = truth.images[0].shape[:2]
    s = 32 / max(W, H)
    assert tuple(cams.sizes[0]) == (round(W * s), round(H * s))
    np.testing.assert_allclose(cams.Ks[0, 0, 0], truth.K[0, 0] * cams.sizes[0, 0] / W, rtol=1e-9)
    np.testing.assert_allclose(cams.Ks[0, 1, 2], truth.K[1, 2] * cams.sizes[0, 1] / H, rtol=1e-9)
