"""Image files: reading, size checks, ``images_N`` downscales and cache folders.

- :func:`read_image` returns ``[H,W,C] float32`` in [0,1] with C = 3 (RGB) or
  4 (RGBA: the file has alpha), the file's values divided by 255 (65535 for
  16-bit), no gamma change, no EXIF rotation: a dataset's images are used as
  stored, as COLMAP made their cameras from them (a folder of photos is
  turned upright before SfM: spirula/sfm/photos.py).
- ``--downscale N`` (:func:`resolve_images`) uses ``<images>_N/`` when the
  dataset has it; otherwise it computes it once (PIL box filter, size
  ``round(W/N) x round(H/N)``, same file names and formats, JPEG at quality 95
  with 4:4:4 chroma) into the dataset folder when writable, else under
  ``$XDG_CACHE_HOME/spirula/datasets/`` (``~/.cache/spirula/datasets/``).
  K is scaled by the actual size ratio (``fx * w'/W``, ``cx * w'/W``; exactly
  ``fx/N`` when N divides the size), which is exact for a whole-image resize
  under the pixel-centre-at-half-integer convention.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from spirula import settings
from spirula.errors import DatasetError
from spirula.progress import track

# what Pillow raises for a file it cannot decode (a huge size read from a
# corrupt header is a DecompressionBombError, which is none of the others)
_UNREADABLE = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)
_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def note(msg: str) -> None:
    """One line on stderr, ``spirula: <msg>``."""
    print("spirula: " + msg, file=sys.stderr, flush=True)


def rel(path, root) -> str:
    """``path`` for messages: relative to the dataset folder ``root`` (posix
    separators) when inside it, else as given."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def read_image(path) -> np.ndarray:
    """``[H,W,3]`` or ``[H,W,4]`` ``float32`` in [0,1] (4 when the file has alpha)."""
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in _SIXTEEN_BIT:
                a = np.asarray(im).astype(np.float32) / 65535.0
                return np.repeat(a[:, :, None], 3, axis=2)
            alpha = im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info
            arr = np.asarray(im.convert("RGBA" if alpha else "RGB"))
    except FileNotFoundError:
        raise DatasetError("%s: missing" % path) from None
    except _UNREADABLE as exc:
        raise DatasetError("%s: cannot read image (%s)" % (path, _one_line(exc))) from None
    if arr.dtype == np.uint16:
        return arr.astype(np.float32) / 65535.0
    return arr.astype(np.float32) / 255.0


def image_size(path, root) -> tuple:
    """``(width, height)`` from the file header (no decode)."""
    try:
        with Image.open(path) as im:
            return im.size
    except FileNotFoundError:
        raise DatasetError("%s: missing" % rel(path, root)) from None
    except _UNREADABLE as exc:
        raise DatasetError("%s: cannot read image (%s)" % (rel(path, root), _one_line(exc))) from None


