"""--geometry's normal consistency (2DGS) on the GPU: ``normal_consistency_fwd``/``bwd``
over a rendered normal image and depth image (reference: :mod:`spirula.reference.normals`;
docs/training.md, "Geometry"). Training records the backward alone, between the raster
forward (with ``normals``) and ``rasterize_bwd`` (with ``normals``), into the rasterizer's
``grad_normal_image`` and ``grad_depth_image``.
"""

from __future__ import annotations

from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import grid_stride_groups


def record_normal_consistency(
    rec,
    normals: Buffer,
    depths: Buffer,
    alphas: Buffer,
    cameras: Buffer,
    width: int,
    height: int,
    n_cameras: int,
    out_loss: Buffer | None = None,
    grad_loss: Buffer | None = None,
    grad_normals: Buffer | None = None,
    grad_depths: Buffer | None = None,
):
    """Record the per-pixel loss into ``out_loss`` [C,H,W] f32 (when given) and/or its
    backward from ``grad_loss`` [C,H,W] into ``grad_normals`` [C,H,W,3] and ``grad_depths``
    [C,H,W] (when given). ``normals`` [C,H,W,3] camera-space rendered normals, ``depths``
    [C,H,W] camera z, ``alphas`` [C,H,W], ``cameras`` [C,20] (viewmat, fx, fy, cx, cy)."""
    count = int(n_cameras * width * height)
    push = dict(width=int(width), height=int(height), count=count)
    inputs = dict(normals=normals, depths=depths, alphas=alphas, cameras=cameras)
    if out_loss is not None:
        kernel = rec.device.kernel("normal_consistency_fwd")
        rec.dispatch(kernel, grid_stride_groups(kernel, count), dict(inputs, out_loss=out_loss), push=push)
    if grad_loss is not None:
        kernel = rec.device.kernel("normal_consistency_bwd")
        bufs = dict(inputs, grad_loss=grad_loss, grad_normals=grad_normals, grad_depths=grad_depths)
        rec.dispatch(kernel, grid_stride_groups(kernel, count), bufs, push=push)
    return rec
