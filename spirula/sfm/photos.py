"""Photo folders as people shoot them: upright images, and the cameras that took them.

- :func:`read_photos`: each image's header, checked: its size as stored,
  its EXIF orientation, its size upright, and the camera that took it (EXIF
  Make and Model, and the lens's focal length when recorded).
- :func:`upright_images`: COLMAP reads the pixels as stored and ignores the
  EXIF orientation a phone writes for a photo held in portrait (a 4032x3024
  picture tagged "turn 90 degrees"); an image with such a tag gets a copy
  turned upright (the tag then reset, the rest of its EXIF kept), and so
  does its mask, so that SfM, training and every viewer see the photo as the
  camera showed it.
- :func:`camera_groups`: the images grouped by upright size, camera and
  focal length. Each group shares one camera (intrinsics) by default:
  one lens at one zoom makes one camera, better constrained than a camera per
  image, and images of another size or from another camera get their own.
  ``--single-camera`` shares one among all, ``--camera-per-image`` gives each
  its own (:data:`CAMERA_MODES`).
- :func:`registration_advice`: what to try when too few images register,
  from how the cameras were assigned.

See docs/sfm.md ("Cameras") and docs/capture.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageOps

from spirula.errors import DatasetError
from spirula.progress import track

# --single-camera / (default) / --camera-per-image
CAMERA_MODES = ("single", "grouped", "per-image")
_ORIENTATION, _MAKE, _MODEL, _EXIF_IFD, _FOCAL = 0x0112, 0x010F, 0x0110, 0x8769, 0x920A
# Pillow's transposes for EXIF orientations 2-8 (ImageOps.exif_transpose's table)
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


def camera_mode(single_camera: bool | None) -> str:
    """``--single-camera`` (True), ``--camera-per-image`` (False) or neither (None) -> one of :data:`CAMERA_MODES`."""
    return "grouped" if single_camera is None else "single" if single_camera else "per-image"


@dataclass(frozen=True)
class Photo:
    """One image's header."""

    name: str
    stored: tuple  # (W, H) of the pixels as stored
    orientation: int  # EXIF orientation, 1 (or absent) = upright; 2-8 = flipped and/or turned
    camera: str  # EXIF "Make Model", "" when not recorded
    focal_mm: float | None  # EXIF FocalLength

    @property
    def turned(self) -> bool:
        return self.orientation in _TRANSPOSE

    @property
    def size(self) -> tuple:
        """(W, H) upright: orientations 5-8 swap the sides."""
        return self.stored[::-1] if self.orientation in (5, 6, 7, 8) else self.stored

    @property
    def key(self) -> tuple:
        """Images with one key share a camera by default."""
        return (self.size, self.camera, self.focal_mm)

    def label(self) -> str:
        """``4032x3024 Apple iPhone 13 4.2 mm`` (what identifies its group)."""
        parts = ["%dx%d" % self.size] + [self.camera] * bool(self.camera)
        if self.focal_mm:
            parts.append("%g mm" % self.focal_mm)
        return " ".join(parts)


def read_photos(folder: Path, names) -> list:
    """A :class:`Photo` per name; a one-line error names a file that is not an image."""
    photos = []
    for name in names:
        try:
            with Image.open(folder / name) as im:
                im.verify()
            with Image.open(folder / name) as im:  # verify() leaves the image unusable
                exif = im.getexif()
                stored = im.size
        except Exception as exc:  # Pillow raises many types for a bad file
            raise DatasetError("%s: not a readable image (%s)" % (folder / name, " ".join(str(exc).split()))) from None
        photos.append(Photo(name, stored, _int(exif.get(_ORIENTATION)), _camera(exif), _focal(exif)))
    return photos


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


def _text(value) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return " ".join(str(value or "").replace("\x00", " ").split())


def _camera(exif) -> str:
    make, model = _text(exif.get(_MAKE)), _text(exif.get(_MODEL))
    if make and model.lower().startswith(make.lower()):  # "Canon" "Canon EOS R5"
        return model
    return " ".join(p for p in (make, model) if p)


def _focal(exif) -> float | None:
    try:
        value = float(exif.get_ifd(_EXIF_IFD).get(_FOCAL))
    except (TypeError, ValueError, ZeroDivisionError, KeyError):
        return None
    return round(value, 2) if value > 0 else None


