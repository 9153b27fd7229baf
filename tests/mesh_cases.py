"""Analytic shapes for the mesh tests: exact signed distances (positive
outside) of a sphere, a box and a torus, truncated TSDF volumes of them in
the fused-volume layout (spirula/mesh/surface.py), a linear colour field, and
distances from points to a triangle mesh."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Volume:
    """Stand-in for spirula.mesh.fuse.FusedVolume: same fields, same conventions."""

    tsdf: np.ndarray  # [X,Y,Z] f32, positive outside, truncated
    weight: np.ndarray  # [X,Y,Z] f32, 0 = never observed
    color: np.ndarray  # [X,Y,Z,3] f32 in [0,1]
    origin: np.ndarray  # [3], voxel (i,j,k) centre = origin + (ijk + 0.5) * voxel_size
    voxel_size: float


class Sphere:
    def __init__(self, radius=0.8, center=(0.03, -0.02, 0.01)):
        self.r, self.c = radius, np.asarray(center, np.float64)
        self.min_curvature_radius = radius
        self.area = 4 * np.pi * radius**2

    def sdf(self, p):
        return np.linalg.norm(p - self.c, axis=-1) - self.r

    def normal(self, p):
        d = p - self.c
        return d / np.linalg.norm(d, axis=-1, keepdims=True)

    def sample(self, n, rng):
        v = rng.normal(size=(n, 3))
        return self.c + self.r * v / np.linalg.norm(v, axis=1, keepdims=True)


class Box:
    def __init__(self, half=(0.7, 0.5, 0.6), center=(0.02, 0.03, -0.01)):
        self.h, self.c = np.asarray(half, np.float64), np.asarray(center, np.float64)
        self.area = 8 * (self.h[0] * self.h[1] + self.h[1] * self.h[2] + self.h[0] * self.h[2])

    def sdf(self, p):
        q = np.abs(p - self.c) - self.h
        return np.linalg.norm(np.maximum(q, 0), axis=-1) + np.minimum(q.max(axis=-1), 0)

    def normal(self, p):
        """Outward normal of the face nearest to p (p near the surface)."""
        q = np.abs(p - self.c) - self.h
        axis = np.argmax(q, axis=-1)
        n = np.zeros_like(p)
        n[np.arange(len(p)), axis] = np.sign((p - self.c)[np.arange(len(p)), axis])
        return n

    def edge_distance(self, p):
        """Distance of p (near the surface) to the nearest edge of the box."""
        q = np.sort(np.abs(np.abs(p - self.c) - self.h), axis=-1)
        return np.hypot(q[:, 0], q[:, 1])

    def sample(self, n, rng):
        # area-weighted faces
        a = np.array([self.h[1] * self.h[2], self.h[0] * self.h[2], self.h[0] * self.h[1]])
        axis = rng.choice(3, size=n, p=a / a.sum())
        p = rng.uniform(-1, 1, size=(n, 3)) * self.h
        side = rng.choice([-1.0, 1.0], size=n)
        p[np.arange(n), axis] = side * self.h[axis]
        return p + self.c


class Torus:
    def __init__(self, major=0.7, minor=0.3, center=(0.01, 0.02, -0.03)):
        self.R, self.r, self.c = major, minor, np.asarray(center, np.float64)
        # largest |second derivative| of the distance on the surface: the tube (1/r)
        # plus the turn around the axis on the inner equator (1/(R - r))
        self.min_curvature_radius = 1.0 / (1.0 / minor + 1.0 / (major - minor))
        self.area = 4 * np.pi**2 * major * minor

    def _ring(self, p):
        d = p - self.c
        rho = np.hypot(d[..., 0], d[..., 1])
        return d, rho

    def sdf(self, p):
        d, rho = self._ring(p)
        return np.hypot(rho - self.R, d[..., 2]) - self.r

    def normal(self, p):
        d, rho = self._ring(p)
        ring = np.stack([d[:, 0] * self.R / rho, d[:, 1] * self.R / rho, np.zeros(len(d))], axis=1)
        v = d - ring
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def sample(self, n, rng):
        # area element (R + r cos v): rejection sampling
        u = rng.uniform(0, 2 * np.pi, size=4 * n)
        v = rng.uniform(0, 2 * np.pi, size=4 * n)
        keep = rng.uniform(0, self.R + self.r, size=4 * n) < self.R + self.r * np.cos(v)
        u, v = u[keep][:n], v[keep][:n]
        rr = self.R + self.r * np.cos(v)
        return self.c + np.stack([rr * np.cos(u), rr * np.sin(u), self.r * np.sin(v)], axis=1)


def tsdf_volume(shape, n=40, lo=-1.2, hi=1.2, trunc_voxels=3.0, colour=None):
    """An n^3 truncated TSDF of ``shape`` over the cube [lo,hi]^3 (voxel centres),
    every voxel observed; ``color`` from ``colour(points)`` (else grey)."""
    h = (hi - lo) / n
    origin = np.full(3, lo)
    idx = np.arange(n) + 0.5
    g = np.stack(np.meshgrid(idx, idx, idx, indexing="ij"), axis=-1).reshape(-1, 3) * h + origin
    trunc = trunc_voxels * h
    d = np.clip(shape.sdf(g), -trunc, trunc).reshape(n, n, n).astype(np.float32)
    col = (colour(g) if colour is not None else np.full((len(g), 3), 0.5)).reshape(n, n, n, 3)
    return Volume(d, np.ones_like(d), col.astype(np.float32), origin, h)


def colour_field(p):
    """A linear colour field (values in [0.1, 0.9] over [-1,1]^3); |gradient| per channel <= 0.4."""
    p = np.asarray(p, np.float64)
    return np.clip(0.5 + 0.4 * np.stack([p[:, 0], p[:, 1], -p[:, 2]], axis=1), 0, 1)


COLOUR_GRADIENT = 0.4  # per channel, per world unit: colour_field above


def mesh_distance(mesh, points):
    """[P] exact distances from points to the triangle mesh (trimesh, all triangles)."""
    import trimesh

    _, dist, _ = trimesh.proximity.closest_point_naive(mesh, points)
    return dist
