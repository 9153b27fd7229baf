"""Every bad input raises SpirulaError with one line naming the file and the problem."""

import json
import struct

import data_fixtures as fx
import numpy as np
import pytest
from PIL import Image

from spirula.data import load_dataset
from spirula.errors import SpirulaError


@pytest.fixture(scope="module")
def truth():
    return fx.make_truth()


def error_of(*args, **kw) -> str:
    with pytest.raises(SpirulaError) as ei:
        load_dataset(*args, **kw)
    msg = str(ei.value)
    assert "\n" not in msg and msg.strip() == msg and msg
    return msg


@pytest.fixture
def colmap(tmp_path, truth):
    return fx.write_colmap(tmp_path, truth)


def test_missing_image(colmap):
    (colmap / "images" / "0007.png").unlink()
    assert error_of(colmap) == "images/0007.png: missing (referenced by sparse/0/images.bin)"


def test_image_size_mismatch(colmap):
    Image.new("RGB", (40, 30)).save(colmap / "images" / "0003.png")
    assert error_of(colmap) == "images/0003.png: 40x30, but its camera says 64x48"


@pytest.mark.parametrize("name", ["cameras.bin", "images.bin", "points3D.bin"])
def test_truncated_bin(colmap, name):
    p = colmap / "sparse" / "0" / name
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 7])
    msg = error_of(colmap)
    assert msg.startswith("sparse/0/%s: truncated (expected " % name)
    assert msg.endswith("file has %d)" % (len(data) - 7))


def test_truncated_cameras_bin_exact_message(colmap):
    p = colmap / "sparse" / "0" / "cameras.bin"
    p.write_bytes(p.read_bytes()[:30])  # count (8) + id, model, w, h (24) = 32 > 30
    assert error_of(colmap) == "sparse/0/cameras.bin: truncated (expected 24 bytes at offset 8, file has 30)"


def test_trailing_bytes_bin(colmap):
    p = colmap / "sparse" / "0" / "cameras.bin"
    p.write_bytes(p.read_bytes() + b"\0\0\0")
    assert "sparse/0/cameras.bin: 3 unexpected bytes" in error_of(colmap)


def test_image_uses_undefined_camera(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, binary=False)
    p = tmp_path / "sparse" / "0" / "images.txt"
    lines = p.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("12 "))
    tok = lines[i].split()
    tok[8] = "5"
    lines[i] = " ".join(tok)
    p.write_text("\n".join(lines) + "\n")
    assert error_of(tmp_path) == "sparse/0/images.txt: image 12 uses camera 5, which cameras.txt does not define"


def test_image_uses_undefined_camera_bin(colmap):
    p = colmap / "sparse" / "0" / "cameras.bin"
    data = bytearray(p.read_bytes())
    data[8:12] = struct.pack("<i", 5)  # camera 1 is now camera 5
    p.write_bytes(bytes(data))
    assert error_of(colmap) == "sparse/0/images.bin: image 1 uses camera 1, which cameras.bin does not define"


def test_unsupported_camera_model(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, model="FOV", params=[60, 60, 32, 24, 0.1])
    msg = error_of(tmp_path)
    assert msg.startswith("sparse/0/cameras.bin: camera 1 has model FOV, which Spirula does not support")


def test_fisheye_trains_through_its_lens_and_cannot_be_undistorted(tmp_path, truth):
    """COLMAP OPENCV_FISHEYE and FULL_OPENCV load with their parameters as the kernels' lens
    (docs/design.md §2.3), on the original images; undistort=True refuses the fisheye."""
    fx.write_colmap(tmp_path, truth, model="OPENCV_FISHEYE", params=[60, 60, 32, 24, 0.1, -0.02, 0.003, -4e-4])
    scene = load_dataset(tmp_path)
    f = scene.frames[0]
    assert f.model == "OPENCV_FISHEYE" and np.allclose(f.dist[:4], [0.1, -0.02, 0.003, -4e-4]) and not f.dist[4:].any()
    assert "spirula_undistorted" not in str(f.image_path)
    assert "cannot be undistorted" in error_of(tmp_path, undistort=True)
    full = [60, 60, 32, 24, 0.1, 0.01, 1e-3, 2e-3, 0.001, 0.05, 0.002, 0.0003]
    fx.write_colmap(tmp_path, truth, model="FULL_OPENCV", params=full)
    f = load_dataset(tmp_path).frames[0]
    # k1..k6, p1, p2, s1..s4 from fx fy cx cy k1 k2 p1 p2 k3 k4 k5 k6
    assert f.model == "OPENCV" and np.allclose(f.dist, [0.1, 0.01, 0.001, 0.05, 0.002, 0.0003, 1e-3, 2e-3, 0, 0, 0, 0])


def test_malformed_text_line(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, binary=False)
    p = tmp_path / "sparse" / "0" / "cameras.txt"
    p.write_text(p.read_text().replace("1 PINHOLE 64 48", "1 PINHOLE sixty-four 48"))
    assert error_of(tmp_path).startswith("sparse/0/cameras.txt: line 4: expected CAMERA_ID MODEL")
    p.write_text("1 PINHOLE 64 48 60 60 32\n")
    assert error_of(tmp_path) == "sparse/0/cameras.txt: line 1: camera 1 (PINHOLE) has 3 parameters, expected 4"


