"""Camera models other than the pinhole (docs/design.md §2.3 "Camera models"): the float64
reference's backward against finite differences, projection_fwd / projection_bwd on each
backend (CUDA where it runs) against the reference for OPENCV, FULL_OPENCV (as OPENCV with
k3..k6 and the thin prism), OPENCV_FISHEYE and EQUIRECTANGULAR, the cull of what a lens
cannot see, the seam, and the pinhole path bit for bit as it was before lenses existed."""

from pathlib import Path

import numpy as np
import pytest
from kernel_cases import project, run_kernel, scene_inputs
from lens_cases import LENSES, lens_scene
from render_cases import random_scene

from spirula.reference.projection import (
    EQUIRECTANGULAR,
    OPENCV,
    OPENCV_FISHEYE,
    lens_limit,
    lens_project,
    projection_bwd,
    projection_fwd,
)
from spirula.render.raster_buffers import CAMERA_MODELS, pack_cameras
from spirula.render.raster_buffers import lens_limit as host_lens_limit
from spirula.render.rasterizer import EPS2D, FAR_PLANE, NEAR_PLANE
from spirula.runtime.sequence import Threads

STORED = Path(__file__).parent / "stored" / "pinhole_projection.npz"
F64 = ("means", "quats", "scales", "opacities", "sh_coeffs", "viewmats", "Ks")


def _f64(scene):
    return [np.asarray(scene[k], np.float64) for k in F64]


def _lens(scene):
    return dict(models=scene["models"], dists=np.asarray(scene["dists"], np.float64))


def test_model_ids_and_limits_are_the_kernels():
    assert CAMERA_MODELS == dict(
        PINHOLE=0, OPENCV=OPENCV, OPENCV_FISHEYE=OPENCV_FISHEYE, EQUIRECTANGULAR=EQUIRECTANGULAR
    )
    for model, dist, *_ in LENSES.values():
        assert host_lens_limit(model, dist) == lens_limit(model, dist)
    # the limit is where the radial polynomial turns: k1 = -0.5 turns at r^2 = 2/3 (1 - 3 * 0.5 r^2 = 0)
    d = np.zeros(12)
    d[0] = -0.5
    assert abs(lens_limit(OPENCV, d) - 2 / 3) < 0.01
    assert lens_limit(OPENCV_FISHEYE, np.zeros(12)) == pytest.approx(np.pi - 0.01)
    rec = pack_cameras(np.eye(4)[None], np.eye(3)[None], ["OPENCV_FISHEYE"], d[None])
    assert rec[0, 12] == OPENCV_FISHEYE and rec[0, 20] == -0.5


def test_pinhole_records_are_unchanged():
    """A pinhole record carries nothing new: zeros past fx, fy, cx, cy, model 0."""
    s = random_scene(n=5)
    rec = pack_cameras(s["viewmats"], s["Ks"])
    assert (rec[:, 12:16] == 0).all() and (rec[:, 20:] == 0).all()
    assert np.array_equal(rec, pack_cameras(s["viewmats"], s["Ks"], [0, 0], np.zeros((2, 12))))


