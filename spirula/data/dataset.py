"""``load_dataset``: detect the format, read cameras and points, resolve images.

Detection, in order: ``transforms.json`` with a ``frames`` list -> nerfstudio;
``transforms_train.json`` -> Blender; ``sparse/0/`` or ``sparse/`` with a
cameras file -> COLMAP. A path to a ``.json`` file is read as nerfstudio.

Then, for every format: ``images_N`` downscale (:mod:`spirula.data.images`),
undistortion of distorted cameras (:mod:`spirula.data.undistort`), the eval
split, seed points (random when the dataset has none) and the scene extent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from spirula.data.blender import RANDOM_BOX, RANDOM_POINTS, load_blender, read_json
from spirula.data.colmap import find_model_dir, load_colmap
from spirula.data.images import check_decodes, downscale_dir, note, rel, resolve_images
from spirula.data.masks import find_masks
from spirula.data.nerfstudio import load_nerfstudio
from spirula.data.ply import read_points_ply
from spirula.data.scene import Frame, Scene, random_points, scene_extent
from spirula.data.undistort import undistort_views
from spirula.errors import DatasetError

BACKGROUNDS = {"white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0)}


def parse_eval_split(eval_split) -> int:
    """``"interval:N"`` -> N (>= 2); ``"none"`` (or None) -> 0."""
    if eval_split is None or str(eval_split).strip().lower() == "none":
        return 0
    s = str(eval_split).strip().lower()
    if s.startswith("interval:"):
        try:
            n = int(s[len("interval:") :])
        except ValueError:
            n = 0
        if n >= 2:
            return n
    raise DatasetError("eval split %r: expected 'interval:N' with N >= 2, or 'none'" % (eval_split,))


def parse_background(background) -> np.ndarray:
    """``'white'``, ``'black'`` or three numbers in [0,1] -> ``[3] float32``."""
    if isinstance(background, str):
        if background.lower() in BACKGROUNDS:
            return np.array(BACKGROUNDS[background.lower()], dtype=np.float32)
    else:
        try:
            bg = np.array(background, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError):
            bg = np.zeros(0)
        if bg.shape == (3,) and np.all(bg >= 0) and np.all(bg <= 1):
            return bg
    raise DatasetError("background %r: expected 'white', 'black' or three numbers in [0, 1]" % (background,))


def parse_downscale(downscale) -> int:
    """None -> 1; a whole number >= 1 -> itself."""
    if downscale is None:
        return 1
    try:
        n = int(downscale)
        ok = n >= 1 and float(downscale) == n
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise DatasetError("downscale %r: expected a whole number >= 1" % (downscale,))
    return n


def detect_format(path) -> tuple:
    """``(format, dataset folder, file or folder that defines it)``."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DatasetError("%s: does not exist" % p)
    if p.is_file():
        if p.suffix.lower() == ".json":
            return "nerfstudio", p.parent, p
        raise DatasetError("%s: not a dataset (expected a folder, or a transforms.json)" % p)
    if (p / "transforms.json").is_file():
        meta = read_json(p / "transforms.json", p)
        if isinstance(meta, dict) and "frames" in meta:
            return "nerfstudio", p, p / "transforms.json"
        if not (p / "transforms_train.json").is_file():
            raise DatasetError("transforms.json: no 'frames' list (in %s)" % p)
    if (p / "transforms_train.json").is_file():
        return "blender", p, p / "transforms_train.json"
    model_dir = find_model_dir(p)
    if model_dir is not None:
        return "colmap", p, model_dir
    raise DatasetError(
        "%s: not a dataset (no transforms.json, transforms_train.json, sparse/0/ or sparse/ "
        "with cameras.bin or cameras.txt)" % p
    )


def _find_loss_masks(fmt, image_dir, views, root) -> dict:
    """``{image name: mask path}`` (white = keep): a view's own ``mask_path``
    (nerfstudio's per-frame key), else ``masks/`` beside a COLMAP or
    nerfstudio dataset's image folder, or in a Blender scene's folder
    (``masks/train/r_0.png``), by spirula.data.masks' names (``<stem>.png``,
    ``<name>``, ``<name>.png``). Each is checked against its image's original
    size; masks of distorted cameras are refused (``spirula sfm`` writes
    undistorted ones)."""
    mask_dir = Path(root) / "masks" if fmt == "blender" else None
    found = find_masks(Path(image_dir), [v.name for v in views], mask_dir)
    found.update({v.name: v.mask_path for v in views if v.mask_path is not None})
    for v in views:
        path = found.get(v.name)
        if path is None:
            continue
        try:
            with Image.open(path) as im:
                size = im.size
        except (OSError, ValueError, SyntaxError) as exc:
            raise DatasetError("%s: cannot read mask (%s)" % (rel(path, root), " ".join(str(exc).split()))) from None
        if size != (v.width, v.height):
            raise DatasetError(
                "%s: mask is %dx%d, its image %s is %dx%d" % (rel(path, root), *size, v.name, v.width, v.height)
            )
        if np.any(np.asarray(v.dist) != 0):
            raise DatasetError(
                "%s: a mask for %s, whose %s camera is distorted; masks need undistorted images "
                "(spirula sfm writes both)" % (rel(path, root), v.name, v.model)
            )
    return found


