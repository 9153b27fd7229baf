"""Each pixel's ray through a camera's lens, and the part of the image the lens can see.

The inverse of the kernels' lenses (docs/design.md §2.3; the forward is
``lens_project`` in spirula/reference/projection.py): :func:`pixel_rays` gives
the unit camera-space direction (OpenCV frame) of every pixel, and whether the
lens's valid domain reaches it. PINHOLE and EQUIRECTANGULAR invert in closed form,
OPENCV_FISHEYE by bisection of the monotonic theta_d(theta) on [0, limit], OPENCV
by Newton's method on the forward model (checked by projecting back).

:func:`valid_mask` is the loss mask of the image area outside the lens's valid
domain (a fisheye's black border past the angle where its polynomial stops
increasing, an equirectangular image's rows past the poles): those pixels have no
ray, so no splat can be drawn there and the loss must ignore them
(:meth:`spirula.data.scene.Scene.load_mask` combines it with a dataset's masks).
The demo ray tracer (spirula/data/demo.py) renders through :func:`pixel_rays`.
"""

from __future__ import annotations

import numpy as np

MODELS = ("PINHOLE", "OPENCV", "OPENCV_FISHEYE", "EQUIRECTANGULAR")


def _limit(model: str, d) -> float:
    from spirula.render.raster_buffers import CAMERA_MODELS, lens_limit

    return lens_limit(CAMERA_MODELS[model], d)


def _fisheye_td(t, d):
    t2 = t * t
    return t * (1 + t2 * (d[0] + t2 * (d[1] + t2 * (d[2] + t2 * d[3]))))


def pixel_rays(model: str, K, dist, width: int, height: int, offset=(0.5, 0.5)) -> tuple:
    """``(dirs [H,W,3] float64 unit, valid [H,W] bool)``: the camera-space ray of each pixel
    at ``(j + offset[0], i + offset[1])`` (default its centre) through the lens ``model``
    with ``K`` and ``dist`` ([12] k1..k6, p1, p2, s1..s4, None = zeros); ``valid`` False
    where the lens's valid domain does not reach the pixel (its ``dirs`` are then +z)."""
    K = np.asarray(K, np.float64)
    d = np.zeros(12) if dist is None else np.asarray(dist, np.float64)
    u, v = np.meshgrid(np.arange(width) + offset[0], np.arange(height) + offset[1])
    nx, ny = (u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1]
    valid = np.ones(nx.shape, bool)
    if model == "PINHOLE":
        dirs = np.stack([nx, ny, np.ones_like(nx)], -1)
    elif model == "EQUIRECTANGULAR":
        valid = (np.abs(nx) <= np.pi) & (np.abs(ny) <= np.pi / 2)
        lon, lat = np.clip(nx, -np.pi, np.pi), np.clip(ny, -np.pi / 2, np.pi / 2)
        dirs = np.stack([np.cos(lat) * np.sin(lon), np.sin(lat), np.cos(lat) * np.cos(lon)], -1)
    elif model == "OPENCV_FISHEYE":
        limit = _limit(model, d)
        td = np.hypot(nx, ny)
        valid = td <= _fisheye_td(limit, d)
        lo, hi = np.zeros_like(td), np.full_like(td, limit)
        for _ in range(60):  # theta_d is increasing on [0, limit]
            mid = 0.5 * (lo + hi)
            below = _fisheye_td(mid, d) < td
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        t = 0.5 * (lo + hi)
        s = np.where(td > 0, np.sin(t) / np.where(td > 0, td, 1.0), 1.0)
        dirs = np.stack([s * nx, s * ny, np.cos(t)], -1)
    elif model == "OPENCV":
        from spirula.reference.projection import OPENCV, lens_project

        unit = np.eye(3)
        x, y = nx.copy(), ny.copy()
        for _ in range(30):
            uv, J, ok = lens_project(OPENCV, d, unit, np.stack([x, y, np.ones_like(x)], -1))
            rx, ry = uv[..., 0] - nx, uv[..., 1] - ny
            a, b, c, e = J[..., 0, 0], J[..., 0, 1], J[..., 1, 0], J[..., 1, 1]
            det = a * e - b * c
            det = np.where(np.abs(det) > 1e-12, det, 1.0)
            x, y = x - (e * rx - b * ry) / det, y - (a * ry - c * rx) / det
            x, y = np.clip(x, -10, 10), np.clip(y, -10, 10)
        uv, _, ok = lens_project(OPENCV, d, unit, np.stack([x, y, np.ones_like(x)], -1))
        valid = ok & (np.hypot(uv[..., 0] - nx, uv[..., 1] - ny) < 1e-6)
        dirs = np.stack([x, y, np.ones_like(x)], -1)
    else:
        raise ValueError("lens model %r (expected one of %s)" % (model, ", ".join(MODELS)))
    dirs = np.where(valid[..., None], dirs, [0.0, 0.0, 1.0])
    return dirs / np.linalg.norm(dirs, axis=-1, keepdims=True), valid


