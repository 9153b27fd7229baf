"""Seeded, awkward scenes for the rasterizer tests, and the GPU/reference runs.

Image sizes are not multiples of 16, N is not a multiple of any workgroup,
there are two cameras, and every SH band is exercised.
"""

from __future__ import annotations

import numpy as np


def random_scene(n=300, cameras=2, width=75, height=53, sh_degree=3, seed=0, spread=1.0):
    """Gaussians in front of `cameras` cameras that look at them from slightly
    different poses. Returns a dict of float32 inputs for rasterization()."""
    rng = np.random.default_rng(seed)
    means = np.c_[rng.uniform(-1.2, 1.2, (n, 2)) * spread, rng.uniform(2.5, 6.0, n)].astype(np.float32)
    quats = rng.standard_normal((n, 4)).astype(np.float32)
    scales = np.exp(rng.uniform(-3.5, -1.2, (n, 3))).astype(np.float32)
    opacities = rng.uniform(0.05, 0.95, n).astype(np.float32)
    K = (sh_degree + 1) ** 2
    sh = (rng.standard_normal((n, K, 3)) * np.r_[0.6, np.full(K - 1, 0.15)][None, :, None]).astype(np.float32)
    viewmats, Ks = [], []
    for c in range(cameras):
        a = 0.12 * c
        R = np.array([[np.cos(a), 0, -np.sin(a)], [0, 1, 0], [np.sin(a), 0, np.cos(a)]])
        vm = np.eye(4)
        vm[:3, :3] = R
        vm[:3, 3] = [0.2 * c, -0.1 * c, 0.3 * c]
        viewmats.append(vm)
        f = 0.9 * width
        Ks.append([[f, 0, width / 2 + 1.3 * c], [0, f * 1.05, height / 2 - 0.7 * c], [0, 0, 1]])
    return dict(
        means=means,
        quats=quats,
        scales=scales,
        opacities=opacities,
        sh_coeffs=sh,
        viewmats=np.array(viewmats, np.float32),
        Ks=np.array(Ks, np.float32),
        width=width,
        height=height,
        sh_degree=sh_degree,
    )


def gpu_render(scene, backgrounds=None, device=None, **kwargs):
    from spirula.render.api import rasterization

    return rasterization(**scene, backgrounds=backgrounds, device=device, **kwargs)


def ref_render(scene, backgrounds=None):
    from reference.render import rasterization

    s = {k: (np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v) for k, v in scene.items()}
    return rasterization(**s, backgrounds=None if backgrounds is None else np.asarray(backgrounds, np.float64))


def ref_grads(scene, grad_colors, grad_alphas, backgrounds=None):
    from reference.render import rasterization_bwd

    s = {k: (np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v) for k, v in scene.items()}
    return rasterization_bwd(
        **s,
        backgrounds=None if backgrounds is None else np.asarray(backgrounds, np.float64),
        grad_colors=np.asarray(grad_colors, np.float64),
        grad_alphas=np.asarray(grad_alphas, np.float64),
    )