def test_pinhole_projection_is_bit_identical_to_before_lenses(device):
    """projection_fwd and projection_bwd of a pinhole scene give the bits the kernels gave before
    camera models (stored from that tree on lavapipe; another driver: within 1e-5)."""
    stored = dict(np.load(STORED))
    scene = random_scene(n=97, sh_degree=3, seed=39, spread=1.6)
    fwd = project(device, scene, 3, True)
    n, C, K = len(scene["means"]), len(scene["viewmats"]), scene["sh_coeffs"].shape[1]
    rng = np.random.default_rng(5)
    grads = dict(
        grad_xy=rng.standard_normal((C * n, 2)).astype(np.float32),
        grad_conics=rng.standard_normal((C * n, 3)).astype(np.float32),
        grad_rgb=rng.standard_normal((C * n, 3)).astype(np.float32),
        grad_opacity=rng.standard_normal((C * n,)).astype(np.float32),
        grad_normals=np.zeros((C * n, 3), np.float32),
    )
    inputs = dict(scene_inputs(scene, False), radii=fwd["radii"], **grads)
    outs = dict(
        grad_means=((n, 3), np.float32),
        grad_quats=((n, 4), np.float32),
        grad_scales=((n, 3), np.float32),
        grad_opacities=((n,), np.float32),
        grad_sh=((n, K, 3), np.float32),
    )
    push = dict(n=n, n_cameras=C, width=scene["width"], height=scene["height"], eps2d=EPS2D)
    spec = dict(SH_DEGREE=3, SH_COEFFS=K, ACTIVATED=0, NORMALS=0)
    got = dict(fwd, **run_kernel(device, "projection_bwd", Threads(n), inputs, outs, push=push, spec=spec))
    exact = "llvmpipe" in device.info.name.lower()
    seen = (stored["radii"] != 0).any(-1)
    assert np.array_equal(seen, (got["radii"] != 0).any(-1))
    for key in ("xyop", "conics", "rgb"):  # culled rows are left unwritten
        got[key], stored[key] = got[key][seen], stored[key][seen]
    for key, want in stored.items():
        if exact or want.dtype != np.float32:
            assert np.array_equal(got[key], want), key
        else:
            np.testing.assert_allclose(got[key], want, rtol=1e-5, atol=1e-5, err_msg=key)


@pytest.mark.parametrize("name", sorted(LENSES))
def test_lens_project_jacobian_matches_finite_differences(name):
    model, dist = LENSES[name][0], np.asarray(LENSES[name][1], np.float64)
    s = lens_scene(name, n=200, seed=2)
    p = np.asarray(s["means"], np.float64) @ np.asarray(s["viewmats"][0, :3, :3], np.float64).T
    K = np.asarray(s["Ks"][0], np.float64)
    uv, J, ok = lens_project(model, dist, K, p)
    assert ok.mean() > 0.7
    h = 1e-6
    for j in range(3):
        e = np.zeros(3)
        e[j] = h
        fd = (lens_project(model, dist, K, p + e)[0] - lens_project(model, dist, K, p - e)[0]) / (2 * h)
        if model == EQUIRECTANGULAR:
            fd[..., 0] = np.where(np.abs(fd[..., 0]) > 1e3, J[..., 0, j], fd[..., 0])  # across the seam
        np.testing.assert_allclose(J[ok, :, j], fd[ok], rtol=1e-5, atol=1e-5 * np.abs(J).max())


@pytest.mark.parametrize("name", sorted(LENSES))
def test_lens_reference_backward_matches_finite_differences(name):
    """projection_bwd through a lens (the unscented transform's backward) against central
    differences of projection_fwd, for the means, quaternions and scales, from random
    cotangents of the 2D means, conics, colours and depths of the visible pairs."""
    s = lens_scene(name, n=120, seed=1)
    args = _f64(s)
    W, H = s["width"], s["height"]
    fwd = projection_fwd(*args, W, H, 3, **_lens(s))
    vis = (fwd["radii"] != 0).any(-1)
    assert vis.mean() > 0.5
    rng = np.random.default_rng(0)
    g = {k: rng.standard_normal(fwd[k].shape) * vis[..., None] for k in ("means2d", "conics", "colors")}
    gd = rng.standard_normal(vis.shape) * vis

    def loss(key, value):
        a = dict(zip(F64, args), **{key: value})
        o = projection_fwd(*a.values(), W, H, 3, **_lens(s))
        assert np.array_equal((o["radii"] != 0).any(-1), vis)
        return sum((o[k] * g[k]).sum() for k in g) + (o["depths"] * gd).sum()

    bwd = projection_bwd(
        *args, W, H, 3, g["means2d"], g["conics"], g["colors"], np.zeros(vis.shape), grad_depths=gd, **_lens(s)
    )
    for key in ("means", "quats", "scales"):
        x = dict(zip(F64, args))[key]
        for i in rng.choice(len(x), 8, replace=False):
            for j in range(x.shape[1]):
                h = 1e-6 * max(1.0, abs(x[i, j]))
                xp, xm = x.copy(), x.copy()
                xp[i, j] += h
                xm[i, j] -= h
                fd = (loss(key, xp) - loss(key, xm)) / (2 * h)
                assert abs(fd - bwd[key][i, j]) <= 1e-4 * (1e-2 + abs(fd)), (key, i, j, fd, bwd[key][i, j])


