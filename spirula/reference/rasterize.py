"""Tile rasterization: front-to-back alpha compositing (float64 reference, forward + analytic backward).

Per pixel p (centre (j+0.5, i+0.5)) of camera c, walking its tile's sorted list with T = 1:
    d = mean2d - p;  sigma = a dx^2/2 + c dy^2/2 + b dx dy        (conic = (a, b, c))
    skip if sigma < 0;  alpha = min(MAX_ALPHA, o exp(-sigma));  skip if alpha < 1/255
    T' = T (1 - alpha);  if T' <= T_EPS: stop without blending
    C += colour alpha T;  D += depth alpha T;  T = T';  last = (index in tile list) + 1
    median = depth of the blended entry with T > 0.5 >= T'  (0 if T never crosses 0.5)
    distortion += 2 w (z A - D_before), A = 1 - T before, w = alpha T   (depth distortion)
colors = C + T bg, alphas = 1 - T, depths = D (not normalised), median_depths = median,
distortions = sum_{i,j} w_i w_j |z_i - z_j| over the blended entries (Mip-NeRF 360, 2DGS),
which for depth-sorted entries is the running sum above.
The pixels of a tile are vectorised; every skip/stop decision is made per pixel.
"""

from __future__ import annotations

import numpy as np

from .intersect import TILE_SIZE, intersect

MAX_ALPHA = 0.99
ALPHA_THRESHOLD = 1.0 / 255.0
T_EPS = 1e-4

# Per-entry, per-pixel decision codes recorded by the forward walk.
NOT_REACHED, SKIP_SIGMA, SKIP_ALPHA, BLENDED, STOPPED = 0, 1, 2, 3, 4
CLAMPED = 8  # added when o exp(-sigma) > MAX_ALPHA (alpha clamped: no gradient to o, sigma)


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _inputs(means2d, conics, colors, opacities, depths):
    means2d, conics, colors, depths = _f64(means2d), _f64(conics), _f64(colors), _f64(depths)
    C, N = depths.shape
    opacities = np.broadcast_to(_f64(opacities), (C, N))
    return means2d, conics, colors, opacities, depths


def _trace(means2d, conics, colors, opacities, depths, radii, width, height):
    """Forward walk of every (camera, tile); returns (intersections, list of per-tile records).

    A record holds the tile's pixels (rows, cols [P]), Gaussian ids [K] in list order, and
    [K,P] arrays: state code, alpha (clamped), raw = o exp(-sigma), vis = exp(-sigma), dx, dy,
    T before the entry; plus the tile's outputs color [P,3], depth [P], T [P], last [P].
    """
    means2d, conics, colors, opacities, depths = _inputs(means2d, conics, colors, opacities, depths)
    C, N = depths.shape
    isect = intersect(means2d, radii, depths, width, height, conics, opacities)
    tw, th = isect["tile_width"], isect["tile_height"]
    flat = isect["flatten_ids"]
    records = []
    for c in range(C):
        for t in range(tw * th):
            ty, tx = divmod(t, tw)
            rows = np.arange(ty * TILE_SIZE, min(height, (ty + 1) * TILE_SIZE))
            cols = np.arange(tx * TILE_SIZE, min(width, (tx + 1) * TILE_SIZE))
            rows, cols = (a.ravel() for a in np.meshgrid(rows, cols, indexing="ij"))
            px, py = cols + 0.5, rows + 0.5
            s, e = isect["tile_ranges"][c, t]
            gids = flat[s:e] - c * N
            K, P = len(gids), len(px)
            rec = dict(
                c=c,
                rows=rows,
                cols=cols,
                gids=gids,
                state=np.zeros((K, P), np.int64),
                **{k: np.zeros((K, P)) for k in ("alpha", "raw", "vis", "dx", "dy", "T")},
            )
            T = np.ones(P)
            col = np.zeros((P, 3))
            dep = np.zeros(P)
            med = np.zeros(P)
            dist = np.zeros(P)
            last = np.zeros(P, np.int64)
            done = np.zeros(P, bool)
            for k, g in enumerate(gids):
                dx = means2d[c, g, 0] - px
                dy = means2d[c, g, 1] - py
                a, b, cc = conics[c, g]
                sigma = 0.5 * (a * dx * dx + cc * dy * dy) + b * dx * dy
                with np.errstate(over="ignore"):  # sigma < 0 is skipped, whatever exp gives
                    vis = np.exp(-sigma)
                raw = opacities[c, g] * vis
                alpha = np.minimum(MAX_ALPHA, raw)
                skip_sigma = sigma < 0
                skip_alpha = ~skip_sigma & (alpha < ALPHA_THRESHOLD)
                cand = ~done & ~skip_sigma & ~skip_alpha
                T_next = T * (1.0 - alpha)
                stop = cand & (T_next <= T_EPS)
                blend = cand & ~stop
                state = np.select(
                    [done, skip_sigma, skip_alpha, stop, blend], [NOT_REACHED, SKIP_SIGMA, SKIP_ALPHA, STOPPED, BLENDED]
                )
                state = state + np.where(~done & (raw > MAX_ALPHA), CLAMPED, 0)
                for name, val in (
                    ("state", state),
                    ("alpha", alpha),
                    ("raw", raw),
                    ("vis", vis),
                    ("dx", dx),
                    ("dy", dy),
                    ("T", T),
                ):
                    rec[name][k] = val
                w = np.where(blend, alpha * T, 0.0)  # blending weight, 0 where not blended
                col += w[:, None] * colors[c, g]
                dist += 2.0 * w * (depths[c, g] * (1.0 - T) - dep)
                dep += w * depths[c, g]
                med = np.where(blend & (T > 0.5) & (T_next <= 0.5), depths[c, g], med)
                T = np.where(blend, T_next, T)
                last = np.where(blend, k + 1, last)
                done |= stop
            rec.update(color=col, depth=dep, median=med, distortion=dist, T_final=T, last=last)
            records.append(rec)
    return isect, records


