"""Projection of 3D Gaussians to the image plane (float64 reference, forward + analytic backward).

Conventions (gsplat 1.5.3): quaternions wxyz, normalised inside; Sigma = M M^T with
M = R(q) diag(s); viewmats world->camera (OpenCV: x right, y down, +z forward);
Ks pixel intrinsics (the skew entry K[0,1] is ignored, as in gsplat); perspective
Jacobian evaluated at a mean whose x/z, y/z are clamped to 1.3x the image frustum;
eps2d added to the 2D covariance; opacity-aware radius; real SH colours + 0.5,
clamped at 0. Culled (camera, Gaussian) pairs have radii (0,0) and all outputs 0.

Lenses other than the pinhole (``models`` [C] of PINHOLE, OPENCV, OPENCV_FISHEYE,
EQUIRECTANGULAR and ``dists`` [C,12] = k1..k6, p1, p2, s1..s4): the unscented transform
(3DGUT; alpha 1, beta 0, kappa 0) of the six sigma points mean +- sqrt(3) s_i R_i through
the exact lens; depth = camera z (OPENCV) or the distance (fisheye, equirectangular); a
Gaussian with a sigma point outside the lens's valid domain is culled
(shaders/include/projection.glsl, docs/design.md §2.3).
"""

from __future__ import annotations

import numpy as np

from .intersect import tile_counts

ALPHA_THRESHOLD = 1.0 / 255.0
MAX_EXTEND = 3.33  # radius cap in standard deviations
CLIP_MARGIN = 0.3  # the Jacobian clamp reaches 0.3 * tan(fov/2) past the image edge

PINHOLE, OPENCV, OPENCV_FISHEYE, EQUIRECTANGULAR = 0, 1, 2, 3  # shaders/include/camera.glsl
DIST_PARAMS = 12  # k1, k2, k3, k4, k5, k6, p1, p2, s1, s2, s3, s4
UT_SPREAD = np.sqrt(3.0)

SH_C0 = 0.2820947917738781
SH_C1 = 0.48860251190292
SH_C2 = (0.5462742152960395, -1.092548430592079, 0.9461746957575601, 0.3153915652525201)
SH_C3 = (
    -0.5900435899266435,
    1.445305721320277,
    -2.285228997322329,
    0.4570457994644658,
    1.865881662950577,
    1.119528997770346,
)


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def quat_to_rotmat(quats) -> np.ndarray:
    """quats [N,4] wxyz (any norm) -> rotation matrices [N,3,3] float64 of the normalised quaternion."""
    q = _f64(quats)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    R = np.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        -1,
    )
    return R.reshape(q.shape[:-1] + (3, 3))


