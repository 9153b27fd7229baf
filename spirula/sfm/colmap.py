"""Structure from motion through pycolmap: images in, a COLMAP dataset out.

:func:`run_sfm` runs five stages, each logged as one line with its time:

- **extract**: SIFT features, honouring masks: on the GPU with Spirula's
  kernels (``features="gpu"``, the default where a device opens;
  :mod:`spirula.sfm.front`) or pycolmap's CPU extractor (``"cpu"``),
  from upright images (a photo with an EXIF turn is copied upright first:
  COLMAP ignores the tag). Images of one size, camera and focal length
  share one camera (one lens at one zoom: every observation then constrains
  the same focal length and distortion, far better conditioned than a camera
  per image); video frames are one such group, a folder of photos from two
  cameras or in portrait and landscape several (spirula/sfm/photos.py).
- **match**: sequential (each frame against the ones 2^k further, k <
  ``overlap``: pycolmap 4.2's quadratic overlap; COLMAP's loop detection off, as it needs a vocabulary
  tree file, and loop candidates from :mod:`spirula.sfm.loops` matched
  instead), exhaustive (every pair) or retrieval (each image with its
  ``loops.RETRIEVAL_PER_IMAGE`` most similar by the same global descriptor).
  ``matcher="auto"`` picks sequential for consecutively numbered frames (what
  ``spirula frames`` writes), exhaustive for up to :data:`MAX_EXHAUSTIVE` other
  images, retrieval past that. On the GPU the same pairs are matched by
  Spirula's kernels, then verified by pycolmap.
- **map**: incremental mapping with bundle adjustment (default) or global
  mapping (GLOMAP); the model with the most registered images is kept.
- **gate**: :mod:`spirula.sfm.gate` on the kept model.
- **undistort**: to PINHOLE (pycolmap.undistort_images), written as
  ``OUT/images`` + ``OUT/sparse/0``, which ``spirula train OUT`` reads; masks
  go to ``OUT/masks``. COLMAP's working files stay in ``OUT/colmap/``. With
  ``camera_model`` OPENCV or OPENCV_FISHEYE the default is **native** instead:
  the images as they are and the model with its own lens (:data:`NATIVE_MODELS`;
  training goes through it, docs/design.md §2.3); ``undistort=True`` restores PINHOLE.

What COLMAP prints goes to the run's log (``OUT/colmap/sfm.log``, beside
the stage lines), not between Spirula's lines; ``verbose`` shows it too.
Each stage draws a progress bar from those lines.

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

from spirula.data.masks import find_masks
from spirula.errors import DatasetError, SpirulaError
from spirula.progress import Bar, capture_output
from spirula.sfm import front as front_mod
from spirula.sfm import gate as gate_mod
from spirula.sfm import loops as loops_mod
from spirula.sfm import masks as masks_mod
from spirula.sfm import photos as photos_mod

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff")
MATCHERS = ("auto", "sequential", "exhaustive", "retrieval")
MAPPERS = ("incremental", "global")
# Models COLMAP estimates that spirula.data reads (undistortion turns any of them into PINHOLE).
# EQUIRECTANGULAR: 360-degree panoramas, solved through pinhole views cut from them (spirula/sfm/panorama.py)
CAMERA_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "OPENCV_FISHEYE", "EQUIRECTANGULAR")
# ... and those whose output keeps the lens by default (the dataset trains through it; --undistort: PINHOLE)
NATIVE_MODELS = ("OPENCV", "OPENCV_FISHEYE")
DEFAULT_CAMERA_MODEL = "SIMPLE_RADIAL"
MAX_EXHAUSTIVE = 300  # above this, exhaustive matching's n^2/2 pairs take hours on a CPU
SEQUENTIAL_OVERLAP = 10  # with quadratic overlap: each frame with the ones 2^k further, k < 10
LOOP_GAP = 3 * SEQUENTIAL_OVERLAP  # loop candidates are further apart than this (spirula/sfm/loops.py)
# RANSAC and the mappers sample from this seed instead of the clock, so the same
# images give the same poses (up to the order of multi-threaded sums).
RANDOM_SEED = 0
STAGES = ("extract", "match", "map", "gate", "undistort")


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
    features: str = "cpu"  # where extraction and matching ran: "gpu" (Spirula's kernels) or "cpu" (pycolmap)
    times: dict = field(default_factory=dict)  # stage -> seconds (and parts of a stage: loops, verify, gpu match)
    n_masks: int = 0  # masks carried into out/masks
    n_cameras: int | None = None  # camera groups (the default's), None with --single-camera / --camera-per-image
    n_turned: int = 0  # images turned upright by their EXIF orientation

    @property
    def total(self) -> float:
        """Seconds of the five stages (the parts of a stage in ``times`` are inside it)."""
        return sum(self.times.get(k, 0.0) for k in STAGES)


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


def check_images(folder: Path, names) -> list:
    """Read the headers of all images: a :class:`~spirula.sfm.photos.Photo`
    each; a one-line error names a file that is not an image. Fewer than 3
    images is an error too."""
    photos = photos_mod.read_photos(folder, names)
    if len(names) < gate_mod.MIN_REGISTERED:
        raise DatasetError(
            "%s: %d image%s; SfM needs at least %d overlapping views of the scene"
            % (folder, len(names), "" if len(names) == 1 else "s", gate_mod.MIN_REGISTERED)
        )
    return photos


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
    if is_frame_sequence(names):
        return "sequential"
    return "retrieval" if len(names) > MAX_EXHAUSTIVE else "exhaustive"


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
    undistort: bool | None = None,
    log_file=None,
    verbose: bool = False,
    features: str = "auto",
    device=None,
) -> SfmResult:
    """Run SfM on the images in the folder ``images``; write a COLMAP dataset to ``out``.

    Args:
        images: folder of images (not recursive).
        out: new or empty folder; gets ``images/``, ``sparse/0/`` (PINHOLE, or the lens with ``undistort`` off),
            ``masks/`` (when masks were used) and ``colmap/`` (database, raw
            models, the upright copies of turned photos).
        matcher: ``"auto"`` (default), ``"sequential"``, ``"exhaustive"`` or ``"retrieval"``.
        mapper: ``"incremental"`` (default) or ``"global"``.
        camera_model: the COLMAP model estimated (one of :data:`CAMERA_MODELS`).
        masks: folder of masks (white = keep); default ``masks/`` beside ``images``, used when it exists.
        single_camera: one camera for all images (True), one per image (False),
            or (None, the default) one per group of images of one size, camera
            and focal length (spirula/sfm/photos.py).
        num_threads: -1 = all cores.
        log: called with one line per stage.
        log_file: the run's log: the stage lines and COLMAP's own, without
            ANSI codes (default ``out/colmap/sfm.log``).
        verbose: COLMAP's lines on stderr as well.
        features: ``"gpu"`` (SIFT and matching on Spirula's kernels, into
            COLMAP's database), ``"cpu"`` (pycolmap's) or ``"auto"`` (the
            default: gpu where a device opens, else cpu).
        device: the device of the GPU path (default: the process's, opened on first use).
        undistort: write PINHOLE images and model (True), or the original images with
            the estimated lens (False); None (default): False for :data:`NATIVE_MODELS`.

    Raises :class:`~spirula.errors.DatasetError` for bad input and :class:`SfmError`
    when the result fails the gate (both exit 2 from the CLI).
    """
    import pycolmap

    images, out = Path(images), Path(out)
    names = list_images(images)
    photos = check_images(images, names)
    if mapper not in MAPPERS:
        raise DatasetError("--mapper %r: expected one of %s" % (mapper, ", ".join(MAPPERS)))
    if camera_model not in CAMERA_MODELS:
        raise DatasetError("--camera-model %r: expected one of %s" % (camera_model, ", ".join(CAMERA_MODELS)))
    matcher = choose_matcher(names, matcher)
    if undistort is None:
        undistort = camera_model not in NATIVE_MODELS
    mode = photos_mod.camera_mode(single_camera)
    groups = photos_mod.camera_groups(photos)
    if mode == "single":
        photos_mod.check_single_camera(images, groups)
    if masks is not None and not Path(masks).is_dir():
        raise DatasetError("%s: mask folder does not exist" % masks)
    mask_files = find_masks(images, names, masks)
    features, device, why = front_mod.choose(features, device)
    _prepare_out(out)
    work = out / "colmap"
    work.mkdir()
    stages = _Stages(pycolmap, Path(log_file) if log_file is not None else work / "sfm.log", verbose)
    if camera_model == "EQUIRECTANGULAR":
        try:
            return _panoramas(
                pycolmap, stages, images, out, names, num_threads, log or (lambda msg: None), (features, device, why)
            )
        finally:
            stages.restore()
    try:
        return _run(
            pycolmap,
            stages,
            images,
            out,
            work,
            names,
            photos,
            groups,
            mode,
            mask_files,
            matcher,
            mapper,
            camera_model,
            num_threads,
            log or (lambda msg: None),
            (features, device, why),
            undistort,
        )
    finally:
        stages.restore()


def _run(
    pycolmap,
    stages,
    images,
    out,
    work,
    names,
    photos,
    groups,
    mode,
    mask_files,
    matcher,
    mapper,
    camera_model,
    num_threads,
    say,
    front=("cpu", None, ""),
    undistort=True,
) -> SfmResult:
    """run_sfm's stages, its input checked."""

    def log(msg):
        say(msg)
        stages.note(msg)

    times = {}

    # extract: from upright images, a camera per group (or one, or one per image)
    t0 = time.perf_counter()
    src, mask_files = photos_mod.upright_images(images, photos, mask_files, work / "upright")
    n_turned = sum(p.turned for p in photos)
    features, gpu, why = front
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = camera_model
    if mask_files and features == "cpu":
        masks_mod.write_colmap_masks(mask_files, src, work / "masks")
        reader.mask_path = str(work / "masks")
    device = sift_device(pycolmap)
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.num_threads = num_threads
    if mode == "grouped" and len(groups) > 1:
        calls = [([p.name for p in g], pycolmap.CameraMode.SINGLE) for g in groups]
        cameras = "%d cameras by size and camera: %s" % (len(groups), photos_mod.describe_groups(groups))
    elif mode == "per-image":
        calls = [(names, pycolmap.CameraMode.PER_IMAGE)]
        cameras = "a camera per image"
    else:
        calls = [(names, pycolmap.CameraMode.SINGLE)]
        cameras = "one shared camera"

    def extract():
        for batch, camera_mode in calls:
            pycolmap.extract_features(
                work / "database.db",
                src,
                image_names=batch,
                camera_mode=camera_mode,
                reader_options=reader,
                extraction_options=extraction,
                device=device,
            )

    if features == "gpu":
        descriptors = stages.run(
            "extract",
            front_mod.extract,
            pycolmap,
            gpu,
            work / "database.db",
            Path(src),
            calls,
            reader,
            mask_files,
            extraction.eff_max_image_size(),
            total=len(names),
            unit="image",
            own_bar=True,
        )
        where = "the GPU (%s; %s)" % (front_mod.device_name(gpu), why)
        n_features = sum(len(d) for d in descriptors.values())
        where += ", %s features" % format(n_features, ",")
    else:
        stages.run("extract", extract, total=len(names), unit="image")
        where = "the %s (pycolmap%s)" % (
            "GPU" if device == pycolmap.Device.cuda else "CPU",
            "; " + why if why else "",
        )
    times["extract"] = time.perf_counter() - t0
    log(
        "extract   %6.1f s  %d images, SIFT on %s, %s (%s)%s%s"
        % (
            times["extract"],
            len(names),
            where,
            cameras,
            camera_model,
            ", %d turned upright (EXIF orientation)" % n_turned if n_turned else "",
            ", %d masks" % len(mask_files) if mask_files else "",
        )
    )

    # match
    t0 = time.perf_counter()
    db = work / "database.db"
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = num_threads
    verification = pycolmap.TwoViewGeometryOptions()
    verification.ransac.random_seed = RANDOM_SEED
    if features == "gpu":
        how = _match_on_gpu(pycolmap, stages, gpu, db, names, descriptors, matcher, verification, num_threads, times)
    elif matcher == "sequential":
        pairing = pycolmap.SequentialPairingOptions()
        pairing.overlap = SEQUENTIAL_OVERLAP
        pairing.quadratic_overlap = True
        pairing.loop_detection = False
        stages.run(
            "match",
            pycolmap.match_sequential,
            db,
            matching_options=matching,
            pairing_options=pairing,
            verification_options=verification,
            device=device,
            total=len(names),
            unit="image",
        )
        how = "sequential, overlap %d" % SEQUENTIAL_OVERLAP
        t1 = time.perf_counter()
        pairs = loops_mod.loop_pairs(db, names, LOOP_GAP)
        if pairs:
            _match_listed(
                pycolmap, stages, db, work / "loop_pairs.txt", pairs, matching, verification, device, "match loops"
            )
        closed = verified_pairs(pycolmap, db, pairs)
        times["loops"] = time.perf_counter() - t1
        how += "; loops: %d candidate pairs (global descriptors, %.1f s), %d verified" % (
            len(pairs),
            times["loops"],
            len(closed),
        )
    elif matcher == "retrieval":
        # exhaustive matching first needs the features only: the pairs come from their descriptors
        t1 = time.perf_counter()
        pairs = loops_mod.retrieval_pairs(db, names)
        times["retrieval"] = time.perf_counter() - t1
        _match_listed(pycolmap, stages, db, work / "retrieval_pairs.txt", pairs, matching, verification, device)
        how = "retrieval, %s pairs (%d most similar an image by global descriptor, %.1f s)" % (
            format(len(pairs), ","),
            loops_mod.RETRIEVAL_PER_IMAGE,
            times["retrieval"],
        )
    else:
        stages.run(
            "match",
            pycolmap.match_exhaustive,
            db,
            matching_options=matching,
            verification_options=verification,
            device=device,
            total=None,
            unit="block",
        )
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
        options.random_seed = RANDOM_SEED
        models = stages.run(
            "map", pycolmap.incremental_mapping, db, src, sparse, options, total=len(names), unit="image"
        )
    else:
        options = pycolmap.GlobalPipelineOptions()
        options.num_threads = num_threads
        options.random_seed = RANDOM_SEED
        models = stages.run("map", pycolmap.global_mapping, db, src, sparse, options)
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
    quality = stages.run("gate", gate_mod.measure, kept, len(names), len(sizes), profile=False)
    failure = quality.failure(photos_mod.registration_advice(mode, groups, is_frame_sequence(names), matcher))
    times["gate"] = time.perf_counter() - t0
    log("gate      %6.1f s  %s: %s" % (times["gate"], "FAILED" if failure else "passed", quality.line()))
    if failure:
        raise SfmError("%s: %s (log: %s)" % (images, failure, stages.log_file))

    # undistort
    t0 = time.perf_counter()
    model_dir = sparse / str(kept_id)
    if not (model_dir / "cameras.bin").is_file():  # pycolmap writes model k to sparse/k; be sure
        model_dir = work / "kept"
        model_dir.mkdir()
        kept.write(model_dir)

    def result(n_masks):
        n_cameras = len(calls) if mode == "grouped" else None
        return SfmResult(out, quality, sizes, matcher, features, times, n_masks, n_cameras, n_turned)

    if not undistort:  # native: the images as they are, the model with its lens
        n_masks = _native(stages, kept, src, out, mask_files, times, t0, log, camera_model)
        return result(n_masks)
    staging = work / "undistorted"
    stages.run(
        "undistort",
        pycolmap.undistort_images,
        staging,
        model_dir,
        src,
        output_type="COLMAP",
        num_threads=num_threads,
        total=quality.n_registered,
        unit="image",
    )
    shutil.move(staging / "images", out / "images")
    (out / "sparse").mkdir()
    shutil.move(staging / "sparse", out / "sparse" / "0")
    shutil.rmtree(staging)
    n_masks = 0
    if mask_files:
        n_masks = stages.run(
            "undistort masks", masks_mod.undistort_masks, mask_files, src, kept, out / "masks", profile=False
        )
    times["undistort"] = time.perf_counter() - t0
    log(
        "undistort %6.1f s  PINHOLE, %d images%s -> %s"
        % (times["undistort"], quality.n_registered, ", %d masks" % n_masks if n_masks else "", out)
    )
    return result(n_masks)


def _panoramas(pycolmap, stages, images, out, names, num_threads, say, front) -> SfmResult:
    """run_sfm for equirectangular panoramas (spirula/sfm/panorama.py), gated as any model;
    ``front``: front.choose's (features, device, why)."""
    from spirula.sfm import panorama

    def log(msg):
        say(msg)
        stages.note(msg)

    features, device, why = front
    got = panorama.run_panorama_sfm(
        images, out, names, log, num_threads, stages=stages, seed=RANDOM_SEED,
        gpu=device if features == "gpu" else None, why=why,
    )  # fmt: skip
    quality = got["quality"]
    failure = quality.failure("more overlap between panoramas")
    log("gate      %6.1f s  %s: %s" % (0.0, "FAILED" if failure else "passed", quality.line()))
    if failure:
        raise SfmError("%s: %s (log: %s)" % (images, failure, stages.log_file))
    log(
        "write     %6.1f s  EQUIRECTANGULAR (nerfstudio), %d panoramas -> %s"
        % (got["times"]["write"], quality.n_registered, out)
    )
    return SfmResult(out, quality, got["model_sizes"], "exhaustive", features, got["times"])


def _match_listed(pycolmap, stages, db, listing, pairs, matching, verification, device, stage="match") -> None:
    """pycolmap's matcher and verification on the image ``pairs`` (names), listed in the file ``listing``."""
    listing.write_text("".join("%s %s\n" % p for p in pairs))
    imported = pycolmap.ImportedPairingOptions()
    imported.match_list_path = listing
    stages.run(
        stage,
        pycolmap.match_image_pairs,
        db,
        matching_options=matching,
        pairing_options=imported,
        verification_options=verification,
        device=device,
        total=None,
        unit="block",
    )


def _match_on_gpu(pycolmap, stages, gpu, db, names, descriptors, matcher, verification, num_threads, times) -> str:
    """The match stage of the GPU path: the CPU path's pairs matched on ``gpu``,
    verified by pycolmap; returns the stage line's description."""
    loops = []
    if matcher == "sequential":
        pairs = front_mod.sequential_pairs(names, SEQUENTIAL_OVERLAP)
        how = "sequential, overlap %d" % SEQUENTIAL_OVERLAP
        t1 = time.perf_counter()
        loops = loops_mod.loop_pairs(db, names, LOOP_GAP)
        times["loops"] = time.perf_counter() - t1
        seen = set(pairs) | {(b, a) for a, b in pairs}
        pairs += [p for p in loops if p not in seen]
    elif matcher == "retrieval":
        t1 = time.perf_counter()
        pairs = loops_mod.retrieval_pairs(db, names)
        times["retrieval"] = time.perf_counter() - t1
        how = "retrieval (%d most similar an image by global descriptor, %.1f s)" % (
            loops_mod.RETRIEVAL_PER_IMAGE,
            times["retrieval"],
        )
    else:
        pairs = front_mod.exhaustive_pairs(names)
        how = "exhaustive"
    from spirula.features import release

    try:
        got = stages.run(
            "match", front_mod.match, pycolmap, gpu, db, descriptors, pairs, total=len(pairs), unit="pair", own_bar=True
        )
    finally:
        release(gpu)  # the extractors' and matchers' buffers
    t2 = time.perf_counter()
    stages.run("verify", front_mod.verify, pycolmap, db, verification, num_threads, total=None, unit="block")
    times["verify"] = time.perf_counter() - t2
    times["gpu match"] = got["seconds"]
    how += ", %s pairs on the GPU (%.1f s, %s matches), verified by pycolmap (%.1f s)" % (
        format(got["pairs"], ","),
        got["seconds"],
        format(got["matches"], ","),
        times["verify"],
    )
    if matcher == "sequential":
        closed = verified_pairs(pycolmap, db, loops)
        how += "; loops: %d candidate pairs (global descriptors, %.1f s), %d verified" % (
            len(loops),
            times["loops"],
            len(closed),
        )
    return how


def _native(stages, kept, src, out, mask_files, times, t0, log, camera_model) -> int:
    """The dataset without undistortion: ``out/images`` (the registered images, copied),
    ``out/sparse/0`` (the kept model, its cameras' lens as estimated) and ``out/masks``
    (``<name>.png``, unwarped). Returns the number of masks."""
    names = sorted(im.name for im in kept.images.values() if kept.exists_image(im.image_id) and im.has_pose)
    (out / "sparse" / "0").mkdir(parents=True)
    kept.write(out / "sparse" / "0")
    for name in names:
        dst = out / "images" / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(src) / name, dst)
    kept_masks = {n: mask_files[n] for n in names if n in mask_files}
    if kept_masks:
        stages.run("masks", masks_mod.write_colmap_masks, kept_masks, src, out / "masks", profile=False)
    times["write"] = time.perf_counter() - t0
    log(
        "write     %6.1f s  %s (not undistorted), %d images%s -> %s"
        % (
            times["write"],
            camera_model,
            len(names),
            ", %d masks" % len(kept_masks) if kept_masks else "",
            out,
        )
    )
    return len(kept_masks)


