"""SIFT on the GPU against COLMAP's CPU SIFT (pycolmap's extract_features, its defaults) on
views of tests/sfm_scene.py's scene (320x240, grey PNGs so that both read the same grey
values). Repeatability: the fraction of COLMAP's keypoints with one of ours within 1.5 px
and a scale within 10%. Matching score: nearest neighbours with Lowe's ratio 0.8 and the
mutual check between two views 11.4 degrees apart, a match correct when within 2 px of
the epipolar line of the known cameras, over the smaller keypoint count; ours against
COLMAP's own. Figures in docs/sfm.md ("SIFT on the GPU"); ``SPIRULA_PARITY_REPORT=1 pytest
-s`` prints them."""

import os

import numpy as np
import pytest

pycolmap = pytest.importorskip("pycolmap")


def _fundamental(K, R1, t1, R2, t2):
    R = R2 @ R1.T
    t = t2 - R @ t1
    tx = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
    Ki = np.linalg.inv(K)
    return Ki.T @ tx @ R @ Ki


def matching_score(k1, d1, k2, d2, F, ratio=0.8, px=2.0):
    """(correct matches / min(N1, N2), matches)."""
    a, b = d1.astype(np.float32), d2.astype(np.float32)
    dist = (a * a).sum(1)[:, None] + (b * b).sum(1)[None] - 2 * a @ b.T
    nn12 = np.argsort(dist, 1)[:, :2]
    nn21 = np.argmin(dist, 0)
    i = np.arange(len(a))
    d_1, d_2 = dist[i, nn12[:, 0]], dist[i, nn12[:, 1]]
    keep = (np.sqrt(np.maximum(d_1, 0)) < ratio * np.sqrt(np.maximum(d_2, 0))) & (nn21[nn12[:, 0]] == i)
    p1 = np.c_[k1[keep, :2], np.ones(keep.sum())]
    p2 = np.c_[k2[nn12[keep, 0], :2], np.ones(keep.sum())]
    l2 = p1 @ F.T  # epipolar lines in view 2
    l1 = p2 @ F
    e = np.maximum(
        np.abs((l2 * p2).sum(1)) / np.hypot(l2[:, 0], l2[:, 1]), np.abs((l1 * p1).sum(1)) / np.hypot(l1[:, 0], l1[:, 1])
    )
    return float((e < px).sum()) / min(len(k1), len(k2)), int(keep.sum())


def colmap_features(folder, names):
    db = folder / "db.db"
    pycolmap.extract_features(db, folder, image_names=names, device=pycolmap.Device.cpu)
    d = pycolmap.Database.open(db)
    try:
        out = {}
        for im in d.read_all_images():
            k = np.asarray(d.read_keypoints(im.image_id))
            desc = d.read_descriptors(im.image_id)
            desc = np.asarray(getattr(desc, "data", desc))
            scale = np.hypot(k[:, 2], k[:, 4])
            out[im.name] = (np.c_[k[:, :2], scale, np.arctan2(k[:, 4], k[:, 2])], desc)
        return out
    finally:
        d.close()


def repeatability(ours, theirs, px=1.5, scale=0.1):
    from scipy.spatial import cKDTree

    tree = cKDTree(ours[:, :2])
    hits = 0
    for k in theirs:
        idx = tree.query_ball_point(k[:2], px)
        hits += any(abs(ours[j, 2] / k[2] - 1) <= scale for j in idx)
    return hits / len(theirs)


def test_gpu_sift_against_colmap(device, tmp_path):
    import sfm_scene
    from PIL import Image

    from spirula.features import extract_features

    names, Rs, ts, K = sfm_scene.make_scene(tmp_path / "rgb", n=8, width=320, height=240)
    grey = tmp_path / "grey"
    grey.mkdir()
    pick = [names[3], names[4]]
    imgs = {}
    for n in pick:
        g = Image.open(tmp_path / "rgb" / n).convert("L")
        g.save(grey / n)
        imgs[n] = np.asarray(g)
    theirs = colmap_features(grey, pick)
    ours = {n: extract_features(device, imgs[n]) for n in pick}
    rep = [repeatability(ours[n][0], theirs[n][0]) for n in pick]
    F = _fundamental(K, Rs[3], ts[3], Rs[4], ts[4])
    ms_ours, m_ours = matching_score(*ours[pick[0]], *ours[pick[1]], F)
    ms_theirs, m_theirs = matching_score(*theirs[pick[0]], *theirs[pick[1]], F)
    if os.environ.get("SPIRULA_PARITY_REPORT"):
        print(
            "\nkeypoints ours %s colmap %s; repeatability %s; matching score ours %.3f (%d matches) colmap %.3f (%d)"
            % (
                [len(ours[n][0]) for n in pick],
                [len(theirs[n][0]) for n in pick],
                ["%.4f" % r for r in rep],
                ms_ours,
                m_ours,
                ms_theirs,
                m_theirs,
            )
        )
    assert min(rep) >= 0.95
    assert ms_theirs > 0.2  # the scene matches at all
    assert ms_ours >= 0.95 * ms_theirs