def camera_groups(photos) -> list:
    """The photos grouped by :attr:`Photo.key`, each group a list of
    photos in name order, the groups in the order of their first name."""
    groups = {}
    for p in photos:
        groups.setdefault(p.key, []).append(p)
    return list(groups.values())


def describe_groups(groups, most: int = 4) -> str:
    """``320x240 CamA (5), 240x320 CamA (11)``: each group's label and size, the
    largest ``most`` groups, then how many more."""
    big = sorted(groups, key=lambda g: -len(g))
    text = ", ".join("%s (%d)" % (g[0].label(), len(g)) for g in big[:most])
    return text + (", %d more" % (len(big) - most) if len(big) > most else "")


def check_single_camera(folder: Path, groups) -> None:
    """``--single-camera`` needs every image at one size: a camera has one."""
    sizes = {g[0].size for g in groups}
    if len(sizes) > 1:
        raise DatasetError(
            "%s: --single-camera, but the images come in %d sizes (%s) and one camera has one size;"
            " leave it out (the default gives each size and camera its own)"
            % (folder, len(sizes), describe_groups(groups))
        )


def upright_images(folder: Path, photos, masks: dict, work: Path) -> tuple:
    """(image folder, masks) for SfM: ``folder`` and ``masks`` as they are when no
    image carries an EXIF turn; else ``work/images`` holding an upright copy
    of each turned image (JPEG quality 95, 4:4:4; its EXIF kept but for the
    orientation, now 1) and a link to each other one, and ``work/masks`` the
    masks of the turned images turned alike (a mask the size of the stored
    pixels is turned with them; one already the upright size is kept)."""
    turned = [p for p in photos if p.turned]
    if not turned:
        return folder, masks
    out = work / "images"
    out.mkdir(parents=True)
    for p in track(photos, "turning photos upright", unit="photo"):  # ~0.3 s a 12 MP JPEG
        if not p.turned:
            _link(Path(folder).resolve() / p.name, out / p.name)
            continue
        with Image.open(folder / p.name) as im:
            up = ImageOps.exif_transpose(im)
            _save_like(up, out / p.name, im.format, up.getexif())
    masks = dict(masks)
    turned_by_name = {p.name: p for p in turned}
    for name, path in list(masks.items()):
        p = turned_by_name.get(name)
        if p is None:
            continue
        with Image.open(path) as m:
            m = ImageOps.exif_transpose(m)  # a mask's own tag first
            if m.size == p.stored:
                m = m.transpose(_TRANSPOSE[p.orientation])
            target = work / "masks" / (name + ".png")
            target.parent.mkdir(parents=True, exist_ok=True)
            m.save(target)
        masks[name] = target
    return out, masks


def _link(src: Path, dst: Path) -> None:
    try:
        os.symlink(src, dst)
    except OSError:  # a filesystem without links
        import shutil

        shutil.copyfile(src, dst)


def _save_like(im, path: Path, fmt: str | None, exif) -> None:
    kwargs = dict(exif=exif.tobytes()) if len(exif) else {}
    if im.info.get("icc_profile"):
        kwargs["icc_profile"] = im.info["icc_profile"]
    if fmt == "JPEG":
        im.convert("RGB").save(path, "JPEG", quality=95, subsampling=0, **kwargs)
    else:
        im.save(path, fmt, **kwargs)


def registration_advice(mode: str, groups, frames: bool, matcher: str) -> str:
    """What to try when too few images register (the gate's hint), the fix that
    applies first: the camera assignment, then the capture, then the matcher.

    ``mode``: one of :data:`CAMERA_MODES`; ``groups``: :func:`camera_groups`;
    ``frames``: the images are numbered video frames; ``matcher``: the one used."""
    tries = []
    n_images = sum(len(g) for g in groups)
    if mode == "single" and len(groups) > 1:
        tries.append(
            "leaving out --single-camera (these images come from %d cameras: %s)"
            % (len(groups), describe_groups(groups, most=3))
        )
    elif mode == "grouped" and not frames and len(groups) < n_images:
        tries.append("--camera-per-image (if the zoom or focus changed between shots, images of one size differ)")
    elif mode == "per-image" and len(groups) < n_images:
        tries.append("leaving out --camera-per-image (images of one size and camera then share intrinsics)")
    tries.append(
        "more frames (spirula frames --fps)" if frames else "more photos, each overlapping its neighbours by half"
    )
    if matcher == "sequential":
        tries.append("--matcher exhaustive")
    return ", ".join(tries[:-1]) + (", or " if len(tries) > 1 else "") + tries[-1]
