"""The full rasterization pipeline (projection -> intersection -> compositing), float64 reference."""

from __future__ import annotations

import numpy as np

from .projection import projection_bwd, projection_fwd
from .rasterize import rasterize_bwd, rasterize_fwd


def _raster_inputs(proj, opacities):
    """Inputs of the compositing stage: the opacity is shared by all cameras, broadcast to [C,N]."""
    C, N = proj["depths"].shape
    opac = np.broadcast_to(np.asarray(opacities, dtype=np.float64), (C, N))
    return (proj["means2d"], proj["conics"], proj["colors"], opac, proj["depths"], proj["radii"])


def rasterization(means, quats, scales, opacities, sh_coeffs, viewmats, Ks, width, height, sh_degree, backgrounds=None):
    """Render C images of N Gaussians.

    Inputs as projection_fwd, plus backgrounds [C,3] or None.
    Returns (colors [C,H,W,3], alphas [C,H,W,1], meta), all float64; meta holds the projection
    outputs (means2d, conics, depths, radii, colors, tiles), render_depths [C,H,W,1] (accumulated
    depth, not divided by alpha), median_depths [C,H,W,1], T_final [C,H,W], last [C,H,W], isects,
    flatten_ids, tile_ranges.
    """
    proj = projection_fwd(means, quats, scales, opacities, sh_coeffs, viewmats, Ks, width, height, sh_degree)
    ras = rasterize_fwd(*_raster_inputs(proj, opacities), width, height, backgrounds)
    meta = dict(proj)
    meta.update(
        render_depths=ras["depths"],
        median_depths=ras["median_depths"],
        T_final=ras["T_final"],
        last=ras["last"],
        isects=ras["isect"]["isects"],
        flatten_ids=ras["isect"]["flatten_ids"],
        tile_ranges=ras["isect"]["tile_ranges"],
    )
    return ras["colors"], ras["alphas"], meta


def rasterization_bwd(
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
    backgrounds=None,
    grad_colors=None,
    grad_alphas=None,
    grad_depths=None,
) -> dict:
    """Analytic gradients of rasterization.

    grad_colors [C,H,W,3], grad_alphas [C,H,W,1], optional grad_depths [C,H,W,1] (w.r.t.
    meta['render_depths']); None means 0. Returns float64 means [N,3], quats [N,4], scales [N,3],
    opacities [N], sh_coeffs [N,K,3], and backgrounds [C,3] if backgrounds is given.
    """
    proj = projection_fwd(means, quats, scales, opacities, sh_coeffs, viewmats, Ks, width, height, sh_degree)
    v = rasterize_bwd(
        *_raster_inputs(proj, opacities),
        width,
        height,
        backgrounds,
        grad_colors=grad_colors,
        grad_alphas=grad_alphas,
        grad_depths=grad_depths,
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
        v["colors"],
        v["opacities"],
        grad_depths=v["depths"],
    )
    if backgrounds is not None:
        out["backgrounds"] = v["backgrounds"]
    return out
