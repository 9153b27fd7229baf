"""Normal consistency (2DGS, --geometry): the float64 reference (spirula/reference/normals.py)
against geometry and finite differences, and the kernels normal_consistency_fwd/bwd
(shaders/, native_cuda/) against the reference."""

import numpy as np
import pytest
from kernel_cases import run_kernel

from spirula.reference.normals import (
    depth_normals,
    normal_consistency_bwd,
    normal_consistency_case,
    normal_consistency_fwd,
    splat_normals,
)

_case = normal_consistency_case


def test_depth_normal_of_a_plane_is_its_normal_towards_the_camera():
    """Depths of the plane n . X = h (camera space) rendered exactly: every interior pixel's
    depth normal is n (the side facing the camera), to float64 rounding."""
    H, W = 9, 11
    K = np.array([[[20.0, 0, 5.1], [0, 21.0, 4.3], [0, 0, 1]]])
    n = np.array([0.3, -0.2, -1.0])
    n /= np.linalg.norm(n)
    h = -2.0  # n . X = h, the camera on the side n points to (n . 0 = 0 > h)
    v, u = np.mgrid[0:H, 0:W] + 0.5
    ray = np.stack([(u - 5.1) / 20.0, (v - 4.3) / 21.0, np.ones_like(u)], -1)
    depth = h / (ray @ n)
    got, valid = depth_normals(depth[None], K)
    assert valid[0, 1:-1, 1:-1].all() and not valid[0, 0].any() and not valid[0, :, -1].any()
    np.testing.assert_allclose(got[0, 1:-1, 1:-1], np.broadcast_to(n, (H - 2, W - 2, 3)), atol=1e-12)
    # fronto-parallel: -z
    got, _ = depth_normals(np.full((1, 5, 5), 3.0), K)
    np.testing.assert_allclose(got[0, 2, 2], [0.0, 0.0, -1.0], atol=1e-15)


def test_reference_backward_matches_finite_differences():
    """Both cotangents of the reference against central differences of sum(g l) (float64,
    step 1e-6: truncation ~1e-12 x the third derivative, rounding ~1e-16 / 1e-6; both far
    below the 1e-7 bound). The holes make five pixels each lose their depth normal."""
    N, d, a, Ks, g = _case(C=1, H=7, W=9)
    d[0, 3, 4] = 0.0
    gn, gd = normal_consistency_bwd(N, d, a, Ks, g)

    def f(N_, d_):
        return float((normal_consistency_fwd(N_, d_, a, Ks) * g).sum())

    for x, got in ((d, gd), (N, gn)):
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            if x is d and d[idx] == 0.0:
                continue  # the hole: the loss is discontinuous there
            xp, xm = x.copy(), x.copy()
            xp[idx] += 1e-6
            xm[idx] -= 1e-6
            fd[idx] = (f(*((xp, d) if x is N else (N, xp))) - f(*((xm, d) if x is N else (N, xm)))) / 2e-6
        np.testing.assert_allclose(got, fd, atol=1e-7 * max(1.0, np.abs(fd).max()))
    assert np.abs(gd).max() > 0.1 and np.abs(gn).max() > 0.1


def test_splat_normals_face_the_camera_along_the_smallest_axis():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((50, 4))
    s = rng.uniform(0.01, 1.0, (50, 3))
    means = rng.uniform(-1, 1, (50, 3))
    vm = np.eye(4)[None].repeat(2, 0)
    vm[:, 2, 3] = 4.0
    vm[1, :3, :3] = [[0, 0, 1], [0, 1, 0], [-1, 0, 0]]
    n = splat_normals(q, s, means, vm)
    np.testing.assert_allclose(np.linalg.norm(n, axis=-1), 1.0, rtol=1e-12)
    p = np.einsum("cij,nj->cni", vm[:, :3, :3], means) + vm[:, None, :3, 3]
    assert ((n * p).sum(-1) <= 0).all()
    from spirula.reference.projection import quat_to_rotmat

    R = quat_to_rotmat(q)
    axis = R[np.arange(50), :, np.argmin(s, 1)]
    # the rotated smallest axis, up to sign
    np.testing.assert_allclose(np.abs(np.einsum("ij,nj->ni", vm[0, :3, :3], axis)), np.abs(n[0]), atol=1e-12)