def test_missing_images_file(colmap):
    (colmap / "sparse" / "0" / "images.bin").unlink()
    assert error_of(colmap) == "sparse/0/images.bin: missing (the model has sparse/0/cameras.bin)"


@pytest.mark.parametrize("name", ["transforms_train.json", "transforms_test.json"])
def test_malformed_blender_json(tmp_path, truth, name):
    fx.write_blender(tmp_path, truth)
    (tmp_path / name).write_text('{"camera_angle_x": 0.8, "frames": [}')
    assert error_of(tmp_path).startswith("%s: malformed JSON (line 1, column 36" % name)


def test_malformed_nerfstudio_json(tmp_path, truth):
    fx.write_nerfstudio(tmp_path, truth)
    (tmp_path / "transforms.json").write_text('{"frames": [\n  {"file_path": }')
    assert error_of(tmp_path).startswith("transforms.json: malformed JSON (line 2, column")


def test_blender_missing_image_and_bad_pose(tmp_path, truth):
    fx.write_blender(tmp_path, truth)
    (tmp_path / "train" / "r_003.png").unlink()
    assert error_of(tmp_path) == "train/r_003.png: missing (referenced by transforms_train.json)"
    fx.write_blender(tmp_path, truth)
    meta = json.loads((tmp_path / "transforms_test.json").read_text())
    meta["frames"][1]["transform_matrix"] = [[1, 0], [0, 1]]
    (tmp_path / "transforms_test.json").write_text(json.dumps(meta))
    assert error_of(tmp_path) == (
        "transforms_test.json: frame 1 (./test/r_008): transform_matrix must be a 4x4 (or 3x4) matrix of numbers"
    )
    del meta["camera_angle_x"]
    (tmp_path / "transforms_test.json").write_text(json.dumps(meta))
    assert error_of(tmp_path).startswith("transforms_test.json: camera_angle_x missing")


def test_nerfstudio_errors(tmp_path, truth):
    fx.write_nerfstudio(tmp_path, truth)
    good = json.loads((tmp_path / "transforms.json").read_text())
    meta = json.loads(json.dumps(good))
    del meta["fl_x"]
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    assert error_of(tmp_path) == (
        "transforms.json: frame 0 (images/0000.png) has no fl_x (neither per frame nor at the top level)"
    )
    meta = dict(good, w=800, h=600)
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    assert error_of(tmp_path) == "images/0000.png: 64x48, but its camera says 800x600"
    meta = dict(good, camera_model="FISHEYE624")
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    assert "camera_model FISHEYE624 is not supported" in error_of(tmp_path)
    meta = dict(good, ply_file_path="nope.ply")
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    assert error_of(tmp_path) == "transforms.json: ply_file_path 'nope.ply' does not exist"
    meta = dict(good, fl_x="sixty")
    (tmp_path / "transforms.json").write_text(json.dumps(meta))
    assert error_of(tmp_path) == "transforms.json: frame 0 (images/0000.png): fl_x is 'sixty', not a number"
    (tmp_path / "images" / "0004.png").unlink()
    (tmp_path / "transforms.json").write_text(json.dumps(good))
    assert error_of(tmp_path) == "images/0004.png: missing (referenced by transforms.json)"


def test_incomplete_images_n(colmap):
    (colmap / "images_2").mkdir()
    Image.new("RGB", (32, 24)).save(colmap / "images_2" / "0000.png")
    assert error_of(colmap, downscale=2).startswith("images_2/0001.png: missing (images_2/ exists but lacks it")


def test_images_n_wrong_size(colmap):
    (colmap / "images_2").mkdir()
    for n in fx.make_truth().names:
        Image.new("RGB", (16, 12)).save(colmap / "images_2" / n)
    assert error_of(colmap, downscale=2) == (
        "images_2/0000.png: 16x12, but its camera says 64x48, so 32x24 at downscale 2"
    )


def test_corrupt_image(colmap):
    (colmap / "images" / "0002.png").write_bytes(b"not a png")
    assert error_of(colmap).startswith("images/0002.png: cannot read image")


def test_not_a_dataset(tmp_path):
    assert error_of(tmp_path / "nowhere") == "%s: does not exist" % (tmp_path / "nowhere")
    assert error_of(tmp_path).startswith("%s: not a dataset" % tmp_path)


@pytest.mark.parametrize(
    "kw,start",
    [
        (dict(eval_split="every:8"), "eval split 'every:8'"),
        (dict(eval_split="interval:1"), "eval split"),
        (dict(background="pink"), "background 'pink'"),
        (dict(background=(2, 0, 0)), "background"),
        (dict(downscale=1.5), "downscale 1.5"),
        (dict(downscale=0), "downscale 0"),
    ],
)
def test_bad_options(colmap, kw, start):
    assert error_of(colmap, **kw).startswith(start)


def test_one_image_interval_split(tmp_path, truth):
    one = fx.Truth(
        names=truth.names[:1],
        K=truth.K,
        viewmats=truth.viewmats[:1],
        points=truth.points,
        colors=truth.colors,
        images=truth.images[:1],
    )
    fx.write_colmap(tmp_path, one)
    assert "leaves none to train on" in error_of(tmp_path)
    assert len(load_dataset(tmp_path, eval_split="none").train) == 1
    np.testing.assert_equal(load_dataset(tmp_path, eval_split="none").extent, 1.0)
