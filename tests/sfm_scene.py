"""A textured scene with known cameras, for the SfM tests (tests/test_sfm.py).

Axis-aligned boxes (a floor slab, a back wall, a side wall and three blocks of
different heights, so the scene is not one plane) are ray cast in numpy. Every
face is textured with multi-octave value noise sampled in world units: blobs
from ~1 cm to ~30 cm, which SIFT finds at several scales and matches across
views. Cameras sit on an arc of radius 4 at height 1.6 (world z up) looking at
a point above the floor centre; the images are pinhole with fx = fy = 0.95 W
and the principal point at the centre. For videos that go all the way
round (tests/test_video_sfm.py), ROOM puts the blocks in a walled room and
orbit_path / walk_path give the cameras, render_path their views.

Written independently of spirula.data and pycolmap: the test compares the
poses COLMAP recovers with these (:func:`umeyama`, :func:`pose_errors_of`;
also used by benchmarks/sfm_bench.py).
"""

from __future__ import annotations

from pathlib import Path

import data_fixtures
import numpy as np
from PIL import Image

# (min corner, max corner) of each box, metres; world z up.
BOXES = [
    ((-3.0, -2.5, -0.2), (3.0, 2.5, 0.0)),  # floor slab
    ((-3.0, 2.0, 0.0), (3.0, 2.3, 2.5)),  # back wall
    ((-3.0, -2.5, 0.0), (-2.7, 2.0, 2.5)),  # left wall
    ((-0.9, -0.3, 0.0), (-0.2, 0.4, 0.9)),  # blocks
    ((0.3, 0.2, 0.0), (1.0, 0.8, 0.5)),
    ((-0.2, -1.0, 0.0), (0.3, -0.6, 1.3)),
]
TARGET = np.array([0.0, 0.3, 0.5])
# A room for orbits and walk-throughs (camera paths that go all the way round):
# the blocks of BOXES in the middle of a 14 x 14 m floor, walls 2.5 m high all
# round, so every view, whichever way it looks, sees textured surfaces.
ROOM = (
    [
        ((-7.0, -7.0, -0.2), (7.0, 7.0, 0.0)),  # floor
        ((-7.0, 6.8, 0.0), (7.0, 7.0, 2.5)),  # walls
        ((-7.0, -7.0, 0.0), (7.0, -6.8, 2.5)),
        ((-7.0, -6.8, 0.0), (-6.8, 6.8, 2.5)),
        ((6.8, -6.8, 0.0), (7.0, 6.8, 2.5)),
    ]
    + BOXES[3:]
)


def look_at(center, target=TARGET, up=(0.0, 0.0, 1.0)) -> tuple:
    """World->camera rotation R [3,3] (rows: camera x right, y down, z forward) and
    translation t [3] of a camera at ``center`` looking at ``target`` (COLMAP's frame)."""
    v = data_fixtures.look_at(center, target, up)
    return v[:3, :3], v[:3, 3]


def arc_centres(n: int, radius=4.0, height=1.6, span_deg=80.0) -> np.ndarray:
    """[n,3] camera centres on an arc in front of the scene (y < 0), evenly spaced."""
    a = np.radians(np.linspace(-span_deg / 2, span_deg / 2, n))
    return np.stack([radius * np.sin(a), -radius * np.cos(a), np.full(n, height)], axis=1)


