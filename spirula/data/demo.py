"""The embedded demo scene, generated deterministically at first use.

A small ray-traced world: a checkered floor, three striped spheres casting
shadows, under a sky gradient, seen by 48 cameras circling it (160x120).
It is written as a COLMAP text model (cameras, images, points3D: surface
points with the colours a camera saw, plus noise, as SfM would give) with PNG
images, into ``$SPIRULA_CACHE_DIR`` (default ``~/.cache/spirula``)/demo-v2.
Nothing is shipped; the same bytes come out on every machine.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from spirula.cache import cache_home

VERSION = "demo-v2"
WIDTH, HEIGHT, FOCAL = 160, 120, 150.0
N_VIEWS = 48
SPHERES = (  # centre, radius, two stripe colours
    ((0.9, 0.0, 0.5), 0.5, (0.85, 0.2, 0.15), (0.95, 0.8, 0.3)),
    ((-0.55, 0.8, 0.4), 0.4, (0.15, 0.65, 0.3), (0.9, 0.95, 0.9)),
    ((-0.45, -0.85, 0.6), 0.6, (0.2, 0.3, 0.85), (0.7, 0.85, 1.0)),
)
LIGHT = np.array([0.4, -0.3, 0.87]) / np.linalg.norm([0.4, -0.3, 0.87])
FLOOR_RADIUS = 3.0
SKY_RADIUS = 9.0
# The object-centric variant (``object_world=True``; benchmarks/make_scene.py --object): the
# spheres on a small checkered disc before a black background, seen from all around, as a
# NeRF-synthetic capture: what the long-run quality benchmarks train on (issue #46).
OBJECT_FLOOR_RADIUS = 1.6


def demo_path() -> Path:
    return cache_home() / VERSION


def ensure_demo_scene(log=None) -> Path:
    """The demo dataset's folder, generating it (a few seconds) if missing."""
    path = demo_path()
    if (path / "sparse" / "0" / "points3D.txt").is_file():
        return path
    if log:
        log("spirula: generating the demo scene in %s" % path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".demo-"))
    try:
        _write(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return path


# ---- the world -------------------------------------------------------------------


def _sky(d):
    t = np.clip(d[..., 2], 0, 1)[..., None]
    return (1 - t) * np.array([0.92, 0.94, 0.97]) + t * np.array([0.35, 0.55, 0.9])


def _sphere_hit(o, d, centre, radius):
    oc = o - np.asarray(centre)
    b = (oc * d).sum(-1)
    c = (oc * oc).sum(-1) - radius**2
    disc = b * b - c
    t = -b - np.sqrt(np.maximum(disc, 0))
    return np.where((disc > 0) & (t > 1e-4), t, np.inf)


def _shade_sphere(p, i):
    centre, radius, c0, c1 = SPHERES[i]
    n = (p - np.asarray(centre)) / radius
    stripes = (np.floor(np.arctan2(n[..., 1], n[..., 0]) / np.pi * 6 + n[..., 2] * 3) % 2)[..., None]
    albedo = np.where(stripes > 0, np.asarray(c1), np.asarray(c0))
    return albedo * (0.35 + 0.65 * np.clip((n * LIGHT).sum(-1), 0, 1))[..., None]


def _shade_floor(p):
    checker = ((np.floor(p[..., 0] * 2) + np.floor(p[..., 1] * 2)) % 2)[..., None]
    albedo = np.where(checker > 0, np.array([0.82, 0.8, 0.75]), np.array([0.3, 0.28, 0.32]))
    lit = np.ones(p.shape[:-1])
    for centre, radius, _, _ in SPHERES:  # shadows of the spheres
        lit = np.where(np.isfinite(_sphere_hit(p, np.broadcast_to(LIGHT, p.shape), centre, radius)), 0.0, lit)
    return albedo * (0.35 + 0.65 * LIGHT[2] * lit)[..., None]


def trace(o, d, object_world: bool = False) -> np.ndarray:
    """Colour [...,3] of rays from o [...,3] along unit d [...,3]; ``object_world``: the
    object-centric variant (small floor, black background)."""
    t_best = np.full(d.shape[:-1], np.inf)
    colour = np.zeros(d.shape) if object_world else _sky(d)
    floor_radius = OBJECT_FLOOR_RADIUS if object_world else FLOOR_RADIUS
    t_floor = np.where(d[..., 2] < -1e-6, -o[..., 2] / np.where(d[..., 2] < -1e-6, d[..., 2], -1), np.inf)
    p = o + d * np.where(np.isfinite(t_floor), t_floor, 0)[..., None]
    t_floor = np.where((p[..., :2] ** 2).sum(-1) < floor_radius**2, t_floor, np.inf)
    hit = t_floor < t_best
    colour = np.where(hit[..., None], _shade_floor(p), colour)
    t_best = np.minimum(t_best, t_floor)
    for i, (centre, radius, _, _) in enumerate(SPHERES):
        t = _sphere_hit(o, d, centre, radius)
        hit = t < t_best
        colour = np.where(hit[..., None], _shade_sphere(o + d * np.where(hit, t, 0)[..., None], i), colour)
        t_best = np.minimum(t_best, t)
    return colour


def cameras(width=WIDTH, height=HEIGHT, focal=FOCAL, n_views=N_VIEWS):
    """(viewmats [V,4,4] world->camera OpenCV, K [3,3]) of the demo views."""
    K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1.0]])
    views = []
    for v in range(n_views):
        az = 2 * np.pi * v / n_views
        el = np.radians(22 + 14 * np.sin(3 * az))
        r = 4.2 + 0.4 * np.cos(2 * az)
        eye = np.array([r * np.cos(el) * np.cos(az), r * np.cos(el) * np.sin(az), 0.3 + r * np.sin(el)])
        fwd = np.array([0, 0, 0.35]) - eye
        fwd /= np.linalg.norm(fwd)
        right = np.cross(fwd, [0, 0, 1.0])
        right /= np.linalg.norm(right)
        down = np.cross(fwd, right)
        R = np.stack([right, down, fwd])
        vm = np.eye(4)
        vm[:3, :3] = R
        vm[:3, 3] = -R @ eye
        views.append(vm)
    return np.array(views), K


