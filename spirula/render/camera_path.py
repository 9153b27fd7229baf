"""Camera paths for videos: an orbit, or a dataset's cameras interpolated.

Every path is a list of world->camera matrices [F,4,4] float64 in OpenCV
axes (x right, y down, z forward, docs/design.md §2.1); the intrinsics come
with the caller's image size and field of view (:func:`intrinsics`).
"""

from __future__ import annotations

import numpy as np

from spirula.errors import UsageError


def intrinsics(width: int, height: int, fov_deg: float) -> np.ndarray:
    """[3,3] pixel intrinsics with a vertical field of view ``fov_deg`` and
    the principal point at the image centre (square pixels)."""
    if not 0 < fov_deg < 180:
        raise UsageError("--fov %s: the vertical field of view must be between 0 and 180 degrees" % fov_deg)
    f = 0.5 * height / np.tan(np.radians(fov_deg) / 2)
    return np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], np.float64)


def look_at(eye, target, up) -> np.ndarray:
    """[4,4] world->camera of a camera at ``eye`` looking at ``target``, with
    ``up`` (world) pointing up in the image (OpenCV: image y is down)."""
    eye, target, up = (np.asarray(v, np.float64) for v in (eye, target, up))
    z = target - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, up)
    if np.linalg.norm(x) < 1e-9:  # looking along up: any sideways axis will do
        x = np.cross(z, np.eye(3)[np.argmin(np.abs(z))])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    vm = np.eye(4)
    vm[:3, :3] = np.stack([x, y, z])
    vm[:3, 3] = -vm[:3, :3] @ eye
    return vm


def orbit(center, radius: float, up, frames: int, height: float = 0.0, start=None) -> np.ndarray:
    """[F,4,4]: ``frames`` cameras evenly around a circle of ``radius`` about
    ``center`` in the plane orthogonal to ``up``, ``height`` above it along
    ``up``, all looking at ``center``. ``start``: a direction the first camera
    lies in from the centre (projected onto the plane; default any)."""
    up = np.asarray(up, np.float64)
    up = up / np.linalg.norm(up)
    center = np.asarray(center, np.float64)
    a = np.asarray(start, np.float64) if start is not None else np.eye(3)[np.argmin(np.abs(up))]
    a = a - up * (a @ up)
    if np.linalg.norm(a) < 1e-9:
        a = np.eye(3)[np.argmin(np.abs(up))] - up * up[np.argmin(np.abs(up))]
    a /= np.linalg.norm(a)
    b = np.cross(up, a)
    out = []
    for k in range(frames):
        t = 2 * np.pi * k / frames
        eye = center + radius * (np.cos(t) * a + np.sin(t) * b) + height * up
        out.append(look_at(eye, center, up))
    return np.array(out)


def orbit_around_splats(means, frames: int) -> np.ndarray:
    """An orbit for splats alone: about their median, at 2.5x the radius
    holding 90% of them (robust to floaters), in the plane orthogonal to -y
    (the up of COLMAP-style worlds, whose cameras have y down), slightly above."""
    means = np.asarray(means, np.float64)
    c = np.median(means, axis=0)
    r = float(np.quantile(np.linalg.norm(means - c, axis=1), 0.9))
    r = r if r > 0 else 1.0
    return orbit(c, 2.5 * r, (0.0, -1.0, 0.0), frames, height=0.5 * r, start=(0.0, 0.0, -1.0))


def camera_centers(viewmats) -> np.ndarray:
    vm = np.asarray(viewmats, np.float64)
    return -np.einsum("nji,nj->ni", vm[:, :3, :3], vm[:, :3, 3])


def orbit_around_cameras(viewmats, frames: int) -> np.ndarray:
    """An orbit for a dataset: about the point the cameras look at (their
    centre where their axes do not meet), with their average up vector, at
    their median distance from it and their mean height along up; the first
    frame lies towards the first camera."""
    from spirula.data.world import WorldTransform

    vm = np.asarray(viewmats, np.float64)
    centres = camera_centers(vm)
    c = np.asarray(WorldTransform.from_cameras(vm, "focus").center)
    up = -vm[:, 1, :3].mean(0)  # image up (-y) of each camera, in world coordinates
    if np.linalg.norm(up) < 1e-6:
        up = np.array([0.0, -1.0, 0.0])
    up /= np.linalg.norm(up)
    d = centres - c
    h = d @ up
    r = float(np.median(np.linalg.norm(d - h[:, None] * up, axis=1)))
    return orbit(c, r if r > 0 else 1.0, up, frames, height=float(np.mean(h)), start=d[0])


def interpolate_cameras(viewmats, frames: int) -> np.ndarray:
    """[F,4,4]: ``frames`` cameras along the given ones in order (the first
    and the last included): rotations slerped, centres lerped, between
    consecutive cameras, evenly in the path's parameter (one unit per pair)."""
    from scipy.spatial.transform import Rotation, Slerp

    vm = np.asarray(viewmats, np.float64)
    if len(vm) == 1 or frames == 1:
        return np.repeat(vm[:1], frames, axis=0)
    keys = np.arange(len(vm), dtype=np.float64)
    slerp = Slerp(keys, Rotation.from_matrix(vm[:, :3, :3]))
    centres = camera_centers(vm)
    t = np.linspace(0, len(vm) - 1, frames)
    R = slerp(t).as_matrix()
    C = np.stack([np.interp(t, keys, centres[:, i]) for i in range(3)], axis=1)
    out = np.tile(np.eye(4), (frames, 1, 1))
    out[:, :3, :3] = R
    out[:, :3, 3] = -np.einsum("nij,nj->ni", R, C)
    return out
