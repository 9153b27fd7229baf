"""``spirula sfm --features gpu``: SIFT and matching on Spirula's kernels written into
COLMAP's database (spirula/sfm/front.py), verification and mapping in pycolmap; the
choice between the two front ends; the scene of tests/test_sfm.py solved within the
same bounds as the CPU path."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from PIL import Image
from test_cli_train import spirula
from test_sfm import MAX_CENTRE_ERROR, MAX_ROTATION_DEG, pose_errors, scene  # noqa: F401 (a fixture)

from spirula.errors import DatasetError, SpirulaError
from spirula.sfm import front

pycolmap = pytest.importorskip("pycolmap")


def test_database_round_trip(device, tmp_path):
    """What the GPU front end writes is what pycolmap reads back: keypoints (COLMAP's
    affine form of x, y, scale, orientation), descriptors byte for byte, and matches
    (a pair written b-a reads back a-b, rows swapped)."""
    import sfm_scene

    from spirula.features import extract_features, match_features, release
    from spirula.reference import match as ref

    names, *_ = sfm_scene.make_scene(tmp_path / "all", n=16, width=128, height=96)
    names = names[:3]  # 5 degrees apart
    (tmp_path / "images").mkdir()
    for name in names:
        (tmp_path / "all" / name).rename(tmp_path / "images" / name)
    db = tmp_path / "database.db"
    calls = [(names, pycolmap.CameraMode.SINGLE)]
    reader = pycolmap.ImageReaderOptions()
    mask = np.full((96, 128), 255, np.uint8)
    mask[:, :30] = 0
    Image.fromarray(mask).save(tmp_path / "m.png")
    descriptors = front.extract(
        pycolmap, device, db, tmp_path / "images", calls, reader, {names[0]: tmp_path / "m.png"}, 3200
    )
    pairs = [(names[1], names[0]), (names[1], names[2])]
    got = front.match(pycolmap, device, db, descriptors, pairs)
    assert got["pairs"] == 2 and got["matches"] > 20
    d = pycolmap.Database.open(str(db))
    try:
        ids = {im.name: im.image_id for im in d.read_all_images()}
        assert sorted(ids) == names and d.num_cameras() == 1
        for name in names:
            grey, _ = front.read_grey(tmp_path / "images" / name, 3200)
            kp, desc = extract_features(device, grey, mask if name == names[0] else None)
            stored = np.asarray(d.read_keypoints(ids[name]))
            assert stored.shape == (len(kp), 6)
            np.testing.assert_allclose(stored[:, :2], kp[:, :2], rtol=0, atol=1e-4)
            np.testing.assert_allclose(np.hypot(stored[:, 2], stored[:, 4]), kp[:, 2], rtol=1e-6)
            angle = np.arctan2(stored[:, 4], stored[:, 2])
            assert np.abs(np.angle(np.exp(1j * (angle - kp[:, 3])))).max() < 1e-5
            assert (np.asarray(d.read_descriptors(ids[name]).data) == desc).all()
            assert (descriptors[name] == desc).all()
        assert (np.asarray(d.read_keypoints(ids[names[0]]))[:, 0] >= 30 - 0.5).all()  # the mask
        m = np.asarray(d.read_matches(ids[names[0]], ids[names[1]]))  # written as (1, 0)
        want = match_features(device, descriptors[names[1]], descriptors[names[0]])
        assert {tuple(r) for r in m[:, ::-1]} == {tuple(r) for r in want}
        assert {tuple(r) for r in want} == {tuple(r) for r in ref.match(descriptors[names[1]], descriptors[names[0]])}
    finally:
        d.close()
        release(device)


def test_sequential_pairs_are_pycolmaps(tmp_path):
    """The GPU path matches the pairs pycolmap's sequential matcher matches (the pairs
    its match_sequential writes into the database, the CPU path's options): 40 frames
    of noise, big enough for a few features each."""
    from spirula.sfm.colmap import SEQUENTIAL_OVERLAP

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    names = ["frame_%05d.png" % i for i in range(40)]
    for name in names:
        Image.fromarray(rng.integers(0, 256, (32, 48), np.uint8)).resize((96, 64)).save(folder / name)
    db = tmp_path / "database.db"
    pycolmap.extract_features(db, folder, device=pycolmap.Device.cpu)
    pairing = pycolmap.SequentialPairingOptions()
    pairing.overlap = SEQUENTIAL_OVERLAP
    pairing.quadratic_overlap = True
    pairing.loop_detection = False
    matching = pycolmap.FeatureMatchingOptions()
    matching.skip_geometric_verification = True
    pycolmap.match_sequential(db, matching_options=matching, pairing_options=pairing, device=pycolmap.Device.cpu)
    with sqlite3.connect(db) as con:
        ids = dict(con.execute("SELECT image_id, name FROM images"))
        written = {pycolmap.pair_id_to_image_pair(p) for (p,) in con.execute("SELECT pair_id FROM matches")}
    theirs = {tuple(sorted((ids[a], ids[b]))) for a, b in written}
    ours = front.sequential_pairs(list(reversed(names)), SEQUENTIAL_OVERLAP)
    assert len(ours) == len(set(ours)) and {tuple(sorted(p)) for p in ours} == theirs
    assert front.exhaustive_pairs(["c", "a", "b"]) == [("a", "b"), ("a", "c"), ("b", "c")]


def test_features_choice(device):
    def fails():
        raise SpirulaError("no Vulkan here")

    assert front.choose("cpu", device)[:2] == ("cpu", None)
    assert front.choose("gpu", device)[:2] == ("gpu", device)
    assert front.choose("auto", fails)[0] == "cpu" and "no Vulkan here" in front.choose("auto", fails)[2]
    with pytest.raises(SpirulaError, match="no Vulkan here"):
        front.choose("gpu", fails)
    with pytest.raises(DatasetError, match="--features"):
        front.choose("fast", device)
    # a CPU device (lavapipe) keeps pycolmap's front end by default; a GPU takes the kernels
    chosen, _, why = front.choose("auto", device)
    assert chosen == ("cpu" if device.info.is_cpu else "gpu"), why
    if device.info.is_cpu:
        assert "--features gpu" in why


def test_the_capture_cache_key_holds_the_features_choice(tmp_path):
    from spirula.sfm import pipeline

    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"not decoded here")
    keys = {f: pipeline.cache_key(clip, "video", pipeline.CaptureSettings(features=f)) for f in (None, "gpu", "cpu")}
    assert len(set(keys.values())) == 3


def test_cli_features_option(tmp_path):
    proc = spirula("sfm", tmp_path, tmp_path / "out", "--features", "fast")
    assert proc.returncode == 2 and "--features" in proc.stderr
    proc = spirula("train", tmp_path / "clip.mp4", "--features", "fast")
    assert proc.returncode == 2 and "--features" in proc.stderr


@pytest.mark.slow
def test_gpu_front_end_solves_the_scene(scene, tmp_path):  # noqa: F811 (the fixture)
    """tests/test_sfm.py's scene through ``--features gpu``: every view registered, poses
    within the CPU path's bounds (measured on lavapipe: see docs/sfm.md), the stages'
    lines, and the new kernels in --profile's kernel table."""
    root = scene[0]
    proc = spirula("sfm", root / "images", tmp_path / "out", "--features", "gpu", "--profile", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "SIFT on the GPU" in proc.stderr and "pairs on the GPU" in proc.stderr, proc.stderr
    assert "verified by pycolmap" in proc.stderr and "20 masks" in proc.stderr
    for kernel in ("sift_blur", "sift_descriptor", "match_top2", "match_mutual"):
        assert kernel in proc.stderr, kernel
    rot_err, centre_err = pose_errors(scene, tmp_path / "out")
    print(
        "GPU front end: rotation error max %.3f deg median %.3f deg, centre %.4f"
        % (rot_err.max(), np.median(rot_err), centre_err.max())
    )
    assert rot_err.max() < MAX_ROTATION_DEG, rot_err
    assert centre_err.max() < MAX_CENTRE_ERROR, centre_err
