"""Fixed benchmark workloads (docs/design.md §7), drawn with numpy so that
the gsplat peer (`gsplat_raster_bench.py`) draws exactly the same arrays."""

from __future__ import annotations

import numpy as np

WIDTH, HEIGHT, FOCAL = 1237, 822, 900.0


def make_scene(n: int, seed: int = 0, sh_degree: int = 0) -> dict:
    """raster_bench's slab: N Gaussians before one camera at the origin.

    Every draw is float32 and in this order: means in x [-6,6), y [-4,4),
    z [-2,14); log-scales U[-5,-2.5); quaternions normal, normalized (wxyz);
    opacity logits U[-3,5); SH DC 0.5*normal, higher bands 0.1*normal.
    """
    rng = np.random.default_rng(seed)
    lo = np.array([-6.0, -4.0, -2.0], np.float32)
    span = np.array([12.0, 8.0, 16.0], np.float32)
    means = lo + rng.random((n, 3), dtype=np.float32) * span
    log_scales = np.float32(-5.0) + np.float32(2.5) * rng.random((n, 3), dtype=np.float32)
    quats = rng.standard_normal((n, 4), dtype=np.float32)
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    opacity_logits = np.float32(-3.0) + np.float32(8.0) * rng.random(n, dtype=np.float32)
    k = (sh_degree + 1) ** 2
    sh = np.empty((n, k, 3), np.float32)
    sh[:, 0, :] = np.float32(0.5) * rng.standard_normal((n, 3), dtype=np.float32)
    if k > 1:
        sh[:, 1:, :] = np.float32(0.1) * rng.standard_normal((n, k - 1, 3), dtype=np.float32)
    return {"means": means, "log_scales": log_scales, "quats": quats, "opacity_logits": opacity_logits, "sh": sh}


def camera(width: int = WIDTH, height: int = HEIGHT, focal: float = FOCAL):
    """(viewmats [1,4,4], Ks [1,3,3]): identity pose, principal point at the centre."""
    K = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1]], np.float32)
    return np.eye(4, dtype=np.float32)[None], K[None]