def check_decodes(paths, root) -> None:
    """Decode every image in ``paths`` once, so that a file whose header is
    valid but whose body is truncated or corrupt stops the load, naming it,
    rather than training (which decodes the train images after opening the
    device, and the test images only at the first evaluation). Threads, as
    Pillow decodes without the GIL. JPEGs decode at 1/8 scale (libjpeg's DCT
    scaling): every byte of the entropy-coded data is still read, so a
    truncated or broken stream fails the same, for a fraction of the work."""
    paths = list(paths)

    def work(path):
        try:
            with Image.open(path) as im:
                if im.format == "JPEG":
                    im.draft(im.mode, (max(1, im.width // 8), max(1, im.height // 8)))
                im.load()
        except FileNotFoundError:
            raise DatasetError("%s: missing" % rel(path, root)) from None
        except _UNREADABLE as exc:
            raise DatasetError("%s: cannot read image (%s)" % (rel(path, root), _one_line(exc))) from None

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as ex:
        list(track(ex.map(work, paths), "checking images", total=len(paths), unit="image"))


def _one_line(exc) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def writable(folder) -> bool:
    """True when files can be created in ``folder`` (probed, not guessed)."""
    try:
        fd, p = tempfile.mkstemp(prefix=".spirula-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(p)
    return True


def home_cache(root) -> Path:
    """The per-dataset cache folder used when the dataset folder is read-only:
    ``$XDG_CACHE_HOME/spirula/datasets/<name>-<hash of the absolute path>``."""
    root = Path(root).resolve()
    base = settings.xdg_cache_home()
    h = hashlib.sha1(str(root).encode()).hexdigest()[:10]
    return base / "spirula" / "datasets" / ("%s-%s" % (root.name, h))


def home_equivalent(root, folder) -> Path:
    """``folder``'s place under :func:`home_cache`: the same path relative to
    the dataset folder (just its name when it lies outside it)."""
    try:
        return home_cache(root) / Path(folder).relative_to(root)
    except ValueError:
        return home_cache(root) / Path(folder).name


def cache_location(root, folder) -> Path:
    """Where a cache folder ``folder`` goes: itself when its parent folder (the
    dataset folder, for one inside it) is writable, else
    :func:`home_equivalent`."""
    folder = Path(folder)
    try:
        folder.relative_to(root)
        probe = Path(root)
    except ValueError:
        probe = folder.parent
    return folder if writable(probe) else home_equivalent(root, folder)


def save_image(arr: np.ndarray, path) -> None:
    """Write a ``[H,W,C] uint8`` array (C = 3 or 4) in the format of ``path``'s
    suffix (JPEG: quality 95, 4:4:4)."""
    im = Image.fromarray(arr)
    _save_pil(im, Path(path))


def _save_pil(im, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in (".jpg", ".jpeg"):
        im.convert("RGB").save(path, quality=95, subsampling=0)
    else:
        im.save(path)


def downscale_dir(root, image_dir, n: int) -> Path:
    """``images`` -> ``images_N`` (a sibling); the dataset folder itself -> ``images_N`` inside it."""
    root, image_dir = Path(root), Path(image_dir)
    if image_dir == root:
        return root / ("images_%d" % n)
    return image_dir.parent / ("%s_%d" % (image_dir.name, n))


def _scale_view(v, w, h) -> None:
    """Set a view's size to ``w x h`` and scale its K by the size ratio."""
    K = np.array(v.K, dtype=np.float64)
    K[0, :] *= w / v.width
    K[1, :] *= h / v.height
    v.K, v.width, v.height = K, int(w), int(h)


def _check_originals(views, image_dir, root, referenced_by) -> None:
    for v in views:
        p = image_dir / v.name
        if not p.is_file():
            raise DatasetError("%s: missing (referenced by %s)" % (rel(p, root), referenced_by))
        w, h = image_size(p, root)
        if (w, h) != (v.width, v.height):
            raise DatasetError("%s: %dx%d, but its camera says %dx%d" % (rel(p, root), w, h, v.width, v.height))
        v.image_path = p


def resolve_images(root, image_dir, views, downscale, referenced_by: str) -> None:
    """Point each view at the image to train on and check it.

    ``views``: :class:`~spirula.data.scene.View` list with ``name`` relative to
    ``image_dir`` and ``width``/``height``/``K`` at the original resolution.
    Sets ``image_path`` and, for ``downscale`` N > 1, the downscaled size and K
    (in place). Raises :class:`~spirula.errors.DatasetError` for a missing image or one whose
    size does not match its camera (allowing rounding for ``images_N``).
    """
    root, image_dir = Path(root), Path(image_dir)
    n = 1 if downscale in (None, 1) else int(downscale)
    if n == 1:
        _check_originals(views, image_dir, root, referenced_by)
        return
    ddir = downscale_dir(root, image_dir, n)
    cached = home_equivalent(root, ddir)
    if not ddir.is_dir() and cached.is_dir():
        ddir = cached
    if ddir.is_dir():
        for v in views:
            p = ddir / v.name
            if not p.is_file():
                raise DatasetError(
                    "%s: missing (%s/ exists but lacks it; delete that folder to have "
                    "spirula recompute it)" % (rel(p, root), rel(ddir, root))
                )
            w, h = image_size(p, root)
            if abs(w - v.width / n) >= 1 or abs(h - v.height / n) >= 1:
                raise DatasetError(
                    "%s: %dx%d, but its camera says %dx%d, so %dx%d at downscale %d"
                    % (rel(p, root), w, h, v.width, v.height, round(v.width / n), round(v.height / n), n)
                )
            _scale_view(v, w, h)
            v.image_path = p
        return
    _check_originals(views, image_dir, root, referenced_by)
    target = cache_location(root, ddir)
    note("downscaling %d images by %d into %s" % (len(views), n, target))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="." + target.name + ".tmp-", dir=target.parent))
    try:

        def work(v):
            try:
                with Image.open(v.image_path) as im:
                    if im.mode not in ("RGB", "RGBA", "L", "LA"):
                        im = im.convert("RGBA" if ("A" in im.mode or "transparency" in im.info) else "RGB")
                    size = (max(1, round(v.width / n)), max(1, round(v.height / n)))
                    im = im.resize(size, Image.BOX)
            except _UNREADABLE as exc:
                raise DatasetError("%s: cannot read image (%s)" % (rel(v.image_path, root), _one_line(exc))) from None
            _save_pil(im, tmp / v.name)

        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as ex:
            list(track(ex.map(work, views), "downscaling", total=len(views), unit="image"))
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished it first
            if not target.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for v in views:
        p = target / v.name
        _scale_view(v, *image_size(p, root))
        v.image_path = p
