"""``spirula sfm --camera-model EQUIRECTANGULAR`` (issue 39 item 2, the 360-degree path):
panoramas cut into a rig of pinhole views for COLMAP, solved one pose a panorama, written
as a nerfstudio EQUIRECTANGULAR dataset of the original panoramas.

The panoramas are ray cast here (tests/sfm_scene.py's textured room, render_equirect:
the projection of spirula/reference/projection.py's EQUIRECTANGULAR, written again),
so the recovered poses are compared with the true ones after a similarity.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import sfm_scene
from PIL import Image
from test_cli_train import assert_one_line_error, spirula

pycolmap = pytest.importorskip("pycolmap")

N_PANOS = 10
SIZE = (768, 384)  # the views are 192 px across (90 degrees)
# Measured here: rotation error 0.04-0.11 degrees, centres within 0.0009 of the orbit's
# extent (views of 192 px at 96 px focal: 0.26 px of reprojection error is 0.16 degrees).
# With the views' focal lengths refined by bundle adjustment every panorama came out
# tilted by 6.6 degrees, so the bounds (tests/test_sfm.py's) would catch that.
MAX_ROTATION_DEG = 0.5
MAX_CENTRE_ERROR = 0.003


def test_views_look_where_their_rotations_say():
    """Each view's centre pixel is the panorama's pixel on the view's axis, and every
    direction lends its features to exactly one view (the masks partition the sphere)."""
    from spirula.sfm import panorama

    h, w = 64, 128
    lon = (np.arange(w) + 0.5) / w * 2 * np.pi - np.pi
    lat = (np.arange(h) + 0.5) / h * np.pi - np.pi / 2
    lon, lat = np.meshgrid(lon, lat)
    # smooth round the seam, so that bilinear sampling there blends like values
    pano = np.stack([0.5 + 0.5 * np.cos(lon), 0.5 + 0.5 * np.sin(lon), lat / np.pi + 0.5], -1)
    pano = np.rint(pano * 255).astype(np.uint8)
    rotations = panorama.view_rotations()
    assert rotations.shape == (panorama.VIRTUAL, 3, 3)
    assert np.allclose(rotations @ rotations.transpose(0, 2, 1), np.eye(3), atol=1e-12)
    views, masks = panorama.cut_views(pano, rotations, 33)
    for view, R in zip(views, rotations):
        axis = R[2]  # the view's z in the panorama's frame
        a_lon, a_lat = np.arctan2(axis[0], axis[2]), np.arctan2(axis[1], np.hypot(axis[0], axis[2]))
        expect = np.array([0.5 + 0.5 * np.cos(a_lon), 0.5 + 0.5 * np.sin(a_lon), a_lat / np.pi + 0.5]) * 255
        assert np.abs(view[16, 16].astype(float) - expect).max() <= 3.0, (view[16, 16], expect)
    # the masks: a view owns its centre, not its corners (the 90-degree views overlap there:
    # a neighbour's axis is nearer), and each owns a share of the sphere
    assert (masks[:, 16, 16] == 255).all() and (masks[:, [0, 0, -1, -1], [0, -1, 0, -1]] == 0).all()
    share = (masks == 255).mean((1, 2))
    assert (share > 0.2).all() and (share < 0.9).all(), share


def test_a_panorama_that_is_not_two_to_one_is_one_line(tmp_path):
    (tmp_path / "images").mkdir()
    for k in range(3):
        Image.fromarray(np.zeros((100, 150, 3), np.uint8)).save(tmp_path / "images" / ("p%d.png" % k))
    proc = spirula("sfm", tmp_path / "images", tmp_path / "out", "--camera-model", "EQUIRECTANGULAR")
    assert_one_line_error(proc, "150x100 is not an equirectangular panorama")


def _solve_orbit(tmp_path, n: int, *options) -> tuple:
    """An orbit of ``n`` panoramas in the textured room through ``spirula sfm --camera-model
    EQUIRECTANGULAR *options``: (the process, the output folder, each registered panorama's
    rotation error in degrees, its centre's error over the orbit's extent)."""
    images = tmp_path / "panos"
    images.mkdir()
    centres, targets = sfm_scene.orbit_path(n, radius=3.0)
    table = sfm_scene._noise_table(0)
    Rs, ts = [], []
    for k, (c, target) in enumerate(zip(centres, targets)):
        R, t = sfm_scene.look_at(c, target)
        Rs.append(R)
        ts.append(t)
        Image.fromarray(sfm_scene.render_equirect(R, t, *SIZE, table)).save(images / ("pano_%02d.png" % k))
    out = tmp_path / "out"
    proc = spirula("sfm", images, out, "--camera-model", "EQUIRECTANGULAR", *options, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "%d/%d images registered" % (n, n) in proc.stderr, proc.stderr
    meta = json.loads((out / "transforms.json").read_text())
    assert (meta["camera_model"], meta["w"], meta["h"]) == ("EQUIRECTANGULAR", *SIZE)
    assert len(meta["frames"]) == n
    index = [int(f["file_path"][-6:-4]) for f in meta["frames"]]
    w2c = []
    for f in meta["frames"]:
        c2w = np.array(f["transform_matrix"])
        c2w[:3, 1:3] *= -1  # nerfstudio's OpenGL axes -> OpenCV
        w2c.append(np.linalg.inv(c2w))
    w2c = np.array(w2c)
    centres_got = np.array([np.linalg.inv(m)[:3, 3] for m in w2c])
    centres_true = np.array([-Rs[i].T @ ts[i] for i in index])
    s, R, t = sfm_scene.umeyama(centres_got, centres_true)
    rot_err = []
    for m, i in zip(w2c, index):
        d = m[:3, :3] @ R.T @ Rs[i].T
        rot_err.append(np.degrees(np.arccos(np.clip((np.trace(d) - 1) / 2, -1, 1))))
    centre_err = np.linalg.norm(s * centres_got @ R.T + t - centres_true, axis=1) / np.ptp(centres_true, 0).max()
    return proc, out, np.array(rot_err), centre_err


@pytest.mark.slow
def test_panoramas_register_as_one_rig_each_and_train(tmp_path):
    """An orbit of 10 panoramas in the textured room: every one registered, rotations
    and centres within the bounds, the dataset loaded through the equirectangular lens."""
    from spirula.data import load_dataset

    proc, out, rot_err, centre_err = _solve_orbit(tmp_path, N_PANOS)
    assert "SIFT in %d views on the CPU" % (12 * N_PANOS) in proc.stderr, proc.stderr
    assert rot_err.max() < MAX_ROTATION_DEG, rot_err
    assert centre_err.max() < MAX_CENTRE_ERROR, centre_err
    scene = load_dataset(out)
    assert {f.model for f in scene.frames} == {"EQUIRECTANGULAR"} and len(scene.frames) == N_PANOS


@pytest.mark.slow
def test_panoramas_through_the_gpu_front_end(tmp_path):
    """``--features gpu``: the views' SIFT (masks honoured) and matching on Spirula's kernels
    (lavapipe here), pycolmap's verification and mapping with the rig: the orbit of 10
    panoramas registered within the CPU path's bounds, no pair of one panorama's views
    matched (they see disjoint parts of it). ~1 minute on 2 cores."""
    n = N_PANOS
    proc, _, rot_err, centre_err = _solve_orbit(tmp_path, n, "--features", "gpu")
    assert "SIFT in %d views on the GPU" % (12 * n) in proc.stderr, proc.stderr
    pairs = (12 * n) * (12 * n - 12) // 2  # the views of other panoramas
    assert "%s pairs on the GPU" % format(pairs, ",") in proc.stderr, proc.stderr
    print(
        "GPU front end, %d panoramas: rotation error max %.3f deg, centre %.4f" % (n, rot_err.max(), centre_err.max())
    )
    assert rot_err.max() < MAX_ROTATION_DEG, rot_err
    assert centre_err.max() < MAX_CENTRE_ERROR, centre_err