def _look_at_centre(eye) -> np.ndarray:
    """[4,4] OpenCV world->camera of a camera at ``eye`` looking at the spheres' centre
    (0, 0, 0.35), world +z up in the image."""
    fwd = np.array([0, 0, 0.35]) - eye
    fwd /= np.linalg.norm(fwd)
    right = np.cross(fwd, [0, 0, 1.0])
    right /= np.linalg.norm(right)
    R = np.stack([right, np.cross(fwd, right), fwd])
    vm = np.eye(4)
    vm[:3, :3] = R
    vm[:3, 3] = -R @ eye
    return vm


def object_cameras(width=WIDTH, height=HEIGHT, focal=FOCAL, n_views=N_VIEWS):
    """(viewmats [V,4,4], K [3,3]) of the object-centric views: a spiral over the upper
    hemisphere (elevation 8 to 72 degrees, golden-angle azimuths), all looking at the spheres."""
    K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1.0]])
    views = []
    for v in range(n_views):
        az = v * np.pi * (3 - np.sqrt(5))
        el = np.radians(8 + 64 * (v + 0.5) / n_views)
        r = 4.0 + 0.3 * np.cos(3 * az)
        eye = np.array([r * np.cos(el) * np.cos(az), r * np.cos(el) * np.sin(az), 0.35 + r * np.sin(el)])
        views.append(_look_at_centre(eye))
    return np.array(views), K


