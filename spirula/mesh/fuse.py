"""Fuse a splat's rendered depth into a TSDF volume on the GPU.

:func:`fuse_splats` renders, for each camera, the median depth, alpha and colour with the
project's rasterizer (spirula/render/rasterizer.py) and integrates them into a
:class:`~spirula.mesh.tsdf.TSDFVolume` (``tsdf_integrate``) without leaving the GPU; only the
finished volume is read back.

Tiling: a dense volume whose tsdf + weight + colour (24 bytes a voxel on the GPU) exceeds
``config.slab_budget_bytes`` or the device's storage buffer range is fused in slabs along x:
each slab is its own TSDFVolume, every camera is rendered again for it, and the slab is read
back into the host arrays before the next is allocated. GPU memory is then one slab plus one
camera's render; the host holds the whole result (20 bytes a voxel).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from spirula.errors import SpirulaError
from spirula.mesh.fusion_config import DEFAULT
from spirula.mesh.tsdf import BYTES_PER_VOXEL, TSDFVolume


@dataclasses.dataclass
class FusedVolume:
    """A fused TSDF volume, on the host.

    ``tsdf`` [X,Y,Z] f32: signed distance (world units), positive outside, truncated to
    [-truncation, truncation]; ``weight`` [X,Y,Z] f32, 0 where no view observed the voxel
    (mask those out); ``color`` [X,Y,Z,3] f32 linear rgb in [0,1] (0 where unseen);
    voxel (i, j, k) is centred at ``origin + ((i, j, k) + 0.5) * voxel_size``.
    """

    tsdf: np.ndarray
    weight: np.ndarray
    color: np.ndarray
    origin: np.ndarray
    voxel_size: float
    truncation: float = 0.0


def volume_grid(means, resolution=None, config=DEFAULT, support=None) -> tuple:
    """(origin [3] f64, voxel_size, dims (X, Y, Z)): the box of
    :func:`~spirula.mesh.cameras.scene_bounds` (``means`` [N,3], ``support`` [N]: the
    splats' drawn radii, :func:`~spirula.mesh.cameras.splat_support`) plus
    ``config.margin_voxels`` (the truncation band and one) on each side, with ``resolution``
    voxels along its longest axis (cubic voxels). At a resolution below four margins the
    margin shrinks to a quarter of it (at most half the volume is margin)."""
    from spirula.mesh.cameras import scene_bounds

    resolution = int(resolution or config.resolution)
    if resolution < 2:
        raise SpirulaError("meshing: --resolution must be at least 2, got %d" % resolution)
    lo, hi = scene_bounds(means, config, support)
    margin = min(config.margin_voxels, resolution // 4)
    voxel = float((hi - lo).max()) / (resolution - 2 * margin)
    dims = tuple(int(d) + 2 * margin for d in np.maximum(1, np.ceil((hi - lo) / voxel - 1e-9)))
    centre = 0.5 * (lo + hi)
    origin = centre - 0.5 * voxel * np.array(dims)
    return origin, voxel, dims


def _activated(splats: dict) -> dict:
    """means, quats, activated scales and opacities, sh [N,K,3], sh_degree from either a
    read_splat_ply dict (log_scales, opacity_logits, sh_coeffs) or activated arrays
    (scales, opacities, sh_coeffs or sh)."""
    s = dict(splats)
    if "log_scales" in s:
        scales = np.exp(np.asarray(s["log_scales"], np.float64))
    else:
        scales = np.asarray(s["scales"], np.float64)
    if "opacity_logits" in s:
        opacities = 1.0 / (1.0 + np.exp(-np.asarray(s["opacity_logits"], np.float64)))
    else:
        opacities = np.asarray(s["opacities"], np.float64)
    sh = np.asarray(s["sh_coeffs"] if "sh_coeffs" in s else s["sh"], np.float32)
    means = np.asarray(s["means"], np.float32)
    n = len(means)
    if n == 0:
        raise SpirulaError("meshing: the splat has no Gaussians")
    if sh.ndim != 3 or sh.shape[0] != n or sh.shape[2] != 3:
        raise SpirulaError("meshing: sh coefficients of shape %s, expected [%d,K,3]" % (sh.shape, n))
    out = dict(
        means=means,
        quats=np.asarray(s["quats"], np.float32),
        scales=scales.astype(np.float32),
        opacities=opacities.reshape(-1).astype(np.float32),
        sh=sh,
    )
    for k, v in out.items():
        if not np.isfinite(v).all():
            raise SpirulaError("meshing: the splats' %s hold a non-finite value" % k)
    deg = s.get("sh_degree")
    out["sh_degree"] = min(3, int(round(sh.shape[1] ** 0.5)) - 1) if deg is None else int(deg)
    return out


def plan_slabs(dims, device, config=DEFAULT) -> list:
    """[(x0, x1)]: the x ranges of the slabs a volume of ``dims`` is fused in, each within
    ``config.slab_budget_bytes`` and the device's storage buffer range (16 bytes of colour a
    voxel in one buffer)."""
    X, Y, Z = dims
    info = device.info
    rng = info.max_storage_buffer_range if info is not None else 1 << 62
    per_x = Y * Z
    most = min(config.slab_budget_bytes // BYTES_PER_VOXEL, rng // 16, (1 << 32) - 1) // per_x
    if most < 1:
        raise SpirulaError(
            "meshing: one %d x %d plane of the volume exceeds the GPU budget; lower --resolution" % (Y, Z)
        )
    n = -(-X // most)
    step = -(-X // n)
    return [(x0, min(X, x0 + step)) for x0 in range(0, X, step)]


def fuse_splats(device, splats, cameras, resolution=None, config=DEFAULT, progress=True) -> FusedVolume:
    """Render ``cameras`` (:class:`~spirula.mesh.cameras.Cameras`) of ``splats`` and fuse
    their median depth, alpha and colour into a TSDF volume of ``resolution`` voxels along
    the longest axis of the splats' box (default ``config.resolution``).

    ``splats``: the dict :func:`spirula.data.ply.read_splat_ply` returns, or activated
    arrays (means, quats, scales, opacities, sh_coeffs). Returns a :class:`FusedVolume`.
    """
    from spirula.progress import track
    from spirula.render.rasterizer import Rasterizer, Splats

    s = _activated(splats)
    if len(cameras) == 0:
        raise SpirulaError("meshing: no camera to fuse depth from")
    from spirula.mesh.cameras import splat_support

    support = splat_support(s["scales"], s["opacities"])
    origin, voxel, dims = volume_grid(s["means"], resolution, config, support)
    trunc = config.truncation_voxels * voxel
    slabs = plan_slabs(dims, device, config)
    tsdf = np.empty(dims, np.float32)
    weight = np.empty(dims, np.float32)
    color = np.empty(dims + (3,), np.float32)
    gpu = Splats.from_numpy(device, s["means"], s["quats"], s["scales"], s["opacities"], s["sh"], prefix="mesh.splat")
    rasters = {}
    vol = None
    try:
        jobs = [(sl, c) for sl in slabs for c in range(len(cameras))]
        items = track(jobs, "fusing depth", unit="view") if progress else jobs
        for (x0, x1), c in items:
            if c == 0:
                vol = TSDFVolume(
                    device, origin, voxel, (x1 - x0, dims[1], dims[2]), trunc, config, name="mesh.tsdf", x_offset=x0
                )
            W, H = (int(v) for v in cameras.sizes[c])
            raster = rasters.get((W, H))
            if raster is None:
                raster = rasters[(W, H)] = Rasterizer(device, W, H, 1, capacity=gpu.n, name="mesh.raster")
                raster.set_backgrounds(None)  # black: colours come out premultiplied by alpha
            raster.set_cameras(cameras.viewmats[c : c + 1], cameras.Ks[c : c + 1])
            raster.forward(gpu, s["sh_degree"])
            vol.integrate(raster.out_median, raster.out_alphas, raster.out_colors, cameras.viewmats[c], cameras.Ks[c])
            if c == len(cameras) - 1:
                t, w, col = vol.extract()
                tsdf[x0:x1], weight[x0:x1], color[x0:x1] = t, w, col
                vol.free()
                vol = None
    finally:
        if vol is not None:
            vol.free()
        for r in rasters.values():
            r.free()
        gpu.free(device)
    return FusedVolume(tsdf, weight, color, origin, voxel, trunc)
