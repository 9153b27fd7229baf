"""Seeded, awkward scenes for the rasterizer tests, and the GPU/reference runs.

Image sizes are not multiples of 16, N is not a multiple of any workgroup,
there are two cameras, and every SH band is exercised.
"""

from __future__ import annotations

import numpy as np

from spirula.selftest import random_scene  # noqa: F401 (shared with spirula selftest)


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
