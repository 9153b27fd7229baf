"""Frames for structure from motion out of a video: ``spirula frames``.

Every frame is decoded (PyAV, threaded) and the output timeline is cut into
windows; of each window the sharpest frame is kept, so a frame smeared by
motion blur or a focus hunt loses to a neighbour a few milliseconds away.

- **Windows.** By default (neither ``fps`` nor ``every``) the count follows
  how far the view moves (:func:`auto_count`): a first pass measures the
  image motion between frames (:class:`MotionMeter`, on grey frames
  :data:`MOTION_SIDE` px long) and the windows hold equal shares of it, one
  per :data:`MOTION_STEP` of the frame's long side, at least
  :data:`MIN_AUTO_FRAMES` (every frame of a shorter clip), at most
  ``max_frames``; a second pass decodes again and keeps the chosen frames.
  ``fps=F``: windows of 1/F seconds on the frames' presentation timestamps
  (variable frame rate clips included; the frame index is never read as a
  time). ``every=N``: windows of N consecutive decoded frames. At most
  ``max_frames`` windows: past that, the windows widen evenly.
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

DEFAULT_MAX_FRAMES = 300  # SfM and training cost grow with the count (docs/capture.md)
# The automatic policy (docs/capture.md, "How many frames"): a frame each time the
# view has moved MOTION_STEP of the frame's long side, at least MIN_AUTO_FRAMES
MOTION_STEP = 0.03  # a point stays in view for ~30 kept frames; SfM's window of 10 spans 30%
MIN_AUTO_FRAMES = 60  # a short clip still gives SfM long tracks (or every frame, if it has fewer)
MOTION_SIDE = 192  # long side of the grey frames whose motion is measured
MOTION_PERCENTILE = 75  # of the blocks' shifts: the faster-moving part of the view (view_motion)
MOTION_BLOCK = 32  # blocks (px of that image) whose shifts are measured by phase correlation
ANCHOR_STEP = 0.02  # motion (of the long side) from the reference frame that moves it on
LOST_STEP = 0.05  # the motion counted when no block can be followed (a cut, a blur, a blank view)
MIN_PEAK = 0.2  # phase correlation peak of a block that is followed (noise gives ~0.08)
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


def block_shifts(a: np.ndarray, b: np.ndarray, block: int = MOTION_BLOCK):
    """``(shifts [k, 2], peaks [k])``: the displacement (px, y x) of each
    ``block`` x ``block`` tile of grey image ``b`` relative to ``a`` (the same
    shape), by phase correlation of the tiles (Hann window, sub-pixel by a
    parabola through the peak), and the height of each tile's peak (1 for a
    pure shift, ~0.08 for tiles that share nothing)."""
    h, w = a.shape
    ny, nx = h // block, w // block
    y0, x0 = (h - ny * block) // 2, (w - nx * block) // 2

    def tiles(img):
        t = np.asarray(img, np.float32)[y0 : y0 + ny * block, x0 : x0 + nx * block]
        t = t.reshape(ny, block, nx, block).transpose(0, 2, 1, 3).reshape(-1, block, block)
        return (t - t.mean(axis=(1, 2), keepdims=True)) * _hann(block)

    fa, fb = np.fft.rfft2(tiles(a)), np.fft.rfft2(tiles(b))
    cross = np.conj(fa) * fb
    r = np.fft.irfft2(cross / (np.abs(cross) + 1e-6), s=(block, block))
    k = np.arange(len(r))
    flat = r.reshape(len(r), -1).argmax(1)
    py, px = flat // block, flat % block
    peaks = r[k, py, px]

    def refine(lo, hi):  # vertex of the parabola through (-1, lo), (0, peak), (1, hi)
        d = lo - 2 * peaks + hi
        return np.where(d < 0, 0.5 * (lo - hi) / np.where(d < 0, d, -1), 0.0)

    dy = py + refine(r[k, (py - 1) % block, px], r[k, (py + 1) % block, px])
    dx = px + refine(r[k, py, (px - 1) % block], r[k, py, (px + 1) % block])
    dy = (dy + block / 2) % block - block / 2  # signed: the shift wraps around the tile
    dx = (dx + block / 2) % block - block / 2
    return np.stack([dy, dx], 1), peaks


_HANN = {}


def _hann(n: int) -> np.ndarray:
    if n not in _HANN:
        h = np.hanning(n + 2)[1:-1].astype(np.float32)
        _HANN[n] = np.outer(h, h)
    return _HANN[n]


def view_motion(a: np.ndarray, b: np.ndarray) -> float | None:
    """How far the view moved from grey image ``a`` to ``b``: the displacement
    of the tiles that phase correlation follows, the :data:`MOTION_PERCENTILE`
    th percentile of them, as a fraction of the image's long side; None when
    no tile can be followed. A percentile above the median: orbiting an
    object keeps the object still in the frame while the background sweeps
    past, and the view has changed all the same."""
    shifts, peaks = block_shifts(a, b)
    ok = peaks >= MIN_PEAK
    if not ok.any():
        return None
    return float(np.percentile(np.hypot(shifts[ok, 0], shifts[ok, 1]), MOTION_PERCENTILE)) / max(a.shape)


class MotionMeter:
    """The cumulative motion of the view over a video's frames, in long sides
    of the frame: each frame is compared with a reference frame, and once the
    view has moved :data:`ANCHOR_STEP` from it (or cannot be followed: then
    :data:`LOST_STEP` is counted), that motion is added and the frame becomes
    the reference. Comparing with a reference rather than the previous frame
    keeps noise and a still camera's jitter from adding up; the value never
    decreases."""

    def __init__(self):
        self.ref = None
        self.base = 0.0  # the motion up to the reference frame
        self.value = 0.0

    def __call__(self, grey: np.ndarray) -> float:
        if self.ref is None:
            self.ref = grey
            return 0.0
        d = view_motion(self.ref, grey)
        if d is None:
            d = LOST_STEP
        if d >= ANCHOR_STEP:
            self.base += d
            self.ref = grey
            d = 0.0
        self.value = max(self.value, self.base + d)
        return self.value


def auto_count(frames: int, motion: float, max_frames: int) -> tuple[int, str]:
    """The number of frames the automatic policy keeps from a clip of
    ``frames`` frames whose view moves ``motion`` long sides in all, and why
    (a phrase for the log line): one per :data:`MOTION_STEP`, at least
    :data:`MIN_AUTO_FRAMES`, at most ``max_frames`` and the clip's frames."""
    by_motion = int(round(motion / MOTION_STEP))
    n, why = by_motion, "one per %g%% of the frame's long side" % (100 * MOTION_STEP)
    if n < MIN_AUTO_FRAMES:
        n, why = MIN_AUTO_FRAMES, "at least %d (%d by the motion)" % (MIN_AUTO_FRAMES, by_motion)
    if n > max_frames:
        n, why = max_frames, "at most %d, --max-frames (%d by the motion)" % (max_frames, by_motion)
    if n >= frames:
        n, why = frames, "every frame (%d by the motion, at least %d)" % (by_motion, min(MIN_AUTO_FRAMES, max_frames))
    return n, why


