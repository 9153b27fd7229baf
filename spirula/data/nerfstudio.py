"""nerfstudio datasets: ``transforms.json`` (as written by ``ns-process-data``).

Intrinsics ``fl_x fl_y cx cy w h`` and distortion ``k1 k2 k3 k4 p1 p2`` are read
per frame, falling back to the top level (``fl_y`` defaults to ``fl_x``,
``cx``/``cy`` to the image centre, ``w``/``h`` to the image's size,
``camera_angle_x`` is accepted instead of ``fl_x``). ``camera_model``: a
perspective one (OPENCV, the default, PINHOLE, SIMPLE_PINHOLE, RADIAL,
SIMPLE_RADIAL), OPENCV_FISHEYE (k1..k4 of Kannala-Brandt) or EQUIRECTANGULAR
(the full sphere across the image: fx = w / 2 pi, fy = h / pi, the centre at the
image's; its intrinsics keys are not read). Distorted cameras train through
their lens, or are undistorted at load like COLMAP's OPENCV (``undistort=True``,
perspective ones only).

Poses: ``transform_matrix`` is camera->world in the OpenGL convention. When
``applied_transform`` (3x4) is present, ns-process-data moved COLMAP's world
by it (poses and the ``ply_file_path`` points alike); Spirula undoes it, so
the world frame is the original one (the COLMAP model's, for data processed
from COLMAP) and exported splats line up with it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from spirula.data.blender import image_file, is_angle, pose_matrix, read_json
from spirula.data.images import image_size, rel
from spirula.data.scene import View, check_intrinsics, opengl_c2w_to_viewmat
from spirula.errors import DatasetError

PERSPECTIVE = ("OPENCV", "PINHOLE", "SIMPLE_PINHOLE", "RADIAL", "SIMPLE_RADIAL")
SUPPORTED = PERSPECTIVE + ("OPENCV_FISHEYE", "EQUIRECTANGULAR")
DIST_KEYS = ("k1", "k2", "k3", "k4", "p1", "p2")


def _number(fr: dict, meta: dict, key: str, label: str, what: str):
    val = fr.get(key, meta.get(key))
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
        raise DatasetError("%s: %s: %s is %r, not a number" % (label, what, key, val))
    return float(val)


def _applied_transform(meta: dict, label: str):
    a = meta.get("applied_transform")
    if a is None:
        return None
    try:
        m = np.array(a, dtype=np.float64)
    except (TypeError, ValueError):
        m = None
    if (
        m is None
        or m.shape not in ((3, 4), (4, 4))
        or not np.all(np.isfinite(m))
        or abs(np.linalg.det(m[:3, :3])) < 1e-12
    ):
        raise DatasetError("%s: applied_transform must be an invertible 3x4 matrix" % label)
    if m.shape == (3, 4):
        m = np.vstack([m, [0, 0, 0, 1]])
    return m


def load_nerfstudio(root: Path, json_path: Path) -> tuple:
    """``(views, image_dir, points, colors)``: views sorted by name (relative to
    ``image_dir``, the folder holding all images), at the image resolution
    the file describes; seed points from ``ply_file_path`` (None, None when
    absent), in the same (un-transformed) world as the views."""
    from spirula.data.ply import read_points_ply

    label = rel(json_path, root)
    meta = read_json(json_path, root)
    if not isinstance(meta, dict) or not isinstance(meta.get("frames"), list):
        raise DatasetError("%s: expected an object with a 'frames' list" % label)
    if not meta["frames"]:
        raise DatasetError("%s: no frames" % label)
    inv_applied = None
    applied = _applied_transform(meta, label)
    if applied is not None:
        inv_applied = np.linalg.inv(applied)
    views, paths = [], []
    for i, fr in enumerate(meta["frames"]):
        if not isinstance(fr, dict) or not isinstance(fr.get("file_path"), str):
            raise DatasetError("%s: frame %d has no file_path" % (label, i))
        what = "frame %d (%s)" % (i, fr["file_path"])
        model = fr.get("camera_model", meta.get("camera_model", "OPENCV"))
        if model not in SUPPORTED:
            raise DatasetError(
                "%s: %s: camera_model %s is not supported (supported: %s)" % (label, what, model, ", ".join(SUPPORTED))
            )
        c2w = pose_matrix(fr.get("transform_matrix"), label, what)
        if inv_applied is not None:
            c2w = inv_applied @ c2w
            c2w[:3, :3] /= np.linalg.norm(c2w[:3, :3], axis=0, keepdims=True)  # drop any scale
        p = image_file(root, fr["file_path"])
        if not p.is_file():
            raise DatasetError("%s: missing (referenced by %s)" % (rel(p, root), label))
        w, h = _number(fr, meta, "w", label, what), _number(fr, meta, "h", label, what)
        if w is None or h is None:
            w, h = image_size(p, root)
        w, h = int(round(w)), int(round(h))
        if w <= 0 or h <= 0:
            raise DatasetError("%s: %s: image size w x h = %d x %d" % (label, what, w, h))
        fx = _number(fr, meta, "fl_x", label, what) if model != "EQUIRECTANGULAR" else w / (2 * math.pi)
        if fx is None:
            ang = _number(fr, meta, "camera_angle_x", label, what)
            if ang is None:
                raise DatasetError("%s: %s has no fl_x (neither per frame nor at the top level)" % (label, what))
            if not is_angle(ang):
                raise DatasetError(
                    "%s: %s: camera_angle_x is %r; expected an angle in (0, pi) radians" % (label, what, ang)
                )
            fx = 0.5 * w / math.tan(0.5 * ang)
        equirect = model == "EQUIRECTANGULAR"
        fy = _number(fr, meta, "fl_y", label, what) if not equirect else h / math.pi
        fy = fx if fy is None else fy
        cx = _number(fr, meta, "cx", label, what) if not equirect else None
        cy = _number(fr, meta, "cy", label, what) if not equirect else None
        cx = 0.5 * w if cx is None else cx
        cy = 0.5 * h if cy is None else cy
        check_intrinsics("%s: %s" % (label, what), w, h, fx, fy, cx, cy, names=("fl_x", "fl_y", "cx", "cy"))
        dist = np.array([_number(fr, meta, k, label, what) or 0.0 for k in DIST_KEYS])
        K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]], dtype=np.float64)
        lens_dist = np.zeros(12)  # k1..k6, p1, p2, s1..s4
        if model in ("OPENCV_FISHEYE", "EQUIRECTANGULAR"):
            lens_dist[:4] = dist[:4] if model == "OPENCV_FISHEYE" else 0.0
            lens, dist = model, np.zeros(6)  # no undistortion of these
        else:  # nerfstudio's k4 is a polynomial r^8 term the kernels lack: undistorted (dataset.py)
            lens = "OPENCV"
            lens_dist[:3], lens_dist[6:8] = dist[:3], dist[4:6]
            if dist[3] != 0:
                lens = "UNDISTORT"
        views.append(
            View(
                name="",
                width=w,
                height=h,
                K=K,
                viewmat=opengl_c2w_to_viewmat(c2w),
                dist=dist,
                model=model if np.any(dist) or model != "OPENCV" else "PINHOLE",
                lens=lens,
                lens_dist=lens_dist,
            )
        )
        if "mask_path" in fr:  # nerfstudio's per-frame loss mask (white = keep), relative to the file
            if not isinstance(fr["mask_path"], str):
                raise DatasetError("%s: %s: mask_path is %r; expected a file name" % (label, what, fr["mask_path"]))
            mask = views[-1].mask_path = image_file(root, fr["mask_path"])
            if not mask.is_file():
                raise DatasetError("%s: missing (mask_path of %s in %s)" % (rel(mask, root), what, label))
        paths.append(p)
    image_dir = Path(os.path.commonpath([str(p.parent) for p in paths]))
    for v, p in zip(views, paths):
        v.name = Path(os.path.relpath(p, image_dir)).as_posix()
    views.sort(key=lambda v: v.name)
    points = colors = None
    ply = meta.get("ply_file_path")
    if ply is not None:
        ply_path = root / str(ply)
        if not isinstance(ply, str) or not ply_path.is_file():
            raise DatasetError("%s: ply_file_path %r does not exist" % (label, ply))
        points, colors = read_points_ply(ply_path)
        if inv_applied is not None:
            with np.errstate(over="ignore", invalid="ignore"):
                points = (points.astype(np.float64) @ inv_applied[:3, :3].T + inv_applied[:3, 3]).astype(np.float32)
            if not np.all(np.isfinite(points)):
                raise DatasetError("%s: applied_transform moves the seed points beyond float32's range" % label)
    return views, image_dir, points, colors