def _cameras(Ks, models=None, dists=None):
    from spirula.render.raster_buffers import pack_cameras

    return pack_cameras(np.broadcast_to(np.eye(4), (len(Ks), 4, 4)), Ks, models, dists)


def run_normal_consistency(dev, N, d, a, Ks, g, models=None, dists=None):
    C, H, W = d.shape
    f32 = np.float32
    cameras = _cameras(Ks, models, dists)
    inputs = dict(normals=N.astype(f32), depths=d.astype(f32), alphas=a.astype(f32), cameras=cameras)
    push = dict(width=W, height=H, count=C * H * W)  # 1 workgroup of 256 < C H W: grid-stride
    fwd = run_kernel(dev, "normal_consistency_fwd", (1,), inputs, {"out_loss": ((C, H, W), f32)}, push=push)
    bwd = run_kernel(
        dev,
        "normal_consistency_bwd",
        (1,),
        dict(inputs, grad_loss=g.astype(f32)),
        {"grad_normals": ((C, H, W, 3), f32), "grad_depths": ((C, H, W), f32)},
        push=push,
    )
    return fwd["out_loss"], bwd["grad_normals"], bwd["grad_depths"]


def test_kernels_match_reference(backend):
    """The kernels (float32) against the float64 reference on the inputs rounded to float32.
    The depth normal is a difference of neighbouring points: P = d ray is exact to ~2^-24 |P|,
    A and B (~2 d / f here) lose a factor |P| / |A| ~ f / 2 ~ 15, then 1 / |c| and the
    cross products add a few ulps: ~1e-6 of each output's largest, held to 2e-5."""
    N, d, a, Ks, g = _case()
    N, d, a, g = (x.astype(np.float32).astype(np.float64) for x in (N, d, a, g))
    loss, gn, gd = run_normal_consistency(backend, N, d, a, Ks, g)
    want_loss = normal_consistency_fwd(N, d, a, Ks)
    want_gn, want_gd = normal_consistency_bwd(N, d, a, Ks, g)
    for got, want, what in ((loss, want_loss, "loss"), (gn, want_gn, "grad_normals"), (gd, want_gd, "grad_depths")):
        assert np.isfinite(got).all(), what
        np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max(), err_msg=what)
    assert (loss == 0).sum() == (want_loss == 0).sum()  # the border and the holes' pixels


# ---- through a lens (issue 39): P = depth x the pixel's ray through the lens ---------------

# (model, K, dist) of each lens on the 17 x 13 images of normal_consistency_case: a strongly
# distorted OPENCV (radial, tangential, thin prism), a fisheye whose corners (a fifth of the
# image) lie past its valid angle (k1 < 0: theta_d stops growing at theta 2.58 rad, td 1.72),
# a full sphere
LENSES = {
    "OPENCV": (
        np.array([[10.0, 0, 8.8], [0, 11.0, 6.3], [0, 0, 1]]),
        [-0.25, 0.05, 0.01, 0.0, 0.0, 0.0, 1e-3, -2e-3, 1e-3, 0.0, -1e-3, 0.0],
    ),
    "OPENCV_FISHEYE": (np.array([[4.5, 0, 8.6], [0, 4.6, 6.4], [0, 0, 1]]), [-0.05, 0, 0, 0] + [0] * 8),
    "EQUIRECTANGULAR": (np.array([[17 / (2 * np.pi), 0, 8.5], [0, 13 / np.pi, 6.5], [0, 0, 1]]), [0.0] * 12),
}
MODEL_IDS = {"PINHOLE": 0, "OPENCV": 1, "OPENCV_FISHEYE": 2, "EQUIRECTANGULAR": 3}  # camera.glsl