def valid_mask(model: str, K, dist, width: int, height: int):
    """``[H,W] bool`` (True = the lens sees the pixel's centre), or None when it sees every pixel
    (a pinhole always). Cached per camera (read-only arrays)."""
    if model == "PINHOLE":
        return None
    K = np.asarray(K, np.float64)
    d = np.zeros(12) if dist is None else np.asarray(dist, np.float64)
    key = (model, K.tobytes(), d.tobytes(), int(width), int(height))
    if key not in _MASKS:
        if model == "OPENCV_FISHEYE":  # no need to invert: theta_d is increasing up to the limit
            u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
            td = np.hypot((u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1])
            valid = td <= _fisheye_td(_limit(model, d), d)
        else:
            valid = pixel_rays(model, K, d, width, height)[1]
        valid = None if valid.all() else valid
        if valid is not None:
            valid.setflags(write=False)
        if len(_MASKS) > 64:
            _MASKS.clear()
        _MASKS[key] = valid
    return _MASKS[key]


_MASKS = {}


def project(model: str, K, dist, p) -> tuple:
    """``(uv [...,2], ok [...])``: camera-space points ``p [...,3]`` through the lens (pixels),
    and whether the lens's valid domain holds them (the reference's ``lens_project``)."""
    K = np.asarray(K, np.float64)
    p = np.asarray(p, np.float64)
    if model == "PINHOLE":
        z = p[..., 2]
        zs = np.where(z > 0, z, 1.0)
        uv = np.stack([K[0, 0] * p[..., 0] / zs + K[0, 2], K[1, 1] * p[..., 1] / zs + K[1, 2]], -1)
        return uv, z > 0
    from spirula.reference import projection as ref

    uv, _, ok = ref.lens_project(getattr(ref, model), np.zeros(12) if dist is None else dist, K, p)
    return uv, ok


def resample(img, src: tuple, dst: tuple) -> tuple:
    """An image ``[h,w,C]`` seen through the lens ``src = (model, K, dist)`` resampled
    (bilinear) as the lens ``dst = (model, K, dist, width, height)`` of the same camera sees
    it (e.g. a fisheye image undistorted to a pinhole): ``(image [H,W,C] float32, covered
    [H,W] bool)``; ``covered`` False where the destination's ray leaves the source's valid
    domain or image (those pixels repeat its nearest edge pixel)."""
    from spirula.data.undistort import BilinearSampler

    img = np.asarray(img, np.float32)
    h, w = img.shape[:2]
    dirs, valid = pixel_rays(dst[0], dst[1], dst[2], dst[3], dst[4])
    uv, ok = project(src[0], src[1], src[2], dirs)
    sx, sy = uv[..., 0], uv[..., 1]
    covered = valid & ok & (sx >= 0) & (sx <= w) & (sy >= 0) & (sy <= h)
    return BilinearSampler(sx, sy, w, h)(img), covered
