"""``fpbo``: the fused projection backward + Adam step, one thread per splat (the SH
rows' Adam of a workgroup's 128 splats as one coalesced block: shaders/fpbo.comp)."""

from __future__ import annotations

from spirula.render.rasterizer import EPS2D
from spirula.runtime.sequence import Threads


def record_fpbo(
    rec,
    model,
    raster,
    params,
    stats,
    sh_degree: int,
    mcmc_noise: bool,
    adc_stats: bool,
    absgrad: bool = False,
    depth_grad: bool = False,
    flatten: bool = False,
    normals: bool = False,
    lenses: bool = True,
):
    """Record the update of every live splat of ``model`` from ``raster``'s
    per-view gradients (after its backward), with the step's learning rates
    in ``params`` (StepParams). ``stats``: (grad2d_sum [N], vis_count [N])
    buffers for density control (bound even when unused); ``absgrad``: they
    accumulate the per-pixel |dL/dmean2d| sums (record rasterize_bwd with absgrad);
    ``depth_grad``: add ``raster``'s per-view dL/d depth (rasterize_bwd with distortion);
    ``flatten``: add the flattening regularizer (weight: ``params``' flatten_reg);
    ``normals``: add ``raster``'s per-view dL/d splat normal to the quaternions
    (rasterize_bwd with normals: the normal consistency); ``lenses``: some camera of
    ``raster`` may be a lens (False: pinholes only, and the kernel without the lens
    backward: faster on CUDA)."""
    rec.dispatch(
        "fpbo",
        Threads(model.n),
        dict(
            **model.bindings(),
            **raster.bindings("cameras", "radii", "grad_xy", "grad_conics", "grad_rgb", "grad_opacity"),
            **raster.bindings("grad_xy_abs", "grad_depth", "grad_normals"),
            params=params,
            num_isects=raster.offsets_scan.scratch,
            grad2d_sum=stats[0],
            vis_count=stats[1],
        ),
        push=dict(
            n=model.n,
            n_views=raster.n_cameras,
            width=raster.width,
            height=raster.height,
            eps2d=EPS2D,
            count_offset=raster.total_offset,
            isect_capacity=raster.isect_capacity,
        ),
        spec=dict(
            SH_DEGREE=sh_degree,
            SH_COEFFS=model.sh_coeffs,
            MCMC_NOISE=int(mcmc_noise),
            ADC_STATS=int(adc_stats),
            N_VIEWS=raster.n_cameras,
            ABSGRAD=int(absgrad and adc_stats),
            DEPTH_GRAD=int(depth_grad),
            FLATTEN=int(flatten),
            NORMALS=int(normals),
            LENSES=int(lenses),
        ),
        defines=dict(COMPACT=1) if model.compact else dict(SH_VEC4=int(3 * model.sh_coeffs % 4 == 0)),
    )