@pytest.mark.parametrize("model", sorted(LENSES))
def test_lens_ray_inverts_the_lens_and_agrees_with_the_data_layer(model):
    """The reference's lens_ray (Newton on lens_project's Jacobian; bisection for the fisheye)
    against spirula.data.lenses.pixel_rays (Newton on central differences; the demo ray
    tracer's rays) and against the projection it inverts: the pixel comes back to 1e-9 px."""
    from spirula.data.lenses import pixel_rays
    from spirula.reference.projection import lens_project, lens_ray

    K, dist = LENSES[model]
    H, W = 13, 17
    v, u = np.mgrid[0:H, 0:W] + 0.5
    ray, ok = lens_ray(MODEL_IDS[model], dist, K, np.stack([u, v], -1))
    dirs, valid = pixel_rays(model, K, dist, W, H)
    np.testing.assert_array_equal(ok, valid)
    assert ok.sum() >= 0.6 * ok.size and (model != "OPENCV_FISHEYE" or not ok.all())
    unit = ray / np.linalg.norm(ray, axis=-1, keepdims=True)
    np.testing.assert_allclose(unit[ok], dirs[ok], atol=1e-9)
    back, _, inside = lens_project(MODEL_IDS[model], dist, K, ray[ok])
    assert inside.all()
    np.testing.assert_allclose(back, np.stack([u, v], -1)[ok], atol=1e-9)
    if model != "OPENCV":  # depth along a fisheye's or a sphere's ray is the distance
        np.testing.assert_allclose(np.linalg.norm(ray[ok], axis=-1), 1.0, rtol=1e-12)


def _plane_depths(model, n, h, H=13, W=17):
    """The depths (as the lens measures them) of the plane n . X = h seen through ``model``'s
    lens, 0 where a pixel's ray misses it or the lens does not reach the pixel."""
    from spirula.reference.projection import lens_ray

    K, dist = LENSES[model]
    v, u = np.mgrid[0:H, 0:W] + 0.5
    ray, ok = lens_ray(MODEL_IDS[model], dist, K, np.stack([u, v], -1))
    s = h / (ray @ n)  # P = s ray on the plane
    return np.where(ok & (s > 0), s, 0.0)


@pytest.mark.parametrize("model", sorted(LENSES))
def test_depth_normal_of_a_plane_through_a_lens(model):
    """A plane's depths through each lens: every pixel with a depth normal has the plane's
    normal (towards the camera), to float64 rounding; those the lens does not reach have none."""
    n = np.array([0.3, -0.2, -1.0]) if model != "EQUIRECTANGULAR" else np.array([0.2, 1.0, 0.1])
    n /= np.linalg.norm(n)
    d = _plane_depths(model, n, -2.0)
    K, dist = LENSES[model]
    got, valid = depth_normals(d[None], K[None], [MODEL_IDS[model]], [dist])
    assert valid.sum() >= 0.25 * valid.size  # the sphere sees the plane on one side
    np.testing.assert_allclose(got[valid], np.broadcast_to(n, (int(valid.sum()), 3)), atol=1e-10)
    assert not valid[0][d == 0].any()


@pytest.mark.parametrize("model", sorted(LENSES))
def test_kernels_match_reference_through_a_lens(backend, model):
    """The kernels through each lens against the reference, as test_kernels_match_reference.
    The rays come from Newton's method to float32 rounding (and sin, cos within an ulp or
    two on lavapipe, 2^-21 on NVIDIA's units): a few ulps of |ray|, which the differences
    A, B of neighbouring points magnify by f / 2 (< 6 here; 15 in the pinhole case), so the
    pinhole's 2e-5 bound holds. A pixel the fisheye does not reach has no loss and passes
    no gradient to its depth."""
    N, d, a, _, g = _case()
    K, dist = LENSES[model]
    Ks = np.stack([K, K])
    models, dists = [MODEL_IDS[model]] * 2, [dist] * 2
    loss, gn, gd = run_normal_consistency(backend, N, d, a, Ks, g, models, dists)
    want_loss = normal_consistency_fwd(N, d, a, Ks, models, dists)
    want_gn, want_gd = normal_consistency_bwd(N, d, a, Ks, g, models, dists)
    for got, want, what in ((loss, want_loss, "loss"), (gn, want_gn, "grad_normals"), (gd, want_gd, "grad_depths")):
        assert np.isfinite(got).all(), what
        np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max(), err_msg=what)
    np.testing.assert_array_equal(loss == 0, want_loss == 0)
    if model == "OPENCV_FISHEYE":
        assert (want_gd == 0).sum() > (normal_consistency_bwd(N, d, a, Ks, g)[1] == 0).sum()


