"""Datasets are never silently misread: COLMAP images.txt by structure,
impossible intrinsics, non-finite seed points and truncated image bodies are
each one error naming the file (and the camera or frame) at load."""

import json
import math
import struct

import data_fixtures as fx
import numpy as np
import pytest
from PIL import Image

from spirula.data import load_dataset
from spirula.errors import DatasetError


@pytest.fixture(scope="module")
def truth():
    return fx.make_truth()


def error_of(*args, **kw) -> str:
    with pytest.raises(DatasetError) as ei:
        load_dataset(*args, **kw)
    msg = str(ei.value)
    assert "\n" not in msg and msg.strip() == msg and msg
    return msg


def images_txt(root):
    return root / "sparse" / "0" / "images.txt"


def image_lines(root) -> list:
    """The image lines of the fixture's images.txt (every other data line)."""
    return [ln for ln in images_txt(root).read_text().splitlines() if ln.endswith(".png")]


def assert_same_scene(a, b):
    assert [f.name for f in a.frames] == [f.name for f in b.frames]
    for fa, fb in zip(a.frames, b.frames):
        np.testing.assert_array_equal(fa.viewmat, fb.viewmat)
        np.testing.assert_array_equal(fa.K, fb.K)


# --- COLMAP images.txt, parsed by structure ---------------------------------


def test_images_txt_without_points2d_lines_keeps_every_image(tmp_path, truth):
    """Some tools write one line per image, no POINTS2D line: every image is read."""
    fx.write_colmap(tmp_path, truth, binary=False)
    standard = load_dataset(tmp_path, eval_split="none")
    images_txt(tmp_path).write_text("# one line per image\n" + "\n".join(image_lines(tmp_path)) + "\n")
    scene = load_dataset(tmp_path, eval_split="none")
    assert len(scene.frames) == fx.N_CAMS
    assert_same_scene(scene, standard)


def test_images_txt_mixed_points2d_blank_lines_and_comments(tmp_path, truth):
    """POINTS2D lines for some images only (one with integral coordinates, which
    also parses as an image line), blank lines and comments in between."""
    fx.write_colmap(tmp_path, truth, binary=False)
    standard = load_dataset(tmp_path, eval_split="none")
    out = ["# Number of images: %d" % fx.N_CAMS]
    for k, ln in enumerate(image_lines(tmp_path)):
        out.append(ln)
        if k % 3 == 0:
            out.append("12 3 -1 7 8 4 1 2 3 4 5 6")  # integral X, Y: reads as an image line too
        elif k % 3 == 1:
            out += ["", "# a comment"]
    images_txt(tmp_path).write_text("\n".join(out) + "\n")
    assert_same_scene(load_dataset(tmp_path, eval_split="none"), standard)


def test_images_txt_count_must_match_its_header(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, binary=False)
    lines = images_txt(tmp_path).read_text().splitlines()
    cut = lines.index(image_lines(tmp_path)[-1])
    images_txt(tmp_path).write_text("\n".join(lines[:cut]) + "\n")  # cut at a line boundary
    assert error_of(tmp_path) == "sparse/0/images.txt: the header says 12 images, but the file has 11"


def test_images_txt_malformed_line_names_file_and_line(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, binary=False)
    lines = images_txt(tmp_path).read_text().splitlines()
    i = lines.index(image_lines(tmp_path)[3])
    lines[i + 1] = "12.5 3.25"  # a POINTS2D line cut short
    images_txt(tmp_path).write_text("\n".join(lines) + "\n")
    assert error_of(tmp_path).startswith(
        "sparse/0/images.txt: line %d: expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME or its POINTS2D line"
        % (i + 2)
    )


def test_images_listed_twice(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, binary=False)
    first = image_lines(tmp_path)[0]
    images_txt(tmp_path).write_text(first + "\n" + first.replace("0000.png", "0001.png") + "\n")
    assert error_of(tmp_path) == "sparse/0/images.txt: line 2: image 1 is listed twice"


# --- intrinsics ---------------------------------------------------------------


