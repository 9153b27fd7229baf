"""The data model every loader produces: posed frames, seed points, splits.

Conventions (docs/design.md §2.1, the same as gsplat):

- ``Frame.viewmat`` is world->camera, ``[4,4] float64``, OpenCV camera frame
  (x right, y down, +z forward): ``p_cam = R @ p_world + t``.
- ``Frame.K`` is ``[3,3] float64`` pinhole intrinsics in pixels for the image
  ``Scene.load_image`` returns (after any downscale); the pixel in row i,
  column j has its centre at ``(j + 0.5, i + 0.5)`` (the COLMAP convention).
- ``Frame.model`` is the lens the kernels project through (``PINHOLE``,
  ``OPENCV``, ``OPENCV_FISHEYE``, ``EQUIRECTANGULAR``; docs/design.md §2.3) with
  ``Frame.dist`` its ``[12]`` parameters (k1..k6, p1, p2, s1..s4): by default a
  distorted camera trains through its own lens on the original images;
  ``load_dataset(undistort=True)`` undistorts perspective ones at load into a
  cache folder with the same K (``Frame.image_path`` points there) instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spirula.data.images import read_image
from spirula.errors import DatasetError


@dataclass
class Frame:
    """One posed image.

    ``name``: the image's file name relative to the dataset's image folder
    (COLMAP's name, e.g. ``"0007.png"`` or ``"cam1/0007.jpg"``).
    ``image_path``: the file :meth:`Scene.load_image` reads: the original, an
    ``images_N`` downscale, or an undistorted copy in a cache folder.
    ``width``, ``height``: size in pixels of that image.
    ``K``: ``[3,3] float64`` intrinsics for that size.
    ``viewmat``: ``[4,4] float64`` world->camera, OpenCV frame.
    ``mask_path``: the loss mask (white = keep) at the original resolution,
    or None (:meth:`Scene.load_mask`).
    ``model``, ``dist``: the lens (module docstring); ``dist`` None = zeros.
    """

    name: str
    image_path: Path
    width: int
    height: int
    K: np.ndarray
    viewmat: np.ndarray
    mask_path: Path | None = None
    model: str = "PINHOLE"
    dist: np.ndarray | None = None

    @property
    def camera_center(self) -> np.ndarray:
        """``[3] float64``: the camera centre in world coordinates, ``-R^T t``."""
        R, t = self.viewmat[:3, :3], self.viewmat[:3, 3]
        return -R.T @ t

    @property
    def camtoworld(self) -> np.ndarray:
        """``[4,4] float64``: camera->world (OpenCV frame), the inverse of ``viewmat``."""
        R, t = self.viewmat[:3, :3], self.viewmat[:3, 3]
        m = np.eye(4)
        m[:3, :3] = R.T
        m[:3, 3] = -R.T @ t
        return m


@dataclass
class Scene:
    """A loaded dataset.

    ``frames``: all posed images, sorted by name for COLMAP and nerfstudio;
    Blender keeps its files' order (train frames, then test frames).
    ``train``, ``test``: indices into ``frames``, disjoint, together all frames.
    ``points``: ``[P,3] float32`` seed points (world); ``point_colors``:
    ``[P,3] uint8``. ``points_random``: True when the points were generated
    because the dataset has none.
    ``background``: ``[3] float32`` in [0,1]; RGBA images are composited onto it
    and the trainer renders onto it.
    ``source``: ``'colmap'``, ``'blender'`` or ``'nerfstudio'``; ``path``: the
    dataset folder.
    ``extent``: the 3DGS scene extent: 1.1 x the largest distance of the train
    cameras' centres from their mean (1.0 when that is zero: one camera).
    """

    frames: list
    train: list
    test: list
    points: np.ndarray
    point_colors: np.ndarray
    points_random: bool
    background: np.ndarray
    source: str
    path: Path
    extent: float

    def load_image(self, i: int) -> np.ndarray:
        """Frame ``i``'s image: ``[H,W,3] float32`` in [0,1], linear in the file's
        8-bit (or 16-bit) values, no gamma change. An image with alpha is
        composited onto ``background``: ``rgb * a + background * (1 - a)``."""
        rgba = read_image(self.frames[i].image_path)
        if rgba.shape[2] == 3:
            return rgba
        a = rgba[:, :, 3:4]
        return rgba[:, :, :3] * a + self.background.reshape(1, 1, 3) * (1.0 - a)

    def load_mask(self, i: int) -> np.ndarray | None:
        """Frame ``i``'s loss mask, ``[H,W] bool`` (True = keep) at the size of
        :meth:`load_image`, or None when it has none: the dataset's mask file, and
        through a lens other than the pinhole the pixels its valid domain reaches
        (:func:`spirula.data.lenses.valid_mask`: a fisheye's border past the angle its
        polynomial folds at has no ray, so no splat can be drawn there). Grey levels
        are kept at 128 and above; a downscaled mask (``--downscale``) keeps a pixel only
        when every original pixel its box averages is kept, so no dropped
        colour leaks into a kept pixel of the downscaled image."""
        from spirula.data.lenses import valid_mask

        f = self.frames[i]
        lens = valid_mask(f.model, f.K, f.dist, f.width, f.height)
        if f.mask_path is None:
            return lens
        from PIL import Image

        try:
            with Image.open(f.mask_path) as im:
                m = Image.fromarray(np.where(np.asarray(im.convert("L")) >= 128, 255, 0).astype(np.uint8))
        except (OSError, ValueError, SyntaxError) as exc:
            raise DatasetError("%s: cannot read mask (%s)" % (f.mask_path, " ".join(str(exc).split()))) from None
        if m.size != (f.width, f.height):
            m = np.asarray(m.resize((f.width, f.height), Image.BOX)) == 255
        else:
            m = np.asarray(m) >= 128
        return m if lens is None else m & lens

    def load_rgba(self, i: int) -> np.ndarray:
        """Frame ``i``'s image with its alpha, not composited: ``[H,W,4] float32``
        in [0,1] (alpha is 1 for images without one)."""
        rgba = read_image(self.frames[i].image_path)
        if rgba.shape[2] == 4:
            return rgba
        return np.concatenate([rgba, np.ones_like(rgba[:, :, :1])], axis=2)

    def cameras(self, indices=None):
        """Stacked cameras of ``indices`` (default: all frames):
        ``viewmats [C,4,4] float64``, ``Ks [C,3,3] float64``,
        ``sizes [C,2] int64`` as (width, height)."""
        idx = range(len(self.frames)) if indices is None else indices
        fr = [self.frames[i] for i in idx]
        return (
            np.stack([f.viewmat for f in fr]) if fr else np.zeros((0, 4, 4)),
            np.stack([f.K for f in fr]) if fr else np.zeros((0, 3, 3)),
            np.array([[f.width, f.height] for f in fr], dtype=np.int64).reshape(-1, 2),
        )

    def __repr__(self) -> str:
        return "Scene(%s %s: %d frames (%d train, %d test), %d %s points, extent %.4g)" % (
            self.source,
            self.path,
            len(self.frames),
            len(self.train),
            len(self.test),
            len(self.points),
            "random" if self.points_random else "seed",
            self.extent,
        )


def scene_extent(centers: np.ndarray) -> float:
    """The 3DGS extent (``getNerfppNorm``): ``1.1 * max |c - mean(c)|`` over the
    ``[C,3]`` camera centres; 1.0 when that is (nearly) zero."""
    centers = np.asarray(centers, dtype=np.float64).reshape(-1, 3)
    if len(centers) == 0:
        return 1.0
    d = float(np.linalg.norm(centers - centers.mean(axis=0), axis=1).max())
    return 1.1 * d if d > 1e-9 else 1.0


def qvec_to_rotmat(q) -> np.ndarray:
    """``[3,3] float64`` rotation of a quaternion given wxyz (normalized here)."""
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def quats_to_rotmats(quats) -> np.ndarray:
    """``[...,3,3] float64`` rotations of quaternions ``[...,4]`` given wxyz (any
    norm, normalized here; :func:`qvec_to_rotmat` for many): a splat's axes are the columns."""
    q = np.asarray(quats, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    R = np.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        -1,
    )
    return R.reshape(q.shape[:-1] + (3, 3))


def opengl_c2w_to_viewmat(c2w: np.ndarray) -> np.ndarray:
    """World->camera (OpenCV) ``[4,4]`` from a camera->world ``[4,4]`` in the
    OpenGL/Blender camera convention (x right, y up, +z backward)."""
    m = np.array(c2w, dtype=np.float64)
    m[:3, 1:3] *= -1.0  # flip y and z axes: OpenGL -> OpenCV
    R, c = m[:3, :3], m[:3, 3]
    v = np.eye(4)
    v[:3, :3] = R.T
    v[:3, 3] = -R.T @ c
    return v


def random_points(n: int, lo, hi, seed: int):
    """``n`` points uniform in the box ``[lo, hi]`` (scalars or ``[3]``) and random
    colours: ``([n,3] float32, [n,3] uint8)``, deterministic for a seed."""
    rng = np.random.default_rng(seed)
    lo = np.broadcast_to(np.asarray(lo, dtype=np.float64), (3,))
    hi = np.broadcast_to(np.asarray(hi, dtype=np.float64), (3,))
    pts = (lo + (hi - lo) * rng.random((n, 3))).astype(np.float32)
    cols = rng.integers(0, 256, size=(n, 3), dtype=np.uint8)
    return pts, cols


@dataclass
class View:
    """What a format loader reads, before images are resolved: one camera at
    the original image resolution. ``dist`` is ``[6] float64``
    ``(k1, k2, k3, k4, p1, p2)`` of the OpenCV radial-tangential model (zeros
    for pinhole); ``model`` names the camera model for messages; ``mask_path``
    a loss mask the format names for this view (nerfstudio's ``mask_path``).
    ``lens``, ``lens_dist``: the kernels' lens for training without undistortion
    (``Frame.model``, ``Frame.dist`` [12]), None for ``lens_dist`` when it has no
    distortion; ``dist`` is what undistortion would use (zeros when it cannot)."""

    name: str
    width: int
    height: int
    K: np.ndarray
    viewmat: np.ndarray
    dist: np.ndarray
    model: str = "PINHOLE"
    image_path: Path | None = None
    mask_path: Path | None = None
    lens: str = "PINHOLE"
    lens_dist: np.ndarray | None = None


def check_intrinsics(where: str, width, height, fx, fy, cx, cy, names=("fx", "fy", "cx", "cy")) -> None:
    """Raise :class:`DatasetError` ``"<where>: ..."`` unless the focal lengths
    are finite and positive and the principal point finite and at most one
    image size outside the image: cx in [-W, 2W], cy in [-H, 2H].

    Why that bound: a real camera's principal point lies in its image, near
    the centre; a crop of a larger photo can move it out, but by more than a
    whole image size the crop would be a corner of a sensor at least four
    times as wide (or tall) as the image, which no dataset tool writes. Such
    values are misread fields (a centre in another unit or resolution,
    swapped parameters), and training would silently fit a wrong camera.
    ``names`` spell the four values as the file does."""
    fx, fy, cx, cy = (float(x) for x in (fx, fy, cx, cy))
    for name, f in zip(names[:2], (fx, fy)):
        if not (math.isfinite(f) and f > 0):
            raise DatasetError("%s: focal length %s = %r; expected a positive number of pixels" % (where, name, f))
    for name, c, size in zip(names[2:], (cx, cy), (width, height)):
        if not (math.isfinite(c) and -size <= c <= 2 * size):
            raise DatasetError(
                "%s: principal point %s = %r; expected %s in [%d, %d] (at most one image size outside the %dx%d image)"
                % (where, name, c, name, -size, 2 * size, width, height)
            )