def _rotmat_vjp(quats, v_R) -> np.ndarray:
    """Gradient w.r.t. the *unnormalised* quats [N,4] given v_R [N,3,3] = dL/dR(q/|q|)."""
    u = _f64(quats)
    n = np.linalg.norm(u, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(u / n, -1, 0)
    v = v_R.reshape(-1, 9).T  # v[3*i+j] = dL/dR_ij
    v_w = 2 * (-z * v[1] + y * v[2] + z * v[3] - x * v[5] - y * v[6] + x * v[7])
    v_x = 2 * (y * v[1] + z * v[2] + y * v[3] - 2 * x * v[4] - w * v[5] + z * v[6] + w * v[7] - 2 * x * v[8])
    v_y = 2 * (-2 * y * v[0] + x * v[1] + w * v[2] + x * v[3] + z * v[5] - w * v[6] + z * v[7] - 2 * y * v[8])
    v_z = 2 * (-2 * z * v[0] - w * v[1] + x * v[2] + w * v[3] - 2 * z * v[4] + y * v[5] + x * v[6] + y * v[7])
    v_q = np.stack([v_w, v_x, v_y, v_z], -1)
    q = u / n
    # q = u/|u|  =>  dq = (I - q q^T) du / |u|
    return (v_q - q * np.sum(q * v_q, -1, keepdims=True)) / n


def sh_basis(dirs, degree: int) -> np.ndarray:
    """Real SH basis (Sloan's ordering and signs). dirs [N,3] unit vectors -> [N,(degree+1)^2] float64."""
    x, y, z = _f64(dirs).T
    out = [np.full_like(x, SH_C0)]
    if degree >= 1:
        out += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if degree >= 2:
        A, B, C, D = SH_C2
        z2, fC1, fS1 = z * z, x * x - y * y, 2 * x * y
        out += [A * fS1, B * z * y, C * z2 - D, B * z * x, A * fC1]
    if degree >= 3:
        A, B, Cz, C0, E, F = SH_C3
        fTmpC = Cz * z2 + C0
        fC2, fS2 = x * fC1 - y * fS1, x * fS1 + y * fC1
        out += [A * fS2, B * z * fS1, fTmpC * y, z * (E * z2 - F), fTmpC * x, B * z * fC1, A * fC2]
    return np.stack(out, -1)


def sh_basis_jac(dirs, degree: int) -> np.ndarray:
    """d sh_basis / d dirs, treating x, y, z as independent: [N,(degree+1)^2,3] float64."""
    x, y, z = _f64(dirs).T
    o = np.zeros_like(x)
    rows = [(o, o, o)]
    if degree >= 1:
        rows += [(o, o - SH_C1, o), (o, o, o + SH_C1), (o - SH_C1, o, o)]
    if degree >= 2:
        A, B, C, _ = SH_C2
        rows += [
            (2 * A * y, 2 * A * x, o),
            (o, B * z, B * y),
            (o, o, 2 * C * z),
            (B * z, o, B * x),
            (2 * A * x, -2 * A * y, o),
        ]
    if degree >= 3:
        A, B, Cz, C0, E, F = SH_C3
        fTmpC = Cz * z * z + C0
        rows += [
            (6 * A * x * y, 3 * A * (x * x - y * y), o),  # A (3x^2 y - y^3)
            (2 * B * z * y, 2 * B * z * x, 2 * B * x * y),  # B z 2xy
            (o, fTmpC, 2 * Cz * z * y),  # fTmpC y
            (o, o, 3 * E * z * z - F),  # z (E z^2 - F)
            (fTmpC, o, 2 * Cz * z * x),  # fTmpC x
            (2 * B * z * x, -2 * B * z * y, B * (x * x - y * y)),  # B z (x^2 - y^2)
            (3 * A * (x * x - y * y), -6 * A * x * y, o),
        ]  # A (x^3 - 3 x y^2)
    return np.stack([np.stack(r, -1) for r in rows], 1)


def _world(means, quats, scales):
    """World covariance Sigma = M M^T, M = R(q) diag(s): returns (R, M, Sigma), each [N,3,3]."""
    R = quat_to_rotmat(quats)
    M = R * _f64(scales)[:, None, :]
    return R, M, M @ np.swapaxes(M, -1, -2)


def _camera(means, cov, opacities, sh, viewmat, K, width, height, sh_degree, eps2d, near, far) -> dict:
    """Forward of one camera, vectorised over N; keeps the intermediates the backward needs.
    Values of culled Gaussians are computed on safe placeholders and masked by 'vis'."""
    Rv, tv = viewmat[:3, :3], viewmat[:3, 3]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    mc = means @ Rv.T + tv
    covc = Rv @ cov @ Rv.T
    x, y, z = mc.T
    depth_ok = (z > near) & (z < far)
    zs = np.where(depth_ok, z, 1.0)  # placeholder depth for culled Gaussians, keeps the maths finite

    lim = np.array(
        [
            (width - cx) / fx + CLIP_MARGIN * 0.5 * width / fx,  # x positive
            cx / fx + CLIP_MARGIN * 0.5 * width / fx,  # x negative
            (height - cy) / fy + CLIP_MARGIN * 0.5 * height / fy,  # y positive
            cy / fy + CLIP_MARGIN * 0.5 * height / fy,
        ]
    )  # y negative
    ux, uy = x / zs, y / zs
    clip_x = (ux > lim[0]) | (ux < -lim[1])
    clip_y = (uy > lim[2]) | (uy < -lim[3])
    tx = zs * np.clip(ux, -lim[1], lim[0])
    ty = zs * np.clip(uy, -lim[3], lim[2])
    n = len(z)
    J = np.zeros((n, 2, 3))
    J[:, 0, 0] = fx / zs
    J[:, 0, 2] = -fx * tx / zs**2
    J[:, 1, 1] = fy / zs
    J[:, 1, 2] = -fy * ty / zs**2
    cov2 = J @ covc @ np.swapaxes(J, -1, -2) + eps2d * np.eye(2)
    det = cov2[:, 0, 0] * cov2[:, 1, 1] - cov2[:, 0, 1] ** 2
    det_ok = det > 0
    dets = np.where(det_ok, det, 1.0)
    conic = np.stack([cov2[:, 1, 1] / dets, -cov2[:, 0, 1] / dets, cov2[:, 0, 0] / dets], -1)
    means2d = np.stack([fx * x / zs + cx, fy * y / zs + cy], -1)

    # Opacity-aware radius: alpha = o exp(-sigma) reaches 1/255 at sigma = ln(255 o).
    op_ok = opacities >= ALPHA_THRESHOLD
    extend = np.minimum(MAX_EXTEND, np.sqrt(2.0 * np.log(np.maximum(opacities * 255.0, 1.0))))
    radii = np.stack(
        [
            np.ceil(extend * np.sqrt(np.maximum(cov2[:, 0, 0], 0.0))),
            np.ceil(extend * np.sqrt(np.maximum(cov2[:, 1, 1], 0.0))),
        ],
        -1,
    )
    r_ok = (radii[:, 0] > 0) | (radii[:, 1] > 0)
    on_img = (
        (means2d[:, 0] + radii[:, 0] > 0)
        & (means2d[:, 0] - radii[:, 0] < width)
        & (means2d[:, 1] + radii[:, 1] > 0)
        & (means2d[:, 1] - radii[:, 1] < height)
    )
    vis = depth_ok & det_ok & op_ok & r_ok & on_img

    # View-dependent colour; direction from the camera centre campos = -Rv^T tv.
    campos = -Rv.T @ tv
    diff = means - campos
    dist = np.linalg.norm(diff, axis=-1)
    dirs = diff / np.where(dist > 0, dist, 1.0)[:, None]
    Y = sh_basis(dirs, sh_degree)
    raw = np.einsum("nk,nkc->nc", Y, sh[:, : Y.shape[1]]) + 0.5

    m = vis[:, None]
    return dict(
        vis=vis,
        means2d=np.where(m, means2d, 0.0),
        conics=np.where(m, conic, 0.0),
        depths=np.where(vis, z, 0.0),
        radii=np.where(m, radii, 0).astype(np.int32),
        colors=np.where(m, np.maximum(raw, 0.0), 0.0),
        # intermediates for the backward
        Rv=Rv,
        fx=fx,
        fy=fy,
        x=x,
        y=y,
        zs=zs,
        tx=tx,
        ty=ty,
        clip_x=clip_x,
        clip_y=clip_y,
        J=J,
        covc=covc,
        cov2=cov2,
        dirs=dirs,
        dist=dist,
        Y=Y,
        raw=raw,
    )


# ---- lenses (the unscented transform) ----


def lens_limit(model: int, dist) -> float:
    """The lens's valid limit (the camera record's slot 13): OPENCV the largest r^2 = (x/z)^2 +
    (y/z)^2 before d r_d / d r of the radial part stops being positive (at most r = 10);
    OPENCV_FISHEYE the largest theta before d theta_d / d theta does (at most pi - 0.01);
    0 for the others. Sampled on a fixed grid (spirula/render/raster_buffers.py's twin)."""
    d = np.zeros(DIST_PARAMS) if dist is None else _f64(dist)
    k1, k2, k3, k4, k5, k6 = d[:6]
    if model == OPENCV:
        r = np.linspace(0.0, 10.0, 4001)[1:]
        r2 = r * r
        rad = (1 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1 + r2 * (k4 + r2 * (k5 + r2 * k6)))
        rd = r * rad
        bad = np.nonzero((np.diff(np.concatenate([[0.0], rd])) <= 0) | ~np.isfinite(rd))[0]
        return float(r2[-1] if len(bad) == 0 else (r2[bad[0] - 1] if bad[0] > 0 else 0.0))
    if model == OPENCV_FISHEYE:
        t = np.linspace(0.0, np.pi - 0.01, 4001)[1:]
        t2 = t * t
        td = t * (1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))
        bad = np.nonzero(np.diff(np.concatenate([[0.0], td])) <= 0)[0]
        return float(t[-1] if len(bad) == 0 else (t[bad[0] - 1] if bad[0] > 0 else 0.0))
    return 0.0