def camera_line(fx_=fx.F, fy=fx.F, cx=fx.W / 2, cy=fx.H / 2) -> str:
    return "1 PINHOLE %d %d %r %r %r %r\n" % (fx.W, fx.H, fx_, fy, cx, cy)


@pytest.mark.parametrize(
    "kw,what",
    [
        (dict(fx_=float("nan")), "focal length fx = nan"),
        (dict(fx_=0.0), "focal length fx = 0.0"),
        (dict(fy=-60.0), "focal length fy = -60.0"),
        (dict(fy=float("inf")), "focal length fy = inf"),
        (dict(cx=float("nan")), "principal point cx = nan"),
        (dict(cx=3 * fx.W), "principal point cx = 192.0"),
        (dict(cy=-fx.H - 1.0), "principal point cy = -49.0"),
    ],
)
def test_colmap_impossible_intrinsics(tmp_path, truth, kw, what):
    fx.write_colmap(tmp_path, truth, binary=False)
    (tmp_path / "sparse" / "0" / "cameras.txt").write_text(camera_line(**kw))
    assert error_of(tmp_path).startswith("sparse/0/cameras.txt: camera 1 (PINHOLE): " + what)


def test_colmap_principal_point_within_one_image_size_is_accepted(tmp_path, truth):
    """The bound is one image size outside the image, edges included (a crop)."""
    fx.write_colmap(tmp_path, truth, binary=False)
    (tmp_path / "sparse" / "0" / "cameras.txt").write_text(camera_line(cx=-float(fx.W), cy=2.0 * fx.H))
    assert load_dataset(tmp_path).frames[0].K[0, 2] == -fx.W


def test_colmap_bin_nan_distortion(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, model="OPENCV", params=[60, 60, 32, 24, float("nan"), 0, 0, 0])
    assert error_of(tmp_path).startswith("sparse/0/cameras.bin: camera 1 (OPENCV): distortion parameters")


def test_colmap_bin_nan_focal(tmp_path, truth):
    fx.write_colmap(tmp_path, truth)
    p = tmp_path / "sparse" / "0" / "cameras.bin"
    data = bytearray(p.read_bytes())
    data[32:40] = struct.pack("<d", float("nan"))  # params[0]: fx
    p.write_bytes(bytes(data))
    assert error_of(tmp_path).startswith("sparse/0/cameras.bin: camera 1 (PINHOLE): focal length fx = nan")


@pytest.mark.parametrize("angle", [float("nan"), 0.0, 4.0, "wide", True])
def test_blender_bad_camera_angle_y(tmp_path, truth, angle):
    fx.write_blender(tmp_path, truth)
    p = tmp_path / "transforms_train.json"
    meta = json.loads(p.read_text())
    meta["camera_angle_y"] = angle
    p.write_text(json.dumps(meta))
    assert error_of(tmp_path).startswith("transforms_train.json: camera_angle_y is %r" % (angle,))


@pytest.mark.parametrize("angle", [float("inf"), -0.5, math.pi])
def test_blender_bad_camera_angle_x(tmp_path, truth, angle):
    fx.write_blender(tmp_path, truth)
    p = tmp_path / "transforms_test.json"
    meta = json.loads(p.read_text())
    meta["camera_angle_x"] = angle
    p.write_text(json.dumps(meta))
    assert error_of(tmp_path).startswith("transforms_test.json: camera_angle_x is %r" % (angle,))


@pytest.mark.parametrize(
    "top,frame3,what",
    [
        (dict(fl_x=0.0), {}, "frame 0 (images/0000.png): focal length fl_x = 0.0"),
        (dict(fl_y=-60.0), {}, "frame 0 (images/0000.png): focal length fl_y = -60.0"),
        ({}, dict(cx=500.0), "frame 3 (images/0003.png): principal point cx = 500.0"),
        ({}, dict(fl_x=-1), "frame 3 (images/0003.png): focal length fl_x = -1.0"),
        (dict(camera_angle_x=0.0), {}, "frame 0 (images/0000.png): camera_angle_x is 0.0"),
    ],
)
def test_nerfstudio_impossible_intrinsics(tmp_path, truth, top, frame3, what):
    fx.write_nerfstudio(tmp_path, truth)
    p = tmp_path / "transforms.json"
    meta = json.loads(p.read_text())
    if "camera_angle_x" in top:
        del meta["fl_x"]
    meta.update(top)
    meta["frames"][3].update(frame3)
    p.write_text(json.dumps(meta))
    assert error_of(tmp_path).startswith("transforms.json: " + what)