def rasterize_fwd(means2d, conics, colors, opacities, depths, radii, width, height, backgrounds=None) -> dict:
    """Render C images.

    means2d [C,N,2], conics [C,N,3], colors [C,N,3], opacities [C,N] or [N] (broadcast),
    depths [C,N] (sort key and depth value), radii [C,N,2] int (0,0 = culled), backgrounds [C,3] or None.
    Returns float64 colors [C,H,W,3], alphas [C,H,W,1], depths [C,H,W,1] (sum of depth*weight,
    not divided by alpha), median_depths [C,H,W,1] (the depth of the Gaussian whose blend takes T
    across 0.5; 0 where T stays above), distortions [C,H,W,1] (depth distortion),
    T_final [C,H,W]; last [C,H,W] int64 (number of tile-list entries up to
    and including the last blended one; 0 if none); and isect (the intersect() dict).
    """
    isect, records = _trace(means2d, conics, colors, opacities, depths, radii, width, height)
    C = np.shape(depths)[0]
    out_c = np.zeros((C, height, width, 3))
    out_d = np.zeros((C, height, width, 1))
    out_m = np.zeros((C, height, width, 1))
    out_x = np.zeros((C, height, width, 1))
    out_t = np.ones((C, height, width))
    out_l = np.zeros((C, height, width), np.int64)
    bg = np.zeros((C, 3)) if backgrounds is None else _f64(backgrounds)
    for r in records:
        idx = (r["c"], r["rows"], r["cols"])
        out_c[idx] = r["color"] + r["T_final"][:, None] * bg[r["c"]]
        out_d[idx] = r["depth"][:, None]
        out_m[idx] = r["median"][:, None]
        out_x[idx] = r["distortion"][:, None]
        out_t[idx] = r["T_final"]
        out_l[idx] = r["last"]
    return dict(
        colors=out_c,
        alphas=1.0 - out_t[..., None],
        depths=out_d,
        median_depths=out_m,
        distortions=out_x,
        T_final=out_t,
        last=out_l,
        isect=isect,
    )


def decision_codes(means2d, conics, colors, opacities, depths, radii, width, height):
    """Everything piecewise about a render: (flatten_ids, per-entry per-pixel state codes).

    Two inputs with equal decision codes lie in the same smooth piece of rasterize_fwd,
    which is what a finite-difference test must check before comparing.
    """
    isect, records = _trace(means2d, conics, colors, opacities, depths, radii, width, height)
    codes = [r["state"].ravel() for r in records]
    return isect["flatten_ids"], (np.concatenate(codes) if codes else np.zeros(0, np.int64))


