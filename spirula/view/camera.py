"""An interactive camera for the viewers: orbit, pan, dolly, fly, field of view.

Pure numpy, no window: the native window (spirula/view/window.py) and the web
viewer turn mouse and keys into these calls. Conventions (docs/design.md):
the camera produces OpenCV world->camera view matrices (x right, y down,
z forward) and pinhole intrinsics with pixel centres at +0.5, so the
principal point of a W x H image is (W/2, H/2).

State: ``rotation`` [3,3] camera->world (columns: right, down, forward),
``target`` [3] the point orbited, ``distance`` from the eye to it, ``up`` [3]
the world's up (orbiting left/right turns about it), ``fov_y`` in degrees.
The eye is always ``target - distance * forward``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

DEFAULT_FOV_Y = 50.0  # degrees; a normal lens
FOV_RANGE = (5.0, 150.0)  # degrees: narrower is a telescope, wider folds the image
MIN_DISTANCE = 1e-4  # dolly stops short of the target (in scene units x extent, see fit)


def rotate(axis, angle: float) -> np.ndarray:
    """[3,3] rotation by ``angle`` radians about ``axis`` (right-handed, Rodrigues)."""
    a = np.asarray(axis, np.float64)
    a = a / np.linalg.norm(a)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)


def look_rotation(forward, up) -> np.ndarray:
    """[3,3] camera->world rotation looking along ``forward`` with ``up`` up
    (OpenCV columns: right = forward x up, down = forward x right)."""
    f = np.asarray(forward, np.float64)
    f = f / np.linalg.norm(f)
    r = np.cross(f, up)
    if np.linalg.norm(r) < 1e-9:  # looking straight along up: any right will do
        r = np.cross(f, [1.0, 0.0, 0.0] if abs(f[0]) < 0.9 else [0.0, 1.0, 0.0])
    r = r / np.linalg.norm(r)
    return np.stack([r, np.cross(f, r), f], axis=1)


@dataclasses.dataclass
class Camera:
    target: np.ndarray  # [3] float64, the orbit centre
    distance: float  # eye to target
    rotation: np.ndarray  # [3,3] float64 camera->world (right, down, forward)
    up: np.ndarray = dataclasses.field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))  # [3] world up
    fov_y: float = DEFAULT_FOV_Y  # vertical field of view, degrees
    scale: float = 1.0  # the scene's size: pan, fly and the dolly's floor scale with it

    # -- construction -------------------------------------------------------------
    @classmethod
    def fit(cls, means, up=(0.0, 0.0, 1.0), fov_y: float = DEFAULT_FOV_Y) -> Camera:
        """A view of the points ``means`` [N,3]: looking at their median from
        outside, slightly from above, far enough to see the central 90% of them."""
        m = np.asarray(means, np.float64).reshape(-1, 3)
        m = m[np.isfinite(m).all(1)]
        up = np.asarray(up, np.float64) / np.linalg.norm(up)
        centre = np.median(m, axis=0) if len(m) else np.zeros(3)
        radius = float(np.percentile(np.linalg.norm(m - centre, axis=1), 90)) if len(m) else 1.0
        radius = radius if radius > 0 else 1.0
        # a horizontal direction, then tilted 20 degrees down towards the centre
        side = np.cross(up, [1.0, 0.0, 0.0] if abs(up[0]) < 0.9 else [0.0, 1.0, 0.0])
        forward = np.cross(side, up)
        forward = math.cos(math.radians(20)) * forward / np.linalg.norm(forward) - math.sin(math.radians(20)) * up
        distance = radius / math.sin(math.radians(fov_y) / 2)
        return cls(centre, distance, look_rotation(forward, up), up, fov_y, radius)

    @classmethod
    def from_view(cls, viewmat, K, height: int, up=None, distance: float | None = None, scale: float = 1.0) -> Camera:
        """The camera of a dataset view: world->camera ``viewmat`` [4,4] and
        ``K`` [3,3] of an image ``height`` pixels high. The orbit target is
        ``distance`` (default ``scale``) in front of it; ``up`` defaults to
        the camera's own up (-y)."""
        vm = np.asarray(viewmat, np.float64)
        R = vm[:3, :3].T
        eye = -R @ vm[:3, 3]
        up = -R[:, 1] if up is None else np.asarray(up, np.float64) / np.linalg.norm(up)
        d = float(distance or scale)
        fov = math.degrees(2 * math.atan(height / (2 * float(np.asarray(K)[1, 1]))))
        return cls(eye + d * R[:, 2], d, R, up, fov, scale)

    def copy(self) -> Camera:
        return dataclasses.replace(self, target=self.target.copy(), rotation=self.rotation.copy(), up=self.up.copy())

    # -- what the renderer needs ----------------------------------------------------
    @property
    def eye(self) -> np.ndarray:
        return self.target - self.distance * self.rotation[:, 2]

    def viewmat(self) -> np.ndarray:
        """[4,4] float64 world->camera (OpenCV)."""
        vm = np.eye(4)
        vm[:3, :3] = self.rotation.T
        vm[:3, 3] = -self.rotation.T @ self.eye
        return vm

    def K(self, width: int, height: int) -> np.ndarray:
        """[3,3] float64 intrinsics for a ``width`` x ``height`` image: square
        pixels, principal point at the centre (pixel centres at +0.5)."""
        f = (height / 2) / math.tan(math.radians(self.fov_y) / 2)
        return np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], np.float64)

    def key(self) -> tuple:
        """Hashable state: equal keys render equal images (the session's dirty check)."""
        return (tuple(self.target), self.distance, tuple(self.rotation.ravel()), self.fov_y)

    # -- controls ---------------------------------------------------------------------
    def orbit(self, yaw: float, pitch: float):
        """Turn the eye around the target: ``yaw`` radians about the world's
        up, ``pitch`` radians about the camera's right axis (positive: look
        from higher). The distance to the target does not change."""
        R = rotate(self.up, -yaw) @ self.rotation
        self.rotation = rotate(R[:, 0], -pitch) @ R

    def look(self, yaw: float, pitch: float):
        """Turn the camera in place (fly mode): the eye stays, the target moves."""
        eye = self.eye
        self.orbit(yaw, pitch)
        self.target = eye + self.distance * self.rotation[:, 2]

    def pan(self, dx: float, dy: float):
        """Slide eye and target together by (dx, dy) x distance along the
        camera's right and down axes (a drag of the whole view)."""
        self.target = self.target + self.distance * (dx * self.rotation[:, 0] + dy * self.rotation[:, 1])

    def dolly(self, factor: float):
        """Move the eye towards the target: the distance is multiplied by ``factor``."""
        self.distance = max(self.distance * float(factor), MIN_DISTANCE * self.scale)

    def fly(self, right: float, down: float, forward: float):
        """Move eye and target together along the camera's axes, in units of ``scale``."""
        self.target = self.target + self.scale * (self.rotation @ np.array([right, down, forward], np.float64))

    def zoom(self, factor: float):
        """Narrow (factor < 1) or widen the field of view, within FOV_RANGE."""
        self.fov_y = float(np.clip(self.fov_y * factor, *FOV_RANGE))