def lens_project(model: int, dist, K, p):
    """Pixel positions [...,2] of camera-space points p [...,3] through the lens, their
    Jacobians d uv / d p [...,2,3], and whether each is in the lens's valid domain (outside
    it the values are finite placeholders). Longitudes in (-pi, pi]."""
    d = _f64(dist)
    k1, k2, k3, k4, k5, k6, p1, p2, s1, s2, s3, s4 = d
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    limit = lens_limit(model, d)
    X, Y, Z = np.moveaxis(_f64(p), -1, 0)
    J = np.zeros(X.shape + (2, 3))
    with np.errstate(all="ignore"):
        if model == OPENCV:
            valid = (Z > 0) & (X * X + Y * Y <= limit * Z * Z)
            Zs = np.where(valid, Z, 1.0)
            x, y = np.where(valid, X / Zs, 0.0), np.where(valid, Y / Zs, 0.0)
            r2 = x * x + y * y
            num = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
            den = 1 + r2 * (k4 + r2 * (k5 + r2 * k6))
            rad = num / den
            drad = ((k1 + r2 * (2 * k2 + 3 * k3 * r2)) * den - num * (k4 + r2 * (2 * k5 + 3 * k6 * r2))) / den**2
            sx, sy = s1 + 2 * s2 * r2, s3 + 2 * s4 * r2
            nx = x * rad + 2 * p1 * x * y + p2 * (r2 + 2 * x * x) + s1 * r2 + s2 * r2 * r2
            ny = y * rad + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y + s3 * r2 + s4 * r2 * r2
            dxx = rad + 2 * x * x * drad + 2 * p1 * y + 6 * p2 * x + 2 * x * sx
            dxy = 2 * x * y * drad + 2 * p1 * x + 2 * p2 * y + 2 * y * sx
            dyx = 2 * x * y * drad + 2 * p1 * x + 2 * p2 * y + 2 * x * sy
            dyy = rad + 2 * y * y * drad + 6 * p1 * y + 2 * p2 * x + 2 * y * sy
            J[..., 0, :] = fx / Zs[..., None] * np.stack([dxx, dxy, -(dxx * x + dxy * y)], -1)
            J[..., 1, :] = fy / Zs[..., None] * np.stack([dyx, dyy, -(dyx * x + dyy * y)], -1)
        elif model == OPENCV_FISHEYE:
            rho = np.hypot(X, Y)
            t = np.arctan2(rho, Z)
            valid = t <= limit
            dd = np.sqrt(X * X + Y * Y + Z * Z)
            dd = np.where(dd > 0, dd, 1.0)
            t2 = t * t
            P = 1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))
            dP = k1 + t2 * (2 * k2 + t2 * (3 * k3 + 4 * t2 * k4))
            sin = np.sin(t)
            st = np.where(t < 1e-4, 1 + t2 / 6, t / np.where(sin != 0, sin, 1.0))
            cf = np.where(t < 1e-2, -2 / 3 + t2 / 45, (np.cos(t) - st) / np.where(t2 > 0, t2, 1.0))
            g = P * st / dd
            Kx = st * st / dd**3 * (P * cf + 2 * dP * Z / dd)
            gz = -(P + 2 * t2 * dP) / dd**2
            nx, ny = g * X, g * Y
            J[..., 0, :] = fx * np.stack([g + X * X * Kx, X * Y * Kx, X * gz], -1)
            J[..., 1, :] = fy * np.stack([X * Y * Kx, g + Y * Y * Kx, Y * gz], -1)
        elif model == EQUIRECTANGULAR:
            q2 = X * X + Z * Z
            d2 = q2 + Y * Y
            valid = q2 > 1e-8 * d2
            q2s = np.where(valid, q2, 1.0)
            q, d2s = np.sqrt(q2s), np.where(valid, d2, 1.0)
            nx, ny = np.arctan2(X, Z), np.arctan2(Y, np.sqrt(q2))
            J[..., 0, :] = fx * np.stack([Z / q2s, 0 * Z, -X / q2s], -1)
            J[..., 1, :] = fy * np.stack([-X * Y / (q * d2s), q / d2s, -Z * Y / (q * d2s)], -1)
        else:
            raise ValueError("lens model %r" % (model,))
    uv = np.stack([fx * nx + cx, fy * ny + cy], -1)
    ok = valid & np.all(np.isfinite(uv), -1) & np.all(np.isfinite(J), (-1, -2))
    return np.where(ok[..., None], uv, 0.0), np.where(ok[..., None, None], J, 0.0), ok


