"""A synthetic scene with a known surface, for --geometry's shape test and
benchmarks/geometry_effect.py: a textured sphere (radius 1, at the origin) on
black, seen by cameras spread over a sphere of radius 3.5 looking at its centre,
written as a COLMAP model whose seed points are scattered through a ball of
radius 1.4 (not on the surface: the depths must be learned)."""

from __future__ import annotations

import math
from pathlib import Path

import data_fixtures
import numpy as np
from data_fixtures import Truth, look_at, write_colmap

RADIUS = 1.0
DISTANCE = 3.5


def sphere_cameras(n: int) -> list:
    """n world->camera [4,4] on a Fibonacci spiral of radius DISTANCE (poles avoided)."""
    views = []
    for k in range(n):
        z = 0.8 * (1 - 2 * (k + 0.5) / n)
        r = math.sqrt(1 - z * z)
        t = k * math.pi * (3 - math.sqrt(5))
        views.append(look_at((DISTANCE * r * math.cos(t), DISTANCE * r * math.sin(t), DISTANCE * z)))
    return views


def ray_sphere_depth(viewmat, K, width: int, height: int, d_cam=None) -> np.ndarray:
    """[H,W] camera z of the sphere's surface at each pixel centre (0: missed); with
    ``d_cam`` [H,W,3] (the pixels' rays through a lens) the distance along them instead."""
    i, j = np.mgrid[0:height, 0:width]
    if d_cam is None:
        d_cam = np.stack([(j + 0.5 - K[0, 2]) / K[0, 0], (i + 0.5 - K[1, 2]) / K[1, 1], np.ones_like(i, float)], -1)
    R, t = viewmat[:3, :3], viewmat[:3, 3]
    o = -R.T @ t  # camera centre in the world
    d = d_cam @ R  # world directions (R^T d_cam), z-component 1 in the camera
    a = np.sum(d * d, -1)
    b = 2 * (d @ o)
    c = o @ o - RADIUS**2
    disc = b * b - 4 * a * c
    s = (-b - np.sqrt(np.maximum(disc, 0))) / (2 * a)  # ray parameter = camera z (d_cam.z = 1)
    return np.where(disc > 0, s, 0.0)


def _texture(p: np.ndarray) -> np.ndarray:
    """Colours in [0.25, 0.9] on the unit sphere: a latitude-longitude checker."""
    lat = np.arcsin(np.clip(p[..., 2], -1, 1))
    lon = np.arctan2(p[..., 1], p[..., 0])
    check = (np.floor(lat / (math.pi / 8)) + np.floor(lon / (math.pi / 8))) % 2
    base = np.stack([0.3 + 0.5 * (p[..., 0] * 0.5 + 0.5), 0.3 + 0.4 * check, 0.35 + 0.3 * (p[..., 2] * 0.5 + 0.5)], -1)
    return np.clip(base, 0.25, 0.9)


def write_sphere_scene(
    root: Path, n_cams: int = 24, width: int = 64, height: int = 48, focal: float = 60.0, fisheye_k=None
):
    """Write the scene as COLMAP (images/, sparse/0) under root; returns (root, truth). With
    ``fisheye_k`` (k1..k4) the camera is an OPENCV_FISHEYE of that focal length."""
    from spirula.data.lenses import pixel_rays

    K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1.0]])
    views = sphere_cameras(n_cams)
    images = []
    i, j = np.mgrid[0:height, 0:width]
    d_cam = np.stack([(j + 0.5 - K[0, 2]) / K[0, 0], (i + 0.5 - K[1, 2]) / K[1, 1], np.ones_like(i, float)], -1)
    if fisheye_k is not None:
        d_cam = pixel_rays("OPENCV_FISHEYE", K, list(fisheye_k) + [0.0] * 8, width, height)[0]
    for v in views:
        z = ray_sphere_depth(v, K, width, height, d_cam)
        p_world = (d_cam * z[..., None] - v[:3, 3]) @ v[:3, :3]
        col = np.where((z > 0)[..., None], _texture(p_world / RADIUS), 0.0)
        images.append(np.rint(col * 255).astype(np.uint8))
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(2000, 3))
    pts *= (1.4 * rng.uniform(0, 1, (2000, 1)) ** (1 / 3)) / np.linalg.norm(pts, axis=1, keepdims=True)
    truth = Truth(
        names=["%04d.png" % k for k in range(n_cams)],
        K=K,
        viewmats=np.stack(views),
        points=pts.astype(np.float32),
        colors=np.full((len(pts), 3), 128, np.uint8),
        images=images,
    )
    saved = data_fixtures.W, data_fixtures.H
    data_fixtures.W, data_fixtures.H = width, height  # write_colmap's image size
    try:
        params = [focal, focal, width / 2, height / 2] + ([] if fisheye_k is None else list(fisheye_k))
        model = "PINHOLE" if fisheye_k is None else "OPENCV_FISHEYE"
        return write_colmap(Path(root), truth, binary=True, model=model, params=params, images=images), truth
    finally:
        data_fixtures.W, data_fixtures.H = saved
