"""Blender / NeRF-synthetic datasets: ``transforms_{train,test}.json``.

Each file has ``camera_angle_x`` (horizontal field of view, radians) and
``frames`` with ``file_path`` (relative to the dataset folder, ``.png`` added
when it has no suffix) and ``transform_matrix``, a camera->world ``[4,4]`` in
the OpenGL camera convention (converted to an OpenCV world->camera viewmat).
K: ``fx = fy = W / (2 tan(camera_angle_x / 2))`` (``fy`` from
``camera_angle_y`` when given), principal point at the image centre.
``transforms_val.json`` is ignored. Seed points: ``points3d.ply`` when present,
else 100,000 points uniform in [-1.3, 1.3]^3 with random colours (3DGS).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from spirula.data.images import image_size, rel
from spirula.data.scene import View, opengl_c2w_to_viewmat
from spirula.errors import DatasetError

RANDOM_POINTS = 100_000
RANDOM_BOX = 1.3


def read_json(path: Path, root: Path):
    """Parse a json file; a DatasetError naming it when missing or malformed."""
    label = rel(path, root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError("%s: missing" % label) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError("%s: cannot read (%s)" % (label, getattr(exc, "strerror", None) or exc)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            "%s: malformed JSON (line %d, column %d: %s)" % (label, exc.lineno, exc.colno, exc.msg)
        ) from None


def pose_matrix(value, label: str, what: str) -> np.ndarray:
    """A ``[4,4] float64`` from a json 4x4 or 3x4 nested list; DatasetError otherwise."""
    try:
        m = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        m = None
    if m is None or m.shape not in ((4, 4), (3, 4)) or not np.all(np.isfinite(m)):
        raise DatasetError("%s: %s: transform_matrix must be a 4x4 (or 3x4) matrix of numbers" % (label, what))
    if m.shape == (3, 4):
        m = np.vstack([m, [0, 0, 0, 1]])
    return m


def is_angle(value) -> bool:
    """True for a number in (0, pi): a field of view in radians (finite, so
    its focal length is finite and positive)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.pi


def image_file(root: Path, file_path: str) -> Path:
    """The image a ``file_path`` names: as given, or with ``.png`` added."""
    p = root / os.path.normpath(file_path)
    if p.suffix == "" or (not p.is_file() and Path(str(p) + ".png").is_file()):
        return Path(str(p) + ".png")
    return p


def _frames(root: Path, split: str) -> list:
    path = root / ("transforms_%s.json" % split)
    label = rel(path, root)
    meta = read_json(path, root)
    if not isinstance(meta, dict) or not isinstance(meta.get("frames"), list):
        raise DatasetError("%s: expected an object with a 'frames' list" % label)
    fov_x, fov_y = meta.get("camera_angle_x"), meta.get("camera_angle_y")
    if fov_x is None:
        raise DatasetError("%s: camera_angle_x missing (the horizontal field of view, radians)" % label)
    if not is_angle(fov_x):
        raise DatasetError("%s: camera_angle_x is %r; expected an angle in (0, pi) radians" % (label, fov_x))
    if fov_y is not None and not is_angle(fov_y):
        raise DatasetError("%s: camera_angle_y is %r; expected an angle in (0, pi) radians" % (label, fov_y))
    views = []
    for i, fr in enumerate(meta["frames"]):
        if not isinstance(fr, dict) or not isinstance(fr.get("file_path"), str):
            raise DatasetError("%s: frame %d has no file_path" % (label, i))
        what = "frame %d (%s)" % (i, fr["file_path"])
        c2w = pose_matrix(fr.get("transform_matrix"), label, what)
        p = image_file(root, fr["file_path"])
        if not p.is_file():
            raise DatasetError("%s: missing (referenced by %s)" % (rel(p, root), label))
        w, h = image_size(p, root)
        fx = 0.5 * w / math.tan(0.5 * fov_x)
        fy = 0.5 * h / math.tan(0.5 * fov_y) if fov_y is not None else fx
        K = np.array([[fx, 0, 0.5 * w], [0, fy, 0.5 * h], [0, 0, 1]], dtype=np.float64)
        views.append(
            View(
                name=rel(p, root),
                width=w,
                height=h,
                K=K,
                viewmat=opengl_c2w_to_viewmat(c2w),
                dist=np.zeros(6),
                model="PINHOLE",
                image_path=p,
            )
        )
    if not views:
        raise DatasetError("%s: no frames" % label)
    return views


def load_blender(root: Path) -> tuple:
    """``(views, train_count, points_file)``: the train views then the test views
    (``transforms_test.json`` is optional), names relative to the dataset
    folder, and ``points3d.ply`` when it exists (else None)."""
    train = _frames(root, "train")
    test = _frames(root, "test") if (root / "transforms_test.json").is_file() else []
    seen = set()
    for v in train + test:
        if v.name in seen:
            raise DatasetError("%s: listed twice (transforms_train.json and transforms_test.json)" % v.name)
        seen.add(v.name)
    ply = root / "points3d.ply"
    return train + test, len(train), ply if ply.is_file() else None
