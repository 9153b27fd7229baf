"""Training coordinates: the scene translated and uniformly scaled so that the
cameras sit about one unit from their centre, as gsplat's simple_trainer
normalizes COLMAP worlds. Hyperparameters that are not scale-invariant (MCMC
position noise ~ lr x covariance, the scale regularizer) then behave the same
on every dataset. No rotation is applied, so splats map back to the dataset's
frame without rotating SH coefficients: x_world = x_train / scale + center.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class WorldTransform:
    center: tuple       # dataset coordinates of the training origin
    scale: float        # training units per dataset unit

    @classmethod
    def from_cameras(cls, viewmats) -> "WorldTransform":
        """Centre: mean camera position; scale: 1 / median camera distance from it."""
        vm = np.asarray(viewmats, np.float64)
        centres = -np.einsum("nji,nj->ni", vm[:, :3, :3], vm[:, :3, 3])
        c = centres.mean(0)
        d = np.median(np.linalg.norm(centres - c, axis=1))
        return cls(tuple(float(v) for v in c), float(1.0 / d) if d > 0 else 1.0)

    @classmethod
    def identity(cls) -> "WorldTransform":
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
        out["means"] = (np.asarray(params["means"], np.float64) / self.scale + np.asarray(self.center)).astype(np.float32)
        out["scales"] = (np.asarray(params["scales"], np.float64) - np.log(self.scale)).astype(np.float32)
        return out

    def to_training(self, params: dict) -> dict:
        out = dict(params)
        out["means"] = self.points(params["means"]).astype(np.float32)
        out["scales"] = (np.asarray(params["scales"], np.float64) + np.log(self.scale)).astype(np.float32)
        return out