def test_kernel_plane_through_a_fisheye_has_no_loss(backend):
    """Rendered normals equal to a plane's, depths the plane's through the fisheye: the
    kernel's loss is 0 to float32 rounding everywhere (it is ~1 where the pinhole ray is used
    for a fisheye's pixels, as before issue 39's lens rays)."""
    n = np.array([0.3, -0.2, -1.0])
    n /= np.linalg.norm(n)
    d = _plane_depths("OPENCV_FISHEYE", n, -2.0)[None]
    a = np.ones_like(d)
    N = np.broadcast_to(n, d.shape + (3,)).copy()
    K, dist = LENSES["OPENCV_FISHEYE"]
    loss, _, _ = run_normal_consistency(backend, N, d, a, K[None], np.ones_like(d), [2], [dist])
    assert (loss[0][1:-1, 1:-1] != 0).sum() == 0 or np.abs(loss).max() < 1e-5
    assert np.abs(loss).max() < 1e-5
    pinhole, _, _ = run_normal_consistency(backend, N, d, a, K[None], np.ones_like(d))
    assert np.abs(pinhole).max() > 1e-2


# ---- the normal image (projection_fwd + rasterize_fwd with NORMALS) ---------------------


def _disc_scene(normal_world, flip_half=False):
    """A 5x5 grid of overlapping, nearly opaque flat discs (scales 0.25, 0.25, 1e-3 along
    their own x, y, z) on the plane through (0, 0, 3) with world normal ``normal_world``,
    seen by one identity camera (32 x 24 pixels). ``flip_half``: every other disc's rotation
    turned by pi about its x axis (its z axis, the normal, reversed)."""
    n = np.asarray(normal_world, np.float64)
    n /= np.linalg.norm(n)
    # a rotation whose z column is n: the shortest arc from z to n, as a quaternion (w, x, y, z)
    z = np.array([0.0, 0.0, 1.0])
    q = np.r_[1.0 + z @ n, np.cross(z, n)]
    q /= np.linalg.norm(q)
    e1 = np.cross(n, [0.0, 1.0, 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(n, e1)
    g = np.linspace(-0.4, 0.4, 5)
    means = np.array([[0.0, 0.0, 3.0] + a * e1 + b * e2 for a in g for b in g])
    quats = np.tile(q, (len(means), 1))
    if flip_half:  # q * (0, 1, 0, 0): a pi turn about the local x axis
        w, x, y, zz = q
        quats[::2] = [-x, w, zz, -y]
    K = np.array([[[30.0, 0, 16.0], [0, 30.0, 12.0], [0, 0, 1]]])
    return dict(
        means=means.astype(np.float32),
        quats=quats.astype(np.float32),
        scales=np.tile([0.25, 0.25, 1e-3], (len(means), 1)).astype(np.float32),
        opacities=np.full(len(means), 0.9, np.float32),
        sh_coeffs=np.zeros((len(means), 1, 3), np.float32),
        viewmats=np.eye(4, dtype=np.float32)[None],
        Ks=K.astype(np.float32),
        width=32,
        height=24,
        sh_degree=0,
    )


def test_flat_discs_render_their_normal_towards_the_camera():
    """Discs on a tilted plane render n * alpha: the normal image over the alpha is the
    plane's normal (camera = world here), the side facing the camera, wherever a disc
    covers a pixel, also where half the discs' rotations point their normal away. float32
    blending of <= 25 terms of the same unit vector: relative error ~1e-6, bounded by 1e-5."""
    from render_cases import gpu_render

    n = np.array([0.3, -0.4, -1.0]) / np.linalg.norm([0.3, -0.4, -1.0])  # faces the camera
    for flip_half in (False, True):
        for sign in (1.0, -1.0):  # the stored normal facing the camera or away from it
            scene = _disc_scene(sign * n, flip_half)
            _, alphas, _, meta = gpu_render(scene, normals=True)
            img = meta["normals"]
            assert img.shape == (1, 24, 32, 3) and img.dtype == np.float32
            cover = alphas[..., 0] > 0.05
            assert cover.mean() > 0.3
            got = img[cover] / alphas[cover]
            np.testing.assert_allclose(got, np.broadcast_to(n, got.shape), atol=1e-5)
            np.testing.assert_allclose(img[~cover], 0.0, atol=0.05 * 1.0)  # |N| <= alpha <= 0.05


def test_normal_image_matches_reference():
    """The random scene's normal image against the float64 reference (the colour's bound of
    tests/test_rasterize_fwd.py: 1e-5 + 1% per pixel; the splat normals are rotation columns
    in float32, ~1e-7), both cameras, with and without the distortion."""
    from render_cases import gpu_render, random_scene

    from spirula.reference.normals import render_normals

    scene = random_scene(n=300, width=75, height=53, seed=3, sh_degree=1)
    f64 = {k: np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v for k, v in scene.items()}
    want = render_normals(**f64)
    for distortion in (False, True):
        colors, alphas, _, meta = gpu_render(scene, normals=True, distortion=distortion)
        got = meta["normals"]
        bad = np.abs(got - want) > 1e-5 + 0.01 * np.abs(want)
        assert not bad.any(), "%d values off, worst %g" % (bad.sum(), np.abs(got - want).max())
        # |N| <= alpha (a blend of unit vectors), and the image is not empty
        assert (np.linalg.norm(got, axis=-1) <= alphas[..., 0] + 1e-5).all()
        assert (np.linalg.norm(got, axis=-1) > 0.3).mean() > 0.2
    plain_colors, plain_alphas, _, plain_meta = gpu_render(scene, distortion=True)
    assert plain_meta["normals"] is None
    # the normals change nothing else (same arithmetic, bitwise)
    assert np.array_equal(plain_colors, colors) and np.array_equal(plain_alphas, alphas)


@pytest.mark.parametrize("distortion", [False, True], ids=["", "distortion"])
def test_normal_and_depth_image_gradients_match_reference(distortion):
    """rasterize_bwd with NORMALS: the cotangents of the normal image and of the accumulated
    depth image (with the colour's and alpha's, and the distortion's) against the reference's
    rasterize_bwd, which is linear in its cotangents: the colour pass (colours, background)
    plus a pass with the splat normals as the colours (no background) and the depth
    cotangent; the reference is checked against finite differences in test_reference.py.
    Bound: tests/test_rasterize_bwd.py's float32 atomics bound."""
    from reference.rasterize import rasterize_bwd
    from render_cases import gpu_render, random_scene
    from test_rasterize_bwd import assert_grad_close

    from spirula.render.api import rasterization_backward

    scene = random_scene(n=150, seed=22, sh_degree=1)
    W, H = scene["width"], scene["height"]
    bg = np.array([[0.3, 0.1, 0.0], [0.0, 0.5, 1.0]], np.float32)
    colors, alphas, _, meta = gpu_render(scene, backgrounds=bg, normals=True, distortion=distortion)
    rng = np.random.default_rng(5)
    gc = rng.standard_normal(colors.shape).astype(np.float32)
    ga = rng.standard_normal(alphas.shape).astype(np.float32)
    gn = rng.standard_normal(colors.shape).astype(np.float32)
    gd = rng.standard_normal(alphas.shape).astype(np.float32)
    gx = rng.standard_normal(alphas.shape).astype(np.float32) if distortion else None
    got = rasterization_backward(meta, gc, ga, grad_distortions=gx, grad_normals=gn, grad_accum_depths=gd)
    raster = meta["_context"].raster
    C, N = meta["radii"].shape[:2]
    normals = raster.device.readback(raster.splat_normals, shape=(C * N, 4)).reshape(C, N, 4)[..., :3]
    opac = np.broadcast_to(scene["opacities"], (C, N))
    geo = (meta["means2d"], meta["conics"])
    rest = (opac, meta["depths"], meta["radii"], W, H)
    a = rasterize_bwd(*geo, meta["colors"], *rest, bg, grad_colors=gc, grad_alphas=ga, grad_distortions=gx)
    b = rasterize_bwd(*geo, normals, *rest, grad_colors=gn, grad_depths=gd)

    def read(buf, w):
        return raster.device.readback(buf, shape=(C * N, w)).reshape(C, N, w)

    vis = (meta["radii"] != 0).any(-1)
    assert_grad_close(got["means2d"][vis], (a["means2d"] + b["means2d"])[vis], "means2d")
    assert_grad_close(read(raster.grad_conics, 3)[vis], (a["conics"] + b["conics"])[vis], "conics")
    assert_grad_close(read(raster.grad_rgb, 3)[vis], a["colors"][vis], "colors")
    assert_grad_close(read(raster.grad_opacity, 1)[vis][:, 0], (a["opacities"] + b["opacities"])[vis], "opacity")
    assert_grad_close(got["depths"][vis], (a["depths"] + b["depths"])[vis], "depths")
    assert_grad_close(got["normals"][vis], b["colors"][vis], "normals")
    assert np.abs(b["colors"][vis]).max() > 0.1 and np.abs(b["opacities"][vis]).max() > 0.1


def test_splat_normals_vjp_matches_finite_differences():
    """The reference's quaternion gradient of the splat normals against central differences
    of sum(g . n) (float64, step 1e-6: error ~1e-12 against gradients of order 1). The
    scales are distinct by more than any step moves, so the axis choice and flip are fixed."""
    from spirula.reference.normals import splat_normals_vjp

    rng = np.random.default_rng(4)
    N, C = 9, 2
    q = rng.standard_normal((N, 4)) * 1.7
    s = np.exp(rng.uniform(-3, 0, (N, 3)))
    means = np.c_[rng.uniform(-1, 1, (N, 2)), rng.uniform(2, 4, N)]
    vm = np.tile(np.eye(4), (C, 1, 1))
    a = 0.3
    vm[1, :3, :3] = [[np.cos(a), 0, -np.sin(a)], [0, 1, 0], [np.sin(a), 0, np.cos(a)]]
    vm[1, :3, 3] = [0.2, -0.1, 0.4]
    g = rng.standard_normal((C, N, 3))
    got = splat_normals_vjp(q, s, means, vm, g)
    fd = np.zeros_like(q)
    for idx in np.ndindex(q.shape):
        qp, qm = q.copy(), q.copy()
        qp[idx] += 1e-6
        qm[idx] -= 1e-6
        fp = (g * splat_normals(qp, s, means, vm)).sum()
        fm = (g * splat_normals(qm, s, means, vm)).sum()
        fd[idx] = (fp - fm) / 2e-6
    np.testing.assert_allclose(got, fd, atol=1e-8)
    assert np.abs(got).max() > 0.1


@pytest.mark.parametrize("name", ["quats", "means", "scales", "opacities"])
def test_normal_gradients_reach_the_splats_as_the_reference(name):
    """rasterization_backward with the normal and depth images' cotangents: dL/d each splat
    parameter (projection_bwd with NORMALS: the normals' gradient to the quaternions) against
    the reference chain: rasterize_bwd's two passes as above into projection_bwd, plus
    splat_normals_vjp. The API's projection_bwd does not take dL/d depth further (as for the
    distortion), so neither does the reference here. Bound: test_rasterize_bwd's."""
    from reference.projection import projection_bwd
    from reference.rasterize import rasterize_bwd
    from render_cases import gpu_render, random_scene
    from test_rasterize_bwd import assert_grad_close

    from spirula.reference.normals import splat_normals_vjp
    from spirula.render.api import rasterization_backward

    scene = random_scene(n=120, seed=23, sh_degree=1)
    W, H = scene["width"], scene["height"]
    colors, alphas, _, meta = gpu_render(scene, normals=True)
    rng = np.random.default_rng(6)
    gc = rng.standard_normal(colors.shape).astype(np.float32)
    gn = rng.standard_normal(colors.shape).astype(np.float32)
    gd = rng.standard_normal(alphas.shape).astype(np.float32)
    got = rasterization_backward(meta, gc, None, grad_normals=gn, grad_accum_depths=gd)
    raster = meta["_context"].raster
    C, N = meta["radii"].shape[:2]
    normals = raster.device.readback(raster.splat_normals, shape=(C * N, 4)).reshape(C, N, 4)[..., :3]
    f64 = {k: np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v for k, v in scene.items()}
    opac = np.broadcast_to(f64["opacities"], (C, N))
    geo = (meta["means2d"], meta["conics"])
    rest = (opac, meta["depths"], meta["radii"], W, H)
    a = rasterize_bwd(*geo, meta["colors"], *rest, grad_colors=gc)
    b = rasterize_bwd(*geo, normals, *rest, grad_colors=gn, grad_depths=gd)
    keys = ("means", "quats", "scales", "opacities", "sh_coeffs", "viewmats", "Ks", "width", "height", "sh_degree")
    want = projection_bwd(
        *(f64[k] for k in keys),
        a["means2d"] + b["means2d"],
        a["conics"] + b["conics"],
        a["colors"],
        a["opacities"] + b["opacities"],
    )
    want["quats"] = want["quats"] + splat_normals_vjp(
        f64["quats"], f64["scales"], f64["means"], f64["viewmats"], b["colors"]
    )
    assert_grad_close(got[name], want[name], name)