def rasterize_bwd(
    means2d,
    conics,
    colors,
    opacities,
    depths,
    radii,
    width,
    height,
    backgrounds=None,
    grad_colors=None,
    grad_alphas=None,
    grad_depths=None,
    grad_distortions=None,
) -> dict:
    """Analytic gradients of rasterize_fwd.

    Inputs as rasterize_fwd, plus cotangents grad_colors [C,H,W,3], grad_alphas [C,H,W,1] and,
    optionally, grad_depths [C,H,W,1] and grad_distortions [C,H,W,1] (None = 0). Returns float64
    means2d [C,N,2], conics [C,N,3], colors [C,N,3], opacities [C,N], depths [C,N] (through the
    depth and distortion images, not the sort),
    and backgrounds [C,3] if backgrounds is given.
    """
    m2d, con, col, opa, dep = _inputs(means2d, conics, colors, opacities, depths)
    C, N = dep.shape
    isect, records = _trace(m2d, con, col, opa, dep, radii, width, height)
    zero = lambda k: np.zeros((C, height, width, k))  # noqa: E731
    gC = zero(3) if grad_colors is None else _f64(grad_colors)
    gA = zero(1) if grad_alphas is None else _f64(grad_alphas)
    gD = zero(1) if grad_depths is None else _f64(grad_depths)
    gX = zero(1) if grad_distortions is None else _f64(grad_distortions)
    bg = np.zeros((C, 3)) if backgrounds is None else _f64(backgrounds)
    v = dict(
        means2d=np.zeros((C, N, 2)),
        conics=np.zeros((C, N, 3)),
        colors=np.zeros((C, N, 3)),
        opacities=np.zeros((C, N)),
        depths=np.zeros((C, N)),
    )
    v_bg = np.zeros((C, 3))
    for r in records:
        c = r["c"]
        idx = (c, r["rows"], r["cols"])
        vC, vA, vD, vX = gC[idx], gA[idx][:, 0], gD[idx][:, 0], gX[idx][:, 0]
        Tf = r["T_final"]
        v_bg[c] += np.sum(vC * Tf[:, None], 0)
        # Back to front: S = what the entries behind the current one (and the background) add.
        S = Tf[:, None] * bg[c]
        SD = np.zeros_like(Tf)
        # distortion L = 2 sum_i w_i (z_i A_{i-1} - D_{i-1}); behind k: bA = sum w_i, bD = sum w_i z_i
        # (= SD), G = sum (dL/dw_i) w_i; in front: A_{k-1} = A_f - bA - w_k, D_{k-1} = D_f - bD - w_k z_k
        A_f, D_f = 1.0 - Tf, r["depth"]
        bA = np.zeros_like(Tf)
        G = np.zeros_like(Tf)
        for k in range(len(r["gids"]) - 1, -1, -1):
            state = r["state"][k]
            blend = (state & 7) == BLENDED
            if not blend.any():
                continue
            g = r["gids"][k]
            al, T = r["alpha"][k], r["T"][k]
            w = np.where(blend, al * T, 0.0)
            om = 1.0 - al  # >= 1 - MAX_ALPHA, no division hazard
            # out = sum_j c_j a_j T_j + T_f bg, T_j (j > k) and T_f carry (1 - a_k):
            # d out/d a_k = c_k T_k - S_k/(1 - a_k);  d(1 - T_f)/d a_k = T_f/(1 - a_k)
            v_alpha = (
                np.sum(vC * (col[c, g] * T[:, None] - S / om[:, None]), -1)
                + vA * Tf / om
                + vD * (dep[c, g] * T - SD / om)
            )
            z = dep[c, g]
            A_prev, D_prev = A_f - bA - w, D_f - SD - w * z
            dLdw = np.where(blend, 2.0 * (z * A_prev - D_prev) + 2.0 * (SD - z * bA), 0.0)
            v_alpha = v_alpha + vX * (T * dLdw - G / om)
            v["depths"][c, g] += np.sum(vX * 2.0 * w * (A_prev - bA))
            G = G + dLdw * w
            bA = bA + w
            v["colors"][c, g] += np.sum(vC * w[:, None], 0)
            v["depths"][c, g] += np.sum(vD * w)
            S = S + w[:, None] * col[c, g]
            SD = SD + w * dep[c, g]
            # alpha = min(MAX_ALPHA, o exp(-sigma)): gradient only where unclamped
            v_raw = np.where(blend & ((state & CLAMPED) == 0), v_alpha, 0.0)
            v["opacities"][c, g] += np.sum(v_raw * r["vis"][k])
            v_sigma = -v_raw * r["raw"][k]
            dx, dy = r["dx"][k], r["dy"][k]
            a, b, cc = con[c, g]
            v["conics"][c, g] += [
                np.sum(0.5 * dx * dx * v_sigma),
                np.sum(dx * dy * v_sigma),
                np.sum(0.5 * dy * dy * v_sigma),
            ]
            v["means2d"][c, g] += [np.sum((a * dx + b * dy) * v_sigma), np.sum((b * dx + cc * dy) * v_sigma)]
    if backgrounds is not None:
        v["backgrounds"] = v_bg
    return v