def render_view(
    viewmat, K, width=WIDTH, height=HEIGHT, supersample=2, object_world: bool = False, model="PINHOLE", dist=None
) -> np.ndarray:
    """[H,W,3] float image of one view, supersample^2 rays per pixel, through the lens
    ``model`` with ``dist`` ([12], spirula/data/lenses.py); a ray outside the lens's valid
    domain is black."""
    from spirula.data.lenses import pixel_rays

    R, t = viewmat[:3, :3], viewmat[:3, 3]
    eye = -R.T @ t
    acc = np.zeros((height, width, 3))
    offsets = (np.arange(supersample) + 0.5) / supersample
    for dy in offsets:
        for dx in offsets:
            cam, valid = pixel_rays(model, K, dist, width, height, (dx, dy))
            d = cam @ R  # camera -> world: R^T x, applied row-wise
            acc += np.where(valid[..., None], trace(np.broadcast_to(eye, d.shape), d, object_world), 0.0)
    return np.clip(acc / supersample**2, 0, 1)


def seed_points(rng, density: float = 1.0, object_world: bool = False, full_sky: bool = False) -> tuple:
    """Surface points with their shaded colour, plus noise (as SfM gives):
    on the spheres, the floor and (not ``object_world``) the sky dome
    (``density`` x the default counts); ``full_sky``: the sky below the horizon too
    (what a 360-degree camera among the spheres sees past the floor's edge), twice as many."""
    pts, cols = [], []
    for i, (centre, radius, _, _) in enumerate(SPHERES):
        n = rng.standard_normal((int(900 * density), 3))
        n /= np.linalg.norm(n, axis=1, keepdims=True)
        p = np.asarray(centre) + radius * n
        p = p[p[:, 2] > 0.02]  # under the floor: never seen
        pts.append(p)
        cols.append(_shade_sphere(p, i))
    floor_radius = OBJECT_FLOOR_RADIUS if object_world else FLOOR_RADIUS
    r = floor_radius * np.sqrt(rng.random(int(2500 * density * (floor_radius / FLOOR_RADIUS) ** 2)))
    a = 2 * np.pi * rng.random(len(r))
    p = np.stack([r * np.cos(a), r * np.sin(a), np.zeros_like(r)], 1)
    pts.append(p)
    cols.append(_shade_floor(p))
    d = rng.standard_normal((0 if object_world else int((2400 if full_sky else 1200) * density), 3))
    if not full_sky:
        d[:, 2] = np.abs(d[:, 2]) + 0.05
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    pts.append(SKY_RADIUS * d)
    cols.append(_sky(d))
    pts, cols = np.concatenate(pts), np.concatenate(cols)
    return pts + rng.normal(0, 0.01, pts.shape), np.clip(cols + rng.normal(0, 0.03, cols.shape), 0, 1)


def _qvec(R):
    """COLMAP quaternion (w, x, y, z) of a rotation matrix (any rotation: scipy
    picks the numerically stable branch, where 1 + trace alone fails near half turns)."""
    from scipy.spatial.transform import Rotation

    x, y, z, w = Rotation.from_matrix(R).as_quat()
    return np.array([w, x, y, z])


def _write(root: Path):
    from PIL import Image

    rng = np.random.default_rng(7)
    viewmats, K = cameras()
    (root / "images").mkdir(parents=True)
    (root / "sparse" / "0").mkdir(parents=True)
    lines = []
    for v, vm in enumerate(viewmats):
        name = "%04d.png" % v
        Image.fromarray(np.rint(render_view(vm, K) * 255).astype(np.uint8)).save(root / "images" / name)
        q, t = _qvec(vm[:3, :3]), vm[:3, 3]
        lines.append("%d %s 1 %s\n\n" % (v + 1, " ".join("%.12g" % x for x in list(q) + list(t)), name))
    sp = root / "sparse" / "0"
    (sp / "cameras.txt").write_text(
        "# Spirula demo scene\n1 PINHOLE %d %d %.12g %.12g %.12g %.12g\n"
        % (WIDTH, HEIGHT, K[0, 0], K[1, 1], K[0, 2], K[1, 2])
    )
    (sp / "images.txt").write_text("# Spirula demo scene\n" + "".join(lines))
    pts, cols = seed_points(rng)
    with open(sp / "points3D.txt", "w") as f:
        f.write("# Spirula demo scene\n")
        for i, (p, c) in enumerate(zip(pts, np.rint(cols * 255).astype(int))):
            f.write("%d %.9g %.9g %.9g %d %d %d 0\n" % (i + 1, p[0], p[1], p[2], c[0], c[1], c[2]))