def lens_ray(model: int, dist, K, uv):
    """The inverse of :func:`lens_project`: the camera-space ray [...,3] of pixel positions uv
    [...,2], scaled as the lens measures depth along it (P = depth ray: PINHOLE and OPENCV
    (x/z, y/z, 1), OPENCV_FISHEYE and EQUIRECTANGULAR a unit vector), and whether the lens's
    valid domain reaches each (elsewhere the ray is +z). OPENCV by Newton's method on
    :func:`lens_project`'s Jacobian (50 steps, float64), OPENCV_FISHEYE by bisection of the
    increasing theta_d(theta) on [0, limit] (60 halvings), EQUIRECTANGULAR in closed form."""
    uv = _f64(uv)
    d = np.zeros(DIST_PARAMS) if dist is None else _f64(dist)
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    mx, my = (uv[..., 0] - cx) / fx, (uv[..., 1] - cy) / fy
    one = np.ones_like(mx)
    if model == PINHOLE:
        return np.stack([mx, my, one], -1), np.ones(mx.shape, bool)
    if model == EQUIRECTANGULAR:
        ok = (np.abs(mx) <= np.pi) & (np.abs(my) <= np.pi / 2)
        ray = np.stack([np.cos(my) * np.sin(mx), np.sin(my), np.cos(my) * np.cos(mx)], -1)
    elif model == OPENCV_FISHEYE:
        limit = lens_limit(model, d)

        def td_of(t):
            t2 = t * t
            return t * (1 + t2 * (d[0] + t2 * (d[1] + t2 * (d[2] + t2 * d[3]))))

        td = np.hypot(mx, my)
        ok = td <= td_of(limit)
        lo, hi = np.zeros_like(td), np.full_like(td, limit)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            below = td_of(mid) < td
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        t = 0.5 * (lo + hi)
        s = np.where(td > 0, np.sin(t) / np.where(td > 0, td, 1.0), 1.0)
        ray = np.stack([s * mx, s * my, np.cos(t)], -1)
    elif model == OPENCV:
        unit = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1]])
        x, y = mx.copy(), my.copy()
        with np.errstate(all="ignore"):
            for _ in range(50):
                q, J, _ = lens_project(model, d, unit, np.stack([x, y, one], -1))
                rx, ry = q[..., 0] - mx, q[..., 1] - my
                a, b, c, e = J[..., 0, 0], J[..., 0, 1], J[..., 1, 0], J[..., 1, 1]
                det = np.where(np.abs(a * e - b * c) > 1e-300, a * e - b * c, 1.0)
                x = np.nan_to_num(x - (e * rx - b * ry) / det)
                y = np.nan_to_num(y - (a * ry - c * rx) / det)
            q, _, inside = lens_project(model, d, unit, np.stack([x, y, one], -1))
        ok = inside & (np.hypot(q[..., 0] - mx, q[..., 1] - my) <= 1e-9 * (1 + np.hypot(mx, my)))
        ray = np.stack([x, y, one], -1)
    else:
        raise ValueError("lens model %r" % (model,))
    return np.where(ok[..., None], ray, [0.0, 0.0, 1.0]), ok


