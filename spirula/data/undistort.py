"""Lens distortion: the OpenCV radial-tangential model and image undistortion.

The model (COLMAP's SIMPLE_RADIAL, RADIAL and OPENCV, nerfstudio's OPENCV with
k1..k4, p1, p2), on normalized coordinates ``x = (u - cx)/fx, y = (v - cy)/fy``
of the undistorted (pinhole) image::

    r2 = x^2 + y^2
    d  = 1 + k1 r2 + k2 r2^2 + k3 r2^3 + k4 r2^4
    xd = d x + 2 p1 x y + p2 (r2 + 2 x^2)
    yd = d y + 2 p2 x y + p1 (r2 + 2 y^2)

``dist`` is always ``[6] float64`` ``(k1, k2, k3, k4, p1, p2)``.

Undistortion keeps K: each output (pinhole) pixel centre is pushed through the
forward model to the distorted source image and sampled bilinearly there, so
no inversion is needed for images; :func:`undistort_points` (Newton) is the
inverse for points. Output pixels whose source falls outside the distorted
image repeat its nearest edge pixel (the note says how many there are).
Undistorted copies are PNGs in ``spirula_undistorted/<tag>/`` in the dataset
folder (or the home cache when it is read-only), with a ``manifest.json`` that
records each source file and camera, so later loads reuse them silently.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from spirula.data.images import cache_location, note, read_image, rel
from spirula.errors import DatasetError
from spirula.progress import track


def distort(x: np.ndarray, y: np.ndarray, dist) -> tuple:
    """Forward model on normalized coordinates (any equal shapes, float64)."""
    k1, k2, k3, k4, p1, p2 = np.asarray(dist, dtype=np.float64)
    r2 = x * x + y * y
    d = 1.0 + r2 * (k1 + r2 * (k2 + r2 * (k3 + r2 * k4)))
    xy = x * y
    return d * x + 2 * p1 * xy + p2 * (r2 + 2 * x * x), d * y + 2 * p2 * xy + p1 * (r2 + 2 * y * y)


def undistort_points(xd: np.ndarray, yd: np.ndarray, dist, iters: int = 20) -> tuple:
    """Inverse of :func:`distort` by Newton's method with the analytic Jacobian,
    starting at the distorted point; converges to ~1e-12 for the moderate
    distortion of real lenses (within the image)."""
    k1, k2, k3, k4, p1, p2 = np.asarray(dist, dtype=np.float64)
    xd = np.asarray(xd, dtype=np.float64)
    yd = np.asarray(yd, dtype=np.float64)
    x, y = xd.copy(), yd.copy()
    for _ in range(iters):
        r2 = x * x + y * y
        d = 1.0 + r2 * (k1 + r2 * (k2 + r2 * (k3 + r2 * k4)))
        dr = k1 + r2 * (2 * k2 + r2 * (3 * k3 + r2 * 4 * k4))  # dd/dr2
        fx = d * x + 2 * p1 * x * y + p2 * (r2 + 2 * x * x) - xd
        fy = d * y + 2 * p2 * x * y + p1 * (r2 + 2 * y * y) - yd
        a = d + 2 * x * x * dr + 2 * p1 * y + 6 * p2 * x  # dfx/dx
        b = 2 * x * y * dr + 2 * p1 * x + 2 * p2 * y  # dfx/dy = dfy/dx
        c = d + 2 * y * y * dr + 2 * p2 * x + 6 * p1 * y  # dfy/dy
        det = a * c - b * b
        det = np.where(np.abs(det) < 1e-12, 1e-12, det)
        x = x - (c * fx - b * fy) / det
        y = y - (a * fy - b * fx) / det
    return x, y


def undistortion_map(K, dist, width: int, height: int) -> tuple:
    """``(sx, sy)``, each ``[H,W] float64``: the continuous pixel coordinates in
    the distorted image that output pixel (i, j) (centre ``(j+.5, i+.5)``) samples."""
    K = np.asarray(K, dtype=np.float64)
    u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    fx, fy, cx, cy, s = K[0, 0], K[1, 1], K[0, 2], K[1, 2], K[0, 1]
    y = (v - cy) / fy
    x = (u - cx - s * y) / fx
    xd, yd = distort(x, y, dist)
    return fx * xd + s * yd + cx, fy * yd + cy


class BilinearSampler:
    """Precomputed bilinear gather for one map: sampling ``[H,W,C]`` at the
    continuous coordinates ``(sx, sy)`` (pixel centres at +0.5), clamped to
    the edge pixels. ``outside``: fraction of samples beyond the image."""

    def __init__(self, sx: np.ndarray, sy: np.ndarray, src_w: int, src_h: int):
        self.shape = sx.shape
        self.outside = float(np.mean((sx < 0) | (sx > src_w) | (sy < 0) | (sy > src_h)))
        px = np.clip(sx.ravel() - 0.5, 0, src_w - 1)
        py = np.clip(sy.ravel() - 0.5, 0, src_h - 1)
        x0 = np.minimum(np.floor(px).astype(np.int64), max(src_w - 2, 0))
        y0 = np.minimum(np.floor(py).astype(np.int64), max(src_h - 2, 0))
        fx = (px - x0).astype(np.float32)[:, None]
        fy = (py - y0).astype(np.float32)[:, None]
        x1 = np.minimum(x0 + 1, src_w - 1)
        y1 = np.minimum(y0 + 1, src_h - 1)
        self.idx = [(y0 * src_w + x0), (y0 * src_w + x1), (y1 * src_w + x0), (y1 * src_w + x1)]
        self.w = [(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy]
        self.src = (src_h, src_w)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        """``[h,w,C] float32`` -> ``[H,W,C] float32``."""
        if img.shape[:2] != self.src:
            raise ValueError("image is %s, sampler expects %s" % (img.shape[:2], self.src))
        flat = img.reshape(-1, img.shape[2])
        out = sum(flat[i] * w for i, w in zip(self.idx, self.w))
        return out.reshape(self.shape + (img.shape[2],))


def undistort_image(img: np.ndarray, K, dist) -> np.ndarray:
    """Undistort one ``[H,W,C] float32`` image, keeping K and size."""
    h, w = img.shape[:2]
    sx, sy = undistortion_map(K, dist, w, h)
    return BilinearSampler(sx, sy, w, h)(img)


def _source_stamp(p: Path) -> list:
    st = p.stat()
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


def undistort_views(root, views, tag: str) -> None:
    """Undistort every view with a non-zero ``dist`` into the cache folder
    ``spirula_undistorted/<tag>/`` (``tag`` names the source resolution, e.g.
    ``images`` or ``images_2``), then point it there with ``dist`` zeroed and
    model ``PINHOLE``. K and size are unchanged. Prints one note when any
    image is (re)computed; reuses matching cached copies silently."""
    root = Path(root)
    todo = [v for v in views if np.any(np.asarray(v.dist) != 0)]
    if not todo:
        return
    out_dir = cache_location(root, root / "spirula_undistorted" / tag)
    manifest_path = out_dir / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        if not isinstance(manifest, dict):
            manifest = {}
    except (OSError, ValueError):
        manifest = {}
    entries, stale = {}, []
    for v in todo:
        out_name = v.name if v.name.lower().endswith(".png") else v.name + ".png"
        entry = {
            "out": out_name,
            "source": _source_stamp(v.image_path),
            "size": [v.width, v.height],
            "K": np.asarray(v.K, dtype=np.float64).ravel().tolist(),
            "dist": np.asarray(v.dist, dtype=np.float64).tolist(),
        }
        entries[v.name] = entry
        if manifest.get(v.name) != entry or not (out_dir / out_name).is_file():
            stale.append(v)
    if stale:
        models = sorted({v.model for v in stale})
        samplers = {}
        for v in stale:
            key = (v.width, v.height, tuple(np.ravel(v.K)), tuple(np.ravel(v.dist)))
            if key not in samplers:
                sx, sy = undistortion_map(v.K, v.dist, v.width, v.height)
                samplers[key] = BilinearSampler(sx, sy, v.width, v.height)
        worst = max(s.outside for s in samplers.values())
        msg = "undistorting %d images (%s) into %s" % (len(stale), ", ".join(models), out_dir)
        if worst > 0:
            msg += " (up to %.1f%% of an image's pixels lie outside the source and repeat its edge)" % (100 * worst)
        note(msg)
        for v in track(stale, "undistorting", unit="image"):
            key = (v.width, v.height, tuple(np.ravel(v.K)), tuple(np.ravel(v.dist)))
            img = read_image(v.image_path)
            if img.shape[:2] != (v.height, v.width):
                raise DatasetError(
                    "%s: %dx%d, but its camera says %dx%d"
                    % (rel(v.image_path, root), img.shape[1], img.shape[0], v.width, v.height)
                )
            out = samplers[key](img)
            arr = np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)
            dst = out_dir / entries[v.name]["out"]
            dst.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".undistort-", suffix=".png", dir=dst.parent)
            os.close(fd)
            try:
                Image.fromarray(arr).save(tmp, format="PNG")
                os.replace(tmp, dst)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        manifest.update(entries)
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".json", dir=out_dir)
        with os.fdopen(fd, "w") as f:
            json.dump(manifest, f, indent=1)
        os.replace(tmp, manifest_path)
    for v in todo:
        v.image_path = out_dir / entries[v.name]["out"]
        v.dist = np.zeros(6)
        v.model = "PINHOLE"
