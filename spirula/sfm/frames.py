"""Frames for structure from motion out of a video: ``spirula frames``.

Every frame is decoded (PyAV, threaded) and the output timeline is cut into
windows; of each window the sharpest frame is kept, so a frame smeared by
motion blur or a focus hunt loses to a neighbour a few milliseconds away.

- **Windows.** ``fps=F``: windows of 1/F seconds on the frames' presentation
  timestamps (variable frame rate clips included; the frame index is never
  read as a time). ``every=N``: windows of N consecutive decoded frames. At
  most ``max_frames`` windows: past that, the windows widen evenly.
- **Sharpness.** The variance of the 4-neighbour Laplacian of the frame's
  grey image, downscaled (FFmpeg's area filter) by an integer factor so its
  long side is at most :data:`SHARPNESS_SIDE` pixels. There, noise and
  compression blocks average out, while a motion blur that costs SIFT its
  features (a few pixels at 1080p) still flattens the edges that the
  Laplacian measures; and the score costs about 1 ms a frame, not the 10+
  of the full image.
- **Output.** ``frame_00001.jpg``, ... in time order, upright (the display
  matrix of phone videos is applied), JPEG quality 95: the source is already
  a lossy 4:2:0 video, so quality 95 (4:2:0 as well) adds an error far below
  the codec's own, at about a tenth of PNG's write time and size at 1080p.

A file that is not a video, a damaged one, or one too short for the request
raises :class:`~spirula.errors.DatasetError` with one line naming the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from spirula.errors import DatasetError

DEFAULT_FPS = 2.0  # docs/capture.md: 6-9 degrees between views of a handheld orbit
DEFAULT_MAX_FRAMES = 300  # SfM and training cost grow with the count; 300 covers 2.5 min at 2 fps
MIN_FRAMES = 3  # fewer cannot make a reconstruction (and SfM's own minimum is 3 registered)
SHARPNESS_SIDE = 640  # long side of the grey image that is scored (module docstring)
JPEG_QUALITY = 95
NAME = "frame_%05d.jpg"


class VideoError(DatasetError):
    """A video that cannot give the frames asked for (exit status 2)."""


@dataclass
class Pick:
    """One kept frame: ``index`` among the decoded frames, ``time`` in
    seconds from the first frame, its ``sharpness``, its ``window`` and the
    upright ``image`` (``[H, W, 3] uint8``)."""

    index: int
    time: float
    sharpness: float
    window: int
    image: np.ndarray


@dataclass
class VideoInfo:
    """What a first pass over the packets (no decoding) learns."""

    width: int
    height: int
    frames: int
    t0: float  # first presentation time (s)
    span: float  # from the first frame to the end of the last (s)
    rate: float  # frames per second (average)


def sharpness(grey: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian of ``grey`` ([H, W], any dtype)."""
    g = np.asarray(grey, dtype=np.float32)
    lap = g[1:-1, :-2] + g[1:-1, 2:] + g[:-2, 1:-1] + g[2:, 1:-1] - 4.0 * g[1:-1, 1:-1]
    return float(lap.var())


def display_rotation(matrix) -> int:
    """The counter-clockwise rotation, in degrees rounded to a quarter turn
    (0, 90, 180 or 270), of a display matrix (9 numbers a b u c d v x y w,
    libavutil/display.h, as in an MP4's tkhd box): the turn that shows the
    stored picture upright is its opposite. Mirroring is ignored."""
    m = [float(v) for v in matrix]
    s0, s1 = math.hypot(m[0], m[3]), math.hypot(m[1], m[4])
    if s0 == 0 or s1 == 0:
        return 0
    angle = -math.degrees(math.atan2(m[1] / s1, m[0] / s0))  # av_display_rotation_get
    return int(round(angle / 90.0)) % 4 * 90


def upright(image: np.ndarray, rotation: float) -> np.ndarray:
    """``image`` turned as a player shows it, for a display ``rotation`` in
    degrees counter-clockwise as FFmpeg reports it (PyAV's
    ``VideoFrame.rotation``: -90 for a phone held upright, whose matrix asks
    for a quarter turn clockwise). Rounded to quarter turns."""
    k = int(round(float(rotation) / 90.0)) % 4
    return np.ascontiguousarray(np.rot90(image, k)) if k else image


