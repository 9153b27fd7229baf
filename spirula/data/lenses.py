"""Each pixel's ray through a camera's lens, and the part of the image the lens can see.

The inverse of the kernels' lenses (docs/design.md §2.3; the forward is
``lens_project`` in spirula/reference/projection.py): :func:`pixel_rays` gives
the unit camera-space direction (OpenCV frame) of every pixel, and whether the
lens's valid domain reaches it. PINHOLE and EQUIRECTANGULAR invert in closed form,
OPENCV_FISHEYE by bisection of the monotonic theta_d(theta) on [0, limit], OPENCV
by Newton's method on the forward model (checked by projecting back); :func:`project`
is the forward, numpy only (tests/test_lens_training.py holds it to the reference's).

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


def lens_limit(model: str, dist) -> float:
    """The lens's valid limit, as the kernels take it (the camera record's slot 13;
    spirula/render/raster_buffers.py's twin): OPENCV the largest r^2 = (x/z)^2 + (y/z)^2
    (r <= 10) before d r_d / d r of the radial part stops being positive; OPENCV_FISHEYE
    the largest theta (<= pi - 0.01) before d theta_d / d theta does; 0 otherwise."""
    d = np.zeros(12) if dist is None else np.asarray(dist, np.float64)
    k1, k2, k3, k4, k5, k6 = d[:6]
    if model == "OPENCV":
        r = np.linspace(0.0, 10.0, 4001)[1:]
        r2 = r * r
        with np.errstate(all="ignore"):
            rd = r * (1 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1 + r2 * (k4 + r2 * (k5 + r2 * k6)))
        x = r2
    elif model == "OPENCV_FISHEYE":
        x = np.linspace(0.0, np.pi - 0.01, 4001)[1:]
        rd = _fisheye_td(x, d)
    else:
        return 0.0
    bad = np.nonzero((np.diff(np.concatenate([[0.0], rd])) <= 0) | ~np.isfinite(rd))[0]
    return float(x[-1] if len(bad) == 0 else (x[bad[0] - 1] if bad[0] > 0 else 0.0))


_limit = lens_limit


def _opencv(x, y, d):
    """OpenCV's distortion of normalized coordinates (radial with the rational k4..k6,
    tangential p1, p2, thin prism s1..s4)."""
    k1, k2, k3, k4, k5, k6, p1, p2, s1, s2, s3, s4 = d
    r2 = x * x + y * y
    rad = (1 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1 + r2 * (k4 + r2 * (k5 + r2 * k6)))
    nx = x * rad + 2 * p1 * x * y + p2 * (r2 + 2 * x * x) + s1 * r2 + s2 * r2 * r2
    ny = y * rad + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y + s3 * r2 + s4 * r2 * r2
    return nx, ny


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
    elif model == "OPENCV":  # Newton's method, the Jacobian by central differences
        x, y, h = nx.copy(), ny.copy(), 1e-7
        with np.errstate(all="ignore"):
            for _ in range(30):
                fx, fy = _opencv(x, y, d)
                ax, ay = _opencv(x + h, y, d)
                bx, by = _opencv(x - h, y, d)
                cx_, cy_ = _opencv(x, y + h, d)
                ex, ey = _opencv(x, y - h, d)
                a, b = (ax - bx) / (2 * h), (cx_ - ex) / (2 * h)
                c, e = (ay - by) / (2 * h), (cy_ - ey) / (2 * h)
                det = a * e - b * c
                det = np.where(np.abs(det) > 1e-12, det, 1.0)
                rx, ry = fx - nx, fy - ny
                x = np.clip(np.nan_to_num(x - (e * rx - b * ry) / det), -10, 10)
                y = np.clip(np.nan_to_num(y - (a * ry - c * rx) / det), -10, 10)
            fx, fy = _opencv(x, y, d)
        valid = (np.hypot(fx - nx, fy - ny) < 1e-6) & (x * x + y * y <= _limit(model, d))
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
    and whether the lens's valid domain holds them (as the reference's ``lens_project``)."""
    K = np.asarray(K, np.float64)
    d = np.zeros(12) if dist is None else np.asarray(dist, np.float64)
    X, Y, Z = np.moveaxis(np.asarray(p, np.float64), -1, 0)
    with np.errstate(all="ignore"):
        if model in ("PINHOLE", "OPENCV"):
            Zs = np.where(Z > 0, Z, 1.0)
            x, y = X / Zs, Y / Zs
            ok = Z > 0
            if model == "OPENCV":
                ok &= x * x + y * y <= _limit(model, d)
                x, y = _opencv(np.where(ok, x, 0.0), np.where(ok, y, 0.0), d)
        elif model == "OPENCV_FISHEYE":
            rho = np.hypot(X, Y)
            t = np.arctan2(rho, Z)
            ok = t <= _limit(model, d)
            g = np.where(rho > 0, _fisheye_td(t, d) / np.where(rho > 0, rho, 1.0), 0.0)
            x, y = g * X, g * Y
        elif model == "EQUIRECTANGULAR":
            q2 = X * X + Z * Z
            ok = q2 > 1e-8 * (q2 + Y * Y)
            x, y = np.arctan2(X, Z), np.arctan2(Y, np.sqrt(q2))
        else:
            raise ValueError("lens model %r (expected one of %s)" % (model, ", ".join(MODELS)))
        uv = np.stack([K[0, 0] * x + K[0, 2], K[1, 1] * y + K[1, 2]], -1)
    ok = ok & np.all(np.isfinite(uv), -1)
    return np.where(ok[..., None], uv, 0.0), ok


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
