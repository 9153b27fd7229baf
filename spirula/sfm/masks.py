"""Masks: which pixels of an image feature extraction (and later the loss) may use.

A ``masks/`` folder beside the images holds one mask per image, white = keep,
black = ignore, named like the image (``masks/frame_00001.png`` or the same
name with another extension) or in COLMAP's own convention (the image's full
name plus ``.png``: ``masks/IMG_1.jpg.png``).
:func:`spirula.data.masks.find_masks` pairs them (for the dataset loaders
as for ``spirula sfm``); :func:`write_colmap_masks` writes them where
pycolmap's ``mask_path`` expects them; :func:`undistort_masks` carries them
into the output dataset next to the undistorted images, warped with each
image's own camera (docs/sfm.md, "Masks").

Automatic masking (for example SAM, as Spirula Studio uses) needs model weights
that are not shipped: :class:`Masker` is the interface such a masker implements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from spirula.errors import DatasetError


class Masker(Protocol):
    """The extension point for automatic masks (none is shipped: each needs model weights).

    ``masker(image, name) -> mask``: ``image`` is ``[H,W,3] uint8`` RGB as read
    from the file, ``name`` its file name (for logging or caching); the result
    is ``[H,W]`` bool or uint8, True / 255 where the pixel belongs to what is
    reconstructed (keep), False / 0 where it must be ignored (a moving person,
    the sky, the capture rig). Write its output with :func:`save_mask` into
    ``<images>/../masks/`` and :func:`~spirula.data.masks.find_masks` picks it up.
    """

    def __call__(self, image: np.ndarray, name: str) -> np.ndarray: ...


def read_mask(path: Path, size: tuple) -> np.ndarray:
    """``[H,W] uint8``, 255 keep / 0 ignore (grey thresholded at 128), checked against the image's (W, H)."""
    try:
        with Image.open(path) as im:
            m = np.asarray(im.convert("L"))
    except (OSError, ValueError, SyntaxError) as exc:
        raise DatasetError("%s: cannot read mask (%s)" % (path, " ".join(str(exc).split()))) from None
    if (m.shape[1], m.shape[0]) != tuple(size):
        raise DatasetError("%s: mask is %dx%d, its image is %dx%d" % (path, m.shape[1], m.shape[0], size[0], size[1]))
    return np.where(m >= 128, 255, 0).astype(np.uint8)


def save_mask(mask: np.ndarray, path: Path) -> None:
    """Write ``[H,W]`` bool/uint8 as a black-and-white PNG."""
    m = np.asarray(mask)
    m = np.where(m.astype(bool) if m.dtype == bool else m >= 128, 255, 0).astype(np.uint8)
    Image.fromarray(m, mode="L").save(path)


def write_colmap_masks(masks: dict, image_dir: Path, out_dir: Path) -> None:
    """Write each mask as ``out_dir/<image name>.png`` (pycolmap's ``mask_path``
    convention; 0 = no features there), checked against its image's size."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, path in masks.items():
        with Image.open(Path(image_dir) / name) as im:
            size = im.size
        target = out_dir / (name + ".png")
        target.parent.mkdir(parents=True, exist_ok=True)
        save_mask(read_mask(path, size), target)


def undistort_masks(masks: dict, image_dir: Path, reconstruction, out_dir: Path) -> int:
    """Warp the masks of the registered images with their cameras' undistortion
    (the same as the images') into ``out_dir/<image name without extension>.png``;
    returns how many were written. Warped grey levels are thresholded back to
    0/255 at 128, so the loss sees a hard mask."""
    import pycolmap

    options = pycolmap.UndistortCameraOptions()
    written = 0
    for image in reconstruction.images.values():
        path = masks.get(image.name)
        if path is None:
            continue
        with Image.open(Path(image_dir) / image.name) as im:
            size = im.size
        m = read_mask(path, size)
        bitmap, _ = pycolmap.undistort_image(options, pycolmap.Bitmap.from_array(m), image.camera)
        target = out_dir / Path(image.name).with_suffix(".png")
        target.parent.mkdir(parents=True, exist_ok=True)
        save_mask(np.asarray(bitmap.to_array()).reshape(bitmap.height, bitmap.width) >= 128, target)
        written += 1
    return written