def _open(video: Path):
    import av

    if not video.exists():
        raise VideoError("%s: no such file" % video)
    if video.is_dir():
        raise VideoError("%s: is a folder, not a video file" % video)
    try:
        container = av.open(str(video))
    except av.FFmpegError as exc:
        raise VideoError("%s: not a readable video (%s)" % (video, _reason(exc))) from None
    if not container.streams.video:
        container.close()
        raise VideoError("%s: has no video stream" % video)
    stream = container.streams.video[0]
    if stream.codec_context is None or not stream.codec_context.width:
        container.close()
        raise VideoError("%s: video stream of unknown size (unsupported codec?)" % video)
    return container, stream


def _reason(exc) -> str:
    s = getattr(exc, "strerror", None) or str(exc)
    return s.splitlines()[0] if s else type(exc).__name__


def probe(video) -> VideoInfo:
    """Size, frame count and presentation times of ``video`` from its
    packets (nothing is decoded)."""
    import av

    video = Path(video)
    container, stream = _open(video)
    tb = stream.time_base or Fraction(1, 1)
    times = []
    try:
        with container:
            width, height = stream.codec_context.width, stream.codec_context.height
            avg = float(stream.average_rate) if stream.average_rate else 0.0
            for packet in container.demux(stream):
                if packet.size == 0:
                    continue
                times.append(None if packet.pts is None else float(packet.pts * tb))
    except av.FFmpegError as exc:
        raise VideoError("%s: damaged video (%s)" % (video, _reason(exc))) from None
    if not times:
        raise VideoError("%s: the video stream holds no frames" % video)
    n = len(times)
    if any(t is None for t in times):  # e.g. a raw .h264 stream: no timestamps
        rate = avg or 30.0
        return VideoInfo(width, height, n, 0.0, n / rate, rate)
    ts = np.sort(np.asarray(times))
    step = float(np.median(np.diff(ts))) if n > 1 else (1.0 / avg if avg else 1.0 / 30)
    span = float(ts[-1] - ts[0]) + step
    return VideoInfo(width, height, n, float(ts[0]), span, n / span if span > 0 else avg)