def _sigma_points(mc, A):
    """[N,6,3]: point k = mc + (k even ? 1 : -1) A[:, :, k // 2]."""
    cols = np.swapaxes(A, -1, -2)  # [N,3 axes,3]
    return mc[:, None, :] + np.stack([cols[:, 0], -cols[:, 0], cols[:, 1], -cols[:, 1], cols[:, 2], -cols[:, 2]], 1)


def _lens_camera(means, M, opacities, sh, viewmat, K, model, dist, width, height, sh_degree, eps2d, near, far) -> dict:
    """_camera's twin through a lens (the unscented transform)."""
    Rv, tv = viewmat[:3, :3], viewmat[:3, 3]
    fx, cx = K[0, 0], K[0, 2]
    mc = means @ Rv.T + tv
    depth = mc[:, 2] if model == OPENCV else np.linalg.norm(mc, axis=-1)
    depth_ok = (depth > near) & (depth < far)
    A = UT_SPREAD * (Rv @ M)
    P = _sigma_points(mc, A)
    uv, J, ok = lens_project(model, dist, K, P)
    if model == EQUIRECTANGULAR:  # within half a turn of the mean's longitude
        turn = 2 * np.pi * fx
        u_ref = fx * np.arctan2(mc[:, 0], mc[:, 2]) + cx
        uv[..., 0] -= turn * np.floor((uv[..., 0] - u_ref[:, None]) / turn + 0.5)
    lens_ok = np.all(ok, -1)
    mean2d = uv.mean(1)
    e = uv - mean2d[:, None]
    cov2 = np.einsum("nki,nkj->nij", e, e) / 6 + eps2d * np.eye(2)
    det = cov2[:, 0, 0] * cov2[:, 1, 1] - cov2[:, 0, 1] ** 2
    det_ok = det > 0
    dets = np.where(det_ok, det, 1.0)
    conic = np.stack([cov2[:, 1, 1] / dets, -cov2[:, 0, 1] / dets, cov2[:, 0, 0] / dets], -1)
    f = _screen(mean2d, cov2, conic, det_ok & depth_ok & lens_ok, opacities, width, height)
    f.update(_colour(means, sh, Rv, tv, sh_degree, f["vis"]))
    m = f["vis"][:, None]
    f.update(
        means2d=np.where(m, mean2d, 0.0),
        conics=np.where(m, conic, 0.0),
        depths=np.where(f["vis"], depth, 0.0),
        Rv=Rv,
        mc=mc,
        uv=uv,
        J=J,
        e=e,
        cov2=np.where(m[:, :, None], cov2, np.eye(2)),
        depth_dir=(np.array([0.0, 0.0, 1.0]) if model == OPENCV else mc / np.where(depth > 0, depth, 1.0)[:, None]),
    )
    return f