def scene_up(viewmats) -> np.ndarray:
    """[3] the world's up as the cameras see it: the mean of their -y axes
    (cameras are mostly held level), unit length."""
    vm = np.asarray(viewmats, np.float64).reshape(-1, 4, 4)
    up = -vm[:, 1, :3].sum(0)  # row 1 of R_w2c is the camera's y (down) in world coordinates
    n = np.linalg.norm(up)
    return up / n if n > 0 else np.array([0.0, 0.0, 1.0])


class CameraPath:
    """The dataset's cameras, stepped through with keys: ``viewmats`` [C,4,4]
    world->camera, ``Ks`` [C,3,3], ``heights`` [C] pixels."""

    def __init__(self, viewmats, Ks, heights):
        self.viewmats = np.asarray(viewmats, np.float64).reshape(-1, 4, 4)
        self.Ks = np.asarray(Ks, np.float64).reshape(-1, 3, 3)
        self.heights = [int(h) for h in heights]
        self.up = scene_up(self.viewmats)
        # the scene's size: the cameras' median distance from their mean (1 for one camera)
        eyes = -np.einsum("nji,nj->ni", self.viewmats[:, :3, :3], self.viewmats[:, :3, 3])
        d = float(np.median(np.linalg.norm(eyes - eyes.mean(0), axis=1)))
        self.scale = d if d > 0 else 1.0
        self.index = 0

    @classmethod
    def from_frames(cls, frames) -> CameraPath:
        """The path through a dataset's :class:`~spirula.data.scene.Frame` list. The viewer's
        camera is a pinhole: a perspective lens (PINHOLE, OPENCV) keeps its focal length, a
        fisheye or an equirectangular camera (whose focal length is not a pinhole's) gets
        DEFAULT_FOV_Y."""
        return cls([f.viewmat for f in frames], [_pinhole_K(f) for f in frames], [f.height for f in frames])

    def __len__(self) -> int:
        return len(self.viewmats)

    def camera(self, index: int | None = None) -> Camera:
        """The camera of view ``index`` (default: the current one); ``step`` moves it."""
        i = self.index if index is None else index % len(self)
        return Camera.from_view(self.viewmats[i], self.Ks[i], self.heights[i], self.up, scale=self.scale)

    def step(self, delta: int) -> Camera:
        self.index = (self.index + delta) % len(self)
        return self.camera()


def _pinhole_K(frame) -> np.ndarray:
    """A frame's K where its lens is perspective, else a pinhole's of DEFAULT_FOV_Y (CameraPath.from_frames)."""
    if getattr(frame, "model", "PINHOLE") in ("PINHOLE", "OPENCV"):
        return np.asarray(frame.K, np.float64)
    f = 0.5 * frame.height / math.tan(math.radians(0.5 * DEFAULT_FOV_Y))
    return np.array([[f, 0.0, 0.5 * frame.width], [0.0, f, 0.5 * frame.height], [0.0, 0.0, 1.0]])