# ---- datasets through other lenses (issue 39's evidence; tests/test_lens_training.py) ------


def fisheye_K(width: int, height: int, fov_degrees: float = 180.0) -> np.ndarray:
    """K of an equidistant fisheye whose image width spans ``fov_degrees`` (theta_d = theta)."""
    f = 0.5 * width / np.radians(0.5 * fov_degrees)
    return np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])


def equirect_K(width: int, height: int) -> np.ndarray:
    """K of an equirectangular image of the full sphere (nerfstudio's: fx = W / 2 pi, fy = H / pi)."""
    return np.array([[width / (2 * np.pi), 0, width / 2], [0, height / np.pi, height / 2], [0, 0, 1.0]])


def inside_cameras(n_views: int) -> np.ndarray:
    """[V,4,4] viewmats of cameras among the spheres (for a 360-degree camera): on a wavy
    circle of radius about 2.4 at about 1 m, each looking at the spheres' centre."""
    views = []
    for v in range(n_views):
        az = 2 * np.pi * v / n_views
        r = 2.4 + 0.25 * np.cos(2 * az)
        eye = np.array([r * np.cos(az), r * np.sin(az), 1.0 + 0.3 * np.sin(3 * az)])
        views.append(_look_at_centre(eye))
    return np.array(views)


def write_colmap_scene(root, viewmats, images, camera_line: str, points, colors) -> Path:
    """A COLMAP text model (one camera: ``camera_line`` after its id, e.g. ``"PINHOLE 96 72
    30 30 48 36"``) with PNG ``images`` ([H,W,3] float in [0,1]) as ``0000.png``..."""
    from PIL import Image

    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    sp = root / "sparse" / "0"
    sp.mkdir(parents=True, exist_ok=True)
    lines = []
    for v, (vm, img) in enumerate(zip(viewmats, images)):
        name = "%04d.png" % v
        Image.fromarray(np.rint(np.clip(img, 0, 1) * 255).astype(np.uint8)).save(root / "images" / name)
        q, t = _qvec(vm[:3, :3]), vm[:3, 3]
        lines.append("%d %s 1 %s\n\n" % (v + 1, " ".join("%.12g" % x for x in list(q) + list(t)), name))
    (sp / "cameras.txt").write_text("# Spirula demo scene\n1 %s\n" % camera_line)
    (sp / "images.txt").write_text("# Spirula demo scene\n" + "".join(lines))
    with open(sp / "points3D.txt", "w") as f:
        f.write("# Spirula demo scene\n")
        for i, (p, c) in enumerate(zip(points, np.rint(np.asarray(colors) * 255).astype(int))):
            f.write("%d %.9g %.9g %.9g %d %d %d 0\n" % (i + 1, p[0], p[1], p[2], c[0], c[1], c[2]))
    return root


