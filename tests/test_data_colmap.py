"""COLMAP sparse models: binary and text, camera models, points, splits, extent."""

import data_fixtures as fx
import numpy as np
import pytest

from spirula.data import load_dataset
from spirula.data.colmap import camera_intrinsics, read_model
from spirula.data.scene import qvec_to_rotmat


@pytest.fixture(scope="module")
def truth():
    return fx.make_truth()


def check_matches_truth(scene, truth):
    assert [f.name for f in scene.frames] == truth.names
    for k, f in enumerate(scene.frames):
        np.testing.assert_allclose(f.K, truth.K, atol=1e-6)
        np.testing.assert_allclose(f.viewmat, truth.viewmats[k], atol=1e-6)
        assert (f.width, f.height) == (fx.W, fx.H)
        assert f.K.dtype == np.float64 and f.viewmat.dtype == np.float64
    assert scene.points.dtype == np.float32 and scene.points.shape == (fx.N_POINTS, 3)
    assert scene.point_colors.dtype == np.uint8
    np.testing.assert_array_equal(scene.points, truth.points)
    np.testing.assert_array_equal(scene.point_colors, truth.colors)
    assert not scene.points_random


@pytest.mark.parametrize("binary", [True, False], ids=["bin", "txt"])
def test_colmap_loads_truth(tmp_path, truth, binary):
    fx.write_colmap(tmp_path, truth, binary=binary)
    scene = load_dataset(tmp_path)
    assert scene.source == "colmap" and scene.path == tmp_path
    check_matches_truth(scene, truth)
    img = scene.load_image(3)
    assert img.shape == (fx.H, fx.W, 3) and img.dtype == np.float32
    np.testing.assert_allclose(img, truth.images[3] / 255.0, atol=1e-6)


def test_colmap_model_in_sparse_without_0(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, model_dir="sparse")
    check_matches_truth(load_dataset(tmp_path), truth)


def test_binary_preferred_and_text_equal(tmp_path, truth):
    fx.write_colmap(tmp_path / "b", truth, binary=True)
    fx.write_colmap(tmp_path / "t", truth, binary=False)
    cb, ib, pb, colb, _ = read_model(tmp_path / "b" / "sparse" / "0", tmp_path / "b")
    ct, it, pt, colt, _ = read_model(tmp_path / "t" / "sparse" / "0", tmp_path / "t")
    assert cb == ct
    assert [(i, c, n) for i, _, _, c, n in ib] == [(i, c, n) for i, _, _, c, n in it]
    np.testing.assert_array_equal(pb, pt)
    np.testing.assert_array_equal(colb, colt)


def test_pose_is_world_to_camera(tmp_path, truth):
    """A point in front of camera k projects with K @ viewmat to where a pinhole
    camera at the look-at position would see it: the origin is at the centre."""
    fx.write_colmap(tmp_path, truth)
    scene = load_dataset(tmp_path)
    for f in scene.frames:
        p = f.viewmat @ np.array([0, 0, 0, 1.0])
        assert p[2] > 0  # +z forward
        uv = (f.K @ p[:3])[:2] / p[2]
        np.testing.assert_allclose(uv, [fx.W / 2, fx.H / 2], atol=1e-9)
        np.testing.assert_allclose(np.linalg.norm(f.camera_center[:2]), 4.0, atol=1e-9)
        np.testing.assert_allclose(f.camtoworld @ f.viewmat, np.eye(4), atol=1e-12)
        up = f.viewmat[:3, :3] @ np.array([0, 0, 1.0])  # world up is -y (image up) in the camera
        assert up[1] < 0


def test_qvec_convention():
    # 90 degrees about z: x -> y.
    R = qvec_to_rotmat([np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)])
    np.testing.assert_allclose(R @ [1, 0, 0], [0, 1, 0], atol=1e-12)


