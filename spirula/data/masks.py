"""Masks beside a dataset's images: which pixels the loss (and feature extraction) may use.

A ``masks/`` folder beside the images holds one mask per image, white = keep,
black = ignore, named like the image (``masks/frame_00001.png`` or the same
name with another extension) or in COLMAP's own convention (the image's full
name plus ``.png``: ``masks/IMG_1.jpg.png``). :func:`find_masks` pairs them,
for the dataset loaders (spirula/data/dataset.py) and for ``spirula sfm``
(spirula/sfm/masks.py writes and undistorts them; docs/sfm.md, "Masks").
"""

from __future__ import annotations

from pathlib import Path

MASK_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


def masks_folder(image_dir: Path) -> Path:
    """Where the masks of ``image_dir`` live: ``masks/`` beside it."""
    return Path(image_dir).parent / "masks"


def find_masks(image_dir: Path, names, mask_dir: Path | None = None) -> dict:
    """``{image name: mask path}`` for the images that have one (``mask_dir``
    defaults to :func:`masks_folder`); an empty dict when there is no folder."""
    mask_dir = Path(mask_dir) if mask_dir is not None else masks_folder(image_dir)
    if not mask_dir.is_dir():
        return {}
    found = {}
    for name in names:
        stem = Path(name).with_suffix("")
        candidates = [mask_dir / (name + ".png"), mask_dir / name]
        candidates += [mask_dir / stem.with_suffix(ext) for ext in MASK_EXTENSIONS]
        for c in candidates:
            if c.is_file():
                found[name] = c
                break
    return found
