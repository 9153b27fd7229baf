"""Photo folders as people shoot them (spirula/sfm/photos.py): portrait and
landscape, EXIF-turned, from two cameras, in one folder. SfM sees them
upright, gives each size and camera its own camera, says which camera option
applies when it fails, and ``spirula train photos/`` takes the same options.

The folders are rendered (tests/sfm_scene.py, make_photos): camera A in
landscape (320x240) and held upright (240x320), stored upright or as phones
store it (320x240 pixels, EXIF orientation 6), and camera B (400x300, wider).
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageOps
from sfm_scene import CAMERA_A, CAMERA_B, make_photos
from test_cli_train import SMALL, assert_one_line_error, spirula
from test_sfm import GLOG, MAX_CENTRE_ERROR, MAX_ROTATION_DEG, umeyama

from spirula.sfm import photos as photos_mod

KIND = dict(L="landscape", E="exif", P="portrait", B="b")
# 24 views along the arc: 5 landscape, 5 EXIF-turned, 6 portrait, 8 from camera B;
# the largest group of one stored size (landscape + EXIF-turned) is under half,
# so a camera forced on all of them fails the gate
MIXED = "LEPBPBLEBPEBLPBEPBLEBPBL"


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """One view of each kind: landscape, EXIF-turned, portrait, camera B."""
    folder = tmp_path_factory.mktemp("four") / "photos"
    return folder, make_photos(folder, [KIND[k] for k in "LEPB"])


def test_headers_give_the_upright_size_and_the_camera(four):
    folder, (names, *_rest, sizes) = four
    photos = photos_mod.read_photos(folder, names)
    assert [p.stored for p in photos] == [(320, 240), (320, 240), (240, 320), (400, 300)]
    assert [p.orientation for p in photos] == [1, 6, 1, 1]
    assert [p.size for p in photos] == sizes  # upright
    assert [p.camera for p in photos] == [" ".join(CAMERA_A)] * 3 + [" ".join(CAMERA_B)]
    groups = photos_mod.camera_groups(photos)
    assert [[p.name for p in g] for g in groups] == [names[:1], names[1:3], names[3:]]
    assert photos_mod.describe_groups(groups) == (
        "240x320 Spirula Phone A (2), 320x240 Spirula Phone A (1), 400x300 Other Camera B (1)"
    )


def test_turned_photos_and_their_masks_are_copied_upright(four, tmp_path):
    folder, (names, *_) = four
    photos = photos_mod.read_photos(folder, names)
    mask = np.full((240, 320), 255, np.uint8)  # the EXIF-turned photo's mask, as its pixels are stored
    mask[:10, :20] = 0
    Image.fromarray(mask).save(tmp_path / "turned.png")
    masks = {names[1]: tmp_path / "turned.png", names[2]: tmp_path / "portrait.png"}
    Image.fromarray(np.full((320, 240), 255, np.uint8)).save(masks[names[2]])
    src, new_masks = photos_mod.upright_images(folder, photos, masks, tmp_path / "work")
    assert src == tmp_path / "work" / "images" and sorted(p.name for p in src.iterdir()) == names
    with Image.open(folder / names[1]) as stored, Image.open(src / names[1]) as upright:
        assert upright.size == (240, 320) and upright.getexif().get(0x0112) in (None, 1)
        assert upright.getexif().get(0x0110) == CAMERA_A[1]  # the rest of the EXIF kept
        expect = np.asarray(ImageOps.exif_transpose(stored), np.float64)
        assert np.abs(np.asarray(upright, np.float64) - expect).mean() < 2  # one more JPEG pass
    assert (src / names[0]).read_bytes() == (folder / names[0]).read_bytes()  # the others as they are
    turned = np.asarray(Image.open(new_masks[names[1]]))
    assert turned.shape == (320, 240)
    # stored top-left corner, turned a quarter clockwise: the top-right corner upright
    assert (turned[:20, -10:] == 0).all() and turned[20:, :].all() and turned[:, :-10].all()
    assert new_masks[names[2]] == masks[names[2]]
    # a folder without turned photos is used as it is
    plain = [p for p in photos if not p.turned]
    assert photos_mod.upright_images(folder, plain, {}, tmp_path / "none") == (folder, {})


def test_single_camera_on_several_sizes_is_one_line_naming_the_default(four, tmp_path):
    folder = four[0]
    proc = spirula("sfm", folder, tmp_path / "out", "--single-camera")
    assert proc.returncode == 2
    assert_one_line_error(proc, "--single-camera", "3 sizes", "240x320 Spirula Phone A (2)", "leave it out")
    assert not (tmp_path / "out").exists()  # refused before SfM


def test_the_failure_hint_names_the_camera_option_that_applies(four):
    folder, (names, *_) = four
    groups = photos_mod.camera_groups(photos_mod.read_photos(folder, names))
    one = [[p] for g in groups for p in g]  # every image in a group of its own
    single = photos_mod.registration_advice("single", groups, frames=False, matcher="exhaustive")
    assert single.startswith("leaving out --single-camera (these images come from 3 cameras: ")
    grouped = photos_mod.registration_advice("grouped", groups, frames=False, matcher="sequential")
    assert grouped.startswith("--camera-per-image (")
    assert grouped.endswith("more photos, each overlapping its neighbours by half, or --matcher exhaustive")
    assert photos_mod.registration_advice("grouped", one, frames=False, matcher="exhaustive") == (
        "more photos, each overlapping its neighbours by half"
    )
    per_image = photos_mod.registration_advice("per-image", groups, frames=False, matcher="exhaustive")
    assert per_image.startswith("leaving out --camera-per-image (")
    # video frames: one camera is right; the fix is in the capture
    frames = photos_mod.registration_advice("grouped", groups[1:2], frames=True, matcher="sequential")
    assert frames == "more frames (spirula frames --fps), or --matcher exhaustive"
    assert "--camera-model OPENCV" not in single + grouped + per_image + frames


def test_train_passes_the_camera_options_and_verbose_to_sfm(monkeypatch, four):
    """`spirula train photos/ --camera-per-image` (or --single-camera) reaches SfM
    through the capture settings, which key the cache; --verbose too."""
    from spirula.cli.main import _register, cli
    from spirula.sfm import pipeline

    class Stop(Exception):
        pass

    got = []

    def prepare_capture(path, settings=None, log=print, cache=None, verbose=False, device=None):
        got.append((settings.single_camera, verbose))
        raise Stop

    monkeypatch.setattr(pipeline, "prepare_capture", prepare_capture)
    _register()
    for args, want in (
        ([], (None, False)),
        (["--camera-per-image", "-v"], (False, True)),
        (["--single-camera"], (True, False)),
    ):
        with pytest.raises(Stop):
            cli.main(args=["train", str(four[0]), *args], standalone_mode=False)
        assert got[-1] == want
    keys = {
        pipeline.cache_key(four[0], "images", pipeline.CaptureSettings(single_camera=s)) for s in (None, True, False)
    }
    assert len(keys) == 3


@pytest.mark.slow
def test_train_on_a_folder_of_mixed_photos(tmp_path):
    """`spirula train photos/` on 24 photos of two cameras, portrait and landscape,
    some EXIF-turned, named IMG_0001.jpg... like a phone's: every photo
    registers (a camera forced on all of them registers under half), each size
    and camera has its own camera, the turned photos come out upright with
    poses as good as the others', and training runs on the three sizes."""
    pycolmap = pytest.importorskip("pycolmap")
    photos = tmp_path / "photos"
    names, R_true, t_true, _, sizes = make_photos(photos, [KIND[k] for k in MIXED])
    env = dict(SPIRULA_CAPTURE_CACHE=str(tmp_path / "captures"))
    proc = spirula("train", photos, "--iterations", 5, "-o", tmp_path / "run", *SMALL, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "3 cameras by size and camera: 240x320 Spirula Phone A (11), 400x300 Other Camera B (8)," in err, err
    assert "5 turned upright (EXIF orientation)" in err and "24/24 images registered" in err, err
    assert "spirula: 5 steps in" in err, err
    assert not GLOG.search(err), err  # COLMAP's own lines are in the log, not here
    (entry,) = (tmp_path / "captures").glob("photos-*")
    log = (entry / "sfm.log").read_text()
    assert GLOG.search(log) and "sfm: gate" in log and "\x1b" not in log
    dataset = entry / "dataset"
    rec = pycolmap.Reconstruction(dataset / "sparse" / "0")
    by_name = {im.name: im for im in rec.images.values()}
    assert sorted(by_name) == names
    for name, kind, (w, h) in zip(names, MIXED, sizes):
        with Image.open(dataset / "images" / name) as im:  # undistorted: a few pixels may go
            assert abs(im.width - w) <= 4 and abs(im.height - h) <= 4, (name, kind, im.size)
    # the poses against the truth, as tests/test_sfm.py checks them (same bounds)
    c_true = np.array([-R.T @ t for R, t in zip(R_true, t_true)])
    R_est = np.array([by_name[n].cam_from_world().rotation.matrix() for n in names])
    c_est = np.array([by_name[n].projection_center() for n in names])
    s, R_sim, t_sim = umeyama(c_est, c_true)
    extent = np.linalg.norm(c_true[:, None] - c_true[None], axis=-1).max()
    centre_err = np.linalg.norm(s * c_est @ R_sim.T + t_sim - c_true, axis=1) / extent
    cos = (np.einsum("nij,nij->n", R_est @ R_sim.T, R_true) - 1) / 2
    rot_err = np.degrees(np.arccos(np.clip(cos, -1, 1)))
    assert rot_err.max() < MAX_ROTATION_DEG, rot_err
    assert centre_err.max() < MAX_CENTRE_ERROR, centre_err