@pytest.mark.parametrize(
    "model,params,K,dist",
    [
        ("SIMPLE_PINHOLE", [50, 30, 20], [50, 50, 30, 20], [0] * 6),
        ("PINHOLE", [50, 55, 30, 20], [50, 55, 30, 20], [0] * 6),
        ("SIMPLE_RADIAL", [50, 30, 20, 0.1], [50, 50, 30, 20], [0.1, 0, 0, 0, 0, 0]),
        ("RADIAL", [50, 30, 20, 0.1, 0.2], [50, 50, 30, 20], [0.1, 0.2, 0, 0, 0, 0]),
        ("OPENCV", [50, 55, 30, 20, 0.1, 0.2, 0.3, 0.4], [50, 55, 30, 20], [0.1, 0.2, 0, 0, 0.3, 0.4]),
    ],
)
def test_camera_models(model, params, K, dist):
    k, d = camera_intrinsics(model, params)
    np.testing.assert_array_equal([k[0, 0], k[1, 1], k[0, 2], k[1, 2]], K)
    np.testing.assert_array_equal(d, dist)


def test_simple_pinhole_dataset(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, model="SIMPLE_PINHOLE", params=[fx.F, fx.W / 2, fx.H / 2], binary=False)
    check_matches_truth(load_dataset(tmp_path), truth)


@pytest.mark.parametrize("interval", [8, 3, 2])
def test_interval_split_partitions(tmp_path, truth, interval):
    fx.write_colmap(tmp_path, truth)
    s = load_dataset(tmp_path, eval_split="interval:%d" % interval)
    assert s.test == list(range(0, fx.N_CAMS, interval))
    assert sorted(s.train + s.test) == list(range(fx.N_CAMS)) and not set(s.train) & set(s.test)


def test_default_split_is_interval_8_and_none_trains_all(tmp_path, truth):
    fx.write_colmap(tmp_path, truth)
    assert load_dataset(tmp_path).test == [0, 8]
    s = load_dataset(tmp_path, eval_split="none")
    assert s.train == list(range(fx.N_CAMS)) and s.test == []


def test_frames_sorted_by_name(tmp_path, truth):
    """images.bin order does not matter: frames (and so the split) are sorted by name."""
    order = [5, 2, 11, 0, 7, 1, 3, 4, 6, 8, 9, 10]
    shuffled = fx.Truth(
        names=[truth.names[i] for i in order],
        K=truth.K,
        viewmats=truth.viewmats[order],
        points=truth.points,
        colors=truth.colors,
        images=[truth.images[i] for i in order],
    )
    fx.write_colmap(tmp_path, shuffled)
    check_matches_truth(load_dataset(tmp_path), truth)


def test_extent_is_3dgs(tmp_path, truth):
    fx.write_colmap(tmp_path, truth)
    s = load_dataset(tmp_path)
    c = np.array([s.frames[i].camera_center for i in s.train])
    want = 1.1 * np.linalg.norm(c - c.mean(0), axis=1).max()
    assert s.extent == pytest.approx(want, rel=1e-12)
    s_all = load_dataset(tmp_path, eval_split="none")  # all 12: mean at (0,0,1), radius 4
    assert s_all.extent == pytest.approx(1.1 * 4.0, rel=1e-9)
    cams = s_all.cameras()
    assert cams[0].shape == (12, 4, 4) and cams[1].shape == (12, 3, 3) and cams[2].tolist()[0] == [64, 48]


def test_missing_points_gives_random_points(tmp_path, truth, capsys):
    fx.write_colmap(tmp_path, truth, write_points=False)
    s = load_dataset(tmp_path, eval_split="none")
    assert s.points_random and s.points.shape == (100_000, 3) and s.point_colors.shape == (100_000, 3)
    centre = np.array([0, 0, 1.0])
    assert np.abs(s.points - centre).max() <= s.extent + 1e-5
    assert "no seed points" in capsys.readouterr().err
    s2 = load_dataset(tmp_path, eval_split="none")
    np.testing.assert_array_equal(s.points, s2.points)