# COLMAP's progress lines (pycolmap 4.2): "Processed file [3/36]" (extraction),
# "Processing image [3/36]" (sequential pairs), "Processing block [1/2, 2/2]"
# (exhaustive pairs, blocks of 50 images), "Registering image #7
# (num_reg_frames=5)" (incremental mapping), "Undistorting image [3/36]"
_COUNT = re.compile(r"(?:Processed file|Processing image|Undistorting image) \[(\d+)/(\d+)\]")
_BLOCK = re.compile(r"Processing block \[(\d+)/(\d+), (\d+)/(\d+)\]")
_REGISTERED = re.compile(r"num_reg_frames=(\d+)")


class StageProgress:
    """Work done in a COLMAP stage, read from its log lines: ``(done, total)``
    for a line that reports progress (total None: unchanged), else None. A
    count that starts over (extraction called once per camera group) adds on."""

    def __init__(self):
        self.base = self.k = self.n = 0

    def __call__(self, line: str):
        m = _COUNT.search(line)
        if m:
            k, n = int(m[1]), int(m[2])
            if k <= self.k:
                self.base += self.n
            self.k, self.n = k, n
            return self.base + k, None
        m = _BLOCK.search(line)
        if m:
            i, n1, j, n2 = (int(x) for x in m.groups())
            return (i - 1) * n2 + j, n1 * n2
        m = _REGISTERED.search(line)
        if m:
            return int(m[1]), None
        if "Registering initial image pair" in line:
            return 2, None
        return None


