"""numpy entry points: :func:`rasterization` and :func:`rasterization_backward`.

A thin wrapper over :class:`~spirula.render.rasterizer.Rasterizer`: inputs are
checked and uploaded, the GPU renders, outputs are read back. Training uses
the device-resident form directly. Conventions follow gsplat's
``rasterization()`` (docs/design.md §2): activated scales and opacities,
quaternions wxyz, OpenCV world->camera view matrices, pixel centres at +0.5.
"""

from __future__ import annotations

import weakref

import numpy as np

from spirula.errors import SpirulaError
from spirula.render.rasterizer import MAX_ALPHA, Rasterizer, Splats


def _check(name: str, arr, shape: tuple) -> np.ndarray:
    """float32 array of ``shape`` (None entries: any size, checked across inputs)."""
    a = np.asarray(arr, dtype=np.float32)
    if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        raise ValueError(
            "%s: expected shape %s, got %s" % (name, tuple("*" if s is None else s for s in shape), a.shape)
        )
    bad = ~np.isfinite(a)
    if bad.any():
        row = np.argwhere(bad)[0]
        raise SpirulaError(
            "%s holds a non-finite value (%s at index %s)" % (name, float(a[tuple(row)]), tuple(int(i) for i in row))
        )
    return np.ascontiguousarray(a)


def check_splats(means, quats, scales, opacities, sh_coeffs) -> tuple:
    """The five splat arrays as contiguous float32, their shapes checked against
    one another (means [N,3], quats [N,4], scales [N,3], opacities [N],
    sh_coeffs [N,K,3]) and every value finite; one clear error otherwise."""
    means = _check("means", means, (None, 3))
    n = len(means)
    return (
        means,
        _check("quats", quats, (n, 4)),
        _check("scales", scales, (n, 3)),
        _check("opacities", opacities, (n,)),
        _check("sh_coeffs", sh_coeffs, (n, None, 3)),
    )


class _Context:
    """The GPU state of one rasterization() call, kept for its backward and
    returned to the pool when the metadata holding it is dropped."""

    def __init__(self, device, raster, splats, sh_degree):
        self.device, self.raster, self.splats, self.sh_degree = device, raster, splats, sh_degree
        weakref.finalize(self, _release, raster, splats, device)


def _release(raster, splats, device):
    raster.free()
    splats.free(device)


