"""Normal consistency (2DGS), float64 reference of shaders/normal_consistency_fwd.comp and
normal_consistency_bwd.comp, and of the splat normals the rasterizer is to blend.

Conventions (docs/design.md): OpenCV cameras (x right, y down, z forward), pixel centres at
+0.5, depth = camera z. A pixel (u, v) of depth d is the camera-space point
P = d ((u + 0.5 - cx) / fx, (v + 0.5 - cy) / fy, 1); through a lens (``models``, ``dists`` as
:func:`spirula.reference.projection.projection_fwd` takes them) P = d ray, ray the pixel's
:func:`~spirula.reference.projection.lens_ray` (depth as the lens measures it: camera z
through OPENCV, the distance through a fisheye or an equirectangular camera), and a pixel
the lens does not reach has no point. The depth normal of an interior pixel is

    n_d = normalize(cross(P(u, v+1) - P(u, v-1), P(u+1, v) - P(u-1, v)))

(central differences; this order points it towards the camera: -z for a fronto-parallel
plane). Its loss is l = a (1 - N . n_d), with N the rendered (alpha-blended, unnormalized)
normal and a the pixel's alpha taken as a constant weight (2DGS's 1 - N . (n_d a) with a
detached, up to a constant). A pixel has no depth normal (l = 0, no gradient) on the image
border, where it or one of its four neighbours has depth <= 0, or where the cross product
vanishes (|c|^2 <= NC_MIN_CROSS2).
"""

from __future__ import annotations

import numpy as np

NC_MIN_CROSS2 = 1e-30  # as shaders/include/normals.glsl


def splat_normals(quats, scales, means, viewmats):
    """The camera-space normal of every splat in every view, [C,N,3] float64: the rotation's
    column of the smallest scale (the first of equal ones), turned to the camera (n . p <= 0
    for the splat's camera-space mean p). ``quats`` [N,4] (w, x, y, z, any norm),
    ``scales`` [N,3] (activated), ``means`` [N,3], ``viewmats`` [C,4,4] world->camera."""
    from spirula.reference.projection import quat_to_rotmat

    q = np.asarray(quats, np.float64)
    R = quat_to_rotmat(q / np.linalg.norm(q, axis=-1, keepdims=True))  # [N,3,3]
    k = np.argmin(np.asarray(scales, np.float64), axis=1)
    n_world = R[np.arange(len(k)), :, k]  # [N,3]
    vm = np.asarray(viewmats, np.float64)
    n_cam = np.einsum("cij,nj->cni", vm[:, :3, :3], n_world)
    p_cam = np.einsum("cij,nj->cni", vm[:, :3, :3], np.asarray(means, np.float64)) + vm[:, None, :3, 3]
    flip = np.where((n_cam * p_cam).sum(-1) > 0, -1.0, 1.0)
    return n_cam * flip[..., None]


def splat_normals_vjp(quats, scales, means, viewmats, grad_normals):
    """dL/d ``quats`` [N,4] float64 (the given, unnormalized ones) from ``grad_normals``
    [C,N,3] = dL/d :func:`splat_normals`. The axis choice and the turn to the camera are
    piecewise constant (no gradient to ``scales`` or ``means``): per camera,
    dL/dR[:, k] += flip R_c^T g."""
    from spirula.reference.projection import _rotmat_vjp, quat_to_rotmat

    q = np.asarray(quats, np.float64)
    k = np.argmin(np.asarray(scales, np.float64), axis=1)
    vm = np.asarray(viewmats, np.float64)
    R = quat_to_rotmat(q)
    n_cam = np.einsum("cij,nj->cni", vm[:, :3, :3], R[np.arange(len(k)), :, k])
    p_cam = np.einsum("cij,nj->cni", vm[:, :3, :3], np.asarray(means, np.float64)) + vm[:, None, :3, 3]
    flip = np.where((n_cam * p_cam).sum(-1) > 0, -1.0, 1.0)  # [C,N]
    g_world = np.einsum("cji,cnj->ni", vm[:, :3, :3], flip[..., None] * np.asarray(grad_normals, np.float64))
    v_R = np.zeros((len(k), 3, 3))
    v_R[np.arange(len(k)), :, k] = g_world
    return _rotmat_vjp(q, v_R)


