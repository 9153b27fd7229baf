"""Self-checks of the float64 reference rasterizer in spirula/reference (tests import it as reference.*).

Analytic cases (hand-computable projections and renders, culling, radius, SH constants,
sorting, a naive per-pixel renderer) and every analytic backward against central finite
differences of its forward. FD inputs are placed away from the piecewise boundaries (clip
limits, cull thresholds, alpha 1/255 and 0.99, T 1e-4); a coordinate whose perturbation
still flips any discrete decision is excluded from the comparison.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference.intersect import intersect, tile_counts
from reference.projection import projection_bwd, projection_fwd, quat_to_rotmat, sh_basis, sh_basis_jac
from reference.rasterize import _trace, decision_codes, rasterize_bwd, rasterize_fwd
from reference.render import rasterization, rasterization_bwd
from scipy.spatial.transform import Rotation

H_FD = 1e-6
# Central differences in float64 with h = 1e-6: truncation h^2 |f'''|/6 ~ 1e-12 * |f'''| and
# rounding ~ 1e-16 |L| / h ~ 1e-10 |L|; with |L| <~ 1e3 and |f'''| <~ 1e3 both stay below
# ~1e-7, while a wrong derivative term is off by O(|grad|). Hence this bound (absolute,
# relative to the largest gradient entry of the block, floored at 1):
FD_TOL = 1e-6


# ----------------------------------------------------------------------------- scenes


def intrinsics(f, W, H, C=2):
    """fx = f, fy = 1.1 f (distinct, to catch a swap), principal point off the image centre."""
    K = np.array([[f, 0.0, W / 2 - 0.3], [0.0, 1.1 * f, H / 2 + 0.2], [0.0, 0.0, 1.0]])
    return np.stack([K] * C)


def viewmats2():
    """Camera 0 at the origin looking down +z; camera 1 slightly rotated and moved."""
    v = np.stack([np.eye(4)] * 2)
    v[1, :3, :3] = Rotation.from_rotvec([0.05, -0.08, 0.03]).as_matrix()
    v[1, :3, 3] = [0.2, -0.1, 0.3]
    return v


def gaussians(means, seed, K=16, scale=(0.25, 0.5), opacity=(0.4, 0.85)):
    """Random quats (unnormalised, norms 0.5..2), scales, opacities and SH around a given set of means."""
    rng = np.random.default_rng(seed)
    means = np.asarray(means, dtype=np.float64)
    N = len(means)
    q = rng.normal(size=(N, 4))
    quats = q / np.linalg.norm(q, axis=1, keepdims=True) * rng.uniform(0.5, 2.0, (N, 1))
    scales = rng.uniform(*scale, (N, 3))
    opac = rng.uniform(*opacity, N)
    sh = 0.15 * rng.normal(size=(N, K, 3))
    sh[:, 0] += 1.0  # DC term: colours around 0.78, far from the clamp at 0
    return dict(means=means, quats=quats, scales=scales, opacities=opac, sh_coeffs=sh)


MEANS_SMALL = [[-0.5, -0.4, 4.0], [0.6, 0.3, 4.5], [0.1, 0.5, 3.5], [-0.3, 0.2, 5.0], [0.4, -0.5, 3.8]]


# ----------------------------------------------------------------------------- FD helpers


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def fd_grad(fun, x, h=H_FD):
    """Central differences of fun(x) -> (loss, structure) over every element of x.
    Returns (grad, checked) where checked is False where the structure changed at x +- h."""
    base = fun(x)[1]
    g = np.zeros_like(x)
    ok = np.zeros(x.shape, bool)
    for idx in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        lp, sp = fun(xp)
        lm, sm = fun(xm)
        if _same(sp, base) and _same(sm, base):
            g[idx] = (lp - lm) / (2 * h)
            ok[idx] = True
    return g, ok


def assert_grad(name, analytic, fd, ok, tol=FD_TOL):
    assert ok.mean() >= 0.9, f"{name}: too many coordinates flip a discrete decision ({ok.mean():.2f} checked)"
    scale = max(1.0, np.abs(analytic).max())
    err = np.abs(analytic - fd)[ok].max() if ok.any() else 0.0
    assert err <= tol * scale, f"{name}: max |analytic - fd| = {err:.3e} (scale {scale:.3e})"


# ----------------------------------------------------------------------------- analytic cases


@pytest.mark.parametrize("rotated", [False, True])
def test_single_isotropic_gaussian(rotated):
    W, H, f, z, s, o = 32, 24, 30.0, 4.0, 0.5, 0.6
    K = np.array([[f, 0, 15.5], [0, f, 11.5], [0, 0, 1.0]])[None]  # principal point on pixel (11, 15)'s centre
    view = np.eye(4)[None].copy()
    mean = np.array([[0.0, 0.0, z]])
    if rotated:  # camera somewhere else, rotated; the Gaussian z straight ahead of it
        Rv = Rotation.from_rotvec([0.3, -0.5, 0.2]).as_matrix()
        campos = np.array([1.0, -2.0, 0.5])
        view[0, :3, :3], view[0, :3, 3] = Rv, -Rv @ campos
        mean = (campos + Rv.T @ [0.0, 0.0, z])[None]
    sh = np.array([[[0.7, -0.2, 0.1]]])
    bg = np.array([[0.1, 0.2, 0.3]])
    args = (mean, [[0.3, -0.4, 0.8, 0.1]], [[s, s, s]], [o], sh, view, K, W, H, 0)
    p = projection_fwd(*args)
    var = (f * s / z) ** 2 + 0.3
    np.testing.assert_allclose(p["means2d"][0, 0], [15.5, 11.5], rtol=0, atol=1e-12)
    np.testing.assert_allclose(p["conics"][0, 0], [1 / var, 0, 1 / var], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(p["depths"][0, 0], z, rtol=1e-12)
    colour = 0.2820947917738781 * sh[0, 0] + 0.5
    np.testing.assert_allclose(p["colors"][0, 0], colour, rtol=1e-12)
    r = np.ceil(np.sqrt(2 * np.log(255 * o)) * np.sqrt(var))
    assert p["radii"].dtype == np.int32 and tuple(p["radii"][0, 0]) == (r, r)
    # float32 inputs are upcast and give the same result
    p32 = projection_fwd(*[np.asarray(a, np.float32) if isinstance(a, (np.ndarray, list)) else a for a in args])
    # (the float32 inputs differ from the float64 ones by ~6e-8 relative; conics are ~0.07)
    np.testing.assert_allclose(p32["conics"], p["conics"], rtol=1e-5, atol=1e-7)

    colors, alphas, meta = rasterization(*args, backgrounds=bg)
    # centre pixel: sigma = 0, alpha = o
    np.testing.assert_allclose(alphas[0, 11, 15, 0], o, rtol=1e-12)
    np.testing.assert_allclose(colors[0, 11, 15], o * colour + (1 - o) * bg[0], rtol=1e-12)
    np.testing.assert_allclose(meta["render_depths"][0, 11, 15, 0], o * z, rtol=1e-12)
    assert meta["last"][0, 11, 15] == 1
    # one pixel to the right: dx = -1, sigma = 1/(2 var)
    np.testing.assert_allclose(alphas[0, 11, 16, 0], o * np.exp(-0.5 / var), rtol=1e-12)
    # one pixel diagonally: sigma = (1 + 1)/(2 var)
    np.testing.assert_allclose(alphas[0, 12, 16, 0], o * np.exp(-1.0 / var), rtol=1e-12)


def test_radius_and_conic_anisotropic():
    """Axis-aligned Gaussian on the optical axis: cov2 = diag((f sx/z)^2 + 0.3, (f sy/z)^2 + 0.3)."""
    W, H, z = 64, 48, 5.0
    K = intrinsics(40.0, W, H, 1)
    fx, fy = K[0, 0, 0], K[0, 1, 1]
    ops = np.array([1.0, 0.5, 0.05, 2 / 255])
    n = len(ops)
    sc = np.array([0.3, 0.7, 0.2])
    means = np.array([[0.0, 0.0, z]] * n)
    p = projection_fwd(means, [[2.0, 0, 0, 0]] * n, [sc] * n, ops, np.zeros((n, 1, 3)), np.eye(4)[None], K, W, H, 0)
    vx, vy = (fx * sc[0] / z) ** 2 + 0.3, (fy * sc[1] / z) ** 2 + 0.3
    np.testing.assert_allclose(p["conics"][0], [[1 / vx, 0, 1 / vy]] * n, rtol=1e-12, atol=1e-15)
    ext = np.minimum(3.33, np.sqrt(2 * np.log(255 * ops)))
    assert ext[0] < 3.33  # sqrt(2 ln 255) = 3.329: the cap never binds for opacity <= 1
    np.testing.assert_array_equal(p["radii"][0], np.stack([np.ceil(ext * np.sqrt(vx)), np.ceil(ext * np.sqrt(vy))], -1))


def test_jacobian_clamp_analytic():
    """Mean far right of the frustum: J uses x/z clamped to lim_x_pos = (W-cx)/fx + 0.3 tan_fovx."""
    W, H, z, s = 64, 48, 4.0, 1.5
    K = intrinsics(50.0, W, H, 1)
    fx, fy, cx = K[0, 0, 0], K[0, 1, 1], K[0, 0, 2]
    lim = (W - cx) / fx + 0.3 * 0.5 * W / fx
    mean = np.array([[1.1 * z, 0.0, z]])
    assert 1.1 > lim
    p = projection_fwd(mean, [[1.0, 0, 0, 0]], [[s, s, s]], [0.9], np.zeros((1, 1, 3)), np.eye(4)[None], K, W, H, 0)
    vx = s**2 * (fx**2 / z**2 + (fx * lim / z) ** 2) + 0.3
    vy = s**2 * fy**2 / z**2 + 0.3
    np.testing.assert_allclose(p["conics"][0, 0], [1 / vx, 0, 1 / vy], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(p["means2d"][0, 0], [fx * 1.1 + cx, K[0, 1, 2]], rtol=1e-12)  # unclamped
    assert p["radii"][0, 0, 0] > 0


def test_culling():
    W, H = 32, 24
    K = intrinsics(30.0, W, H, 1)
    means = np.array(
        [
            [0, 0, 4.0],  # visible
            [0, 0, -3.0],  # behind the camera
            [0, 0, 0.005],  # closer than near = 0.01
            [40.0, 0, 4.0],  # far right of the image, box off-image
            [-40.0, 0, 4.0],  # far left
            [0, -30.0, 4.0],  # far above
            [0, 30.0, 4.0],  # far below
            [0, 0, 4.0],
        ]
    )  # opacity below 1/255
    n = len(means)
    ops = np.array([0.5] * (n - 1) + [0.9 / 255])
    sh = np.ones((n, 4, 3))
    p = projection_fwd(means, [[1.0, 0, 0, 0]] * n, [[0.2] * 3] * n, ops, sh, np.eye(4)[None], K, W, H, 1)
    assert np.all(p["radii"][0, 0] > 0) and p["tiles"][0, 0] > 0
    for k in ("means2d", "conics", "depths", "radii", "colors", "tiles"):
        assert not np.any(p[k][0, 1:]), k
    ras = rasterize_fwd(p["means2d"], p["conics"], p["colors"], ops, p["depths"], p["radii"], W, H)
    assert {g for (_, _, _, g) in ras["isect"]["isects"]} == {0}
    # culled pairs contribute no gradient, whatever the cotangents
    rng = np.random.default_rng(0)
    gr = projection_bwd(
        means,
        [[1.0, 0, 0, 0]] * n,
        [[0.2] * 3] * n,
        ops,
        sh,
        np.eye(4)[None],
        K,
        W,
        H,
        1,
        rng.normal(size=(1, n, 2)),
        rng.normal(size=(1, n, 3)),
        rng.normal(size=(1, n, 3)),
        rng.normal(size=(1, n)),
        grad_depths=rng.normal(size=(1, n)),
    )
    for k, v in gr.items():
        assert not v[1:].any(), k


def test_empty_tile_gives_background():
    W, H = 40, 16  # tiles 3 x 1; the last one is partial
    K = np.array([[[20.0, 0, 6.5], [0, 20.0, 6.5], [0, 0, 1]]])
    bg = np.array([[0.25, 0.5, 0.75]])
    args = ([[0.0, 0, 5.0]], [[1.0, 0, 0, 0]], [[0.3] * 3], [0.7], np.ones((1, 1, 3)), np.eye(4)[None], K, W, H, 0)
    colors, alphas, meta = rasterization(*args, backgrounds=bg)
    assert tuple(meta["tiles"][0]) == (1,)
    assert tuple(meta["tile_ranges"][0, 0]) == (0, 1) and np.all(np.diff(meta["tile_ranges"][0, 1:], axis=-1) == 0)
    np.testing.assert_array_equal(colors[0, :, 16:], np.broadcast_to(bg[0], (H, W - 16, 3)))
    assert not alphas[0, :, 16:].any() and not meta["render_depths"][0, :, 16:].any()
    assert np.all(meta["T_final"][0, :, 16:] == 1) and not meta["last"][0, :, 16:].any()
    assert alphas[0, 6, 6, 0] > 0.5
    colors0, _, _ = rasterization(*args)  # no background: black
    assert not colors0[0, :, 16:].any()


def test_stop_rule_and_max_alpha():
    """Stacked Gaussians at one pixel: alpha 0.95 each gives T = 0.05, 0.0025, 1.25e-4, then
    6.25e-6 <= 1e-4 stops at the fourth without blending it; opacity 1 is clamped to 0.99."""
    W, H, n = 20, 18, 5
    m2d = np.tile([[[10.5, 9.5]]], (1, n, 1))
    conics = np.tile([[[0.5, 0.1, 0.4]]], (1, n, 1))
    rng = np.random.default_rng(3)
    cols = rng.uniform(0, 1, (1, n, 3))
    depths = np.arange(1.0, n + 1)[None]
    radii = np.full((1, n, 2), 6)
    r = rasterize_fwd(m2d, conics, cols, np.full(n, 0.95), depths, radii, W, H)
    assert r["last"][0, 9, 10] == 3
    np.testing.assert_allclose(r["T_final"][0, 9, 10], 0.05**3, rtol=1e-12)
    w = 0.95 * 0.05 ** np.arange(3)
    np.testing.assert_allclose(r["colors"][0, 9, 10], w @ cols[0, :3], rtol=1e-12)
    np.testing.assert_allclose(r["depths"][0, 9, 10, 0], w @ depths[0, :3], rtol=1e-12)
    r1 = rasterize_fwd(m2d[:, :1], conics[:, :1], cols[:, :1], [1.0], depths[:, :1], radii[:, :1], W, H)
    np.testing.assert_allclose(r1["alphas"][0, 9, 10, 0], 0.99, rtol=1e-15)


def _stop_boundary_opacities():
    """Opacities (o1, o2, o3) with T2 = (1 - o1)(1 - o2) and T2 (1 - o3) == 1e-4 exactly in float64
    (the reference's own operation order), found by a small deterministic search."""
    for o1 in np.linspace(0.3, 0.9, 50):
        for o2 in np.linspace(0.9, 0.98, 50):
            T2 = (1.0 * (1.0 - o1)) * (1.0 - o2)
            o3 = 1.0 - 1e-4 / T2
            if o3 > 0.98:
                continue
            cand = o3 + np.arange(-3000, 3000) * np.spacing(o3)
            hit = np.nonzero(T2 * (1.0 - cand) == 1e-4)[0]
            if len(hit):
                return o1, o2, cand[hit[0]], T2
    raise AssertionError("no exact boundary found")


def test_decision_boundaries():
    """At a pixel centre sigma = 0 and exp(-0) = 1 exactly, so alpha = opacity exactly: the
    inequalities of the rules are checked at equality. alpha == 1/255 is blended (skip only if
    below); T' == 1e-4 stops (stop if T' <= 1e-4); sigma < 0 is skipped even though exp(-sigma) > 1."""
    W, H = 16, 16
    one = lambda v: np.array(v, dtype=np.float64)[None, None]  # noqa: E731  [1,1,...]

    def args(o, conic=(0.3, 0.0, 0.3)):
        return (one([8.5, 8.5]), one(conic), one([1.0, 0.5, 0.25]), [o], one(2.0), np.full((1, 1, 2), 5), W, H)

    r = rasterize_fwd(*args(1 / 255))
    assert r["T_final"][0, 8, 8] == 1.0 - 1 / 255 and r["last"][0, 8, 8] == 1
    r = rasterize_fwd(*args(np.nextafter(1 / 255, 0)))
    assert r["alphas"][0, 8, 8, 0] == 0 and r["last"][0, 8, 8] == 0
    # conic (-0.1, 0, 0.2): sigma = -0.05 one pixel left/right of the centre, 0 at the centre
    r = rasterize_fwd(*args(0.5, (-0.1, 0.0, 0.2)))
    assert r["alphas"][0, 8, 7, 0] == 0 and r["alphas"][0, 8, 9, 0] == 0 and r["alphas"][0, 8, 8, 0] == 0.5

    o1, o2, o3, T2 = _stop_boundary_opacities()
    m2d, con, col = np.full((1, 3, 2), 8.5), np.tile([[[0.3, 0.0, 0.3]]], (1, 3, 1)), np.ones((1, 3, 3))
    dep, rad = np.array([[1.0, 2.0, 3.0]]), np.full((1, 3, 2), 5)
    r = rasterize_fwd(m2d, con, col, [o1, o2, o3], dep, rad, W, H)
    assert r["last"][0, 8, 8] == 2 and r["T_final"][0, 8, 8] == T2
    o3b = np.nextafter(o3, 0)  # one ulp less opaque: T' > 1e-4, blended
    assert T2 * (1.0 - o3b) > 1e-4
    r = rasterize_fwd(m2d, con, col, [o1, o2, o3b], dep, rad, W, H)
    assert r["last"][0, 8, 8] == 3 and r["T_final"][0, 8, 8] == T2 * (1.0 - o3b)


def test_sh_basis_matches_scipy():
    """Sloan's real SH = Condon-Shortley complex SH (scipy) mapped to reals: m < 0 -> sqrt2 Im Y_l^|m|,
    m = 0 -> Y_l^0, m > 0 -> sqrt2 Re Y_l^m; index l^2 + l + m. Pins down every constant and sign."""
    from scipy.special import sph_harm_y

    d = np.random.default_rng(2).normal(size=(64, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    theta, phi = np.arccos(d[:, 2]), np.arctan2(d[:, 1], d[:, 0])
    Y = sh_basis(d, 3)
    for l in range(4):  # noqa: E741 (l: the SH degree, as in the literature)
        for m in range(-l, l + 1):
            y = sph_harm_y(l, abs(m), theta, phi)
            ref = np.sqrt(2) * y.imag if m < 0 else (y.real if m == 0 else np.sqrt(2) * y.real)
            np.testing.assert_allclose(Y[:, l * l + l + m], ref, atol=1e-14, err_msg=f"l={l} m={m}")


def test_rotmat_matches_scipy():
    q = np.random.default_rng(0).normal(size=(20, 4)) * 3
    ref = Rotation.from_quat(q[:, [1, 2, 3, 0]]).as_matrix()  # scipy is scalar-last and normalises
    np.testing.assert_allclose(quat_to_rotmat(q), ref, atol=1e-14)


def test_sh_basis_orthonormal():
    """Integral of Y_i Y_j over the sphere is delta_ij (checks every constant and sign pattern up to
    a per-function sign). Gauss-Legendre in cos(theta) x uniform phi is exact for these degrees."""
    u, wu = np.polynomial.legendre.leggauss(12)
    phi = np.arange(24) * 2 * np.pi / 24
    U, P = np.meshgrid(u, phi, indexing="ij")
    s = np.sqrt(1 - U**2)
    d = np.stack([s * np.cos(P), s * np.sin(P), U], -1).reshape(-1, 3)
    w = (wu[:, None] * np.full(24, 2 * np.pi / 24)).ravel()
    Y = sh_basis(d, 3)
    np.testing.assert_allclose((Y * w[:, None]).T @ Y, np.eye(16), atol=1e-12)
    # and the signs of degree 1 follow Sloan's: Y1 = -c y, Y2 = c z, Y3 = -c x
    np.testing.assert_allclose(
        sh_basis(np.eye(3), 1)[:, 1:], -0.48860251190292 * np.array([[0, 0, 1], [1, 0, 0], [0, -1, 0]]), atol=1e-15
    )


def test_sh_basis_jac_fd():
    d = np.random.default_rng(1).normal(size=(6, 3))
    jac = sh_basis_jac(d, 3)
    for j in range(3):
        e = np.zeros(3)
        e[j] = 1e-6
        fd = (sh_basis(d + e, 3) - sh_basis(d - e, 3)) / 2e-6
        np.testing.assert_allclose(jac[:, :, j], fd, atol=1e-8)  # cubic polynomials: FD error ~ h^2 + 1e-10


def test_intersect_sort_and_tiles():
    W, H = 40, 20  # 3 x 2 tiles
    m2d = np.array([[[8, 8], [16, 8], [8, 8], [30, 18]], [[8, 8], [0, 0], [0, 0], [8, 8]]], dtype=float)
    radii = np.array([[[3, 3], [1, 1], [3, 3], [2, 9]], [[3, 3], [0, 0], [0, 0], [3, 3]]])
    depths = np.array([[2.0, 1.0, 2.0, 5.0], [3.0, 0.0, 0.0, 1.0]])
    out = intersect(m2d, radii, depths, W, H)
    # (16,8) r1: x tiles floor(1 - 1/16) = 0 .. ceil(1 + 1/16) = 2; (30,18) r(2,9): x 1..2, y 0..2
    np.testing.assert_array_equal(out["tiles"], [[1, 2, 1, 2], [1, 0, 0, 1]])
    np.testing.assert_array_equal(tile_counts(m2d, radii, W, H), out["tiles"])
    expect = [
        (0, 0, 1.0, 1),
        (0, 0, 2.0, 0),
        (0, 0, 2.0, 2),
        (0, 1, 1.0, 1),
        (0, 1, 5.0, 3),
        (0, 4, 5.0, 3),
        (1, 0, 1.0, 3),
        (1, 0, 3.0, 0),
    ]  # depth tie (g 0, 2) broken by id
    assert out["isects"] == expect
    np.testing.assert_array_equal(out["flatten_ids"], [c * 4 + g for c, _, _, g in expect])
    rng = out["tile_ranges"]
    assert rng.shape == (2, 6, 2)
    assert tuple(rng[0, 0]) == (0, 3) and tuple(rng[0, 1]) == (3, 5) and tuple(rng[0, 4]) == (5, 6)
    assert tuple(rng[1, 0]) == (6, 8)
    for c in range(2):
        for t in range(6):
            s, e = rng[c, t]
            assert all(out["isects"][i][:2] == (c, t) for i in range(s, e))
    assert rng[..., 1].sum() - rng[..., 0].sum() == len(expect)


def naive_render(m2d, conics, cols, opac, depths, radii, W, H, bg):
    """Per-pixel scalar loop over *all* visible Gaussians by (depth, id), ignoring tiles: the tile
    box is conservative (alpha < 1/255 outside it), so the result must equal the tiled one."""
    C, N = depths.shape
    out = np.zeros((C, H, W, 3))
    alpha = np.zeros((C, H, W))
    dimg = np.zeros((C, H, W))
    for c in range(C):
        order = sorted((depths[c, g], g) for g in range(N) if radii[c, g].any())
        for i in range(H):
            for j in range(W):
                T, acc, dacc = 1.0, np.zeros(3), 0.0
                for _, g in order:
                    dx, dy = m2d[c, g, 0] - (j + 0.5), m2d[c, g, 1] - (i + 0.5)
                    a, b, cc = conics[c, g]
                    sig = 0.5 * (a * dx * dx + cc * dy * dy) + b * dx * dy
                    if sig < 0:
                        continue
                    al = min(0.99, opac[g] * np.exp(-sig))
                    if al < 1 / 255:
                        continue
                    if T * (1 - al) <= 1e-4:
                        break
                    acc += cols[c, g] * al * T
                    dacc += depths[c, g] * al * T
                    T *= 1 - al
                out[c, i, j] = acc + T * bg[c]
                alpha[c, i, j] = 1 - T
                dimg[c, i, j] = dacc
    return out, alpha, dimg


def test_rasterize_matches_naive():
    W, H = 37, 29
    rng = np.random.default_rng(7)
    n = 14
    means = np.c_[rng.uniform(-1.2, 1.2, (n, 2)), rng.uniform(3, 6, n)]
    means[1:4, :2] = means[0, :2] + rng.normal(size=(3, 2)) * 0.1  # an opaque clump: clamping, early stops
    sc = gaussians(means, seed=7, scale=(0.15, 0.6), opacity=(0.6, 1.0))
    sc["opacities"][:4] = [1.0, 0.999, 0.98, 0.97]
    args = (*sc.values(), viewmats2(), intrinsics(25.0, W, H), W, H, 2)
    bg = np.array([[0.1, 0.2, 0.3], [0.9, 0.1, 0.4]])
    colors, alphas, meta = rasterization(*args, backgrounds=bg)
    nc, na, nd = naive_render(
        meta["means2d"], meta["conics"], meta["colors"], sc["opacities"], meta["depths"], meta["radii"], W, H, bg
    )
    codes = decision_codes(
        meta["means2d"],
        meta["conics"],
        meta["colors"],
        np.broadcast_to(sc["opacities"], (2, n)),
        meta["depths"],
        meta["radii"],
        W,
        H,
    )[1]
    assert np.any(codes & 7 == 4) and np.any(codes & 8) and np.any(alphas == 0)  # stop, clamp, empty pixels
    np.testing.assert_allclose(colors, nc, atol=1e-13)
    np.testing.assert_allclose(alphas[..., 0], na, atol=1e-13)
    np.testing.assert_allclose(meta["render_depths"][..., 0], nd, atol=1e-12)


# ----------------------------------------------------------------------------- projection backward


def _projection_scene():
    W, H = 64, 48
    K = intrinsics(50.0, W, H)
    means = [[-0.8, -0.6, 4.0], [0.9, 0.5, 4.5], [0.2, 0.8, 3.5], [-0.5, 0.3, 5.0], [5.0, 0.1, 4.0]]
    sc = gaussians(means, seed=11)
    sc["scales"][4] = [1.5, 1.2, 1.8]  # huge one beyond the x clip limit, still on the image
    sc["sh_coeffs"][1, 0, 0] = -4.0  # red channel clamped at 0 in every view
    return sc, viewmats2(), K, W, H


def test_projection_scene_regimes():
    """The FD scene covers the clamped Jacobian branch and the colour clamp, with margins."""
    sc, view, K, W, H = _projection_scene()
    p = projection_fwd(*sc.values(), view, K, W, H, 3)
    assert np.all(p["radii"].any(-1))
    for c in range(2):
        mc = view[c, :3, :3] @ sc["means"][4] + view[c, :3, 3]
        lim = (W - K[c, 0, 2]) / K[c, 0, 0] + 0.3 * 0.5 * W / K[c, 0, 0]
        assert mc[0] / mc[2] > lim + 0.1
    assert np.all(p["colors"][:, 1, 0] == 0)


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_projection_bwd_fd(degree):
    sc, view, K, W, H = _projection_scene()
    C, N = 2, len(sc["means"])
    rng = np.random.default_rng(100 + degree)
    g = dict(
        means2d=rng.normal(size=(C, N, 2)),
        conics=rng.normal(size=(C, N, 3)) * 100,
        colors=rng.normal(size=(C, N, 3)),
        depths=rng.normal(size=(C, N)),
    )
    g_op = rng.normal(size=(C, N))

    def fun(name):
        def f(x):
            a = dict(sc, **{name: x})
            p = projection_fwd(*a.values(), view, K, W, H, degree)
            vis = p["radii"].any(-1)
            loss = sum(np.sum(g[k] * p[k]) for k in g) + np.sum(g_op * vis * a["opacities"][None])
            return loss, (p["radii"], p["colors"] > 0)

        return f

    an = projection_bwd(
        *sc.values(), view, K, W, H, degree, g["means2d"], g["conics"], g["colors"], g_op, grad_depths=g["depths"]
    )
    nk = (degree + 1) ** 2
    assert not an["sh_coeffs"][:, nk:].any()  # unused coefficients get no gradient
    for name in ("means", "quats", "scales", "opacities"):
        assert_grad(name, an[name], *fd_grad(fun(name), sc[name]))
    sh_fd, ok = fd_grad(
        lambda x: fun("sh_coeffs")(np.concatenate([x, sc["sh_coeffs"][:, nk:]], 1)), sc["sh_coeffs"][:, :nk]
    )
    assert_grad("sh_coeffs", an["sh_coeffs"][:, :nk], sh_fd, ok)


# ----------------------------------------------------------------------------- rasterize backward


def _raster_scene(kind):
    """2 cameras, 20 x 18 (not a multiple of 16), 5 Gaussians: 'soft' (opacities 0.3..0.8)
    or 'opaque' (three 0.98 ones stacked so pixels stop early, one 0.995 one clamped to 0.99)."""
    W, H, N = 20, 18, 5
    rng = np.random.default_rng(21 if kind == "soft" else 22)
    m2d = np.stack([np.c_[rng.uniform(3, 17, N), rng.uniform(3, 15, N)] for _ in range(2)])
    L = rng.normal(size=(2, N, 2, 2)) * 1.2 + np.eye(2) * 2.0
    cov = L @ np.swapaxes(L, -1, -2) + 0.3 * np.eye(2)
    inv = np.linalg.inv(cov)
    conics = np.stack([inv[..., 0, 0], inv[..., 0, 1], inv[..., 1, 1]], -1)
    opac = rng.uniform(0.3, 0.8, (2, N))
    if kind == "opaque":
        m2d[:, 1:3] = m2d[:, :1] + rng.normal(size=(2, 2, 2)) * 0.7
        opac[:, :3] = 0.98
        opac[:, 3] = 0.995
    ext = np.sqrt(2 * np.log(255 * opac))
    radii = np.ceil(ext[..., None] * np.sqrt(np.stack([cov[..., 0, 0], cov[..., 1, 1]], -1))).astype(np.int32)
    inputs = dict(
        means2d=m2d,
        conics=conics,
        colors=rng.uniform(0, 1, (2, N, 3)),
        opacities=opac,
        depths=rng.uniform(2, 8, (2, N)),
    )
    return inputs, radii, W, H, rng.uniform(0, 1, (2, 3))


@pytest.mark.parametrize("kind", ["soft", "opaque"])
def test_rasterize_bwd_fd(kind):
    inputs, radii, W, H, bg = _raster_scene(kind)
    rng = np.random.default_rng(5)
    gc, ga, gd = rng.normal(size=(2, H, W, 3)), rng.normal(size=(2, H, W, 1)), rng.normal(size=(2, H, W, 1))
    params = dict(inputs, backgrounds=bg)

    def fun(name):
        def f(x):
            a = dict(params, **{name: x})
            r = rasterize_fwd(*[a[k] for k in inputs], radii, W, H, a["backgrounds"])
            loss = np.sum(gc * r["colors"]) + np.sum(ga * r["alphas"]) + np.sum(gd * r["depths"])
            return loss, decision_codes(*[a[k] for k in inputs], radii, W, H)

        return f

    r = rasterize_fwd(*inputs.values(), radii, W, H, bg)
    codes = decision_codes(*inputs.values(), radii, W, H)[1]
    if kind == "opaque":  # the regimes this scene is for
        assert np.any(codes & 7 == 4) and np.any(codes & 8) and np.any(r["last"] >= 2)
    an = rasterize_bwd(*inputs.values(), radii, W, H, bg, grad_colors=gc, grad_alphas=ga, grad_depths=gd)
    for name in params:
        assert_grad(name, an[name], *fd_grad(fun(name), params[name]))


# ----------------------------------------------------------------------------- composed backward


def test_rasterization_bwd_fd():
    W, H = 20, 18
    sc = gaussians(MEANS_SMALL, seed=31)
    view, K = viewmats2(), intrinsics(18.0, W, H)
    rng = np.random.default_rng(32)
    bg = rng.uniform(0, 1, (2, 3))
    gc, ga, gd = rng.normal(size=(2, H, W, 3)), rng.normal(size=(2, H, W, 1)), rng.normal(size=(2, H, W, 1))
    params = dict(sc, backgrounds=bg)

    def fun(name):
        def f(x):
            a = dict(params, **{name: x})
            colors, alphas, meta = rasterization(*[a[k] for k in sc], view, K, W, H, 3, backgrounds=a["backgrounds"])
            loss = np.sum(gc * colors) + np.sum(ga * alphas) + np.sum(gd * meta["render_depths"])
            opac = np.broadcast_to(a["opacities"], (2, len(a["opacities"])))
            ids, codes = decision_codes(
                meta["means2d"], meta["conics"], meta["colors"], opac, meta["depths"], meta["radii"], W, H
            )
            return loss, (meta["radii"], ids, codes, meta["colors"] > 0)

        return f

    colors, alphas, meta = rasterization(*sc.values(), view, K, W, H, 3, backgrounds=bg)
    assert np.all(meta["radii"].any(-1)) and np.all(meta["tiles"] >= 1)
    an = rasterization_bwd(
        *sc.values(), view, K, W, H, 3, backgrounds=bg, grad_colors=gc, grad_alphas=ga, grad_depths=gd
    )
    for name in params:
        assert_grad(name, an[name], *fd_grad(fun(name), params[name]))


# ----------------------------------------------------------------------------- depth distortion


@pytest.mark.parametrize("kind", ["soft", "opaque"])
def test_distortion_is_the_pairwise_sum(kind):
    """The running-sum distortion equals sum_{i,j} w_i w_j |z_i - z_j| over each pixel's blended entries."""
    inputs, radii, W, H, bg = _raster_scene(kind)
    r = rasterize_fwd(*inputs.values(), radii, W, H, bg)
    _, records = _trace(*inputs.values(), radii, W, H)
    for rec in records:
        z = inputs["depths"][rec["c"], rec["gids"]][:, None]  # [K,1]
        w = np.where((rec["state"] & 7) == 3, rec["alpha"] * rec["T"], 0.0)  # [K,P]
        pair = np.einsum("ip,jp,ij->p", w, w, np.abs(z - z.T))
        got = r["distortions"][rec["c"], rec["rows"], rec["cols"], 0]
        np.testing.assert_allclose(got, pair, rtol=1e-12, atol=1e-12)
    assert r["distortions"].max() > 0.1


@pytest.mark.parametrize("kind", ["soft", "opaque"])
def test_distortion_bwd_fd(kind):
    """dL/d(means2d, conics, opacities, depths) of L = sum(gx * distortion), with colour terms."""
    inputs, radii, W, H, bg = _raster_scene(kind)
    rng = np.random.default_rng(6)
    gc, gx = rng.normal(size=(2, H, W, 3)), rng.normal(size=(2, H, W, 1))

    def fun(name):
        def f(x):
            a = dict(inputs, **{name: x})
            r = rasterize_fwd(*a.values(), radii, W, H, bg)
            loss = np.sum(gc * r["colors"]) + np.sum(gx * r["distortions"])
            return loss, decision_codes(*a.values(), radii, W, H)

        return f

    an = rasterize_bwd(*inputs.values(), radii, W, H, bg, grad_colors=gc, grad_distortions=gx)
    for name in ("means2d", "conics", "opacities", "depths"):
        assert_grad(name, an[name], *fd_grad(fun(name), inputs[name]))
