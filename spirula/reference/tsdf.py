"""TSDF fusion of one rendered view (float64 reference of shaders/tsdf_integrate.comp).

Voxel (i, j, k) of a [X,Y,Z] volume has its centre at origin + ((i, j, k) + 0.5) * voxel_size
(i + x_offset for a slab of a larger volume).
It is moved into the camera (OpenCV world->camera viewmat, z forward), projected with K, and
reads the pixel holding it (pixel centres at +0.5: pixel (floor(v), floor(u))); z <= 1e-4 or
outside the image: unchanged. With d the pixel's depth, a its alpha, rgb its premultiplied colour:
    a > alpha_surface and d > 0: sdf = d - z; skip when sdf < -trunc; else
        tsdf, weight <- running average with min(sdf, trunc), weight 1;
        and where sdf < trunc: colour, colour weight <- running average with rgb / a, weight 1
    a < alpha_empty: tsdf, weight <- running average with +trunc, weight carve_weight
"""

from __future__ import annotations

import numpy as np

TSDF_NEAR = 1e-4


def voxel_centres(origin, voxel_size, dims, x_offset=0) -> np.ndarray:
    """[X,Y,Z,3] float64 world positions of the voxel centres (of the slab starting at x_offset)."""
    idx = np.stack(np.meshgrid(*[np.arange(n) for n in dims], indexing="ij"), -1)
    idx[..., 0] += int(x_offset)
    return np.asarray(origin, np.float64) + (idx + 0.5) * float(voxel_size)


def tsdf_integrate(
    tsdf,
    weight,
    rgbw,
    depth,
    alpha,
    color,
    viewmat,
    K,
    origin,
    voxel_size,
    truncation,
    alpha_surface,
    alpha_empty,
    carve_weight,
    x_offset=0,
):
    """One view into the volume; returns new (tsdf [X,Y,Z], weight [X,Y,Z], rgbw [X,Y,Z,4]).

    depth, alpha [H,W] (or [H,W,1]); color [H,W,3]; viewmat [4,4]; K [3,3].
    """
    tsdf, weight, rgbw = (np.array(a, np.float64) for a in (tsdf, weight, rgbw))
    depth = np.asarray(depth, np.float64).reshape(np.shape(depth)[:2])
    alpha = np.asarray(alpha, np.float64).reshape(depth.shape)
    color = np.asarray(color, np.float64)
    H, W = depth.shape
    vm, K = np.asarray(viewmat, np.float64), np.asarray(K, np.float64)
    p = voxel_centres(origin, voxel_size, tsdf.shape, x_offset)
    q = p @ vm[:3, :3].T + vm[:3, 3]
    z = q[..., 2]
    front = z > TSDF_NEAR
    zs = np.where(front, z, 1.0)
    u = K[0, 0] * q[..., 0] / zs + K[0, 2]
    v = K[1, 1] * q[..., 1] / zs + K[1, 2]
    ok = front & (u >= 0) & (v >= 0) & (u < W) & (v < H)
    col = np.clip(np.floor(np.where(ok, u, 0)), 0, W - 1).astype(np.int64)
    row = np.clip(np.floor(np.where(ok, v, 0)), 0, H - 1).astype(np.int64)
    a, d, rgb = alpha[row, col], depth[row, col], color[row, col]
    sdf = d - z
    surf = ok & (a > alpha_surface) & (d > 0) & (sdf >= -truncation)
    empty = ok & ~(a > alpha_surface) & (a < alpha_empty)
    obs = np.where(surf, np.minimum(sdf, truncation), truncation)
    w_obs = np.where(surf, 1.0, np.where(empty, carve_weight, 0.0))
    upd = surf | empty
    w_new = weight + w_obs
    tsdf = np.where(upd, (tsdf * weight + obs * w_obs) / np.where(upd, w_new, 1.0), tsdf)
    band = surf & (sdf < truncation)
    cw = rgbw[..., 3]
    c_new = (rgbw[..., :3] * cw[..., None] + rgb / np.where(band, a, 1.0)[..., None]) / (cw + 1.0)[..., None]
    rgbw[..., :3] = np.where(band[..., None], c_new, rgbw[..., :3])
    rgbw[..., 3] = np.where(band, cw + 1.0, cw)
    return tsdf, w_new, rgbw