def render_normals(means, quats, scales, opacities, sh_coeffs, viewmats, Ks, width, height, sh_degree=0):
    """The normal image rasterize_fwd writes with NORMALS, [C,H,W,3] float64: the splat normals
    (:func:`splat_normals`) alpha-blended as the colour (sum_i n_i alpha_i T_i), no background.
    Inputs as :func:`spirula.reference.render.rasterization` (``scales``, ``opacities``
    activated)."""
    from spirula.reference.projection import projection_fwd
    from spirula.reference.rasterize import rasterize_fwd

    proj = projection_fwd(means, quats, scales, opacities, sh_coeffs, viewmats, Ks, width, height, sh_degree)
    C, N = proj["depths"].shape
    normals = splat_normals(quats, scales, means, viewmats)
    opac = np.broadcast_to(np.asarray(opacities, np.float64), (C, N))
    ras = rasterize_fwd(proj["means2d"], proj["conics"], normals, opac, proj["depths"], proj["radii"], width, height)
    return ras["colors"]


def render_normals_bwd(
    means, quats, scales, opacities, sh_coeffs, viewmats, Ks, width, height, sh_degree, grad_normals
) -> dict:
    """dL/d the splat parameters (float64: means [N,3], quats [N,4], scales [N,3], opacities
    [N], as :func:`spirula.reference.render.rasterization_bwd`) from ``grad_normals``
    [C,H,W,3] = dL/d :func:`render_normals`: rasterize_bwd with the splat normals as the
    colours, projection_bwd of its 2D means, conics and opacities, and
    :func:`splat_normals_vjp` of its colour (normal) gradients."""
    from spirula.reference.projection import projection_bwd, projection_fwd
    from spirula.reference.rasterize import rasterize_bwd

    proj = projection_fwd(means, quats, scales, opacities, sh_coeffs, viewmats, Ks, width, height, sh_degree)
    C, N = proj["depths"].shape
    normals = splat_normals(quats, scales, means, viewmats)
    opac = np.broadcast_to(np.asarray(opacities, np.float64), (C, N))
    v = rasterize_bwd(
        proj["means2d"],
        proj["conics"],
        normals,
        opac,
        proj["depths"],
        proj["radii"],
        width,
        height,
        grad_colors=grad_normals,
    )
    out = projection_bwd(
        means,
        quats,
        scales,
        opacities,
        sh_coeffs,
        viewmats,
        Ks,
        width,
        height,
        sh_degree,
        v["means2d"],
        v["conics"],
        np.zeros((C, N, 3)),
        v["opacities"],
    )
    out["quats"] = out["quats"] + splat_normals_vjp(quats, scales, means, viewmats, v["colors"])
    return out


def _points(depths, Ks, models=None, dists=None):
    """Camera-space points of every pixel, [C,H,W,3], the rays (P = d ray) and where the
    lens reaches the pixel [C,H,W] bool."""
    from spirula.reference.projection import _lenses, lens_ray

    d = np.asarray(depths, np.float64)
    C, H, W = d.shape
    K = np.asarray(Ks, np.float64)
    models, dists = _lenses(models, dists, C)
    v, u = np.mgrid[0:H, 0:W] + 0.5
    ray = np.empty((C, H, W, 3))
    ok = np.ones((C, H, W), bool)
    for c in range(C):
        ray[c], ok[c] = lens_ray(int(models[c]), dists[c], K[c], np.stack([u, v], -1))
    return d[..., None] * ray, ray, ok


def _interior(depths, reached):
    """Where the interior pixels [C,H-2,W-2] and their four neighbours have depth > 0 and a ray."""
    pos = (np.asarray(depths, np.float64) > 0) & reached
    return pos[:, 1:-1, 1:-1] & pos[:, 2:, 1:-1] & pos[:, :-2, 1:-1] & pos[:, 1:-1, 2:] & pos[:, 1:-1, :-2]


def depth_normals(depths, Ks, models=None, dists=None):
    """The depth normal of every pixel, [C,H,W,3] float64, and where it exists [C,H,W] bool."""
    d = np.asarray(depths, np.float64)
    P, _, reached = _points(d, Ks, models, dists)
    A = P[:, 2:, 1:-1] - P[:, :-2, 1:-1]  # along v
    B = P[:, 1:-1, 2:] - P[:, 1:-1, :-2]  # along u
    c = np.cross(A, B)
    c2 = (c * c).sum(-1)
    ok = _interior(d, reached) & (c2 > NC_MIN_CROSS2)
    n = np.zeros(d.shape + (3,))
    valid = np.zeros(d.shape, bool)
    n[:, 1:-1, 1:-1] = np.where(ok[..., None], c / np.sqrt(np.where(ok, c2, 1.0))[..., None], 0.0)
    valid[:, 1:-1, 1:-1] = ok
    return n, valid