def _screen(means2d, cov2, conic, ok, opacities, width, height) -> dict:
    """Opacity-aware radii and the visibility of a projected Gaussian (as _camera)."""
    op_ok = opacities >= ALPHA_THRESHOLD
    extend = np.minimum(MAX_EXTEND, np.sqrt(2.0 * np.log(np.maximum(opacities * 255.0, 1.0))))
    with np.errstate(invalid="ignore"):
        radii = np.stack(
            [
                np.ceil(extend * np.sqrt(np.maximum(cov2[:, 0, 0], 0.0))),
                np.ceil(extend * np.sqrt(np.maximum(cov2[:, 1, 1], 0.0))),
            ],
            -1,
        )
    radii = np.where(np.isfinite(radii), radii, 0.0)
    r_ok = (radii[:, 0] > 0) | (radii[:, 1] > 0)
    on_img = (
        (means2d[:, 0] + radii[:, 0] > 0)
        & (means2d[:, 0] - radii[:, 0] < width)
        & (means2d[:, 1] + radii[:, 1] > 0)
        & (means2d[:, 1] - radii[:, 1] < height)
    )
    vis = ok & op_ok & r_ok & on_img
    return dict(vis=vis, radii=np.where(vis[:, None], radii, 0).astype(np.int32))


def _colour(means, sh, Rv, tv, sh_degree, vis) -> dict:
    campos = -Rv.T @ tv
    diff = means - campos
    dist = np.linalg.norm(diff, axis=-1)
    dirs = diff / np.where(dist > 0, dist, 1.0)[:, None]
    Y = sh_basis(dirs, sh_degree)
    raw = np.einsum("nk,nkc->nc", Y, sh[:, : Y.shape[1]]) + 0.5
    return dict(colors=np.where(vis[:, None], np.maximum(raw, 0.0), 0.0), dirs=dirs, dist=dist, Y=Y, raw=raw)


def _lens_geometry_vjp(f, M, g_m2d, g_con, g_dep):
    """(v_means [N,3], v_M [N,3,3]) of one lens camera from the cotangents of the 2D mean,
    the conic and the depth (the unscented transform's backward, as the kernel's)."""
    N = len(g_m2d)
    V = np.linalg.inv(f["cov2"])
    G = np.zeros((N, 2, 2))
    G[:, 0, 0], G[:, 0, 1], G[:, 1, 1] = g_con[:, 0], g_con[:, 1], g_con[:, 2]
    Vt = np.swapaxes(V, -1, -2)
    v_cov2 = -Vt @ G @ Vt
    v_cov2 = 0.5 * (v_cov2 + np.swapaxes(v_cov2, -1, -2))
    # cov2 = 1/6 sum e_k e_k^T, mean2d = 1/6 sum uv_k (sum e_k = 0)
    v_uv = (2 * np.einsum("nij,nkj->nki", v_cov2, f["e"]) + g_m2d[:, None, :]) / 6
    v_P = np.einsum("nki,nkij->nkj", v_uv, f["J"])  # [N,6,3]
    v_mc = v_P.sum(1) + g_dep[:, None] * f["depth_dir"]
    v_cols = v_P[:, 0::2] - v_P[:, 1::2]  # dL/d A's columns [N,3 axes,3]
    Rv = f["Rv"]
    v_A = np.swapaxes(v_cols, -1, -2)
    v_M = UT_SPREAD * (Rv.T @ v_A)
    return v_mc @ Rv, v_M


