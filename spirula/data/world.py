"""Training coordinates: the scene translated and uniformly scaled so that the
cameras sit about one unit from their centre (their mean position, or with
``world_center="focus"`` the point they look at, as gsplat's simple_trainer
normalizes COLMAP worlds). Hyperparameters that are not scale-invariant (MCMC
position noise ~ lr x covariance, the scale regularizer) then behave the same
on every dataset. No rotation is applied, so splats map back to the dataset's
frame without rotating SH coefficients: x_world = x_train / scale + center.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class WorldTransform:
    center: tuple  # dataset coordinates of the training origin
    scale: float  # training units per dataset unit

    @classmethod
    def from_cameras(cls, viewmats, center: str = "cameras") -> WorldTransform:
        """Scale: 1 / the cameras' median distance from the centre. Centre
        "cameras": their mean position; "focus": the point nearest to all their
        optical axes (what they look at, as gsplat's similarity_from_cameras
        centres a world), or their mean where the axes do not converge in
        front of them (forward-facing captures, a single camera)."""
        vm = np.asarray(viewmats, np.float64)
        centres = -np.einsum("nji,nj->ni", vm[:, :3, :3], vm[:, :3, 3])
        c = centres.mean(0)
        if center == "focus":
            c = _focus_point(centres, vm[:, 2, :3], fallback=c)
        elif center != "cameras":
            raise ValueError("world center must be 'cameras' or 'focus', got %r" % (center,))
        d = np.median(np.linalg.norm(centres - c, axis=1))
        return cls(tuple(float(v) for v in c), float(1.0 / d) if d > 0 else 1.0)

    @classmethod
    def identity(cls) -> WorldTransform:
        return cls((0.0, 0.0, 0.0), 1.0)

    def viewmats(self, viewmats) -> np.ndarray:
        """World->camera matrices for training coordinates (camera space scaled alike)."""
        vm = np.array(viewmats, np.float64)
        R, t = vm[..., :3, :3], vm[..., :3, 3]
        vm[..., :3, 3] = self.scale * (np.einsum("...ij,j->...i", R, np.asarray(self.center)) + t)
        return vm

    def points(self, x) -> np.ndarray:
        return (np.asarray(x, np.float64) - np.asarray(self.center)) * self.scale

    def to_dataset(self, params: dict) -> dict:
        """Raw splat parameters (log-scales) from training to dataset coordinates."""
        out = dict(params)
        out["means"] = (np.asarray(params["means"], np.float64) / self.scale + np.asarray(self.center)).astype(
            np.float32
        )
        out["scales"] = (np.asarray(params["scales"], np.float64) - np.log(self.scale)).astype(np.float32)
        return out

    def to_training(self, params: dict) -> dict:
        out = dict(params)
        out["means"] = self.points(params["means"]).astype(np.float32)
        out["scales"] = (np.asarray(params["scales"], np.float64) + np.log(self.scale)).astype(np.float32)
        return out


def _focus_point(centres, axes, fallback):
    """Least-squares nearest point to the lines centre_i + t axis_i (unit
    axes), if it is well determined and in front of the cameras."""
    P = np.eye(3)[None] - axes[:, :, None] * axes[:, None, :]  # projectors orthogonal to each axis
    A, b = P.sum(0), np.einsum("nij,nj->i", P, centres)
    w = np.linalg.eigvalsh(A)
    if len(centres) < 2 or w[0] < 1e-3 * w[-1]:
        return fallback
    p = np.linalg.solve(A, b)
    if np.median(np.einsum("ni,ni->n", p - centres, axes)) <= 0:
        return fallback
    return p