def motion_windows(motion: np.ndarray, n: int) -> np.ndarray:
    """First frame of each of ``n`` windows (``[n]`` increasing indices,
    starting at 0) that cut the non-decreasing cumulative ``motion`` of the
    frames into equal shares; every window holds at least one frame
    (``n <= len(motion)``). A still stretch of the clip gets few windows, a
    fast one many; a clip that never moves is cut evenly in time."""
    m = np.asarray(motion, np.float64)
    count = len(m)
    if n >= count:
        return np.arange(count)
    total = m[-1] - m[0]
    if total <= 0:
        coord = np.arange(count, dtype=np.float64)
    else:  # a trace of time, so that frames of equal motion still spread
        coord = (m - m[0]) / total + 1e-6 * np.arange(count) / count
    coord = (coord - coord[0]) / (coord[-1] - coord[0])
    starts = np.searchsorted(coord, np.arange(n) / n, side="left")
    starts[0] = 0
    for k in range(1, n):  # each window at least one frame ...
        starts[k] = max(starts[k], starts[k - 1] + 1)
    for k in range(n - 1, 0, -1):  # ... and room left for the ones after it
        starts[k] = min(starts[k], count - (n - k), starts[k + 1] - 1 if k + 1 < n else count - 1)
    return starts


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

    ``fps`` (windows of 1/F s) or ``every`` (of that many decoded frames);
    neither: the automatic policy (windows of equal shares of the view's
    motion, module docstring). At most ``max_frames`` (default
    :data:`DEFAULT_MAX_FRAMES`). ``log(msg)``: one line on the plan (how many
    frames and why).
    """
    check_request(fps, every, max_frames)
    video = Path(video)
    max_frames = DEFAULT_MAX_FRAMES if max_frames is None else int(max_frames)
    info = probe(video)
    if info.frames < MIN_FRAMES:
        raise VideoError(
            "%s: only %d frame%s, at least %d needed"
            % (video, info.frames, "" if info.frames == 1 else "s", MIN_FRAMES)
        )
    if fps is None and every is None:
        yield from _pick_by_motion(video, info, max_frames, log)
        return
    n, window_of = plan(info, fps, every, max_frames)
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
        log("frames: %s: %s -> %d, the sharpest of ~%.0f each" % (video.name, _describe(info), n, info.frames / n))
    best = None  # (window, score, index, time, frame)
    decoded = _Decoder(video, info)
    for i, t, frame in decoded.frames("frames"):
        w = window_of(i, t)
        if best is not None and w != best[0]:
            yield _keep(info, *best)
            best = None
        score = sharpness(decoded.grey(frame))
        if best is None or score > best[1]:
            best = (w, score, i, t, frame)
    if best is not None:
        yield _keep(info, *best)
    decoded.report(log)


def _describe(info: VideoInfo) -> str:
    return "%dx%d, %.1f s, %d frames (%.1f fps)" % (info.width, info.height, info.span, info.frames, info.rate)


def _keep(info, w, score, i, t, frame) -> Pick:
    rot = getattr(frame, "rotation", 0) or 0
    return Pick(i, t - info.t0, score, w, upright(frame.to_ndarray(format="rgb24"), rot))


def _pick_by_motion(video: Path, info: VideoInfo, max_frames: int, log):
    """The automatic policy: a first pass scores every frame (sharpness) and
    measures the view's motion; the frames are cut into windows of equal
    motion (:func:`auto_count`, :func:`motion_windows`); a second pass
    decodes again and yields the sharpest frame of each window."""
    decoded = _Decoder(video, info)
    meter = MotionMeter()
    scores, motion = [], []
    for _, _, frame in decoded.frames("frames: motion"):
        scores.append(sharpness(decoded.grey(frame)))
        motion.append(meter(decoded.small(frame)))
    if len(scores) < MIN_FRAMES:
        raise VideoError(
            "%s: only %d frame(s) could be decoded (at least %d needed)" % (video, len(scores), MIN_FRAMES)
        )
    scores, motion = np.asarray(scores), np.asarray(motion)
    n, why = auto_count(len(scores), float(motion[-1]), max_frames)
    starts = motion_windows(motion, n)
    ends = np.append(starts[1:], len(scores))
    chosen = {int(a + np.argmax(scores[a:b])): w for w, (a, b) in enumerate(zip(starts, ends))}
    if log is not None:
        log(
            "frames: %s: %s; the view moves %.1f times the frame's long side -> %d frames: %s%s"
            % (
                video.name,
                _describe(info),
                motion[-1],
                n,
                why,
                ", the sharpest of ~%.1f each" % (len(scores) / n) if n < len(scores) else "",
            )
        )
    decoded.report(log)
    last = max(chosen)
    frames = _Decoder(video, info).frames("frames")
    for i, t, frame in frames:
        if i in chosen:
            yield _keep(info, chosen[i], float(scores[i]), i, t, frame)
        if i >= last:
            break
    frames.close()  # the container with it


class _Decoder:
    """Every frame of ``video`` decoded in order (threaded), damaged packets
    skipped and counted, with the grey images that are scored and measured."""

    def __init__(self, video: Path, info: VideoInfo):
        self.video, self.info = video, info
        self.damaged = 0
        factor = max(1, math.ceil(max(info.width, info.height) / SHARPNESS_SIDE))
        self.grey_size = (max(info.width // factor, 3), max(info.height // factor, 3))
        scale = MOTION_SIDE / max(info.width, info.height)
        self.small_size = (max(round(info.width * scale), MOTION_BLOCK), max(round(info.height * scale), MOTION_BLOCK))

    def frames(self, desc: str):
        """Yield ``(index, time s, av.VideoFrame)``."""
        import av

        from spirula.progress import track

        container, stream = _open(self.video)
        stream.thread_type = "AUTO"  # frame and slice threads: decoding is most of the time
        tb = stream.time_base or Fraction(1, 1)
        info = self.info

        def packets():
            for packet in container.demux(stream):
                try:
                    yield from packet.decode()
                except av.FFmpegError:
                    self.damaged += 1  # the decoder resumes at the next packet

        try:
            with container:
                for i, frame in enumerate(track(packets(), desc, total=info.frames, unit="frame")):
                    t = float(frame.pts * tb) if frame.pts is not None else info.t0 + i / info.rate
                    yield i, t, frame
        except av.FFmpegError as exc:
            raise VideoError("%s: damaged video (%s)" % (self.video, _reason(exc))) from None

    def grey(self, frame) -> np.ndarray:
        """The grey image whose sharpness is scored (long side <= SHARPNESS_SIDE)."""
        w, h = self.grey_size
        return frame.reformat(width=w, height=h, format="gray", interpolation="AREA").to_ndarray()

    def small(self, frame) -> np.ndarray:
        """The grey image whose motion is measured (long side MOTION_SIDE)."""
        w, h = self.small_size
        return frame.reformat(width=w, height=h, format="gray", interpolation="AREA").to_ndarray()

    def report(self, log):
        if self.damaged and log is not None:
            log(
                "frames: warning: %s: %d damaged packet%s skipped"
                % (self.video, self.damaged, "" if self.damaged == 1 else "s")
            )


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