def _prepare(means, quats, scales, opacities, sh_coeffs, viewmats, Ks):
    means, scales, opacities, sh = _f64(means), _f64(scales), _f64(opacities), _f64(sh_coeffs)
    R, M, cov = _world(means, quats, scales)
    return means, scales, opacities, sh, R, M, cov, _f64(viewmats), _f64(Ks)


def _lenses(models, dists, C):
    models = np.zeros(C, np.int64) if models is None else np.broadcast_to(np.asarray(models, np.int64), (C,))
    dists = np.zeros((C, DIST_PARAMS)) if dists is None else np.broadcast_to(_f64(dists), (C, DIST_PARAMS))
    return models, dists


def projection_fwd(
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
    eps2d=0.3,
    near=0.01,
    far=1e10,
    models=None,
    dists=None,
) -> dict:
    """Project N Gaussians into C cameras.

    means [N,3], quats [N,4] wxyz, scales [N,3] (activated), opacities [N] (activated),
    sh_coeffs [N,K,3] with K >= (sh_degree+1)^2, viewmats [C,4,4], Ks [C,3,3].
    models [C] (PINHOLE... , default all PINHOLE), dists [C,12]: each camera's lens.
    Returns float64 means2d [C,N,2], conics [C,N,3] (a, b, c of the inverse 2D covariance),
    depths [C,N] (camera z; the distance through a fisheye or equirectangular lens),
    radii [C,N,2] int32, colors [C,N,3], tiles [C,N] int64.
    """
    means, scales, opacities, sh, R, M, cov, viewmats, Ks = _prepare(
        means, quats, scales, opacities, sh_coeffs, viewmats, Ks
    )
    models, dists = _lenses(models, dists, len(viewmats))
    cams = [
        _camera(means, cov, opacities, sh, viewmats[c], Ks[c], width, height, sh_degree, eps2d, near, far)
        if models[c] == PINHOLE
        else _lens_camera(
            means, M, opacities, sh, viewmats[c], Ks[c], models[c], dists[c], width, height, sh_degree, eps2d, near, far
        )
        for c in range(len(viewmats))
    ]
    out = {k: np.stack([cam[k] for cam in cams]) for k in ("means2d", "conics", "depths", "radii", "colors")}
    out["tiles"] = tile_counts(out["means2d"], out["radii"], width, height, out["conics"], opacities)
    return out


