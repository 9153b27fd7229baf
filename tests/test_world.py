"""Training coordinates (spirula/data/world.py): the dataset translated and
uniformly scaled so the cameras sit about one unit from their centre, without
changing a single pixel of any view: the projection of every point, and the
2D footprint of every Gaussian, are the same in both coordinate systems."""

import numpy as np
import pytest
from data_fixtures import look_at
from reference.projection import projection_fwd

from spirula.data.world import WorldTransform


def _cameras(seed=0, n=9):
    """World->camera matrices of cameras scattered around (40, -12, 7) at
    distances 30..90, each looking at a point near there."""
    rng = np.random.default_rng(seed)
    target = np.array([40.0, -12.0, 7.0])
    vms = []
    for _ in range(n):
        d = rng.standard_normal(3)
        d[2] = abs(d[2]) + 0.2
        centre = target + rng.uniform(30, 90) * d / np.linalg.norm(d)
        vms.append(look_at(centre, target + rng.normal(0, 2, 3)))
    return np.stack(vms)


def _centres(viewmats):
    return np.stack([-vm[:3, :3].T @ vm[:3, 3] for vm in viewmats])


def _project(viewmat, K, p):
    """Pixel (u, v) and depth of world points p [P,3]."""
    cam = p @ viewmat[:3, :3].T + viewmat[:3, 3]
    uv = cam[:, :2] / cam[:, 2:3] * np.diag(K)[:2] + K[:2, 2]
    return uv, cam[:, 2]


def test_from_cameras_centres_on_the_cameras_and_makes_their_median_distance_one():
    vms = _cameras()
    w = WorldTransform.from_cameras(vms)
    c = _centres(vms)
    np.testing.assert_allclose(w.center, c.mean(0), rtol=1e-12)
    trained = _centres(w.viewmats(vms))
    np.testing.assert_allclose(trained.mean(0), 0, atol=1e-12)
    assert np.median(np.linalg.norm(trained, axis=1)) == pytest.approx(1.0, rel=1e-12)
    np.testing.assert_allclose(trained, w.points(c), atol=1e-12)


def test_a_single_camera_keeps_the_scale():
    vm = _cameras(n=1)
    w = WorldTransform.from_cameras(vm)
    assert w.scale == 1.0
    np.testing.assert_allclose(_centres(w.viewmats(vm)), 0, atol=1e-12)


