"""Cameras to fuse depth from: a Fibonacci sphere of virtual cameras around the splats, or a
dataset's training cameras.

Conventions (docs/design.md): OpenCV world->camera ``viewmats`` [C,4,4] float64 (x right,
y down, z forward), pixel intrinsics ``Ks`` [C,3,3] float64, pixel centres at +0.5.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from spirula.errors import SpirulaError
from spirula.mesh.fusion_config import DEFAULT
from spirula.render.rasterizer import ALPHA_THRESHOLD, RADIUS_SIGMAS  # the rasterizer's cut-off


@dataclasses.dataclass
class Cameras:
    """C cameras: ``viewmats`` [C,4,4] f64 world->camera, ``Ks`` [C,3,3] f64,
    ``sizes`` [C,2] int64 as (width, height)."""

    viewmats: np.ndarray
    Ks: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.viewmats)


def splat_support(scales, opacities) -> np.ndarray:
    """[N] f64: the radius (world units) around each splat's mean outside which the
    rasterizer draws nothing of it: ``opacity_extent(o)`` (shaders/include/projection.glsl:
    min(3.33, sqrt(2 ln(255 o))) standard deviations, past which alpha < 1/255 is skipped)
    times its largest scale. ``scales`` [N,3] activated (not log), ``opacities`` [N] in (0,1).

    Why the sphere of the largest scale and not the ellipsoid's axis-aligned box: the fused
    surface is the median depth, the depth of a splat's *mean* seen along a pixel ray through
    its footprint, i.e. a point of the plane through the mean facing the camera, up to the
    footprint's radius from the mean in any direction (a thin disc seen at a slant puts it
    off the disc's plane). A transparent splat (o < 1/255) is never drawn: radius 0."""
    scales = np.asarray(scales, np.float64).reshape(-1, 3)
    o = np.asarray(opacities, np.float64).reshape(-1)
    k = np.minimum(RADIUS_SIGMAS, np.sqrt(2.0 * np.log(np.maximum(o / ALPHA_THRESHOLD, 1.0))))
    r = k * np.abs(scales).max(axis=1)
    return np.where(np.isfinite(r), r, 0.0)


def scene_bounds(means, config=DEFAULT, support=None) -> tuple:
    """The box holding the splats, robust to floaters: ``(lo [3], hi [3])`` float64, per axis
    the ``config.bounds_percentiles`` of ``mean - support`` (lo) and ``mean + support`` (hi)
    over the finite splats, so the box holds what the rasterizer draws of all but the
    outermost 0.5% of the splats on each side, not just their centres: the surface fused from
    fat splats lies about a standard deviation outside their means (a sphere of radius 0.8 of
    splats of sigma 0.05 fuses at 0.87) and a box of the means cut it open at its faces.

    ``support`` [N] (:func:`splat_support`; None: 0, the means alone). A flat scene keeps a
    depth of at least ``config.min_thickness`` of its longest side; one point (or all at one
    place), a unit box around it. :func:`spirula.mesh.fuse.volume_grid` adds the truncation
    band around this box; the virtual cameras (:func:`sphere_cameras`) see all of it."""
    means = np.asarray(means, np.float64).reshape(-1, 3)
    support = np.zeros(len(means)) if support is None else np.asarray(support, np.float64).reshape(-1)
    ok = np.isfinite(means).all(1) & np.isfinite(support)
    means, support = means[ok], support[ok, None]
    if len(means) == 0:
        raise SpirulaError("meshing: no splat with a finite position")
    lo = np.percentile(means - support, config.bounds_percentiles[0], axis=0)
    hi = np.percentile(means + support, config.bounds_percentiles[1], axis=0)
    size = hi - lo
    longest = float(size.max())
    if not longest > 0:
        longest = 1.0  # one point (or all at one place): a unit box around it
    grow = 0.5 * np.maximum(0.0, config.min_thickness * longest - size)
    return lo - grow, hi + grow


def look_at(eye, target) -> np.ndarray:
    """[4,4] f64 OpenCV world->camera of a camera at ``eye`` looking at ``target``, image up
    along world +z (world +y when looking along z)."""
    from spirula.render.camera_path import look_at as look_at_up

    fwd = np.asarray(target, np.float64) - np.asarray(eye, np.float64)
    up = (0.0, 0.0, 1.0) if abs(fwd[2]) < 0.99 * np.linalg.norm(fwd) else (0.0, 1.0, 0.0)
    return look_at_up(eye, target, up)


def fibonacci_directions(n: int) -> np.ndarray:
    """[n,3] f64 unit vectors spread evenly over the sphere (the Fibonacci lattice)."""
    i = np.arange(n) + 0.5
    z = 1.0 - 2.0 * i / n
    r = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = i * np.pi * (3.0 - np.sqrt(5.0))
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], 1)