def test_lens_culls_what_it_cannot_see():
    """OPENCV: behind the camera; the fisheye: past its valid angle (a polynomial that turns);
    the equirectangular lens sees behind, and a Gaussian across its seam keeps a small box."""
    s = lens_scene("fisheye", n=300, seed=3)
    d = np.asarray(s["dists"], np.float64).copy()
    d[:, :4] = [-0.1, 0, 0, 0]  # theta_d' = 1 - 0.3 theta^2: turns at theta = 1.826
    fwd = projection_fwd(*_f64(s), s["width"], s["height"], 0, models=s["models"], dists=d)
    mc = (
        np.asarray(s["means"], np.float64) @ np.asarray(s["viewmats"][0, :3, :3], np.float64).T
        + s["viewmats"][0, :3, 3]
    )
    theta = np.arctan2(np.hypot(mc[:, 0], mc[:, 1]), mc[:, 2])
    assert not fwd["radii"][0][theta > 1.83].any()
    assert (fwd["radii"][0][theta < 1.0] != 0).any(-1).mean() > 0.9

    s = lens_scene("opencv", n=300, seed=3)
    fwd = projection_fwd(*_f64(s), s["width"], s["height"], 0, **_lens(s))
    mc = np.asarray(s["means"], np.float64) @ np.asarray(s["viewmats"][0, :3, :3], np.float64).T
    assert not fwd["radii"][0][mc[:, 2] <= 0].any()

    s = lens_scene("equirect", n=300, seed=3)
    fwd = projection_fwd(*_f64(s), s["width"], s["height"], 0, **_lens(s))
    seam = slice(0, 20)  # behind the camera, across longitude +-180 degrees
    vis = (fwd["radii"][0][seam] != 0).any(-1)
    assert vis.mean() > 0.9
    assert fwd["radii"][0][seam][vis, 0].max() < s["width"] / 4


def _ref_fwd(scene, sh_degree):
    return projection_fwd(
        *_f64(scene), scene["width"], scene["height"], sh_degree, EPS2D, NEAR_PLANE, FAR_PLANE, **_lens(scene)
    )


@pytest.mark.parametrize("activated", [True, False], ids=["activated", "log-logit"])
@pytest.mark.parametrize("name", sorted(LENSES))
def test_projection_fwd_kernel_through_lens_matches_reference(backend, name, activated):
    """Every output of projection_fwd through a lens against the reference (1e-4, as the
    pinhole's; the unscented transform's spread of six float32 points loses a little more
    where an ellipse is thin and far off the axis: 5e-4 relative on the conic, 2e-4
    elsewhere), radii within 1 pixel, tile counts equal where the radii are, depth keys the
    depth's bits."""
    scene = lens_scene(name, n=301, seed=7)
    out = project(backend, scene, 3, activated)
    ref = _ref_fwd(scene, 3)
    C, n = len(scene["viewmats"]), len(scene["means"])
    radii = out["radii"].reshape(C, n, 2)
    vis, rvis = (radii != 0).any(-1), (ref["radii"] != 0).any(-1)
    assert (vis != rvis).mean() <= 0.01
    both = vis & rvis
    assert both.mean() > 0.3
    xyop = out["xyop"].reshape(C, n, 4)
    got = dict(
        means2d=xyop[..., :2],
        depths=xyop[..., 3],
        conics=out["conics"].reshape(C, n, 4)[..., :3],
        colors=out["rgb"].reshape(C, n, 4)[..., :3],
    )
    for key, value in got.items():
        scale = np.abs(ref[key][both]).max()
        rtol = 5e-4 if key == "conics" else 2e-4
        np.testing.assert_allclose(value[both], ref[key][both], rtol=rtol, atol=1e-5 * scale, err_msg=key)
    assert np.abs(radii[both] - ref["radii"][both]).max() <= 1
    same = both & (radii == ref["radii"]).all(-1)
    tiles = out["tile_counts"].reshape(C, n)
    assert (tiles[same] == ref["tiles"][same]).mean() > 0.99
    keys = out["depth_keys"].reshape(C, n)
    assert np.array_equal(keys[vis & (tiles > 0)], xyop[..., 3][vis & (tiles > 0)].view(np.uint32))
    assert (keys[~vis | (tiles == 0)] == 0xFFFFFFFF).all()