class _Stages:
    """COLMAP's stages as run_sfm runs them: each a ``stage sfm NAME`` row of the
    profiler's timing breakdown; what COLMAP prints (glog lines) captured into
    ``log_file`` (on stderr too when ``verbose``), with a progress bar read from
    those lines; an exception from COLMAP becomes one line naming the stage and
    the log. COLMAP's logging settings are put back by :meth:`restore`."""

    _FLAGS = ("logtostderr", "alsologtostderr", "colorlogtostderr", "stderrthreshold", "minloglevel")

    def __init__(self, pycolmap, log_file: Path, verbose: bool):
        self.lg = pycolmap.logging
        self.saved = {k: getattr(self.lg, k) for k in self._FLAGS if hasattr(self.lg, k)}
        self.log_file, self.verbose = log_file, verbose
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text("")
        # every line to stderr, where capture_output takes it (no files of glog's own, no colours)
        self.lg.logtostderr = True
        self.lg.colorlogtostderr = False
        self.lg.minloglevel = 0

    def note(self, line: str) -> None:
        with open(self.log_file, "a", encoding="utf-8") as f:
            f.write("sfm: %s\n" % line)

    def run(self, name: str, fn, *args, total=False, unit="image", profile=True, own_bar=False, **kwargs):
        import contextlib

        from spirula.runtime import profiler

        bar = None
        try:
            with capture_output(self.log_file, echo=self.verbose) as cap:
                if total is not False:
                    bar = Bar(total, "sfm " + name, unit=unit, stream=cap.stream)
                if own_bar:  # fn advances the bar itself (Spirula's own stages)
                    kwargs["bar"] = bar
                elif bar is not None:
                    parse = StageProgress()

                    def advance(line):
                        got = parse(line)
                        if got is not None:
                            bar.update_to(*got)

                    cap.on_line = advance
                with profiler.stage("sfm " + name) if profile else contextlib.nullcontext():
                    return fn(*args, **kwargs)
        except (RuntimeError, ValueError, OSError) as exc:
            msg = " ".join(str(exc).split()) or type(exc).__name__
            raise SpirulaError("sfm %s failed in COLMAP: %s (log: %s)" % (name, msg, self.log_file)) from None
        finally:
            if bar is not None:
                bar.close()

    def restore(self) -> None:
        for k, v in self.saved.items():
            setattr(self.lg, k, v)


def verified_pairs(pycolmap, database, pairs) -> list:
    """The ``pairs`` (of image names) that geometric verification kept: a
    two-view geometry with inliers in the ``database``."""
    if not pairs:
        return []
    db = pycolmap.Database.open(str(database))
    try:
        ids = {im.name: im.image_id for im in db.read_all_images()}
        kept = []
        for a, b in pairs:
            if db.exists_two_view_geometry(ids[a], ids[b]):
                geometry = db.read_two_view_geometry(ids[a], ids[b])
                if len(geometry.inlier_matches) > 0:
                    kept.append((a, b))
        return kept
    finally:
        db.close()


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