def sphere_cameras(means, n=None, size=None, config=DEFAULT, support=None) -> Cameras:
    """``n`` (default ``config.n_virtual_cameras``) square ``size`` x ``size`` cameras on a
    Fibonacci sphere, all looking at the centre of the splats' box (:func:`scene_bounds` of
    ``means`` [N,3] and ``support`` [N], :func:`splat_support`), at
    ``config.camera_distance`` radii of the box's bounding sphere, the field of view fitted
    to that sphere: every image holds all that is drawn of the splats in the box."""
    n = int(n or config.n_virtual_cameras)
    size = int(size or config.render_size)
    if n < 1 or size < 1:
        raise SpirulaError("meshing: need at least one virtual camera and a positive image size")
    lo, hi = scene_bounds(means, config, support)
    centre, radius = 0.5 * (lo + hi), 0.5 * float(np.linalg.norm(hi - lo))
    dist = config.camera_distance * radius
    half = min(np.arcsin(1.0 / config.camera_distance) * config.fov_margin, np.radians(80.0))
    f = 0.5 * size / np.tan(half)
    K = np.array([[f, 0.0, 0.5 * size], [0.0, f, 0.5 * size], [0.0, 0.0, 1.0]])
    eyes = centre + dist * fibonacci_directions(n)
    return Cameras(
        np.stack([look_at(e, centre) for e in eyes]),
        np.repeat(K[None], n, 0),
        np.full((n, 2), size, np.int64),
    )


def dataset_cameras(path, size=None, config=DEFAULT) -> Cameras:
    """The cameras of every frame (train and test) of the dataset at ``path`` (any format spirula.data reads),
    each scaled so its longest side is at most ``size`` (default ``config.render_size``)
    pixels; the principal point and focal lengths scale with the image."""
    from spirula.data.dataset import load_dataset

    scene = load_dataset(path)  # the lenses as they are
    if all(f.model in PERSPECTIVE for f in scene.frames):
        scene = load_dataset(path, undistort=True)  # TSDF fusion projects through pinholes
        viewmats, Ks, sizes = scene.cameras()  # every frame: more views, a better fused surface
    else:  # a fisheye or 360-degree camera cannot be undistorted: pinholes at its pose
        cams = [c for f in scene.frames for c in pinholes_of(f)]
        viewmats = np.array([c[0] for c in cams]).reshape(-1, 4, 4)
        Ks = np.array([c[1] for c in cams]).reshape(-1, 3, 3)
        sizes = np.array([c[2] for c in cams], np.int64).reshape(-1, 2)
    if len(viewmats) == 0:
        raise SpirulaError("%s: the dataset has no training cameras" % (path,))
    return scale_cameras(Cameras(viewmats, Ks, sizes), size or config.render_size)


PERSPECTIVE = ("PINHOLE", "OPENCV")  # lenses undistortion turns into a pinhole
# camera -> face rotations of a cube's faces (OpenCV axes: x right, y down, z forward):
# forward, right, back, left, up, down
_CUBE = np.array(
    [
        [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
        [[0, 0, -1], [0, 1, 0], [1, 0, 0]],
        [[-1, 0, 0], [0, 1, 0], [0, 0, -1]],
        [[0, 0, 1], [0, 1, 0], [-1, 0, 0]],
        [[1, 0, 0], [0, 0, 1], [0, -1, 0]],
        [[1, 0, 0], [0, 0, -1], [0, 1, 0]],
    ],
    np.float64,
)


def pinholes_of(frame) -> list:
    """[(viewmat, K, (width, height))] pinholes that see what ``frame``'s lens sees, for
    fusion: an equirectangular frame's six cube faces (90 degrees, height / 2 pixels a side:
    its own resolution), a fisheye's forward 90-degree pinhole of its size; a perspective
    frame itself (its K: the pinhole of its undistortion's focal length)."""
    vm = np.asarray(frame.viewmat, np.float64)
    if frame.model == "EQUIRECTANGULAR":
        side = max(1, frame.height // 2)
        K = np.array([[side / 2, 0, side / 2], [0, side / 2, side / 2], [0, 0, 1.0]])
        out = []
        for R in _CUBE:
            face = np.eye(4)
            face[:3, :3] = R @ vm[:3, :3]
            face[:3, 3] = R @ vm[:3, 3]
            out.append((face, K, (side, side)))
        return out
    if frame.model in PERSPECTIVE:
        return [(vm, np.asarray(frame.K, np.float64), (frame.width, frame.height))]
    f = frame.width / 2  # 90 degrees across the width
    K = np.array([[f, 0, frame.width / 2], [0, f, frame.height / 2], [0, 0, 1.0]])
    return [(vm, K, (frame.width, frame.height))]


def scale_cameras(cams: Cameras, size: int) -> Cameras:
    """The cameras scaled (never up) so each image's longest side is at most ``size``."""
    s = np.minimum(1.0, size / cams.sizes.max(1).astype(np.float64))
    new = np.maximum(1, np.round(cams.sizes * s[:, None])).astype(np.int64)
    sx, sy = new[:, 0] / cams.sizes[:, 0], new[:, 1] / cams.sizes[:, 1]
    Ks = np.array(cams.Ks, np.float64)
    Ks[:, 0, :] *= sx[:, None]
    Ks[:, 1, :] *= sy[:, None]
    return Cameras(np.asarray(cams.viewmats, np.float64), Ks, new)