def normal_consistency_fwd(normals, depths, alphas, Ks, models=None, dists=None):
    """Per-pixel loss l = a (1 - N . n_d), [C,H,W] float64 (0 where no depth normal).
    ``normals`` [C,H,W,3] rendered, ``depths``/``alphas`` [C,H,W], ``Ks`` [C,3,3], the lenses
    ``models`` [C], ``dists`` [C,12] (None: pinholes)."""
    n_d, valid = depth_normals(depths, Ks, models, dists)
    N = np.asarray(normals, np.float64)
    a = np.asarray(alphas, np.float64)
    return np.where(valid, a * (1.0 - (N * n_d).sum(-1)), 0.0)


def normal_consistency_bwd(normals, depths, alphas, Ks, grad_loss, models=None, dists=None):
    """The vector-Jacobian product of :func:`normal_consistency_fwd` with ``grad_loss``
    [C,H,W]: (grad_normals [C,H,W,3], grad_depths [C,H,W]), float64. With c = A x B,
    n_d = c / |c|, g = dL/dl: dL/dN = -g a n_d; dL/dc = -g a (N - n_d (n_d . N)) / |c|;
    dL/dA = B x dL/dc, dL/dB = dL/dc x A; each neighbour's depth gets ray . dL/d(its P),
    + for P(u, v+1) and P(u+1, v), - for P(u, v-1) and P(u-1, v)."""
    d = np.asarray(depths, np.float64)
    n_d, valid = depth_normals(d, Ks, models, dists)
    N = np.asarray(normals, np.float64)
    g = np.where(valid, np.asarray(grad_loss, np.float64) * np.asarray(alphas, np.float64), 0.0)
    grad_n = -g[..., None] * n_d
    P, ray, _ = _points(d, Ks, models, dists)
    A = P[:, 2:, 1:-1] - P[:, :-2, 1:-1]
    B = P[:, 1:-1, 2:] - P[:, 1:-1, :-2]
    c = np.cross(A, B)
    inv = 1.0 / np.sqrt(np.maximum((c * c).sum(-1), NC_MIN_CROSS2))
    Ni, ni, gi = N[:, 1:-1, 1:-1], n_d[:, 1:-1, 1:-1], g[:, 1:-1, 1:-1]
    gc = -(gi * inv)[..., None] * (Ni - ni * (ni * Ni).sum(-1, keepdims=True))
    gA = np.cross(B, gc)
    gB = np.cross(gc, A)
    grad_d = np.zeros_like(d)
    grad_d[:, 2:, 1:-1] += (ray[:, 2:, 1:-1] * gA).sum(-1)
    grad_d[:, :-2, 1:-1] -= (ray[:, :-2, 1:-1] * gA).sum(-1)
    grad_d[:, 1:-1, 2:] += (ray[:, 1:-1, 2:] * gB).sum(-1)
    grad_d[:, 1:-1, :-2] -= (ray[:, 1:-1, :-2] * gB).sum(-1)
    return grad_n, grad_d


def normal_consistency_case(C=2, H=13, W=17, seed=0):
    """Inputs of the kernels' tests and selftest, float64 values exact in float32:
    (normals [C,H,W,3], depths [C,H,W], alphas [C,H,W], Ks [C,3,3], grad_loss [C,H,W]).
    A smooth depth surface (tilted plane + a bump, camera z 1.5..2.5) with two holes (depth
    0), random rendered normals of length alpha, alphas in [0.2, 1], normal cotangents."""
    rng = np.random.default_rng(seed)
    Ks = np.array([[[30.0, 0, W / 2 + 0.3], [0, 28.0, H / 2 - 0.2], [0, 0, 1]]] * C)
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    d = np.stack(
        [2.0 + 0.03 * (c + 1) * (u - W / 2) - 0.02 * (v - H / 2) + 0.1 * np.sin(0.5 * u + c) for c in range(C)]
    )
    d[0, 5 % H, 7 % W] = 0.0
    d[-1, 9 % H, 3] = 0.0
    a = rng.uniform(0.2, 1.0, (C, H, W))
    N = rng.standard_normal((C, H, W, 3))
    N *= (a / np.linalg.norm(N, axis=-1))[..., None]
    g = rng.standard_normal((C, H, W))
    return tuple(x.astype(np.float32).astype(np.float64) for x in (N, d, a)) + (
        Ks,
        g.astype(np.float32).astype(np.float64),
    )
