"""Blender / NeRF-synthetic datasets: intrinsics, OpenGL poses, RGBA, random points."""

import json
import math

import data_fixtures as fx
import numpy as np
import pytest

from spirula.data import load_dataset


@pytest.fixture(scope="module")
def truth():
    return fx.make_truth()


def frame_index(name):
    """'train/r_007.png' -> 7."""
    return int(name.rsplit("_", 1)[1].split(".")[0])


def test_blender_cameras_and_split(tmp_path, truth):
    fx.write_blender(tmp_path, truth)
    s = load_dataset(tmp_path)
    assert s.source == "blender"
    names = [f.name for f in s.frames]
    assert names[:10] == ["train/r_%03d.png" % k for k in range(12) if k % 8]
    assert names[10:] == ["test/r_000.png", "test/r_008.png"]
    assert s.train == list(range(10)) and s.test == [10, 11]
    for f in s.frames:
        k = frame_index(f.name)
        np.testing.assert_allclose(f.K, truth.K, atol=1e-9)
        np.testing.assert_allclose(f.viewmat, truth.viewmats[k], atol=1e-9)
    np.testing.assert_allclose(s.background, [1, 1, 1])


def test_blender_file_split_kept_for_interval_and_none_joins(tmp_path, truth):
    fx.write_blender(tmp_path, truth)
    assert load_dataset(tmp_path, eval_split="interval:3").test == [10, 11]
    s = load_dataset(tmp_path, eval_split="none")
    assert s.train == list(range(12)) and s.test == []


@pytest.mark.parametrize("bg", ["white", "black", (0.2, 0.4, 0.6)])
def test_rgba_composited_onto_background(tmp_path, truth, bg):
    fx.write_blender(tmp_path, truth)
    s = load_dataset(tmp_path, background=bg)
    want_bg = {"white": [1, 1, 1], "black": [0, 0, 0]}.get(bg, bg) if isinstance(bg, str) else bg
    np.testing.assert_allclose(s.background, want_bg, atol=1e-7)
    i = s.test[0]  # test/r_000.png
    img = s.load_image(i)
    assert img.shape == (fx.H, fx.W, 3) and img.dtype == np.float32
    a = truth.alphas[0][:, :, None] / 255.0
    want = truth.images[0] / 255.0 * a + np.asarray(want_bg, dtype=np.float32) * (1 - a)
    np.testing.assert_allclose(img, want, atol=1e-6)
    rgba = s.load_rgba(i)
    assert rgba.shape == (fx.H, fx.W, 4)
    np.testing.assert_allclose(rgba[:, :, 3], truth.alphas[0] / 255.0, atol=1e-7)


def test_random_points_when_no_ply(tmp_path, truth):
    fx.write_blender(tmp_path, truth, with_points=False)
    s = load_dataset(tmp_path)
    assert s.points_random
    assert s.points.shape == (100_000, 3) and s.points.dtype == np.float32
    assert s.point_colors.shape == (100_000, 3) and s.point_colors.dtype == np.uint8
    assert s.points.min() >= -1.3 and s.points.max() <= 1.3
    assert s.points.min() < -1.29 and s.points.max() > 1.29  # fills the box
    np.testing.assert_array_equal(s.points, load_dataset(tmp_path).points)  # deterministic
    assert not np.array_equal(s.points, load_dataset(tmp_path, seed=1).points)


def test_points3d_ply_used(tmp_path, truth):
    fx.write_blender(tmp_path, truth)
    s = load_dataset(tmp_path)
    assert not s.points_random
    np.testing.assert_array_equal(s.points, truth.points)
    np.testing.assert_array_equal(s.point_colors, truth.colors)


def test_camera_angle_y_and_suffix_in_file_path(tmp_path, truth):
    fx.write_blender(tmp_path, truth)
    meta = json.loads((tmp_path / "transforms_train.json").read_text())
    meta["camera_angle_y"] = 2 * math.atan(0.5 * fx.H / 50.0)
    for fr in meta["frames"]:
        fr["file_path"] += ".png"
    (tmp_path / "transforms_train.json").write_text(json.dumps(meta))
    (tmp_path / "transforms_test.json").unlink()
    s = load_dataset(tmp_path)
    assert len(s.frames) == 10 and s.test == []
    np.testing.assert_allclose(s.frames[0].K[1, 1], 50.0, rtol=1e-12)
    np.testing.assert_allclose(s.frames[0].K[0, 0], fx.F, rtol=1e-12)
