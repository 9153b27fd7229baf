"""Appearance correction after rendering, float64 reference of shaders/ppisp_fwd.comp,
ppisp_bwd.comp, bilagrid_fwd.comp, bilagrid_bwd.comp and bilagrid_tv.comp (docs/design.md
§2.8). Written from the maths of the papers and their reference code, which were read, not
copied: PPISP (Deutsch et al., CVPR 2026, arXiv 2601.18336; nv-tlabs/ppisp
tests/torch_reference.py, Apache-2.0) and the bilateral grid of BilaRF (Wang et al. 2024;
gsplat examples/lib_bilagrid.py, Apache-2.0).

PPISP, per pixel of an image of frame ``f`` taken by camera ``c`` (either stage group off
when its index is out of range, as the reference's -1):

1. exposure: rgb * 2^e_f;
2. vignetting, per channel k: rgb_k * clamp(1 + a0 r2 + a1 r2^2 + a2 r2^3, 0, 1),
   r2 = |uv - (cx, cy)|^2, uv = (pixel centre - (W, H) / 2) / max(W, H);
3. colour: rgi = (r, g, r + g + b), v = H rgi, w = v (r + g + b) / (v_z + 1e-5),
   out = (w_x, w_y, w_z - w_x - w_y); H the homography of the 8 colour parameters
   (:func:`color_homography`);
4. CRF, per channel: x = clamp(rgb_k, 0, 1), toe = 0.3 + softplus(p0),
   shoulder = 0.3 + softplus(p1), gamma = 0.1 + softplus(p2), centre = sigmoid(p3);
   y = a max(x / centre, eps)^toe below the centre, 1 - b max((1 - x) / (1 - centre),
   eps)^shoulder above, a = shoulder centre / (toe + centre (shoulder - toe)), b = 1 - a;
   out = max(y, eps)^gamma, eps = 1e-6.

The gradient of a clamp passes where its argument is inside or on the bounds (torch's).

Parameters live in one flat buffer (:func:`ppisp_layout`): exposure [F], colour [F,8],
vignetting [C,3,5] (cx, cy, a0, a1, a2), CRF [C,3,4] (p0..p3).

Bilateral grid: one grid per image, [L, GH, GW, 12] (gsplat's [12, L, GH, GW] with the
coefficients last), each node a 3x4 affine matrix row-major. A pixel (x, y) with colour
rgb samples it trilinearly at (gx, gy, gz) = ((x + 0.5) / W (GW - 1), (y + 0.5) / H
(GH - 1), gray (L - 1)), gray = 0.299 r + 0.587 g + 0.114 b, each clamped to the grid
(grid_sample, align_corners, border padding: no gradient through a clamped coordinate),
and its output is A [rgb, 1]. The total variation of F grids is
sum over the axes L, GH, GW of sum (x_next - x)^2 / (12 x the differences' count per grid) / F
(gsplat's total_variation_loss).
"""

from __future__ import annotations

import numpy as np

