"""Structure from motion through pycolmap: images in, a COLMAP dataset out.

:func:`run_sfm` runs five stages, each logged as one line with its time:

- **extract**: SIFT features (pycolmap.extract_features), honouring masks.
  Video frames share one camera (one lens at one zoom: every observation then
  constrains the same focal length and distortion, which is far better
  conditioned than one camera per frame); a photo set gets a camera per image
  (COLMAP's AUTO mode: photos may come from several cameras or zooms).
- **match**: sequential (each frame against the next ``overlap`` frames, with
  quadratic overlap; loop detection off, as it needs a vocabulary tree file)
  or exhaustive (every pair). ``matcher="auto"`` picks sequential for
  consecutively numbered frames (what ``spirula frames`` writes) or more than
  :data:`MAX_EXHAUSTIVE` images, exhaustive otherwise.
- **map**: incremental mapping with bundle adjustment (default) or global
  mapping (GLOMAP); the model with the most registered images is kept.
- **gate**: :mod:`spirula.sfm.gate` on the kept model.
- **undistort**: to PINHOLE (pycolmap.undistort_images), written as
  ``OUT/images`` + ``OUT/sparse/0``, which ``spirula train OUT`` reads; masks
  go to ``OUT/masks``. COLMAP's working files stay in ``OUT/colmap/``.

See docs/sfm.md.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from spirula.data.masks import find_masks
from spirula.errors import DatasetError, SpirulaError
from spirula.sfm import gate as gate_mod
from spirula.sfm import masks as masks_mod

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff")
MATCHERS = ("auto", "sequential", "exhaustive")
MAPPERS = ("incremental", "global")
# Models COLMAP estimates that spirula.data reads (undistortion turns any of them into PINHOLE).
CAMERA_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV")
DEFAULT_CAMERA_MODEL = "SIMPLE_RADIAL"
MAX_EXHAUSTIVE = 300  # above this, exhaustive matching's n^2/2 pairs take hours on a CPU
SEQUENTIAL_OVERLAP = 10  # frames matched ahead (plus 2^k further with quadratic overlap)


class SfmError(SpirulaError):
    """SfM ran but its result is not usable (too few images registered, the gate failed)."""

    exit_code = 2


@dataclass
class SfmResult:
    """What :func:`run_sfm` made."""

    out: Path  # the dataset folder: images/, sparse/0/, masks/ (when masks were given)
    quality: gate_mod.Quality  # of the kept model
    model_sizes: list  # registered images of every model the mapper made, largest first
    matcher: str  # the matcher used ("sequential" or "exhaustive")
    times: dict = field(default_factory=dict)  # stage -> seconds
    n_masks: int = 0  # masks carried into out/masks


def list_images(folder: Path) -> list:
    """Sorted image names in ``folder`` (not recursive); a one-line error when there are none."""
    folder = Path(folder)
    if not folder.exists():
        raise DatasetError("%s: does not exist" % folder)
    if not folder.is_dir():
        raise DatasetError("%s: not a folder of images" % folder)
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    names = [p.name for p in files if p.suffix.lower() in IMAGE_EXTENSIONS]
    if not names:
        what = "it is empty" if not files else "%d file%s, none of them an image" % (len(files), "s"[: len(files) > 1])
        raise DatasetError("%s: no images (%s) to run SfM on: %s" % (folder, ", ".join(IMAGE_EXTENSIONS), what))
    return names


def check_images(folder: Path, names) -> tuple:
    """Decode the headers of all images: ``(W, H)`` of the first; a one-line error
    names a file that is not an image. Fewer than 3 images is an error too."""
    sizes = set()
    for name in names:
        try:
            with Image.open(folder / name) as im:
                im.verify()
                sizes.add(im.size)
        except Exception as exc:  # Pillow raises many types for a bad file
            raise DatasetError("%s: not a readable image (%s)" % (folder / name, " ".join(str(exc).split()))) from None
    if len(names) < gate_mod.MIN_REGISTERED:
        raise DatasetError(
            "%s: %d image%s; SfM needs at least %d overlapping views of the scene"
            % (folder, len(names), "" if len(names) == 1 else "s", gate_mod.MIN_REGISTERED)
        )
    return sizes


def is_frame_sequence(names) -> bool:
    """True when the names are one prefix plus consecutive numbers (``frame_00001.png``, ...)."""
    m = [re.fullmatch(r"(.*?)(\d+)\.[^.]+", n) for n in names]
    if not all(m) or len({x.group(1) for x in m}) != 1:
        return False
    nums = sorted(int(x.group(2)) for x in m)
    return nums == list(range(nums[0], nums[0] + len(nums)))


def choose_matcher(names, matcher: str = "auto") -> str:
    if matcher not in MATCHERS:
        raise DatasetError("--matcher %r: expected one of %s" % (matcher, ", ".join(MATCHERS)))
    if matcher != "auto":
        return matcher
    return "sequential" if is_frame_sequence(names) or len(names) > MAX_EXHAUSTIVE else "exhaustive"


def _prepare_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise DatasetError("%s: exists and is not a folder" % out)
    if out.is_dir() and any(out.iterdir()):
        raise DatasetError("%s: exists and is not empty (give a new folder, or remove it)" % out)
    out.mkdir(parents=True, exist_ok=True)


def run_sfm(
    images,
    out,
    matcher: str = "auto",
    mapper: str = "incremental",
    camera_model: str = DEFAULT_CAMERA_MODEL,
    masks=None,
    single_camera: bool | None = None,
    num_threads: int = -1,
    log: Callable[[str], None] | None = None,
) -> SfmResult:
    """Run SfM on the images in the folder ``images``; write a COLMAP dataset to ``out``.

    Args:
        images: folder of images (not recursive).
        out: new or empty folder; gets ``images/``, ``sparse/0/`` (PINHOLE),
            ``masks/`` (when masks were used) and ``colmap/`` (database, raw models).
        matcher: ``"auto"`` (default), ``"sequential"`` or ``"exhaustive"``.
        mapper: ``"incremental"`` (default) or ``"global"``.
        camera_model: the COLMAP model estimated (one of :data:`CAMERA_MODELS`).
        masks: folder of masks (white = keep); default ``masks/`` beside ``images``, used when it exists.
        single_camera: one camera for all images (True) or one per image (False);
            default: True for a frame sequence, else False.
        num_threads: -1 = all cores.
        log: called with one line per stage.

    Raises :class:`~spirula.errors.DatasetError` for bad input and :class:`SfmError`
    when the result fails the gate (both exit 2 from the CLI).
    """
    import pycolmap

    log = log or (lambda msg: None)
    images, out = Path(images), Path(out)
    names = list_images(images)
    check_images(images, names)
    if mapper not in MAPPERS:
        raise DatasetError("--mapper %r: expected one of %s" % (mapper, ", ".join(MAPPERS)))
    if camera_model not in CAMERA_MODELS:
        raise DatasetError("--camera-model %r: expected one of %s" % (camera_model, ", ".join(CAMERA_MODELS)))
    matcher = choose_matcher(names, matcher)
    if single_camera is None:
        single_camera = is_frame_sequence(names)
    if masks is not None and not Path(masks).is_dir():
        raise DatasetError("%s: mask folder does not exist" % masks)
    mask_files = find_masks(images, names, masks)
    _prepare_out(out)
    work = out / "colmap"
    work.mkdir()
    db = work / "database.db"
    _quiet_colmap(pycolmap, work)
    times = {}

    # extract
    t0 = time.perf_counter()
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = camera_model
    if mask_files:
        masks_mod.write_colmap_masks(mask_files, images, work / "masks")
        reader.mask_path = str(work / "masks")
    device = sift_device(pycolmap)
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.num_threads = num_threads
    mode = pycolmap.CameraMode.SINGLE if single_camera else pycolmap.CameraMode.AUTO
    _stage(
        "extract",
        work,
        pycolmap.extract_features,
        db,
        images,
        image_names=names,
        camera_mode=mode,
        reader_options=reader,
        extraction_options=extraction,
        device=device,
    )
    times["extract"] = time.perf_counter() - t0
    log(
        "extract   %6.1f s  %d images, SIFT on the %s, %s (%s)%s"
        % (
            times["extract"],
            len(names),
            "GPU" if device == pycolmap.Device.cuda else "CPU",
            "one shared camera" if single_camera else "a camera per image",
            camera_model,
            ", %d masks" % len(mask_files) if mask_files else "",
        )
    )

    # match
    t0 = time.perf_counter()
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = num_threads
    if matcher == "sequential":
        pairing = pycolmap.SequentialPairingOptions()
        pairing.overlap = SEQUENTIAL_OVERLAP
        pairing.quadratic_overlap = True
        pairing.loop_detection = False
        _stage(
            "match",
            work,
            pycolmap.match_sequential,
            db,
            matching_options=matching,
            pairing_options=pairing,
            device=device,
        )
        how = "sequential, overlap %d" % SEQUENTIAL_OVERLAP
    else:
        _stage("match", work, pycolmap.match_exhaustive, db, matching_options=matching, device=device)
        how = "exhaustive, %s pairs" % format(len(names) * (len(names) - 1) // 2, ",")
    times["match"] = time.perf_counter() - t0
    log("match     %6.1f s  %s" % (times["match"], how))

    # map
    t0 = time.perf_counter()
    sparse = work / "sparse"
    sparse.mkdir()
    if mapper == "incremental":
        options = pycolmap.IncrementalPipelineOptions()
        options.num_threads = num_threads
        models = _stage("map", work, pycolmap.incremental_mapping, db, images, sparse, options)
    else:
        options = pycolmap.GlobalPipelineOptions()
        options.num_threads = num_threads
        models = _stage("map", work, pycolmap.global_mapping, db, images, sparse, options)
    ranked = sorted(models.items(), key=lambda kv: -kv[1].num_reg_images())
    sizes = [rec.num_reg_images() for _, rec in ranked]
    kept_id, kept = ranked[0] if ranked else (None, None)
    times["map"] = time.perf_counter() - t0
    if len(sizes) > 1:
        others = "; kept the largest (%d images), others: %s" % (sizes[0], ", ".join(map(str, sizes[1:])))
    else:
        others = ""
    log(
        "map       %6.1f s  %s, %d model%s%s"
        % (times["map"], mapper, len(sizes), "" if len(sizes) == 1 else "s", others)
    )

    # gate
    t0 = time.perf_counter()
    quality = gate_mod.measure(kept, len(names), len(sizes))
    failure = quality.failure()
    times["gate"] = time.perf_counter() - t0
    log("gate      %6.1f s  %s: %s" % (times["gate"], "FAILED" if failure else "passed", quality.line()))
    if failure:
        raise SfmError("%s: %s" % (images, failure))

    # undistort
    t0 = time.perf_counter()
    model_dir = sparse / str(kept_id)
    if not (model_dir / "cameras.bin").is_file():  # pycolmap writes model k to sparse/k; be sure
        model_dir = work / "kept"
        model_dir.mkdir()
        kept.write(model_dir)
    staging = work / "undistorted"
    _stage(
        "undistort",
        work,
        pycolmap.undistort_images,
        staging,
        model_dir,
        images,
        output_type="COLMAP",
        num_threads=num_threads,
    )
    shutil.move(staging / "images", out / "images")
    (out / "sparse").mkdir()
    shutil.move(staging / "sparse", out / "sparse" / "0")
    shutil.rmtree(staging)
    n_masks = 0
    if mask_files:
        n_masks = masks_mod.undistort_masks(mask_files, images, kept, out / "masks")
    times["undistort"] = time.perf_counter() - t0
    log(
        "undistort %6.1f s  PINHOLE, %d images%s -> %s"
        % (times["undistort"], quality.n_registered, ", %d masks" % n_masks if n_masks else "", out)
    )
    return SfmResult(out, quality, sizes, matcher, times, n_masks)


def _stage(name: str, work: Path, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, a ``stage sfm NAME`` row of the profiler's
    timing breakdown; an exception from COLMAP becomes one line naming the
    stage and its log."""
    from spirula.runtime import profiler

    try:
        with profiler.stage("sfm " + name):
            return fn(*args, **kwargs)
    except (RuntimeError, ValueError, OSError) as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        raise SpirulaError("sfm %s failed in COLMAP: %s (log: %s/colmap.log.*)" % (name, msg, work)) from None


def _quiet_colmap(pycolmap, work: Path) -> None:
    """COLMAP's own log goes to ``work/colmap.log.*``; only its errors reach stderr."""
    lg = pycolmap.logging
    lg.logtostderr = False
    lg.alsologtostderr = False
    lg.stderrthreshold = int(lg.Level.ERROR.value) if hasattr(lg.Level.ERROR, "value") else 2
    lg.set_log_destination(lg.INFO, str(work / "colmap.log."))


def sift_device(pycolmap):
    """Where SIFT extraction and matching run: the GPU when this pycolmap build
    has CUDA (the ``pycolmap-cuda12`` wheel) and a CUDA device is visible, else
    the CPU (the plain ``pycolmap`` wheel has no CUDA)."""
    if getattr(pycolmap, "has_cuda", False) and pycolmap.get_num_cuda_devices() > 0:
        return pycolmap.Device.cuda
    return pycolmap.Device.cpu


def cores() -> int:
    """CPU cores this process may use (what ``num_threads=-1`` gives COLMAP)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