def test_nerfstudio_non_finite_applied_transform(tmp_path, truth):
    fx.write_nerfstudio(tmp_path, truth)
    p = tmp_path / "transforms.json"
    meta = json.loads(p.read_text())
    meta["applied_transform"][0][3] = float("nan")
    p.write_text(json.dumps(meta))
    assert error_of(tmp_path).startswith("transforms.json: applied_transform must be")


# --- seed points ----------------------------------------------------------------


@pytest.mark.parametrize("binary", [True, False])
def test_colmap_non_finite_seed_point(tmp_path, truth, binary):
    t = fx.make_truth()
    t.points[7] = [0.0, np.nan, 0.0]
    t.points[9] = [np.inf, 0.0, 0.0]
    fx.write_colmap(tmp_path, t, binary=binary)
    name = "sparse/0/points3D.%s" % ("bin" if binary else "txt")
    assert error_of(tmp_path).startswith(name + ": 2 of 500 points have non-finite coordinates (the first: point #8")


def test_colmap_seed_point_beyond_float32(tmp_path, truth):
    fx.write_colmap(tmp_path, truth, binary=False)
    p = tmp_path / "sparse" / "0" / "points3D.txt"
    lines = p.read_text().splitlines()
    tok = lines[5].split()
    tok[1] = "1e39"
    lines[5] = " ".join(tok)
    p.write_text("\n".join(lines) + "\n")
    assert error_of(tmp_path).startswith("sparse/0/points3D.txt: 1 of 500 points have non-finite coordinates")


def test_ply_non_finite_seed_point(tmp_path, truth):
    t = fx.make_truth()
    t.points[0, 2] = np.nan
    fx.write_blender(tmp_path / "b", t)
    assert error_of(tmp_path / "b") == (
        "%s: 1 of 500 points have non-finite coordinates (the first: vertex 0, %s)"
        % (tmp_path / "b" / "points3d.ply", t.points[0].tolist())
    )
    fx.write_nerfstudio(tmp_path / "n", t)
    assert "sparse_pc.ply: 1 of 500 points have non-finite coordinates" in error_of(tmp_path / "n")


def test_ply_vertex_count_smaller_than_the_data(tmp_path, truth):
    """A header that declares fewer vertices than the file holds loses points silently."""
    fx.write_blender(tmp_path, truth)
    p = tmp_path / "points3d.ply"
    p.write_bytes(p.read_bytes().replace(b"element vertex 500", b"element vertex 50", 1))
    assert "bytes after the 50 vertices the header declares" in error_of(tmp_path)


# --- image bodies ---------------------------------------------------------------


def truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_truncated_train_image_found_at_load(tmp_path, truth):
    fx.write_colmap(tmp_path, truth)
    truncate(tmp_path / "images" / "0005.png")
    assert error_of(tmp_path).startswith("images/0005.png: cannot read image (")


def test_truncated_test_image_found_at_load(tmp_path, truth):
    """Test images are decoded only at the first evaluation: checked at load too."""
    fx.write_blender(tmp_path, truth)
    truncate(tmp_path / "test" / "r_008.png")
    assert error_of(tmp_path).startswith("test/r_008.png: cannot read image (")


def test_truncated_jpeg_found_at_load(tmp_path, truth):
    fx.write_nerfstudio(tmp_path, truth)
    Image.fromarray(truth.images[2]).save(tmp_path / "images" / "0002.jpg", quality=95)
    (tmp_path / "images" / "0002.png").unlink()
    p = tmp_path / "transforms.json"
    p.write_text(p.read_text().replace("images/0002.png", "images/0002.jpg"))
    assert len(load_dataset(tmp_path).frames) == fx.N_CAMS
    truncate(tmp_path / "images" / "0002.jpg", keep=0.6)
    assert error_of(tmp_path).startswith("images/0002.jpg: cannot read image (")