def rasterization(
    means,
    quats,
    scales,
    opacities,
    sh_coeffs,
    viewmats,
    Ks,
    width: int,
    height: int,
    sh_degree: int | None = None,
    backgrounds=None,
    *,
    max_alpha: float = MAX_ALPHA,
    distortion: bool = False,
    normals: bool = False,
    camera_models=None,
    dists=None,
    device=None,
):
    """Render N Gaussians into C images on the GPU.

    Args:
        means: [N,3] world positions.
        quats: [N,4] rotations, wxyz (normalized inside).
        scales: [N,3] activated (positive) scales.
        opacities: [N] activated opacities in [0,1].
        sh_coeffs: [N,K,3] SH coefficients, K >= (sh_degree+1)^2.
        viewmats: [C,4,4] world->camera (OpenCV: x right, y down, z forward).
        Ks: [C,3,3] pixel intrinsics.
        width, height: image size in pixels.
        sh_degree: SH degree used (default: the largest K allows, up to 3).
        backgrounds: [C,3] colours behind the Gaussians (default black).
        camera_models: [C] lens per camera, "PINHOLE" (default), "OPENCV",
            "OPENCV_FISHEYE" or "EQUIRECTANGULAR" (docs/design.md §2.3), with
            dists [C,12] its k1..k6, p1, p2, s1..s4 (default 0).
        max_alpha: cap on one Gaussian's alpha at a pixel (default 0.99,
            docs/design.md §2.4; gsplat 1.5.3 uses 0.999).
        distortion: also render the depth distortion (``meta["distortions"]``
            [C,H,W,1] float32, sum_ij w_i w_j |z_i - z_j| per pixel: docs/design.md §3).
        normals: also render the normal image (``meta["normals"]`` [C,H,W,3] float32:
            sum_i n_i w_i, each splat's camera-space normal n_i, the rotation's axis of its
            smallest scale turned to the camera, alpha-blended as the colour without
            background, so not normalized: its length is at most the alpha).
        device: a :class:`~spirula.runtime.device.Device` of either backend
            (default: the process's, :func:`spirula.backends.get_device`).

    Returns:
        (colors [C,H,W,3], alphas [C,H,W,1], depths [C,H,W,1], meta), float32.
        ``depths`` is the expected depth (accumulated depth / alpha, 0 where
        alpha is 0). ``meta`` holds per (camera, Gaussian) ``radii`` [C,N,2]
        int32 (0: culled), ``means2d`` [C,N,2], ``depths`` [C,N],
        ``conics`` [C,N,3], ``colors`` [C,N,3], ``tiles_touched`` [C,N], and
        ``n_isects``; culled entries are 0. ``meta["median_depths"]``
        [C,H,W,1] float32 is the median depth per pixel: the camera-space z of
        the Gaussian whose blend takes the transmittance from above 0.5 to at
        most 0.5 (0 where it never drops to 0.5). Pass ``meta`` to
        :func:`rasterization_backward`.
    """
    from spirula.backends import get_device

    device = device or get_device()
    means, quats, scales, opacities, sh_coeffs = check_splats(means, quats, scales, opacities, sh_coeffs)
    N = len(means)
    viewmats = _check("viewmats", viewmats, (None, 4, 4))
    C = len(viewmats)
    Ks = _check("Ks", Ks, (C, 3, 3))
    K = sh_coeffs.shape[1]
    if sh_degree is None:
        sh_degree = min(int(np.sqrt(K)) - 1, 3)
    if not 0 <= sh_degree <= 3 or (sh_degree + 1) ** 2 > K:
        raise ValueError("sh_degree %d needs 0..3 and (sh_degree+1)^2 <= K = %d" % (sh_degree, K))
    if C == 0 or width <= 0 or height <= 0:
        raise ValueError("need at least one camera and a positive image size")
    if backgrounds is not None:
        backgrounds = _check("backgrounds", backgrounds, (C, 3))

    raster = Rasterizer(
        device,
        width,
        height,
        C,
        capacity=max(N, 1),
        name="api.raster",
        max_alpha=max_alpha,
        geometry=distortion,
        normals=normals,
    )
    splats = Splats.from_numpy(device, means, quats, scales, opacities, sh_coeffs, activated=True, prefix="api.splat")
    raster.set_cameras(viewmats, Ks, camera_models, dists)
    raster.set_backgrounds(backgrounds)
    m = raster.forward(splats, sh_degree, distortion, normals)

    colors = device.readback(raster.out_colors)
    alphas = device.readback(raster.out_alphas)[..., None]
    acc = device.readback(raster.out_depths)[..., None]
    depths = np.where(alphas > 0, acc / np.where(alphas > 0, alphas, 1), 0).astype(np.float32)
    median_depths = device.readback(raster.out_median)[..., None]

    rows = C * N
    radii = device.readback(raster.radii, shape=(rows, 2)).reshape(C, N, 2)
    visible = (radii != 0).any(-1)
    xyop = device.readback(raster.xyop, shape=(rows, 4)).reshape(C, N, 4)
    conics = device.readback(raster.conics, shape=(rows, 4)).reshape(C, N, 4)
    rgb = device.readback(raster.rgb, shape=(rows, 4)).reshape(C, N, 4)
    tiles = device.readback(raster.tile_counts, shape=(rows,)).reshape(C, N)
    mask = visible[..., None]
    meta = {
        "radii": radii,
        "means2d": np.where(mask, xyop[..., :2], 0).astype(np.float32),
        "depths": np.where(visible, xyop[..., 3], 0).astype(np.float32),
        "conics": np.where(mask, conics[..., :3], 0).astype(np.float32),
        "colors": np.where(mask, rgb[..., :3], 0).astype(np.float32),
        "opacities": np.where(visible, xyop[..., 2], 0).astype(np.float32),
        "tiles_touched": tiles.astype(np.int32),
        "median_depths": median_depths,
        "distortions": device.readback(raster.out_distort)[..., None] if distortion else None,
        "normals": device.readback(raster.out_normals) if normals else None,
        "n_isects": m,
        "width": width,
        "height": height,
        "sh_degree": sh_degree,
        "_context": _Context(device, raster, splats, sh_degree),
    }
    return colors, alphas, depths, meta


