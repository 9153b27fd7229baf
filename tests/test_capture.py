"""spirula train VIDEO|PHOTOS: what counts as a capture, the cache key, and
that a second run reuses the cached dataset (SfM replaced by a stub here;
tests/test_sfm.py runs the real one end to end)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spirula.errors import DatasetError
from spirula.sfm import pipeline


def _photos(folder: Path, n=4, size=(32, 24)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(n):
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(folder / ("p%02d.jpg" % k))
    return folder


def test_what_is_a_capture(tmp_path):
    photos = _photos(tmp_path / "photos")
    assert pipeline.capture_kind(photos) == "images"
    nested = _photos(tmp_path / "shoot" / "images")
    assert pipeline.capture_kind(nested.parent) == "images"
    assert pipeline.photo_folder(nested.parent) == nested
    video = tmp_path / "clip.MP4"
    video.write_bytes(b"not looked at here")
    assert pipeline.capture_kind(video) == "video"
    (tmp_path / "notes.txt").write_text("x")
    assert pipeline.capture_kind(tmp_path / "notes.txt") is None
    assert pipeline.capture_kind(tmp_path / "missing") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert pipeline.capture_kind(empty) is None
    # a dataset is trained as it is, even when it holds images/; a broken one
    # (sparse/ without cameras) too, so that its own error says what is wrong
    (nested.parent / "sparse" / "0").mkdir(parents=True)
    assert pipeline.capture_kind(nested.parent) is None
    (nested.parent / "sparse").rename(nested.parent / "elsewhere")
    assert pipeline.capture_kind(nested.parent) == "images"
    (nested.parent / "transforms_train.json").write_text('{"frames": []}')
    assert pipeline.capture_kind(nested.parent) is None


def test_the_cache_key_follows_the_files_and_the_settings(tmp_path):
    photos = _photos(tmp_path / "photos")
    settings = pipeline.CaptureSettings()
    key = pipeline.cache_key(photos, "images", settings)
    assert pipeline.cache_key(photos, "images", settings) == key
    assert pipeline.cache_key(photos, "images", pipeline.CaptureSettings(matcher="exhaustive")) != key
    _photos(photos, n=5)  # one photo more
    assert pipeline.cache_key(photos, "images", settings) != key
    key = pipeline.cache_key(photos, "images", settings)
    masks = photos / "masks"
    masks.mkdir()
    Image.fromarray(np.full((24, 32), 255, np.uint8)).save(masks / "p00.jpg.png")
    assert pipeline.cache_key(photos, "images", settings) != key  # masks change what SfM does
    key = pipeline.cache_key(photos, "images", settings)
    stamp = (photos / "p00.jpg").stat()
    os.utime(photos / "p00.jpg", ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))
    assert pipeline.cache_key(photos, "images", settings) != key  # a photo replaced


def test_a_second_run_uses_the_cached_dataset(tmp_path, monkeypatch):
    from spirula.sfm import colmap

    calls = []

    def fake_sfm(images, out, log=None, log_file=None, verbose=False, device=None, **kw):
        calls.append((Path(images), kw))
        (Path(out) / "sparse" / "0").mkdir(parents=True)

    monkeypatch.setattr(colmap, "run_sfm", fake_sfm)
    photos = _photos(tmp_path / "photos")
    said = []
    first = pipeline.prepare_capture(photos, log=said.append, cache=tmp_path / "cache")
    assert calls == [(photos, {})] and (first / "sparse" / "0").is_dir()
    assert pipeline.cached_dataset(photos, cache=tmp_path / "cache") == first
    again = pipeline.prepare_capture(photos, log=said.append, cache=tmp_path / "cache")
    assert again == first and len(calls) == 1
    assert "using the frames and camera poses made earlier" in said[-1]
    # other settings: SfM again, into another entry
    other = pipeline.prepare_capture(
        photos, pipeline.CaptureSettings(matcher="exhaustive"), log=said.append, cache=tmp_path / "cache"
    )
    assert other != first and calls[-1] == (photos, {"matcher": "exhaustive"})


def test_a_failed_stage_leaves_no_cache_entry(tmp_path, monkeypatch):
    from spirula.sfm import colmap

    def failing_sfm(images, out, log=None, log_file=None, verbose=False, **kw):
        (Path(out) / "sparse").mkdir(parents=True)
        raise DatasetError("%s: only 2 images registered" % images)

    monkeypatch.setattr(colmap, "run_sfm", failing_sfm)
    photos = _photos(tmp_path / "photos")
    with pytest.raises(DatasetError, match="only 2 images registered"):
        pipeline.prepare_capture(photos, log=lambda m: None, cache=tmp_path / "cache")
    assert pipeline.cached_dataset(photos, cache=tmp_path / "cache") is None
    assert list((tmp_path / "cache").iterdir()) == []  # the work folder is gone too


@pytest.mark.slow
def test_train_a_video_end_to_end_then_from_the_cache(tmp_path):
    """`spirula train clip.mp4`: frames, SfM (stage lines, profiler rows),
    training, a splat and a test PSNR; the second run reuses the poses."""
    pytest.importorskip("pycolmap")
    from sfm_scene import make_scene
    from test_cli_train import spirula
    from test_frames import encode

    frames = tmp_path / "rendered"
    names, *_ = make_scene(frames, n=24, width=320, height=240)
    clip = encode(tmp_path / "orbit.mp4", [np.asarray(Image.open(frames / n)) for n in names], rate=8)
    env = dict(SPIRULA_CAPTURE_CACHE=str(tmp_path / "captures"))
    args = ["train", clip, "--fps", "8", "--eval-split", "interval:6"]
    # 450 steps: the sparse SfM seeds (0.1 x their spacing, MCMC's init) need ~250 to cover the
    # views; at 300 the test PSNR is still climbing steeply (23.1 dB, 25.8 at 450)
    first = spirula(*args, "--iterations", "450", "-o", tmp_path / "run1", "--profile", env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "spirula: frames: 24 images from orbit.mp4" in first.stderr
    assert "spirula: camera poses ready" in first.stderr
    for row in ("stage frames", "stage sfm extract", "stage sfm match", "stage sfm map", "stage sfm undistort"):
        assert row in first.stderr, row
    metrics = json.loads((tmp_path / "run1" / "metrics.json").read_text())
    assert (tmp_path / "run1" / "splat.ply").is_file()
    # it learnt the views: better than each test image's own mean colour, by far
    (dataset,) = (tmp_path / "captures").glob("orbit-*/dataset")
    flat = []
    for view in metrics["per_image"]:
        img = np.asarray(Image.open(dataset / "images" / view["image"]), np.float64) / 255
        flat.append(-10 * np.log10(((img - img.mean((0, 1))) ** 2).mean()))
    gate = [line for line in first.stderr.splitlines() if "registered" in line]
    assert metrics["psnr"] > np.mean(flat) + 3, (metrics["psnr"], flat, gate)
    again = spirula(*args, "--iterations", "1", "-o", tmp_path / "run2", env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "using the frames and camera poses made earlier" in again.stderr
    assert "spirula: frames:" not in again.stderr


def test_dry_run_says_what_a_capture_would_run(tmp_path):
    from test_cli_train import spirula

    photos = _photos(tmp_path / "photos")
    proc = spirula("train", photos, "--dry-run", env=dict(SPIRULA_CAPTURE_CACHE=str(tmp_path / "c")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "%s: a folder of photos; training would first run SfM (nothing cached yet)" % photos


def test_a_text_file_named_like_a_video_is_one_line(tmp_path):
    from test_cli_train import assert_one_line_error, spirula

    fake = tmp_path / "clip.mp4"
    fake.write_text("not a video\n")
    proc = spirula("train", fake, env=dict(SPIRULA_CAPTURE_CACHE=str(tmp_path / "c")))
    assert proc.returncode == 2
    assert_one_line_error(proc, str(fake))
    assert not list((tmp_path / "c").glob("clip-*"))  # no cache entry for it