def projection_bwd(
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
    grad_means2d,
    grad_conics,
    grad_colors,
    grad_opacities,
    eps2d=0.3,
    near=0.01,
    far=1e10,
    grad_depths=None,
    models=None,
    dists=None,
) -> dict:
    """Analytic gradients of projection_fwd.

    grad_means2d [C,N,2], grad_conics [C,N,3], grad_colors [C,N,3]: cotangents of the outputs;
    grad_opacities [C,N]: gradient w.r.t. the opacity as the rasterizer uses it in camera c
    (passed through: the radius is piecewise constant); grad_depths [C,N] optional.
    Culled (c, g) pairs contribute nothing. Returns float64 means [N,3], quats [N,4] (w.r.t. the
    unnormalised input), scales [N,3], opacities [N], sh_coeffs [N,K,3].
    """
    means, scales, opacities, sh, R, M, cov, viewmats, Ks = _prepare(
        means, quats, scales, opacities, sh_coeffs, viewmats, Ks
    )
    N = len(means)
    models, dists = _lenses(models, dists, len(viewmats))
    v_means = np.zeros((N, 3))
    v_cov = np.zeros((N, 3, 3))
    v_M_lens = np.zeros((N, 3, 3))
    v_sh = np.zeros_like(sh)
    v_op = np.zeros(N)
    for c in range(len(viewmats)):
        if models[c] == PINHOLE:
            f = _camera(means, cov, opacities, sh, viewmats[c], Ks[c], width, height, sh_degree, eps2d, near, far)
        else:
            f = _lens_camera(
                means,
                M,
                opacities,
                sh,
                viewmats[c],
                Ks[c],
                models[c],
                dists[c],
                width,
                height,
                sh_degree,
                eps2d,
                near,
                far,
            )
        vis = f["vis"]
        m = vis[:, None]
        g_m2d = np.where(m, _f64(grad_means2d[c]), 0.0)
        g_con = np.where(m, _f64(grad_conics[c]), 0.0)
        g_col = np.where(m, _f64(grad_colors[c]), 0.0)
        v_op += np.where(vis, _f64(grad_opacities[c]), 0.0)
        g_dep = np.zeros(N) if grad_depths is None else np.where(vis, _f64(grad_depths[c]), 0.0)

        # colour = max(raw, 0): gradient passes where raw >= 0 (torch's clamp_min convention).
        v_raw = g_col * (f["raw"] >= 0.0)
        Y = f["Y"]
        nk = Y.shape[1]
        v_sh[:, :nk] += Y[:, :, None] * v_raw[:, None, :]
        v_Y = np.einsum("nkc,nc->nk", sh[:, :nk], v_raw)
        v_dir = np.einsum("nk,nkj->nj", v_Y, sh_basis_jac(f["dirs"], sh_degree))
        d, dist = f["dirs"], np.where(f["dist"] > 0, f["dist"], 1.0)
        # dirs = diff/|diff|: d dirs = (I - d d^T) d diff / |diff|
        v_means += (v_dir - d * np.sum(d * v_dir, -1, keepdims=True)) / dist[:, None]
        if models[c] != PINHOLE:
            v_mean_lens, v_M = _lens_geometry_vjp(f, M, g_m2d, g_con, g_dep)
            v_means += v_mean_lens
            v_M_lens += v_M
            continue

        # conic = inverse(cov2) read at (0,0), (0,1), (1,1): dV = -V dCov2 V.
        V = np.linalg.inv(f["cov2"])
        G = np.zeros((N, 2, 2))
        G[:, 0, 0], G[:, 0, 1], G[:, 1, 1] = g_con[:, 0], g_con[:, 1], g_con[:, 2]
        Vt = np.swapaxes(V, -1, -2)
        v_cov2 = -Vt @ G @ Vt

        J, covc = f["J"], f["covc"]
        Jt = np.swapaxes(J, -1, -2)
        v_covc = Jt @ v_cov2 @ J
        v_J = v_cov2 @ J @ np.swapaxes(covc, -1, -2) + np.swapaxes(v_cov2, -1, -2) @ J @ covc

        fx, fy, x, y, z, tx, ty = f["fx"], f["fy"], f["x"], f["y"], f["zs"], f["tx"], f["ty"]
        v_mc = np.zeros((N, 3))
        # means2d = (fx x/z + cx, fy y/z + cy); depth = z
        v_mc[:, 0] += fx / z * g_m2d[:, 0]
        v_mc[:, 1] += fy / z * g_m2d[:, 1]
        v_mc[:, 2] += -fx * x / z**2 * g_m2d[:, 0] - fy * y / z**2 * g_m2d[:, 1] + g_dep
        # J = [[fx/z, 0, -fx tx/z^2], [0, fy/z, -fy ty/z^2]]; tx = x unclipped, tx = z*const clipped.
        v_mc[:, 2] += -fx / z**2 * v_J[:, 0, 0] - fy / z**2 * v_J[:, 1, 1]
        # J[ax, 2] = -fl t/z^2: unclipped t = x (or y): d/dx = -fl/z^2, d/dz = 2 fl t/z^3;
        # clipped t = z*const: no x (y) dependence, d/dz = fl t/z^3.
        for ax, clip, t, fl in ((0, f["clip_x"], tx, fx), (1, f["clip_y"], ty, fy)):
            gJ = v_J[:, ax, 2]
            v_mc[:, ax] += np.where(clip, 0.0, -fl / z**2 * gJ)
            v_mc[:, 2] += np.where(clip, fl * t / z**3, 2 * fl * t / z**3) * gJ
        v_mc *= m  # already 0 for culled pairs (all their cotangents were masked); keeps it explicit

        Rv = f["Rv"]
        v_means += v_mc @ Rv  # mc = Rv mean + tv
        v_cov += Rv.T @ v_covc @ Rv  # covc = Rv cov Rv^T

    # cov = M M^T, M = R diag(s)
    v_M = (v_cov + np.swapaxes(v_cov, -1, -2)) @ M + v_M_lens
    v_R = v_M * scales[:, None, :]
    v_scales = np.sum(v_M * R, axis=1)
    return dict(means=v_means, quats=_rotmat_vjp(quats, v_R), scales=v_scales, opacities=v_op, sh_coeffs=v_sh)
