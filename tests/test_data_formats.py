"""The same scene in every format loads to the same cameras and points; nerfstudio
specifics; format detection."""

import json

import data_fixtures as fx
import numpy as np
import pytest

from spirula.data import load_dataset
from spirula.data.dataset import detect_format


@pytest.fixture(scope="module")
def truth():
    return fx.make_truth()


@pytest.fixture(scope="module")
def all_formats(tmp_path_factory, truth):
    root = tmp_path_factory.mktemp("formats")
    fx.write_colmap(root / "colmap_bin", truth, binary=True)
    fx.write_colmap(root / "colmap_txt", truth, binary=False)
    fx.write_blender(root / "blender", truth)
    fx.write_nerfstudio(root / "nerfstudio", truth)
    return {name: load_dataset(root / name) for name in ("colmap_bin", "colmap_txt", "blender", "nerfstudio")}


def by_index(scene):
    """Frames keyed by camera number (0000.png -> 0, train/r_007.png -> 7)."""
    out = {}
    for i, f in enumerate(scene.frames):
        stem = f.name.rsplit("/", 1)[-1].split(".")[0]
        out[int(stem.rsplit("_", 1)[-1])] = (i, f)
    return out


def test_same_cameras_and_points_in_every_format(all_formats, truth):
    ref = by_index(all_formats["colmap_bin"])
    for name, scene in all_formats.items():
        assert scene.source == name.split("_")[0]
        frames = by_index(scene)
        assert sorted(frames) == list(range(fx.N_CAMS)), name
        for k, (_, f) in frames.items():
            np.testing.assert_allclose(f.K, ref[k][1].K, atol=1e-6, err_msg=name)
            np.testing.assert_allclose(f.viewmat, ref[k][1].viewmat, atol=1e-6, err_msg=name)
            np.testing.assert_allclose(f.viewmat, truth.viewmats[k], atol=1e-6, err_msg=name)
            assert (f.width, f.height) == (fx.W, fx.H)
        np.testing.assert_allclose(scene.points, truth.points, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(scene.point_colors, truth.colors, err_msg=name)
        # Same split too: the Blender fixture puts frames 0 and 8 in its test file.
        assert sorted(k for k, (i, _) in frames.items() if i in scene.test) == [0, 8], name
        assert scene.extent == pytest.approx(all_formats["colmap_bin"].extent, rel=1e-9)


def test_same_images_colmap_and_nerfstudio(all_formats):
    a, b = all_formats["colmap_bin"], all_formats["nerfstudio"]
    assert [f.name for f in a.frames] == [f.name for f in b.frames]  # relative to images/
    np.testing.assert_array_equal(a.load_image(5), b.load_image(5))


def test_nerfstudio_without_applied_transform(tmp_path, truth):
    """No applied_transform: transform_matrix is taken as is (OpenGL c2w)."""
    fx.write_nerfstudio(tmp_path, truth)
    meta = json.loads((tmp_path / "transforms.json").read_text())
    del meta["applied_transform"], meta["ply_file_path"]
    for k, fr in enumerate(meta["frames"]):
        fr["transform_matrix"] = fx.opencv_to_opengl_c2w(truth.viewmats[k]).tolist()
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    s = load_dataset(tmp_path)
    for k, f in enumerate(s.frames):
        np.testing.assert_allclose(f.viewmat, truth.viewmats[k], atol=1e-9)
    assert s.points_random


def test_nerfstudio_per_frame_intrinsics_and_defaults(tmp_path, truth):
    fx.write_nerfstudio(tmp_path, truth, per_frame_intrinsics=True)
    meta = json.loads((tmp_path / "transforms.json").read_text())
    meta["frames"][3]["fl_x"] = 70.0
    for key in ("fl_y", "cx", "cy", "w", "h"):
        del meta["frames"][3][key]  # fl_y = fl_x, centre, size of the image
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    s = load_dataset(tmp_path)
    np.testing.assert_allclose(s.frames[3].K, [[70, 0, 32], [0, 70, 24], [0, 0, 1]])
    np.testing.assert_allclose(s.frames[2].K, truth.K)


def test_path_to_transforms_json(tmp_path, truth):
    fx.write_nerfstudio(tmp_path, truth)
    fmt, root, origin = detect_format(tmp_path / "transforms.json")
    assert (fmt, root) == ("nerfstudio", tmp_path)
    assert len(load_dataset(tmp_path / "transforms.json").frames) == fx.N_CAMS


def test_detection_order(tmp_path, truth):
    fx.write_colmap(tmp_path, truth)
    assert detect_format(tmp_path)[0] == "colmap"
    fx.write_blender(tmp_path, truth)
    assert detect_format(tmp_path)[0] == "blender"
    fx.write_nerfstudio(tmp_path, truth)
    assert detect_format(tmp_path)[0] == "nerfstudio"
