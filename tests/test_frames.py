"""``spirula frames`` (spirula/sfm/frames.py) on short videos that the tests
encode with PyAV: the sharpest frame of each window is the one kept, the
counts that --fps / --every / --max-frames ask for, time order (variable
frame rate included), phone rotation, and one line with exit status 2 for
each bad input."""

import struct
from fractions import Fraction

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage
from test_cli_train import assert_one_line_error, spirula

av = pytest.importorskip("av")

from spirula.sfm import frames as fr  # noqa: E402

W, H, RATE, SECONDS = 160, 120, 30, 3
WINDOW = RATE // 2  # frames in a window at --fps 2


def texture(i: int, w=W, h=H) -> np.ndarray:
    """Frame ``i`` of a moving pattern: seeded noise and stripes, shifted 2 px a frame."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (h, 2 * w + 2 * 90), dtype=np.uint8)
    base = ndimage.uniform_filter(base.astype(np.float32), 2)
    base[:, ::16] = 255
    img = base[:, 2 * i : 2 * i + w]
    return np.repeat(img[..., None], 3, axis=2).clip(0, 255).astype(np.uint8)


def sharp_index(window: int) -> int:
    """The one frame of ``window`` (15 frames) left sharp; never its first or last."""
    return window * WINDOW + 1 + (window * 5) % (WINDOW - 2)


def blurred(img: np.ndarray, size: int) -> np.ndarray:
    return ndimage.uniform_filter(img.astype(np.float32), (size, size, 1)).astype(np.uint8)


def encode(path, images, times=None, codec="libx264", rate=RATE):
    """Write ``images`` ([H, W, 3] uint8) as a video; ``times`` (s) for a variable frame rate."""
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=rate)
        s.height, s.width = images[0].shape[:2]
        s.pix_fmt = "yuv420p"
        if codec == "libx264":
            s.options = {"crf": "8", "preset": "ultrafast"}
        if times is not None:
            s.codec_context.time_base = Fraction(1, 1000)
        for i, img in enumerate(images):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            if times is not None:
                f.pts, f.time_base = round(times[i] * 1000), Fraction(1, 1000)
            else:
                f.pts = i
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """3 s at 30 fps, 160x120: in each 0.5 s window one frame is sharp, the
    others blurred (box 3 to 9 px)."""
    n = RATE * SECONDS
    sharp = {sharp_index(w) for w in range(n // WINDOW)}
    images = [texture(i) if i in sharp else blurred(texture(i), 3 + 2 * (i % 4)) for i in range(n)]
    return encode(tmp_path_factory.mktemp("video") / "clip.mp4", images)


def test_sharpness_falls_with_blur():
    img = texture(0)[..., 0]
    scores = [fr.sharpness(img)] + [fr.sharpness(blurred(img[..., None], s)[..., 0]) for s in (3, 5, 9)]
    assert scores == sorted(scores, reverse=True) and scores[-1] < 0.1 * scores[0]


def test_the_sharp_frame_of_each_window_is_kept(clip):
    picks = list(fr.pick_frames(clip, fps=2))
    assert [p.window for p in picks] == list(range(6))
    assert [p.index for p in picks] == [sharp_index(w) for w in range(6)]
    times = [p.time for p in picks]
    assert times == sorted(times) and all(w * 0.5 <= t < (w + 1) * 0.5 for w, t in enumerate(times))
    assert picks[0].image.shape == (H, W, 3)


@pytest.mark.parametrize(
    "args, count",
    [
        (("--fps", "2"), 6),
        (("--fps", "10"), 30),
        (("--every", "10"), 9),
        (("--every", "7"), 13),  # ceil(90 / 7)
        (("--max-frames", "4"), 4),
        (("--every", "2", "--max-frames", "5"), 5),
    ],
)
def test_counts_follow_the_options(clip, tmp_path, args, count):
    out = tmp_path / "frames"
    proc = spirula("frames", clip, out, *args)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == [fr.NAME % k for k in range(1, count + 1)]
    with Image.open(out / names[0]) as im:
        assert im.size == (W, H) and im.format == "JPEG"


def texture2d(shape=(480, 640), seed=3) -> np.ndarray:
    """Smooth 2D noise (blobs of a few pixels) to cut views from."""
    rng = np.random.default_rng(seed)
    return ndimage.gaussian_filter(rng.random(shape) * 255, 1.5).astype(np.float32)


def test_view_motion_measures_a_shift():
    big = texture2d()
    a = big[100:244, 100:292]  # 192 x 144, as MOTION_SIDE makes it
    for dy, dx in [(0, 2), (3, -4), (-5, 5), (8, 0)]:
        b = ndimage.shift(big, (dy, dx), order=3)[100:244, 100:292]
        got = fr.view_motion(a, b) * 192
        assert abs(got - np.hypot(dy, dx)) < 0.2 * np.hypot(dy, dx) + 0.3, (dy, dx, got)
    assert fr.view_motion(a, a) < 1e-6
    unrelated = texture2d(seed=4)[:144, :192]
    assert fr.view_motion(a, unrelated) is None  # nothing to follow


def test_motion_meter_adds_up_a_pan_but_not_noise():
    big = texture2d()
    rng = np.random.default_rng(0)
    pan, still = fr.MotionMeter(), fr.MotionMeter()
    for k in range(100):  # 1 px a frame for 100 frames: 100 / 192 of the long side
        pan(big[100:244, 100 + k : 292 + k])
        still(big[100:244, 100:292] + rng.normal(0, 4, (144, 192)))
    assert 0.8 * 100 / 192 < pan.value < 1.2 * 100 / 192, pan.value
    assert still.value < fr.ANCHOR_STEP, still.value  # noise never moves the reference on


def test_auto_count_rule():
    step = fr.MOTION_STEP
    assert fr.auto_count(3600, 200 * step, 300) == (200, "one per 3% of the frame's long side")
    n, why = fr.auto_count(3600, 20 * step, 300)  # a slow, short move: at least 60
    assert n == fr.MIN_AUTO_FRAMES == 60 and why.startswith("at least 60")
    n, why = fr.auto_count(3600, 1000 * step, 300)  # a 2-minute walk-through: the cap
    assert n == 300 and "at most 300" in why
    assert fr.auto_count(3600, 1000 * step, 120)[0] == 120  # --max-frames
    assert fr.auto_count(3600, 10 * step, 40)[0] == 40  # --max-frames below the minimum wins
    n, why = fr.auto_count(96, 120 * step, 300)  # a fast 4-second orbit: every frame
    assert n == 96 and why.startswith("every frame")
    assert fr.auto_count(40, 0.0, 300)[0] == 40  # a short still clip: every frame


def test_motion_windows_share_the_motion():
    # still for 100 frames, then moving steadily for 100
    motion = np.concatenate([np.zeros(100), np.linspace(0.01, 1.0, 100)])
    starts = fr.motion_windows(motion, 20)
    assert len(starts) == 20 and starts[0] == 0 and np.all(np.diff(starts) >= 1)
    assert (starts >= 100).sum() >= 18  # the windows follow the motion
    # a clip that never moves: even in time
    assert fr.motion_windows(np.zeros(100), 10).tolist() == list(range(0, 100, 10))
    # one jump bigger than a window: still n windows, each of at least one frame
    jump = np.concatenate([np.zeros(50), np.ones(50)])
    starts = fr.motion_windows(jump, 30)
    assert len(starts) == 30 and np.all(np.diff(starts) >= 1) and starts[-1] <= 99
    assert fr.motion_windows(np.arange(5.0), 8).tolist() == [0, 1, 2, 3, 4]


def test_automatic_frames_follow_the_motion(tmp_path):
    """No options: a clip standing still for 2 s then panning for 2 s keeps
    most of its frames from the pan, and says how many and why."""
    big = texture2d((120, 600)).clip(0, 255).astype(np.uint8)
    views = [big[:, :W]] * 60 + [big[:, 3 * k : 3 * k + W] for k in range(60)]  # 3 px a frame
    clip = encode(tmp_path / "pan.mp4", [np.repeat(v[..., None], 3, 2) for v in views])
    proc = spirula("frames", clip, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    kept = sorted((tmp_path / "out").glob("frame_*.jpg"))
    line = proc.stderr.splitlines()[0]
    assert "-> %d frames" % len(kept) in line and "the view moves" in line, line
    picks = [p.index for p in fr.pick_frames(clip)]
    assert len(picks) == len(kept) >= fr.MIN_AUTO_FRAMES
    assert sum(i < 58 for i in picks) <= 3, picks  # the still part: one window or so


def test_a_second_run_leaves_no_stale_frames(clip, tmp_path):
    assert len(fr.extract_frames(clip, tmp_path, fps=10)) == 30
    (tmp_path / "notes.txt").write_text("kept")
    paths = fr.extract_frames(clip, tmp_path, every=30)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([p.name for p in paths] + ["notes.txt"])


def test_variable_frame_rate_windows_follow_timestamps(tmp_path):
    # 1.5 s at 40 fps, then 1.5 s at 10 fps: windows by frame index would put
    # 4 of every 5 picks in the first half
    times = [k / 40 for k in range(60)] + [1.5 + k / 10 for k in range(15)]
    video = encode(tmp_path / "vfr.mp4", [texture(i % 90) for i in range(len(times))], times=times)
    info = fr.probe(video)
    assert info.frames == 75 and abs(info.span - 2.925) < 1e-3  # last frame + the median step 0.025
    picks = list(fr.pick_frames(video, fps=2))
    assert len(picks) == 5  # floor(2.925 * 2)
    t = np.array([p.time for p in picks])
    assert np.all(np.diff(t) > 0)
    edges = np.arange(6) * info.span / 5
    assert all(edges[p.window] <= p.time < edges[p.window + 1] + 1e-9 for p in picks)
    assert (t < 1.5).sum() <= 3


def rotate_mp4(src, dst, matrix):
    """Copy of ``src`` whose video track header (tkhd) holds the display ``matrix``."""
    data = bytearray(src.read_bytes())
    i = data.find(b"tkhd")
    version = data[i + 4]
    at = i + 8 + (20 if version == 0 else 32) + 16  # times, ids, duration; reserved, layer, group, volume
    assert struct.unpack(">9i", data[at : at + 36]) == (1 << 16, 0, 0, 0, 1 << 16, 0, 0, 0, 1 << 30)
    data[at : at + 36] = struct.pack(">9i", *matrix)
    dst.write_bytes(bytes(data))
    return dst


def test_a_portrait_phone_video_comes_out_upright(tmp_path):
    # stored landscape, a white block top-left; the matrix of a phone held
    # upright (a quarter turn clockwise to show it) moves the block top-right
    img = texture(0) // 4
    img[:20, :30] = 255
    src = encode(tmp_path / "land.mp4", [img] * 10)
    video = rotate_mp4(src, tmp_path / "portrait.mp4", (0, 1 << 16, 0, -(1 << 16), 0, 0, H << 16, 0, 1 << 30))
    paths = fr.extract_frames(video, tmp_path / "out", every=3)
    out = np.asarray(Image.open(paths[0]).convert("L"), dtype=np.float32)
    assert out.shape == (W, H)  # portrait
    assert out[:25, -15:].mean() > 200 and out[:25, :15].mean() < 150 and out[-25:, -15:].mean() < 150


def test_rotation_of_display_matrices():
    one, q = 1 << 16, 1 << 30
    assert fr.display_rotation((one, 0, 0, 0, one, 0, 0, 0, q)) == 0
    assert fr.display_rotation((0, one, 0, -one, 0, 0, 0, 0, q)) == 270  # FFmpeg: -90
    assert fr.display_rotation((0, -one, 0, one, 0, 0, 0, 0, q)) == 90
    assert fr.display_rotation((-one, 0, 0, 0, -one, 0, 0, 0, q)) == 180
    img = np.arange(6).reshape(2, 3)
    assert fr.upright(img, -90).tolist() == [[3, 0], [4, 1], [5, 2]]  # a quarter turn clockwise
    assert fr.upright(img, 90).tolist() == [[2, 5], [1, 4], [0, 3]]
    assert fr.upright(img, 0) is img


@pytest.fixture(scope="module")
def bad(tmp_path_factory, clip):
    d = tmp_path_factory.mktemp("bad")
    (d / "notes.mp4").write_text("not a video\n")
    data = clip.read_bytes()
    (d / "truncated.mp4").write_bytes(data[: len(data) // 2])
    rng = np.random.default_rng(1)
    (d / "noise.mp4").write_bytes(rng.integers(0, 256, 20000, dtype=np.uint8).tobytes())
    with av.open(str(d / "audio.m4a"), "w") as c:
        s = c.add_stream("aac", rate=8000)
        f = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        f.sample_rate, f.pts = 8000, 0
        for p in s.encode(f):
            c.mux(p)
        for p in s.encode():
            c.mux(p)
    encode(d / "short.mp4", [texture(i) for i in range(2)])
    (d / "file").write_text("x")
    return d


@pytest.mark.parametrize(
    "case, args, words",
    [
        ("missing", ("missing.mp4", "out"), ("missing.mp4", "no such file")),
        ("text", ("notes.mp4", "out"), ("notes.mp4", "not a readable video")),
        ("truncated", ("truncated.mp4", "out"), ("truncated.mp4",)),
        ("noise", ("noise.mp4", "out"), ("noise.mp4",)),
        ("audio only", ("audio.m4a", "out"), ("audio.m4a", "no video stream")),
        ("two frames", ("short.mp4", "out"), ("short.mp4", "only 2 frames")),
        ("clip at 1 fps", ("CLIP", "out", "--fps", "0.5"), ("clip.mp4", "too short", "raise --fps")),
        ("clip every 50", ("CLIP", "out", "--every", "50"), ("clip.mp4", "too short", "lower --every")),
        ("fps and every", ("CLIP", "out", "--fps", "2", "--every", "3"), ("--fps", "--every")),
        ("zero fps", ("CLIP", "out", "--fps", "0"), ("--fps", "positive")),
        ("negative every", ("CLIP", "out", "--every", "-2"), ("--every", "positive")),
        ("zero max", ("CLIP", "out", "--max-frames", "0"), ("--max-frames", "positive")),
        ("out is a file", ("CLIP", "file"), ("file", "is a file")),
    ],
)
def test_bad_input_is_one_line(bad, clip, case, args, words):
    args = [clip if a == "CLIP" else bad / a if i < 2 else a for i, a in enumerate(args)]
    proc = spirula("frames", *args)
    assert proc.returncode == 2, (case, proc.stderr)
    assert_one_line_error(proc, *words)
    assert not (bad / "out").exists()