def _noise_table(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((4, 256, 256))


def _texture(u, v, table) -> np.ndarray:
    """Value noise in [0,1] at surface coordinates (u, v) metres: 4 octaves,
    bilinear on a random lattice (periodic over 256 cells)."""
    out = np.zeros_like(u)
    total = 0.0
    for k, (cell, amp) in enumerate(((0.25, 1.0), (0.09, 0.8), (0.035, 0.6), (0.014, 0.4))):
        x, y = u / cell, v / cell
        x0, y0 = np.floor(x), np.floor(y)
        fx, fy = x - x0, y - y0
        fx, fy = fx * fx * (3 - 2 * fx), fy * fy * (3 - 2 * fy)
        i0, j0 = x0.astype(np.int64) % 256, y0.astype(np.int64) % 256
        i1, j1 = (i0 + 1) % 256, (j0 + 1) % 256
        t = table[k]
        val = (t[i0, j0] * (1 - fx) + t[i1, j0] * fx) * (1 - fy) + (t[i0, j1] * (1 - fx) + t[i1, j1] * fx) * fy
        out += amp * val
        total += amp
    return out / total


def render(R, t, K, width, height, table, boxes=BOXES) -> np.ndarray:
    """[H,W,3] uint8 image of the ``boxes`` seen by the camera (R, t, K), one ray per pixel centre."""
    px, py = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    d_cam = np.stack([(px - K[0, 2]) / K[0, 0], (py - K[1, 2]) / K[1, 1], np.ones_like(px)], -1).reshape(-1, 3)
    return render_rays(R, t, d_cam, table, boxes).reshape(height, width, 3)


def render_equirect(R, t, width, height, table, boxes=ROOM) -> np.ndarray:
    """[H,W,3] uint8 equirectangular image (the full sphere, width = 2 height) of a camera
    at (R, t): pixel (j, i) is longitude (j + 0.5) / W * 2 pi - pi (atan2(x, z), OpenCV
    axes) and latitude (i + 0.5) / H * pi - pi / 2 (atan2(y, |xz|), y down), nerfstudio's
    EQUIRECTANGULAR."""
    lon = (np.arange(width) + 0.5) / width * 2 * np.pi - np.pi
    lat = (np.arange(height) + 0.5) / height * np.pi - np.pi / 2
    lon, lat = np.meshgrid(lon, lat)
    d_cam = np.stack([np.cos(lat) * np.sin(lon), np.sin(lat), np.cos(lat) * np.cos(lon)], -1).reshape(-1, 3)
    return render_rays(R, t, d_cam, table, boxes).reshape(height, width, 3)


def render_rays(R, t, d_cam, table, boxes) -> np.ndarray:
    """[N,3] uint8 colours of the camera-space rays ``d_cam`` [N,3] of the camera (R, t)."""
    d = d_cam @ R  # camera -> world: R^T d
    o = -R.T @ t
    best = np.full(len(d), np.inf)
    hit_axis = np.zeros(len(d), np.int64)
    hit_box = np.full(len(d), -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / d
        for b, (lo, hi) in enumerate(boxes):
            t0 = (np.asarray(lo) - o) * inv
            t1 = (np.asarray(hi) - o) * inv
            tmin, tmax = np.minimum(t0, t1), np.maximum(t0, t1)
            tnear, axis = tmin.max(1), tmin.argmax(1)
            hit = (tnear <= tmax.min(1)) & (tnear > 1e-6) & (tnear < best)
            best[hit], hit_axis[hit], hit_box[hit] = tnear[hit], axis[hit], b
    p = o + d * np.where(np.isfinite(best), best, 0)[:, None]
    # Surface coordinates: the two world axes other than the face's normal, offset per box and face.
    ua = np.where(hit_axis == 0, 1, 0)
    va = np.where(hit_axis == 2, 1, 2)
    rows = np.arange(len(d))
    u = p[rows, ua] + 37.0 * hit_box + 11.0 * hit_axis
    v = p[rows, va] + 53.0 * hit_box
    albedo = _texture(u, v, table)
    shade = np.array([0.75, 0.9, 1.0])[hit_axis]  # a face's brightness by its normal's axis
    tint = np.array([[1.0, 0.85, 0.7], [0.7, 0.9, 1.0], [0.85, 1.0, 0.8]])[hit_axis]
    rgb = (0.1 + 0.85 * albedo * shade)[:, None] * tint
    rgb[hit_box < 0] = 0.05
    return (np.clip(rgb, 0, 1) * 255 + 0.5).astype(np.uint8)


def make_scene(folder, n=20, width=320, height=240, seed=0, name="frame_%05d.png"):
    """Render ``n`` views into ``folder``; returns (names, R [n,3,3], t [n,3], K [3,3])."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    table = _noise_table(seed)
    f = 0.95 * width
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    names, Rs, ts = [], [], []
    for i, c in enumerate(arc_centres(n)):
        R, t = look_at(c)
        Image.fromarray(render(R, t, K, width, height, table)).save(folder / (name % (i + 1)))
        names.append(name % (i + 1))
        Rs.append(R)
        ts.append(t)
    return names, np.array(Rs), np.array(ts), K


# Kinds of photo for make_photos: what a phone held both ways and a second camera give.
# "landscape": camera A, 320x240; "portrait": camera A held upright, stored as
# 240x320; "exif": camera A held upright, stored as the sensor reads it (320x240)
# with EXIF orientation 6 (turn 90 degrees clockwise to view), as phones write
# it; "b": camera B, 400x300 at a wider angle (focal 0.75 W), another make and model.
CAMERA_A = ("Spirula", "Phone A")
CAMERA_B = ("Other", "Camera B")
PHOTO_KINDS = dict(
    landscape=((320, 240), 304.0, CAMERA_A),
    portrait=((240, 320), 304.0, CAMERA_A),
    exif=((240, 320), 304.0, CAMERA_A),
    b=((400, 300), 300.0, CAMERA_B),
)


def make_photos(folder, kinds, seed=0, name="IMG_%04d.jpg"):
    """Render one view per entry of ``kinds`` (keys of PHOTO_KINDS), evenly along
    the arc, into ``folder`` as JPEGs with EXIF Make and Model. Returns (names,
    R [n,3,3], t [n,3], Ks [n,3,3], sizes [(W, H)]) of the cameras as the photos
    are seen upright."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    table = _noise_table(seed)
    names, Rs, ts, Ks, sizes = [], [], [], [], []
    for i, (kind, c) in enumerate(zip(kinds, arc_centres(len(kinds)))):
        (w, h), f, (make, model) = PHOTO_KINDS[kind]
        K = np.array([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1.0]])
        R, t = look_at(c)
        img = render(R, t, K, w, h, table)
        exif = Image.Exif()
        exif[0x010F], exif[0x0110] = make, model
        if kind == "exif":
            img = np.ascontiguousarray(np.rot90(img, 1))  # stored turned a quarter anticlockwise
            exif[0x0112] = 6  # so viewers turn it a quarter clockwise
        names.append(name % (i + 1))
        Image.fromarray(img).save(folder / names[-1], quality=95, exif=exif)
        Rs.append(R)
        ts.append(t)
        Ks.append(K)
        sizes.append((w, h))
    return names, np.array(Rs), np.array(ts), np.array(Ks), sizes


def orbit_path(n: int, radius=3.0, height=1.6) -> tuple:
    """``n`` cameras on one full turn round the blocks of ROOM, looking at
    TARGET, the last one a step short of the first: ``(centres [n,3], targets [n,3])``."""
    a = 2 * np.pi * np.arange(n) / n
    c = np.stack([radius * np.sin(a), -radius * np.cos(a), np.full(n, height)], axis=1)
    return c, np.repeat(TARGET[None], n, axis=0)


def walk_path(n: int, pause=(0.3, 0.42)) -> tuple:
    """``n`` cameras walking once round ROOM and back past the start (1.04
    turns, radius 3.2-4.8 m, height 1.4-1.8 m), looking ahead and 50 degrees
    in towards the middle, a little down; standing still over the fraction
    ``pause`` of the clip. ``(centres [n,3], targets [n,3])``."""
    u = np.linspace(0.0, 1.0, n)
    progress = np.interp(u, [0.0, pause[0], pause[1], 1.0], [0.0, 0.35, 0.35, 1.04])
    a = 2 * np.pi * progress
    r = 4.0 + 0.8 * np.sin(2 * a)
    c = np.stack([r * np.sin(a), -r * np.cos(a), 1.6 + 0.2 * np.sin(3 * a)], axis=1)
    ahead = np.stack([np.cos(a), np.sin(a), np.zeros(n)], axis=1)
    inward = -c * [1.0, 1.0, 0.0]
    inward /= np.linalg.norm(inward, axis=1, keepdims=True)
    look = np.cos(np.radians(50)) * ahead + np.sin(np.radians(50)) * inward
    look[:, 2] = -0.25
    return c, c + look


def render_path(centres, targets, width=256, height=192, seed=0, boxes=ROOM) -> tuple:
    """The views of cameras at ``centres`` looking at ``targets``: ``(images
    [[H,W,3] uint8], R [n,3,3], t [n,3], K [3,3])``, pinhole as make_scene's."""
    table = _noise_table(seed)
    f = 0.95 * width
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    images, Rs, ts = [], [], []
    for c, target in zip(centres, targets):
        R, t = look_at(c, target)
        images.append(render(R, t, K, width, height, table, boxes))
        Rs.append(R)
        ts.append(t)
    return images, np.array(Rs), np.array(ts), K


def umeyama(src, dst):
    """Similarity (s, R, t) minimising sum |s R src_i + t - dst_i|^2 (Umeyama 1991)."""
    mu_s, mu_d = src.mean(0), dst.mean(0)
    a, b = src - mu_s, dst - mu_d
    U, S, Vt = np.linalg.svd(b.T @ a / len(src))
    D = np.eye(3)
    D[2, 2] = np.sign(np.linalg.det(U @ Vt))
    R = U @ D @ Vt
    s = np.trace(np.diag(S) @ D) / (a**2).sum(1).mean()
    return s, R, mu_d - s * R @ mu_s


def pose_errors_of(rec, names, R_true, t_true) -> tuple:
    """(rotation errors in degrees [k], centre errors as fractions of the true
    centres' extent [k], the registered names [k]) of the images of the
    pycolmap Reconstruction ``rec`` named in ``names`` (true poses ``R_true``,
    ``t_true`` in that order), after the similarity that best aligns the
    registered centres to the true ones. Unregistered names are left out."""
    by_name = {im.name: im for im in rec.images.values() if im.has_pose}
    idx = [i for i, n in enumerate(names) if n in by_name]
    got = [names[i] for i in idx]
    c_all = np.array([-R.T @ t for R, t in zip(R_true, t_true)])
    extent = np.linalg.norm(c_all[:, None] - c_all[None], axis=-1).max()
    if len(idx) < 3:
        return np.full(len(idx), np.nan), np.full(len(idx), np.nan), got
    c_true, R_ref = c_all[idx], np.asarray(R_true)[idx]
    R_est = np.array([by_name[n].cam_from_world().rotation.matrix() for n in got])
    c_est = np.array([by_name[n].projection_center() for n in got])
    s, R_sim, t_sim = umeyama(c_est, c_true)
    centre_err = np.linalg.norm(s * c_est @ R_sim.T + t_sim - c_true, axis=1) / extent
    # world_true = s R_sim world_est + t: the true cam_from_world rotation is R_est R_sim^T
    cos = (np.einsum("nij,nij->n", R_est @ R_sim.T, R_ref) - 1) / 2
    return np.degrees(np.arccos(np.clip(cos, -1, 1))), centre_err, got