def _lenses(views, undistort: bool, referenced_by: str) -> None:
    """Each view's lens for training: its own (View.lens, lens_dist) unless ``undistort``
    or the kernels lack it (nerfstudio's polynomial k4), then PINHOLE on undistorted images
    (View.dist); a distorted OPENCV view with no distortion is PINHOLE. Undistortion of a
    fisheye or equirectangular view is an error. The native views' dist is zeroed, so that
    undistort_views leaves their images as they are."""
    for v in views:
        d = np.zeros(12) if v.lens_dist is None else np.asarray(v.lens_dist, np.float64)
        perspective = v.lens in ("PINHOLE", "OPENCV", "UNDISTORT")
        if undistort or v.lens == "UNDISTORT":
            if not perspective or np.any(d[3:6]) or np.any(d[8:]):
                raise DatasetError(
                    "%s: image %s: its %s camera cannot be undistorted to a pinhole (train through it: "
                    "leave undistortion off)" % (referenced_by, v.name, v.model)
                )
            v.lens, v.lens_dist = "PINHOLE", None
            continue
        if v.lens == "OPENCV" and not np.any(d):
            v.lens = "PINHOLE"
        v.lens_dist = None if v.lens == "PINHOLE" else d
        v.dist = np.zeros(6)


def load_dataset(
    path, downscale=None, eval_split="interval:8", background="auto", seed=0, undistort: bool = False
) -> Scene:
    """Load a COLMAP, Blender or nerfstudio dataset into a :class:`Scene`.

    ``downscale``: N > 1 trains on ``images_N`` (computed and cached when the
    dataset lacks it), K scaled to match. ``eval_split``: ``"interval:N"``
    puts frames 0, N, 2N, ... (sorted by name) in ``test``; ``"none"`` trains
    on everything. Blender keeps its own train/test files unless
    ``"none"`` (then its test frames join train). ``background``: ``'white'``,
    ``'black'``, RGB in [0,1], or ``'auto'``: white for Blender scenes (as
    NeRF-synthetic is evaluated), black otherwise (as 3DGS trains real scenes);
    RGBA images are composited onto it.
    ``undistort``: False (the default) trains a distorted camera (OPENCV, FULL_OPENCV,
    OPENCV_FISHEYE, EQUIRECTANGULAR) through its own lens on the original images
    (``Frame.model``, ``Frame.dist``); True undistorts perspective ones to pinhole
    copies at load, as before lenses (a fisheye or equirectangular camera is then an
    error). ``seed``: for random points. Every problem with the input raises
    :class:`~spirula.errors.DatasetError` with a one-line message naming the file.
    """
    interval = parse_eval_split(eval_split)
    n = parse_downscale(downscale)
    fmt, root, origin = detect_format(path)
    if isinstance(background, str) and background.lower() == "auto":
        background = "white" if fmt == "blender" else "black"
    bg = parse_background(background)
    points = colors = None
    n_train_blender = None
    if fmt == "nerfstudio":
        views, image_dir, points, colors = load_nerfstudio(root, origin)
        referenced_by = rel(origin, root)
    elif fmt == "blender":
        views, n_train_blender, ply = load_blender(root)
        image_dir, referenced_by = root, "transforms_train.json or transforms_test.json"
        if ply is not None:
            points, colors = read_points_ply(ply)
    else:
        views, image_dir, points, colors, referenced_by = load_colmap(root, origin)
    for v in views:  # the loaders check their fields; this catches what a combination of them makes
        if not (np.all(np.isfinite(v.viewmat)) and np.all(np.isfinite(v.K))):
            raise DatasetError("%s: image %s has a non-finite pose or camera" % (referenced_by, v.name))
    names = [v.name for v in views]
    if len(set(names)) != len(names):
        dup = next(nm for nm in names if names.count(nm) > 1)
        raise DatasetError("%s: image %s is listed more than once" % (referenced_by, dup))

    _lenses(views, undistort, referenced_by)
    mask_paths = _find_loss_masks(fmt, image_dir, views, root)
    resolve_images(root, image_dir, views, n, referenced_by)
    src_dir = image_dir if n == 1 else downscale_dir(root, image_dir, n)
    undistort_views(root, views, "images" if src_dir == root else src_dir.name)
    check_decodes([v.image_path for v in views], root)

    frames = [
        Frame(
            name=v.name,
            image_path=v.image_path,
            width=v.width,
            height=v.height,
            K=np.asarray(v.K, dtype=np.float64),
            viewmat=np.asarray(v.viewmat, dtype=np.float64),
            mask_path=mask_paths.get(v.name),
            model=v.lens,
            dist=None if v.lens_dist is None else np.asarray(v.lens_dist, np.float64),
        )
        for v in views
    ]
    all_idx = list(range(len(frames)))
    if fmt == "blender":
        train, test = (all_idx, []) if interval == 0 else (all_idx[:n_train_blender], all_idx[n_train_blender:])
    elif interval == 0:
        train, test = all_idx, []
    else:
        test = all_idx[::interval]
        train = [i for i in all_idx if i % interval]
        if not train:
            raise DatasetError(
                "%s: %d image(s); eval split interval:%d leaves none to train on (use 'none')"
                % (referenced_by, len(frames), interval)
            )

    extent = scene_extent([frames[i].camera_center for i in train])
    points_random = points is None or len(points) == 0
    if points_random:
        if fmt == "blender":
            points, colors = random_points(RANDOM_POINTS, -RANDOM_BOX, RANDOM_BOX, seed)
        else:
            centre = np.mean([frames[i].camera_center for i in train], axis=0)
            points, colors = random_points(RANDOM_POINTS, centre - extent, centre + extent, seed)
            note(
                "%s has no seed points: starting from %d random points within %.3g of the cameras' centre"
                % (root, RANDOM_POINTS, extent)
            )
    return Scene(
        frames=frames,
        train=train,
        test=test,
        points=np.ascontiguousarray(points, dtype=np.float32),
        point_colors=np.ascontiguousarray(colors, dtype=np.uint8),
        points_random=points_random,
        background=bg,
        source=fmt,
        path=root,
        extent=float(extent),
    )