@pytest.mark.parametrize("name", sorted(LENSES))
def test_projection_bwd_kernel_through_lens_matches_reference(backend, name):
    """projection_bwd through a lens against the reference's gradients (log scales, logit
    opacities as training stores them), from random cotangents of every visible pair."""
    from test_projection_bwd import assert_grad_close

    scene = lens_scene(name, n=257, seed=8)
    n, C, K = len(scene["means"]), len(scene["viewmats"]), scene["sh_coeffs"].shape[1]
    W, H = scene["width"], scene["height"]
    fwd = _ref_fwd(scene, 3)
    vis = (fwd["radii"] != 0).any(-1)
    rng = np.random.default_rng(9)
    grads = dict(
        grad_xy=rng.standard_normal((C, n, 2)).astype(np.float32),
        grad_conics=(rng.standard_normal((C, n, 3)) * 0.1).astype(np.float32),
        grad_rgb=rng.standard_normal((C, n, 3)).astype(np.float32),
        grad_opacity=rng.standard_normal((C, n)).astype(np.float32),
        grad_normals=np.zeros((C, n, 3), np.float32),
    )
    inputs = dict(scene_inputs(scene, False), radii=fwd["radii"].reshape(C * n, 2).astype(np.int32))
    inputs.update({k: v.reshape((C * n,) + v.shape[2:]) for k, v in grads.items()})
    outs = dict(
        grad_means=((n, 3), np.float32),
        grad_quats=((n, 4), np.float32),
        grad_scales=((n, 3), np.float32),
        grad_opacities=((n,), np.float32),
        grad_sh=((n, K, 3), np.float32),
    )
    out = run_kernel(
        backend,
        "projection_bwd",
        Threads(n),
        inputs,
        outs,
        push=dict(n=n, n_cameras=C, width=W, height=H, eps2d=EPS2D),
        spec=dict(SH_DEGREE=3, SH_COEFFS=K, ACTIVATED=0, NORMALS=0),
    )
    ref = projection_bwd(
        *_f64(scene),
        W,
        H,
        3,
        grad_means2d=grads["grad_xy"],
        grad_conics=grads["grad_conics"],
        grad_colors=grads["grad_rgb"],
        grad_opacities=grads["grad_opacity"],
        eps2d=EPS2D,
        near=NEAR_PLANE,
        far=FAR_PLANE,
        **_lens(scene),
    )
    s = np.asarray(scene["scales"], np.float64)
    o = np.asarray(scene["opacities"], np.float64)
    ref["scales"] = ref["scales"] * s
    ref["opacities"] = ref["opacities"] * o * (1 - o)
    assert vis.mean() > 0.3
    for name_, key in (("means", "grad_means"), ("quats", "grad_quats"), ("scales", "grad_scales")):
        assert_grad_close(out[key], ref[name_], name_)
    assert_grad_close(out["grad_opacities"], ref["opacities"], "opacities")
    assert_grad_close(out["grad_sh"], ref["sh_coeffs"], "sh")
