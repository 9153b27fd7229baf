"""Projection of 3D Gaussians to the image plane (float64 reference, forward + analytic backward).

Conventions (gsplat 1.5.3): quaternions wxyz, normalised inside; Sigma = M M^T with
M = R(q) diag(s); viewmats world->camera (OpenCV: x right, y down, +z forward);
Ks pixel intrinsics (the skew entry K[0,1] is ignored, as in gsplat); perspective
Jacobian evaluated at a mean whose x/z, y/z are clamped to 1.3x the image frustum;
eps2d added to the 2D covariance; opacity-aware radius; real SH colours + 0.5,
clamped at 0. Culled (camera, Gaussian) pairs have radii (0,0) and all outputs 0.
"""

from __future__ import annotations

import numpy as np

from .intersect import tile_counts

ALPHA_THRESHOLD = 1.0 / 255.0
MAX_EXTEND = 3.33  # radius cap in standard deviations
CLIP_MARGIN = 0.3  # the Jacobian clamp reaches 0.3 * tan(fov/2) past the image edge

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


def _prepare(means, quats, scales, opacities, sh_coeffs, viewmats, Ks):
    means, scales, opacities, sh = _f64(means), _f64(scales), _f64(opacities), _f64(sh_coeffs)
    R, M, cov = _world(means, quats, scales)
    return means, scales, opacities, sh, R, M, cov, _f64(viewmats), _f64(Ks)


def projection_fwd(
    means, quats, scales, opacities, sh_coeffs, viewmats, Ks, width, height, sh_degree, eps2d=0.3, near=0.01, far=1e10
) -> dict:
    """Project N Gaussians into C cameras.

    means [N,3], quats [N,4] wxyz, scales [N,3] (activated), opacities [N] (activated),
    sh_coeffs [N,K,3] with K >= (sh_degree+1)^2, viewmats [C,4,4], Ks [C,3,3].
    Returns float64 means2d [C,N,2], conics [C,N,3] (a, b, c of the inverse 2D covariance),
    depths [C,N] (camera z), radii [C,N,2] int32, colors [C,N,3], tiles [C,N] int64.
    """
    means, scales, opacities, sh, R, M, cov, viewmats, Ks = _prepare(
        means, quats, scales, opacities, sh_coeffs, viewmats, Ks
    )
    cams = [
        _camera(means, cov, opacities, sh, viewmats[c], Ks[c], width, height, sh_degree, eps2d, near, far)
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
    v_means = np.zeros((N, 3))
    v_cov = np.zeros((N, 3, 3))
    v_sh = np.zeros_like(sh)
    v_op = np.zeros(N)
    for c in range(len(viewmats)):
        f = _camera(means, cov, opacities, sh, viewmats[c], Ks[c], width, height, sh_degree, eps2d, near, far)
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
    v_M = (v_cov + np.swapaxes(v_cov, -1, -2)) @ M
    v_R = v_M * scales[:, None, :]
    v_scales = np.sum(v_M * R, axis=1)
    return dict(means=v_means, quats=_rotmat_vjp(quats, v_R), scales=v_scales, opacities=v_op, sh_coeffs=v_sh)
