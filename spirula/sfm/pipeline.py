"""From a capture to a dataset: ``spirula train clip.mp4`` and ``spirula train photos/``.

A capture is a video file or a folder of photos (no COLMAP model, no
transforms.json). :func:`prepare_capture` runs the stages a user would run
by hand, ``spirula frames`` (videos only) then ``spirula sfm``, and caches
the resulting COLMAP dataset in :func:`cache_root` (default
``~/.cache/spirula/captures``), keyed by the input (each file's name, size and
modification time) and every setting that changes the result, so a second
run starts training at once. A cache entry is complete or absent: it is
built in a temporary folder and renamed into place at the end.

Each stage prints one line with its time, and with ``SS_PROFILE=1`` is a
``stage`` row of the profiler's timing breakdown.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from spirula import settings
from spirula.cache import cache_home
from spirula.errors import DatasetError
from spirula.runtime import profiler

# bump when a stage changes what it writes: older cache entries are then ignored
# (2: photos turned upright by their EXIF orientation, a camera per size and camera;
# 3: frames by the view's motion, loop candidates matched; 4: features on the GPU by default,
# OPENCV and OPENCV_FISHEYE keep their lens (no undistortion)
PIPELINE_VERSION = 4
VIDEO_SUFFIXES = frozenset((".mp4", ".mov", ".m4v", ".mkv", ".avi", ".webm", ".mts", ".m2ts", ".3gp", ".wmv", ".mpg"))
IMAGE_SUFFIXES = frozenset((".jpg", ".jpeg", ".png", ".tif", ".tiff", ".bmp", ".webp"))


@dataclasses.dataclass(frozen=True)
class CaptureSettings:
    """What changes the dataset made from a capture (the cache key holds all of it).

    ``fps``, ``every``, ``max_frames``: frame selection (``spirula frames``;
    None: its defaults, the count from the view's motion); ``matcher``, ``mapper``, ``camera_model``,
    ``single_camera`` (``--single-camera`` True, ``--camera-per-image``
    False), ``features`` (``gpu``, ``cpu``, ``auto``): SfM (``spirula sfm``;
    None: its defaults)."""

    fps: float | None = None
    every: int | None = None
    max_frames: int | None = None
    matcher: str | None = None
    mapper: str | None = None
    camera_model: str | None = None
    single_camera: bool | None = None
    features: str | None = None


def capture_kind(path) -> str | None:
    """``"video"``, ``"images"`` (a folder of photos, or one holding them in
    ``images/``, without a camera model) or None (a dataset, or nothing)."""
    p = Path(path).expanduser()
    if p.is_file():
        return "video" if p.suffix.lower() in VIDEO_SUFFIXES else None
    if not p.is_dir():
        return None
    # a dataset (or a broken one: its own error says what is wrong) is trained
    # as it is: a camera model, transforms or a point cloud say it was meant as one
    if (p / "sparse").exists() or any(p.glob("transforms*.json")) or any(p.glob("*.ply")):
        return None
    from spirula.data.dataset import detect_format

    try:
        detect_format(p)
        return None
    except DatasetError:
        pass
    return "images" if photo_folder(p) is not None else None


def photo_folder(folder: Path) -> Path | None:
    """The folder holding the photos: ``folder`` itself, or its ``images/``."""
    for candidate in (folder, folder / "images"):
        if candidate.is_dir() and any(f.suffix.lower() in IMAGE_SUFFIXES for f in candidate.iterdir() if f.is_file()):
            return candidate
    return None


def cache_root() -> Path:
    """``$SPIRULA_CAPTURE_CACHE`` (frames and SfM results can be large: put
    them on a big disk), else ``$SPIRULA_CACHE_DIR/captures``, else
    ``~/.cache/spirula/captures``."""
    return settings.capture_cache() or cache_home() / "captures"


def _fingerprint(path: Path, kind: str) -> list:
    """(name, size, mtime_ns) of the input's files: a changed or added photo, or a re-encoded video, is a new key."""
    if kind == "video":
        st = path.stat()
        return [[path.name, st.st_size, st.st_mtime_ns]]
    files = []
    for sub in ("", "masks"):
        folder = path / sub if sub else path
        if folder.is_dir():
            for f in sorted(folder.iterdir()):
                if f.is_file():
                    st = f.stat()
                    files.append([(sub + "/" if sub else "") + f.name, st.st_size, st.st_mtime_ns])
    return files


def cache_key(path, kind: str, settings: CaptureSettings) -> str:
    import pycolmap

    path = Path(path).expanduser().resolve()
    blob = json.dumps(
        dict(
            version=PIPELINE_VERSION,
            pycolmap=pycolmap.__version__,
            kind=kind,
            path=str(path),
            files=_fingerprint(path if kind == "video" else photo_folder(path), kind),
            settings=dataclasses.asdict(settings),
        ),
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def stages(kind: str) -> str:
    return "frames and SfM" if kind == "video" else "SfM"


def _entry(path: Path, settings: CaptureSettings, cache: Path | None) -> tuple:
    kind = capture_kind(path)
    if kind is None:
        raise DatasetError("%s: neither a video nor a folder of photos" % path)
    key = cache_key(path, kind, settings)
    return kind, key, (cache or cache_root()) / ("%s-%s" % (path.stem or "capture", key))


def cached_dataset(path, settings: CaptureSettings | None = None, cache: Path | None = None) -> Path | None:
    """The dataset an earlier run made from this capture with these settings, or None."""
    _, _, entry = _entry(Path(path).expanduser(), settings or CaptureSettings(), cache)
    return entry / "dataset" if (entry / "capture.json").is_file() else None


def prepare_capture(
    path,
    settings: CaptureSettings | None = None,
    log=print,
    cache: Path | None = None,
    verbose: bool = False,
    device=None,
) -> Path:
    """The COLMAP dataset folder made from the capture at ``path`` (a video
    or a folder of photos), from the cache when an earlier run made it.

    ``log``: called with one line per stage (``spirula: <stage> ... in N s``).
    SfM's log (its stage lines and COLMAP's own) ends up in the entry as
    ``sfm.log``; after a failure it stays beside where the entry would be
    (``<entry>.log``), and the error names it. ``verbose``: COLMAP's lines on
    stderr too. ``device``: where ``--features gpu`` runs (a device or a function
    that opens one; default the process's). Bad input raises :class:`~spirula.errors.DatasetError` (one
    line, exit status 2), as ``spirula frames`` and ``spirula sfm`` do."""
    settings = settings or CaptureSettings()
    path = Path(path).expanduser()
    kind, key, entry = _entry(path, settings, cache)
    dataset = entry / "dataset"
    if (entry / "capture.json").is_file() and dataset.is_dir():
        log("spirula: %s: using the frames and camera poses made earlier (%s)" % (path, entry))
        return dataset
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".%s-" % key))
    try:
        timings = {}
        if kind == "video":
            from spirula.sfm.frames import extract_frames

            t0 = time.perf_counter()
            with profiler.stage("frames"):
                frames = extract_frames(
                    path,
                    work / "frames",
                    fps=settings.fps,
                    every=settings.every,
                    max_frames=settings.max_frames,
                    log=lambda msg: None if msg.startswith("frames: wrote") else log("spirula: " + msg),
                )
            timings["frames"] = time.perf_counter() - t0
            log("spirula: frames: %d images from %s in %.1f s" % (len(frames), path.name, timings["frames"]))
            images = work / "frames"
        else:
            images = photo_folder(path)
        from spirula.sfm.colmap import run_sfm

        sfm = dict(
            matcher=settings.matcher,
            mapper=settings.mapper,
            camera_model=settings.camera_model,
            single_camera=settings.single_camera,
            features=settings.features,
        )
        sfm = {k: v for k, v in sfm.items() if v is not None}
        t0 = time.perf_counter()
        log_file = entry.parent / (entry.name + ".log")
        run_sfm(images, work / "dataset", log=log, log_file=log_file, verbose=verbose, device=device, **sfm)
        timings["sfm"] = time.perf_counter() - t0
        if log_file.is_file():
            os.replace(log_file, work / "sfm.log")
        (work / "capture.json").write_text(
            json.dumps(
                dict(source=str(path.resolve()), kind=kind, settings=dataclasses.asdict(settings), seconds=timings),
                indent=1,
            )
        )
        if entry.exists():  # an incomplete entry of an interrupted run
            shutil.rmtree(entry)
        os.replace(work, entry)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    log("spirula: camera poses ready in %.1f s; cached in %s" % (sum(timings.values()), entry))
    return dataset