PPISP_ROWS = 37  # per-thread partial sums: exposure, dL/dH (9, row-major), vignetting (15), CRF (12)
CRF_EPS = 1e-6
INTENSITY_EPS = 1e-5
H_EPS = 1e-10
LUMA = np.array([0.299, 0.587, 0.114])
# the ZCA whitening of the colour parameters: one symmetric 2x2 block per control
# chromaticity (blue, red, green, neutral), the numbers of the PPISP reference
ZCA_BLOCKS = np.array(
    [
        [[0.0480542, -0.0043631], [-0.0043631, 0.0481283]],
        [[0.0580570, -0.0179872], [-0.0179872, 0.0431061]],
        [[0.0433336, -0.0180537], [-0.0180537, 0.0580500]],
        [[0.0128369, -0.0034654], [-0.0034654, 0.0128158]],
    ]
)
_S_INV = np.array([[-1.0, -1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


def ppisp_layout(n_frames: int, n_cameras: int) -> dict:
    """name -> (offset, shape) in the flat parameter buffer."""
    out, o = {}, 0
    for name, shape in (
        ("exposure", (n_frames,)),
        ("color", (n_frames, 8)),
        ("vignetting", (n_cameras, 3, 5)),
        ("crf", (n_cameras, 3, 4)),
    ):
        out[name] = (o, shape)
        o += int(np.prod(shape))
    out["size"] = (o, ())
    return out


def ppisp_pack(exposure, color, vignetting, crf) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in (exposure, color, vignetting, crf)])


def ppisp_unpack(flat, n_frames: int, n_cameras: int) -> dict:
    lay = ppisp_layout(n_frames, n_cameras)
    flat = np.asarray(flat)
    return {k: flat[o : o + int(np.prod(s))].reshape(s) for k, (o, s) in lay.items() if k != "size"}


def ppisp_init(n_frames: int, n_cameras: int) -> np.ndarray:
    """PPISP's start: zeros but the CRF, whose toe, shoulder and gamma start at 1 (softplus
    inverses) and centre at 0.5."""
    p = ppisp_unpack(np.zeros(ppisp_layout(n_frames, n_cameras)["size"][0]), n_frames, n_cameras)
    inv = lambda x, lo: np.log(np.expm1(x - lo))  # noqa: E731
    p["crf"][...] = [inv(1.0, 0.3), inv(1.0, 0.3), inv(1.0, 0.1), 0.0]
    return ppisp_pack(p["exposure"], p["color"], p["vignetting"], p["crf"])


# PPISP's regularisers (nv-tlabs/ppisp PPISPConfig's weights, get_regularization_loss)
PPISP_REG = dict(exposure=1.0, vig_center=0.02, vig_channel=0.1, vig_non_pos=0.01, color=1.0, crf_channel=0.1)
_ZCA = np.array(
    [
        [[0.0480542, -0.0043631], [-0.0043631, 0.0481283]],
        [[0.0580570, -0.0179872], [-0.0179872, 0.0431061]],
        [[0.0433336, -0.0180537], [-0.0180537, 0.0580500]],
        [[0.0128369, -0.0034654], [-0.0034654, 0.0128158]],
    ]
)


def _smooth_l1(x, beta):
    a = np.abs(x)
    return np.where(a < beta, 0.5 * x * x / beta, a - 0.5 * beta)


def ppisp_reg(flat, n_frames: int, n_cameras: int) -> float:
    """PPISP's regularisation loss of the flat parameters: smooth L1 (beta 0.1) of the mean
    exposure; smooth L1 (beta 0.005, mean of 8) of the mean over frames of the colour
    parameters through the ZCA blocks; mean |vignetting centre|^2; mean relu of the
    vignetting's falloff terms; the variance over channels (biased) of the vignetting and
    CRF parameters, each mean; weighted by :data:`PPISP_REG`."""
    p, w = ppisp_unpack(np.asarray(flat, np.float64), n_frames, n_cameras), PPISP_REG
    c = p["color"].reshape(n_frames, 4, 2)
    offsets = np.einsum("fbi,bij->fbj", c, _ZCA).reshape(n_frames, 8)
    vig, crf = p["vignetting"], p["crf"]
    return float(
        w["exposure"] * _smooth_l1(p["exposure"].mean(), 0.1)
        + w["vig_center"] * (vig[:, :, :2] ** 2).sum(-1).mean()
        + w["vig_non_pos"] * np.maximum(vig[:, :, 2:], 0).mean()
        + w["vig_channel"] * vig.var(axis=1).mean()
        + w["color"] * _smooth_l1(offsets.mean(0), 0.005).mean()
        + w["crf_channel"] * crf.var(axis=1).mean()
    )


def softplus(x):
    x = np.asarray(x, np.float64)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def _homography_parts(c8):
    o = np.concatenate([np.asarray(c8[2 * b : 2 * b + 2], np.float64) @ ZCA_BLOCKS[b] for b in range(4)])
    T = np.array([[o[0], 1.0 + o[2], o[4]], [o[1], o[3], 1.0 + o[5]], [1.0, 1.0, 1.0]])
    x, y = 1.0 / 3.0 + o[6], 1.0 / 3.0 + o[7]
    K = np.array([[0.0, -1.0, y], [1.0, 0.0, -x], [-y, x, 0.0]])
    M = K @ T
    pairs = ((0, 1), (0, 2), (1, 2))
    lams = [np.cross(M[i], M[j]) for i, j in pairs]
    n = [float(v @ v) for v in lams]
    sel = (0 if n[0] >= n[2] else 2) if n[0] >= n[1] else (1 if n[1] >= n[2] else 2)
    lam = lams[sel]
    H0 = T @ np.diag(lam) @ _S_INV
    s = H0[2, 2] + H_EPS
    return T, K, M, pairs[sel], lam, H0, s


def color_homography(c8) -> np.ndarray:
    """The 3x3 homography (on (r, g, r + g + b)) of the 8 colour parameters: the latent
    offsets through the ZCA blocks move the chromaticities of blue (0, 0), red (1, 0), green
    (0, 1) and grey (1/3, 1/3); H maps the four sources to the four targets, normalised so
    that H[2, 2] = 1 (plus 1e-10)."""
    *_, H0, s = _homography_parts(c8)
    return H0 / s


def color_homography_vjp(c8, G) -> np.ndarray:
    """dL/d(the 8 colour parameters) from G = dL/dH (the cross product choice is piecewise
    constant)."""
    T, K, M, (ia, ib), lam, H0, s = _homography_parts(c8)
    G = np.asarray(G, np.float64)
    G0 = G / s
    G0[2, 2] -= float((G * H0).sum()) / (s * s)
    A = G0 @ _S_INV.T  # dL/d(T diag(lam))
    gT = A * lam[None, :]
    glam = (T * A).sum(0)
    gM = np.zeros((3, 3))
    gM[ia] += np.cross(M[ib], glam)
    gM[ib] += np.cross(glam, M[ia])
    gK = gM @ T.T
    gT += K.T @ gM
    gx = -gK[1, 2] + gK[2, 1]
    gy = gK[0, 2] - gK[2, 0]
    go = np.array([gT[0, 0], gT[1, 0], gT[0, 1], gT[1, 1], gT[0, 2], gT[1, 2], gx, gy])
    return np.concatenate([ZCA_BLOCKS[b] @ go[2 * b : 2 * b + 2] for b in range(4)])


def pixel_uv(H: int, W: int):
    """[H,W] u and v of the pixel centres: (centre - size / 2) / max(W, H)."""
    y, x = np.mgrid[0:H, 0:W].astype(np.float64) + 0.5
    s = float(max(W, H))
    return (x - W / 2.0) / s, (y - H / 2.0) / s


def _crf_params(p):
    toe = 0.3 + softplus(p[0])
    sh = 0.3 + softplus(p[1])
    gam = 0.1 + softplus(p[2])
    ctr = sigmoid(p[3])
    L = toe + ctr * (sh - toe)
    a = sh * ctr / L
    return toe, sh, gam, ctr, L, a


def crf(x_in, p):
    toe, sh, gam, ctr, _, a = _crf_params(p)
    x = np.clip(x_in, 0.0, 1.0)
    low = a * np.maximum(x / ctr, CRF_EPS) ** toe
    high = 1.0 - (1.0 - a) * np.maximum((1.0 - x) / (1.0 - ctr), CRF_EPS) ** sh
    y = np.where(x <= ctr, low, high)
    return np.maximum(y, CRF_EPS) ** gam


def crf_vjp(x_in, p, g):
    """(dL/dx_in, dL/dp [4, ...] per element) of :func:`crf` with cotangent g."""
    toe, sh, gam, ctr, L, a = _crf_params(p)
    b = 1.0 - a
    x = np.clip(x_in, 0.0, 1.0)
    is_low = x <= ctr
    u = x / ctr
    um = np.maximum(u, CRF_EPS)
    pl = um**toe
    w = (1.0 - x) / (1.0 - ctr)
    q = np.maximum(w, CRF_EPS)
    ph = q**sh
    y = np.where(is_low, a * pl, 1.0 - b * ph)
    z = np.maximum(y, CRF_EPS)
    out = z**gam
    d_gam = g * out * np.log(z)
    d_y = np.where(y >= CRF_EPS, g * gam * out / z, 0.0)
    # below the centre
    d_a_lo = d_y * pl
    d_toe = np.where(is_low, d_y * a * pl * np.log(um), 0.0)
    d_u = np.where(u >= CRF_EPS, d_y * a * toe * pl / um, 0.0)
    # above
    d_sh = np.where(is_low, 0.0, -d_y * b * ph * np.log(q))
    d_w = np.where(w >= CRF_EPS, -d_y * b * sh * ph / q, 0.0)
    d_a = np.where(is_low, d_a_lo, d_y * ph)  # b = 1 - a
    d_x = np.where(is_low, d_u / ctr, -d_w / (1.0 - ctr))
    d_ctr = np.where(is_low, -d_u * x / (ctr * ctr), d_w * (1.0 - x) / ((1.0 - ctr) ** 2))
    d_toe = d_toe + d_a * (-a * (1.0 - ctr) / L)
    d_sh = d_sh + d_a * (ctr / L - a * ctr / L)
    d_ctr = d_ctr + d_a * (sh / L - a * (sh - toe) / L)
    d_x = np.where((x_in >= 0.0) & (x_in <= 1.0), d_x, 0.0)
    dp = np.stack([d_toe * sigmoid(p[0]), d_sh * sigmoid(p[1]), d_gam * sigmoid(p[2]), d_ctr * ctr * (1.0 - ctr)])
    return d_x, dp


def _vignette(vig, u, v):
    """Unclamped falloff [H,W] of one channel's (cx, cy, a0, a1, a2), its r2 and dr2 terms."""
    du, dv = u - vig[0], v - vig[1]
    r2 = du * du + dv * dv
    return 1.0 + vig[2] * r2 + vig[3] * r2**2 + vig[4] * r2**3, r2, du, dv


def ppisp_fwd(rgb, exposure=None, color=None, vignetting=None, crf_params=None) -> np.ndarray:
    """``rgb`` [H,W,3] -> [H,W,3]. ``exposure`` (scalar) and ``color`` [8] are the frame's
    (None: the per-frame stages off), ``vignetting`` [3,5] and ``crf_params`` [3,4] the
    camera's (None: off)."""
    return _ppisp(np.asarray(rgb, np.float64), exposure, color, vignetting, crf_params)[0]


def _ppisp(rgb, e, c8, vig, cp):
    Hh, Ww = rgb.shape[:2]
    st = {"in": rgb}
    x = rgb
    if e is not None:
        x = x * 2.0 ** float(e)
    st["exp"] = x
    if vig is not None:
        u, v = pixel_uv(Hh, Ww)
        st["uv"] = (u, v)
        fs = [_vignette(vig[k], u, v)[0] for k in range(3)]
        x = x * np.stack([np.clip(f, 0.0, 1.0) for f in fs], -1)
    st["vig"] = x
    if c8 is not None:
        Hm = color_homography(c8)
        st["H"] = Hm
        inten = x.sum(-1)
        rgi = np.stack([x[..., 0], x[..., 1], inten], -1)
        vv = rgi @ Hm.T
        w = vv * (inten / (vv[..., 2] + INTENSITY_EPS))[..., None]
        x = np.stack([w[..., 0], w[..., 1], w[..., 2] - w[..., 0] - w[..., 1]], -1)
    st["col"] = x
    if cp is not None:
        x = np.stack([crf(x[..., k], cp[k]) for k in range(3)], -1)
    return x, st


def ppisp_bwd(rgb, exposure, color, vignetting, crf_params, grad_out) -> dict:
    """The vector-Jacobian product of :func:`ppisp_fwd` with ``grad_out`` [H,W,3]: a dict
    of ``rgb`` [H,W,3], ``exposure`` (scalar), ``color`` [8], ``vignetting`` [3,5],
    ``crf`` [3,4] (None where the stage is off), ``terms`` [H,W,37]: the per-pixel
    parameter terms the kernel sums (exposure, dL/dH row-major, vignetting, CRF), and
    ``rows`` / ``rows_abs`` [37]: their sums and sums of magnitudes."""
    rgb = np.asarray(rgb, np.float64)
    _, st = _ppisp(rgb, exposure, color, vignetting, crf_params)
    g = np.asarray(grad_out, np.float64)
    Hh, Ww = rgb.shape[:2]
    terms = np.zeros((Hh, Ww, PPISP_ROWS))
    out = {"exposure": None, "color": None, "vignetting": None, "crf": None}
    if crf_params is not None:
        x = st["col"]
        gs = []
        for k in range(3):
            dx, dp = crf_vjp(x[..., k], crf_params[k], g[..., k])
            gs.append(dx)
            terms[..., 25 + 4 * k : 29 + 4 * k] = np.moveaxis(dp, 0, -1)
        g = np.stack(gs, -1)
    if color is not None:
        x = st["vig"]
        Hm = st["H"]
        inten = x.sum(-1)
        rgi = np.stack([x[..., 0], x[..., 1], inten], -1)
        vv = rgi @ Hm.T
        den = vv[..., 2] + INTENSITY_EPS
        k_ = inten / den
        gw = np.stack([g[..., 0] - g[..., 2], g[..., 1] - g[..., 2], g[..., 2]], -1)
        gv = gw * k_[..., None]
        gk = (gw * vv).sum(-1)
        gI = gk / den
        gv[..., 2] -= gk * inten / (den * den)
        terms[..., 1:10] = (gv[..., :, None] * rgi[..., None, :]).reshape(Hh, Ww, 9)
        grgi = gv @ Hm
        gI = gI + grgi[..., 2]
        g = np.stack([grgi[..., 0] + gI, grgi[..., 1] + gI, gI], -1)
    if vignetting is not None:
        x = st["exp"]
        u, v = st["uv"]
        gs = []
        for k in range(3):
            f, r2, du, dv = _vignette(vignetting[k], u, v)
            inside = (f >= 0.0) & (f <= 1.0)
            gs.append(g[..., k] * np.clip(f, 0.0, 1.0))
            gf = np.where(inside, g[..., k] * x[..., k], 0.0)
            a0, a1, a2 = vignetting[k][2:]
            gr2 = gf * (a0 + 2.0 * a1 * r2 + 3.0 * a2 * r2 * r2)
            terms[..., 10 + 5 * k] = -2.0 * gr2 * du
            terms[..., 11 + 5 * k] = -2.0 * gr2 * dv
            terms[..., 12 + 5 * k] = gf * r2
            terms[..., 13 + 5 * k] = gf * r2**2
            terms[..., 14 + 5 * k] = gf * r2**3
        g = np.stack(gs, -1)
    if exposure is not None:
        s = 2.0 ** float(exposure)
        terms[..., 0] = (g * rgb).sum(-1) * s * np.log(2.0)
        g = g * s
    out["rgb"] = g
    out["terms"] = terms
    rows = terms.reshape(-1, PPISP_ROWS).sum(0)
    out["rows"] = rows
    out["rows_abs"] = np.abs(terms).reshape(-1, PPISP_ROWS).sum(0)
    if exposure is not None:
        out["exposure"] = rows[0]
    if color is not None:
        out["color"] = color_homography_vjp(color, rows[1:10].reshape(3, 3))
    if vignetting is not None:
        out["vignetting"] = rows[10:25].reshape(3, 5)
    if crf_params is not None:
        out["crf"] = rows[25:37].reshape(3, 4)
    return out


def ppisp_case(H=11, W=14, seed=0):
    """Inputs of the tests: an image (rendered colours are >= 0; some above 1), parameters
    away from the identity, a cotangent."""
    rng = np.random.default_rng(seed)
    rgb = rng.uniform(0.0, 1.1, (H, W, 3))
    e = 0.3
    c8 = rng.normal(0.0, 1.0, 8)
    vig = np.concatenate([rng.uniform(-0.1, 0.1, (3, 2)), rng.uniform(-0.6, 0.1, (3, 3))], 1)
    cp = rng.normal(0.0, 0.7, (3, 4))
    g = rng.normal(0.0, 1.0, (H, W, 3))
    return rgb, e, c8, vig, cp, g


# ---- bilateral grid --------------------------------------------------------------------


def _bilagrid_coords(rgb, GL, GH, GW):
    Hh, Ww = rgb.shape[:2]
    y, x = np.mgrid[0:Hh, 0:Ww].astype(np.float64) + 0.5
    coords, inner = [], []
    for c, n in ((x / Ww * (GW - 1), GW), (y / Hh * (GH - 1), GH), ((rgb @ LUMA) * (GL - 1), GL)):
        inner.append((c > 0.0) & (c < n - 1))
        c = np.clip(c, 0.0, n - 1)
        i0 = np.minimum(np.floor(c), max(n - 2, 0)).astype(np.int64)
        coords.append((i0, np.minimum(i0 + 1, n - 1), c - i0))
    return coords, inner[2]


def _corners(coords):
    (x0, x1, fx), (y0, y1, fy), (z0, z1, fz) = coords
    for cz, wz, dz in ((z0, 1.0 - fz, -1.0), (z1, fz, 1.0)):
        for cy, wy in ((y0, 1.0 - fy), (y1, fy)):
            for cx, wx in ((x0, 1.0 - fx), (x1, fx)):
                yield (cz, cy, cx), wx * wy * wz, wx * wy * dz


def bilagrid_slice(grid, rgb) -> np.ndarray:
    """The affine matrices [H,W,3,4] sliced from one ``grid`` [L,GH,GW,12] by ``rgb`` [H,W,3]."""
    grid = np.asarray(grid, np.float64)
    coords, _ = _bilagrid_coords(np.asarray(rgb, np.float64), *grid.shape[:3])
    A = 0.0
    for idx, w, _ in _corners(coords):
        A = A + w[..., None] * grid[idx]
    return A.reshape(rgb.shape[:2] + (3, 4))


def bilagrid_fwd(grid, rgb) -> np.ndarray:
    rgb = np.asarray(rgb, np.float64)
    A = bilagrid_slice(grid, rgb)
    return np.einsum("hwij,hwj->hwi", A[..., :3], rgb) + A[..., 3]


def bilagrid_bwd(grid, rgb, grad_out, with_abs=False):
    """(dL/d grid [L,GH,GW,12], dL/d rgb [H,W,3]) of :func:`bilagrid_fwd` with ``grad_out``,
    the luminance's path into the sampling coordinate included; with ``with_abs``, a third:
    each grid element's sum of its per-pixel terms' magnitudes (the summation error bound)."""
    grid = np.asarray(grid, np.float64)
    rgb = np.asarray(rgb, np.float64)
    g = np.asarray(grad_out, np.float64)
    GL = grid.shape[0]
    coords, inner_z = _bilagrid_coords(rgb, *grid.shape[:3])
    A = bilagrid_slice(grid, rgb)
    rgb1 = np.concatenate([rgb, np.ones(rgb.shape[:2] + (1,))], -1)
    gA = (g[..., :, None] * rgb1[..., None, :]).reshape(rgb.shape[:2] + (12,))
    ggrid = np.zeros_like(grid)
    gabs = np.zeros_like(grid)
    gz = np.zeros(rgb.shape[:2])
    for idx, w, dwz in _corners(coords):
        np.add.at(ggrid, idx, w[..., None] * gA)
        np.add.at(gabs, idx, np.abs(w[..., None] * gA))
        gz += dwz * (grid[idx] * gA).sum(-1)
    grgb = np.einsum("hwij,hwi->hwj", A[..., :3], g)
    grgb += np.where(inner_z, gz * (GL - 1), 0.0)[..., None] * LUMA
    return (ggrid, grgb, gabs) if with_abs else (ggrid, grgb)


def bilagrid_tv(grids):
    """(total variation, its gradient) of ``grids`` [F,L,GH,GW,12] (gsplat's
    total_variation_loss of its [F,12,L,GH,GW] grids)."""
    grids = np.asarray(grids, np.float64)
    F = grids.shape[0]
    tv, grad = 0.0, np.zeros_like(grids)
    for axis in (1, 2, 3):
        n = grids.shape[axis]
        if n < 2:
            continue
        d = np.diff(grids, axis=axis)
        count = d[0].size
        tv += (d * d).sum() / count / F
        pad = [(0, 0)] * 5
        lo, hi = list(pad), list(pad)
        lo[axis], hi[axis] = (1, 0), (0, 1)
        grad += 2.0 / count / F * (np.pad(d, lo) - np.pad(d, hi))
    return tv, grad


def bilagrid_identity(F, L=8, GH=16, GW=16) -> np.ndarray:
    g = np.zeros((F, L, GH, GW, 12))
    g[..., [0, 5, 10]] = 1.0
    return g


def bilagrid_case(H=13, W=17, L=4, GH=5, GW=6, seed=0):
    """An image (a few values outside [0, 1]), one grid near the identity, a cotangent."""
    rng = np.random.default_rng(seed)
    rgb = rng.uniform(-0.1, 1.1, (H, W, 3))
    grid = bilagrid_identity(1, L, GH, GW)[0] + rng.normal(0.0, 0.2, (L, GH, GW, 12))
    g = rng.normal(0.0, 1.0, (H, W, 3))
    return grid, rgb, g