def write_nerfstudio_scene(root, viewmats, images, camera: dict, points, colors) -> Path:
    """A nerfstudio ``transforms.json`` (``camera``: its top-level keys, e.g.
    ``{"camera_model": "EQUIRECTANGULAR", "w": 128, "h": 64}``) with PNG ``images`` and the
    seed points as ``points3D.ply`` (``ply_file_path``)."""
    import json

    from PIL import Image

    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    for v, (vm, img) in enumerate(zip(viewmats, images)):
        name = "images/%04d.png" % v
        Image.fromarray(np.rint(np.clip(img, 0, 1) * 255).astype(np.uint8)).save(root / name)
        c2w = np.linalg.inv(vm)
        c2w[:3, 1:3] *= -1  # OpenCV -> OpenGL camera axes
        frames.append({"file_path": name, "transform_matrix": c2w.tolist()})
    rec = np.zeros(
        len(points), dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")]
    )
    for k, key in enumerate("xyz"):
        rec[key] = np.asarray(points)[:, k]
    cols = np.rint(np.asarray(colors) * 255).astype(np.uint8)
    rec["red"], rec["green"], rec["blue"] = cols[:, 0], cols[:, 1], cols[:, 2]
    head = "ply\nformat binary_little_endian 1.0\nelement vertex %d\n" % len(rec)
    head += "".join("property %s %s\n" % ("float" if k in "xyz" else "uchar", k) for k in rec.dtype.names)
    (root / "points3D.ply").write_bytes((head + "end_header\n").encode() + rec.tobytes())
    meta = dict(camera, frames=frames, ply_file_path="points3D.ply")
    (root / "transforms.json").write_text(json.dumps(meta, indent=1))
    return root


def pinhole_crop_K(width: int, height: int, fov_degrees: float = 120.0) -> np.ndarray:
    """K of a pinhole whose image width spans ``fov_degrees``: the undistorted crop of a fisheye."""
    f = 0.5 * width / np.tan(np.radians(0.5 * fov_degrees))
    return np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])


def write_lens_scenes(root, width: int = 96, height: int = 72, n_views: int = 24, crop_fov: float = 120.0) -> dict:
    """Issue 39's evidence datasets of the demo world, into ``root``: ``fisheye/`` (COLMAP
    OPENCV_FISHEYE, equidistant, 180 degrees across the width, the demo's orbit),
    ``pinhole/`` (the same images undistorted to a ``crop_fov``-degree pinhole of the same
    size, as COLMAP's undistorter would crop them) and ``equirect/`` (nerfstudio
    EQUIRECTANGULAR, 2 ``width`` x ``width``, cameras among the spheres, seed points on
    the whole sky). Returns ``{name: folder}`` and ``"K_pinhole"``."""
    from spirula.data.lenses import resample

    root = Path(root)
    viewmats, _ = cameras(n_views=n_views)
    pts, cols = seed_points(np.random.default_rng(7))
    Kf, Kp = fisheye_K(width, height), pinhole_crop_K(width, height, crop_fov)
    fish = [render_view(vm, Kf, width, height, model="OPENCV_FISHEYE") for vm in viewmats]
    fx, fy, cx, cy = Kf[0, 0], Kf[1, 1], Kf[0, 2], Kf[1, 2]
    write_colmap_scene(
        root / "fisheye",
        viewmats,
        fish,
        "OPENCV_FISHEYE %d %d %.12g %.12g %.12g %.12g 0 0 0 0" % (width, height, fx, fy, cx, cy),
        pts,
        cols,
    )
    pin = [resample(im, ("OPENCV_FISHEYE", Kf, None), ("PINHOLE", Kp, None, width, height))[0] for im in fish]
    fx, fy, cx, cy = Kp[0, 0], Kp[1, 1], Kp[0, 2], Kp[1, 2]
    write_colmap_scene(
        root / "pinhole",
        viewmats,
        pin,
        "PINHOLE %d %d %.12g %.12g %.12g %.12g" % (width, height, fx, fy, cx, cy),
        pts,
        cols,
    )
    ew, eh = 2 * width, width
    Ke, eviews = equirect_K(ew, eh), inside_cameras(n_views)
    eq = [render_view(vm, Ke, ew, eh, model="EQUIRECTANGULAR") for vm in eviews]
    epts, ecols = seed_points(np.random.default_rng(7), full_sky=True)
    write_nerfstudio_scene(
        root / "equirect", eviews, eq, {"camera_model": "EQUIRECTANGULAR", "w": ew, "h": eh}, epts, ecols
    )
    return {"fisheye": root / "fisheye", "pinhole": root / "pinhole", "equirect": root / "equirect", "K_pinhole": Kp}


if __name__ == "__main__":
    print(ensure_demo_scene(log=lambda m: print(m, file=sys.stderr)))