def rasterization_backward(
    meta: dict,
    grad_colors,
    grad_alphas=None,
    *,
    absgrad: bool = False,
    grad_distortions=None,
    grad_normals=None,
    grad_accum_depths=None,
) -> dict:
    """Gradients of a loss through :func:`rasterization`.

    Args:
        meta: the metadata :func:`rasterization` returned.
        grad_colors: [C,H,W,3] dL/d colors.
        grad_alphas: [C,H,W,1] dL/d alphas (default 0).
        absgrad: also return ``means2d_absgrad`` [C,N,2], the per-pixel sum of
            |dL/d means2d| that density control uses.
        grad_distortions: [C,H,W,1] dL/d ``meta["distortions"]`` (needs
            ``distortion=True``; default: no distortion term).
        grad_normals: [C,H,W,3] dL/d ``meta["normals"]`` (needs ``normals=True``).
        grad_accum_depths: [C,H,W,1] dL/d the accumulated depth sum_i w_i z_i (``depths`` x
            ``alphas``; needs ``normals=True``). Either of the two (the other 0) returns
            ``normals`` [C,N,3], dL/d each splat's camera-space normal, and ``depths``.

    Returns:
        dict of float32 gradients: ``means`` [N,3], ``quats`` [N,4] (of the
        given, unnormalized quaternions), ``scales`` [N,3], ``opacities`` [N],
        ``sh_coeffs`` [N,K,3], ``means2d`` [C,N,2] (and ``means2d_absgrad``;
        with ``grad_distortions``, ``depths`` [C,N]: dL/d camera z through the
        distortion and the accumulated depth, which is not propagated further).
        The gradient of the depth output is not propagated.
    """
    ctx = meta["_context"]
    device, raster, splats = ctx.device, ctx.raster, ctx.splats
    C, H, W = raster.n_cameras, raster.height, raster.width
    grad_colors = _check("grad_colors", grad_colors, (C, H, W, 3))
    ga = (
        np.zeros((C, H, W), np.float32)
        if grad_alphas is None
        else _check("grad_alphas", grad_alphas, (C, H, W, 1))[..., 0]
    )
    device.upload(raster.grad_colors, grad_colors)
    device.upload(raster.grad_alphas, np.ascontiguousarray(ga))
    distortion = grad_distortions is not None
    if distortion:
        if meta.get("distortions") is None:
            raise ValueError("grad_distortions needs a rasterization(..., distortion=True)")
        gx = _check("grad_distortions", grad_distortions, (C, H, W, 1))[..., 0]
        device.upload(raster.grad_distort, np.ascontiguousarray(gx))
    normals = grad_normals is not None or grad_accum_depths is not None
    if normals:
        if meta.get("normals") is None:
            raise ValueError("grad_normals and grad_accum_depths need a rasterization(..., normals=True)")
        gn = np.zeros((C, H, W, 3), np.float32) if grad_normals is None else grad_normals
        gd = np.zeros((C, H, W, 1), np.float32) if grad_accum_depths is None else grad_accum_depths
        device.upload(raster.grad_normal_image, _check("grad_normals", gn, (C, H, W, 3)))
        gd = _check("grad_accum_depths", gd, (C, H, W, 1))[..., 0]
        device.upload(raster.grad_depth_image, np.ascontiguousarray(gd))
    grads = Splats.alloc(device, splats.n, splats.sh_coeffs, prefix="api.grad")
    raster.backward(splats, ctx.sh_degree, grads, absgrad=absgrad, distortion=distortion, normals=normals)
    out = grads.to_numpy(device)
    out["sh_coeffs"] = out.pop("sh")
    rows = C * splats.n
    out["means2d"] = device.readback(raster.grad_xy, shape=(rows, 2)).reshape(C, splats.n, 2)
    if absgrad:
        out["means2d_absgrad"] = device.readback(raster.grad_xy_abs, shape=(rows, 2)).reshape(C, splats.n, 2)
    if distortion or normals:
        out["depths"] = device.readback(raster.grad_depth, shape=(rows,)).reshape(C, splats.n)
    if normals:
        out["normals"] = device.readback(raster.grad_normals, shape=(rows, 3)).reshape(C, splats.n, 3)
    grads.free(device)
    return out