def plan(info: VideoInfo, fps: float | None, every: int | None, max_frames: int):
    """``(windows, window_of)``: the number of windows and a function
    ``(decoded index, time s) -> window`` for the request."""
    if every is not None:
        n = math.ceil(info.frames / every)
        if n <= max_frames:
            return n, lambda i, t: i // every
        n = max_frames
        return n, lambda i, t: min(i * n // info.frames, n - 1)
    n = min(int(math.floor(info.span * fps + 1e-6)), max_frames, info.frames)
    span, t0 = info.span, info.t0

    def window_of(i, t):
        return min(max(int((t - t0) / span * n), 0), n - 1)

    return n, window_of


def check_request(fps, every, max_frames):
    """The one-line error of a bad ``fps`` / ``every`` / ``max_frames``."""
    if fps is not None and every is not None:
        raise VideoError("--fps and --every both given: choose one")
    if fps is not None and not (fps > 0 and math.isfinite(fps)):
        raise VideoError("--fps must be a positive number, got %s" % fps)
    if every is not None and every < 1:
        raise VideoError("--every must be a positive whole number, got %s" % every)
    if max_frames is not None and max_frames < 1:
        raise VideoError("--max-frames must be a positive whole number, got %s" % max_frames)


def pick_frames(video, fps=None, every=None, max_frames=None, log=None):
    """Yield the :class:`Pick` of each window of ``video``, in time order.

    ``fps`` (default :data:`DEFAULT_FPS` when ``every`` is None) or ``every``
    (one frame per that many decoded frames); at most ``max_frames``
    (default :data:`DEFAULT_MAX_FRAMES`). ``log(msg)``: one line on the plan.
    """
    import av

    from spirula.progress import track

    check_request(fps, every, max_frames)
    video = Path(video)
    max_frames = DEFAULT_MAX_FRAMES if max_frames is None else int(max_frames)
    if every is None and fps is None:
        fps = DEFAULT_FPS
    info = probe(video)
    n, window_of = plan(info, fps, every, max_frames)
    if info.frames < MIN_FRAMES:
        raise VideoError(
            "%s: only %d frame%s, at least %d needed"
            % (video, info.frames, "" if info.frames == 1 else "s", MIN_FRAMES)
        )
    if n < MIN_FRAMES:
        raise VideoError(
            "%s: too short for the request: %.2f s, %d frames give %d frame%s (at least %d needed); %s"
            % (
                video,
                info.span,
                info.frames,
                n,
                "" if n == 1 else "s",
                MIN_FRAMES,
                "lower --every" if every is not None else "raise --fps",
            )
        )
    if log is not None:
        log(
            "frames: %s: %dx%d, %.1f s, %d frames (%.1f fps) -> %d, the sharpest of ~%.0f each"
            % (video.name, info.width, info.height, info.span, info.frames, info.rate, n, info.frames / n)
        )
    factor = max(1, math.ceil(max(info.width, info.height) / SHARPNESS_SIDE))
    sw, sh = max(info.width // factor, 3), max(info.height // factor, 3)

    container, stream = _open(video)
    stream.thread_type = "AUTO"  # frame and slice threads: decoding is most of the time
    tb = stream.time_base or Fraction(1, 1)
    best = None  # (window, score, index, time, frame)
    damaged = 0

    def frames():
        nonlocal damaged
        for packet in container.demux(stream):
            try:
                yield from packet.decode()
            except av.FFmpegError:
                damaged += 1  # the decoder resumes at the next packet

    def keep(b):
        w, score, i, t, frame = b
        rot = getattr(frame, "rotation", 0) or 0
        return Pick(i, t - info.t0, score, w, upright(frame.to_ndarray(format="rgb24"), rot))

    try:
        with container:
            for i, frame in enumerate(track(frames(), "frames", total=info.frames, unit="frame")):
                t = float(frame.pts * tb) if frame.pts is not None else info.t0 + i / info.rate
                w = window_of(i, t)
                if best is not None and w != best[0]:
                    yield keep(best)
                    best = None
                grey = frame.reformat(width=sw, height=sh, format="gray", interpolation="AREA").to_ndarray()
                score = sharpness(grey)
                if best is None or score > best[1]:
                    best = (w, score, i, t, frame)
            if best is not None:
                yield keep(best)
    except av.FFmpegError as exc:
        raise VideoError("%s: damaged video (%s)" % (video, _reason(exc))) from None
    if damaged and log is not None:
        log("frames: warning: %s: %d damaged packet%s skipped" % (video, damaged, "" if damaged == 1 else "s"))


def extract_frames(video, out, fps=None, every=None, max_frames=None, log=None) -> list[Path]:
    """Write the sharpest frame of each window of ``video`` into folder
    ``out`` as ``frame_00001.jpg``, ... (see :func:`pick_frames` for the
    options); returns their paths. Earlier ``frame_*.jpg`` in ``out`` are
    removed first, so a shorter run leaves no stale frames behind."""
    check_request(fps, every, max_frames)
    video, out = Path(video), Path(out)
    if out.exists() and not out.is_dir():
        raise VideoError("%s: output is a file, not a folder" % out)
    picks = pick_frames(video, fps=fps, every=every, max_frames=max_frames, log=log)
    first = next(picks, None)  # probes and checks the video before out is touched
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VideoError("%s: cannot create the output folder (%s)" % (out, exc.strerror)) from None
    for old in out.glob("frame_*.jpg"):
        old.unlink()
    paths = []
    for pick in [first] if first is not None else []:
        paths.append(_save(pick, out, len(paths) + 1))
    for pick in picks:
        paths.append(_save(pick, out, len(paths) + 1))
    if len(paths) < MIN_FRAMES:
        raise VideoError("%s: only %d frame(s) could be decoded (at least %d needed)" % (video, len(paths), MIN_FRAMES))
    if log is not None:
        log("frames: wrote %d images to %s" % (len(paths), out))
    return paths


def _save(pick: Pick, out: Path, k: int) -> Path:
    from PIL import Image

    path = out / (NAME % k)
    Image.fromarray(pick.image).save(path, quality=JPEG_QUALITY)
    return path