def test_viewmats_keep_every_projection_and_scale_depth():
    vms = _cameras(seed=1)
    w = WorldTransform.from_cameras(vms)
    K = np.array([[500.0, 0, 320], [0, 510, 240], [0, 0, 1]])
    rng = np.random.default_rng(2)
    p = np.array([40.0, -12.0, 7.0]) + rng.normal(0, 5, (50, 3))
    trained_vms = w.viewmats(vms)
    assert np.allclose(trained_vms[:, 3], [0, 0, 0, 1]) and np.allclose(trained_vms[:, :3, :3], vms[:, :3, :3])
    for vm, tvm in zip(vms, trained_vms):
        uv, depth = _project(vm, K, p)
        uv_t, depth_t = _project(tvm, K, w.points(p))
        np.testing.assert_allclose(uv_t, uv, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(depth_t, w.scale * depth, rtol=1e-12)


def test_gaussians_project_to_the_same_footprint_in_training_coordinates():
    """Means move with the world and log-scales shift by log(scale): the 2D
    means, conics, radii and colours of every Gaussian stay the same."""
    vms = _cameras(seed=3, n=3)
    w = WorldTransform.from_cameras(vms)
    rng = np.random.default_rng(4)
    n = 40
    # in front of the cameras: around the point they look at
    params = dict(
        means=(np.array([40.0, -12.0, 7.0]) + rng.normal(0, 4, (n, 3))).astype(np.float32),
        quats=rng.standard_normal((n, 4)).astype(np.float32),
        scales=np.log(rng.uniform(0.1, 1.5, (n, 3))).astype(np.float32),
        opacities=rng.normal(0, 1, n).astype(np.float32),
        sh=rng.normal(0, 0.3, (n, 4, 3)).astype(np.float32),
    )
    t = w.to_training(params)
    K = np.tile(np.array([[300.0, 0, 160], [0, 300, 120], [0, 0, 1]]), (3, 1, 1))

    def project(p, viewmats):
        return projection_fwd(
            p["means"],
            p["quats"],
            np.exp(p["scales"].astype(np.float64)),
            1 / (1 + np.exp(-p["opacities"].astype(np.float64))),
            p["sh"],
            viewmats,
            K,
            320,
            240,
            1,
        )

    a, b = project(params, vms), project(t, w.viewmats(vms))
    assert (a["radii"] > 0).any(-1).sum() > n  # most Gaussians are seen by some camera
    # float32 parameters: ~1e-7 relative, amplified by depth and the conic inverse
    np.testing.assert_allclose(b["means2d"], a["means2d"], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(b["conics"], a["conics"], rtol=1e-4, atol=1e-7)
    assert np.abs(b["radii"] - a["radii"]).max() <= 1
    np.testing.assert_allclose(b["colors"], a["colors"], atol=1e-5)
    np.testing.assert_allclose(b["depths"], w.scale * a["depths"], rtol=1e-5)


def test_to_dataset_inverts_to_training():
    w = WorldTransform((3.0, -2.0, 10.0), 0.037)
    rng = np.random.default_rng(5)
    n = 25
    params = dict(
        means=rng.normal(0, 30, (n, 3)).astype(np.float32),
        quats=rng.standard_normal((n, 4)).astype(np.float32),
        scales=rng.normal(-1, 1, (n, 3)).astype(np.float32),
        opacities=rng.normal(0, 2, n).astype(np.float32),
        sh=rng.normal(0, 1, (n, 9, 3)).astype(np.float32),
    )
    before = {k: v.copy() for k, v in params.items()}
    t = w.to_training(params)
    for k in params:
        np.testing.assert_array_equal(params[k], before[k])  # inputs untouched
    np.testing.assert_allclose(t["means"], (params["means"] - np.array(w.center)) * w.scale, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.exp(t["scales"]), w.scale * np.exp(params["scales"]), rtol=1e-6)
    for k in ("quats", "opacities", "sh"):
        np.testing.assert_array_equal(t[k], params[k])
    back = w.to_dataset(t)
    # float32 round trip through a translation by ~10 and a scale of 0.037: a few ulp of |means| + |center|
    np.testing.assert_allclose(back["means"], params["means"], rtol=0, atol=4e-6 * 40)
    np.testing.assert_allclose(back["scales"], params["scales"], rtol=0, atol=1e-6)
    for k in ("quats", "opacities", "sh"):
        np.testing.assert_array_equal(back[k], params[k])


def test_identity_changes_nothing():
    w = WorldTransform.identity()
    vms = _cameras(seed=6, n=2)
    np.testing.assert_array_equal(w.viewmats(vms), vms)
    p = np.random.default_rng(7).normal(0, 1, (5, 3))
    np.testing.assert_array_equal(w.points(p), p)


def test_focus_centre_is_the_point_the_cameras_look_at():
    """Cameras on a tilted ring around (40, -12, 7), all looking at it: the
    'focus' centre is that point (the camera mean is above it), and the scale
    makes their median distance to it one."""
    target = np.array([40.0, -12.0, 7.0])
    vms = np.stack(
        [
            look_at(target + [25 * np.cos(a), 25 * np.sin(a), 10 + 3 * np.sin(3 * a)], target)
            for a in np.linspace(0, 2 * np.pi, 12, endpoint=False)
        ]
    )
    w = WorldTransform.from_cameras(vms, center="focus")
    np.testing.assert_allclose(w.center, target, atol=1e-9)
    c = _centres(vms)
    assert w.scale == pytest.approx(1 / np.median(np.linalg.norm(c - target, axis=1)), rel=1e-12)
    assert np.linalg.norm(c.mean(0) - target) > 5  # the 'cameras' centre differs


def test_focus_centre_falls_back_to_the_cameras_when_axes_do_not_meet():
    """Forward-facing (parallel axes) and a single camera: the camera mean."""
    vms = np.stack([look_at([x, 0.0, z], [x, 10.0, z]) for x in (-1, 0, 1) for z in (-1, 1)])
    w = WorldTransform.from_cameras(vms, center="focus")
    np.testing.assert_allclose(w.center, _centres(vms).mean(0), atol=1e-12)
    one = _cameras(n=1)
    assert WorldTransform.from_cameras(one, center="focus").center == WorldTransform.from_cameras(one).center
    with pytest.raises(ValueError, match="world center"):
        WorldTransform.from_cameras(vms, center="middle")
