"""The per-step scalars the GPU reads (shaders/include/step_params.glsl).

A recorded step is replayed unchanged every step; what changes (the Adam step,
learning rates, the image of each view, the random seed) is written by the
host into host-visible memory before each step, and the step's first dispatch
copies it into this struct on the GPU.
"""
from __future__ import annotations

import numpy as np

MAX_VIEWS = 8

# std430 layout of struct StepParams: 4 uints, uvec4[2], then 20 floats (128 bytes)
STEP_PARAMS_DTYPE = np.dtype([
    ("step", "<u4"), ("seed", "<u4"), ("n_views", "<u4"), ("n_splats", "<u4"),
    ("image_index", "<u4", (MAX_VIEWS,)),
    ("lr_means", "<f4"), ("lr_quats", "<f4"), ("lr_scales", "<f4"), ("lr_opacities", "<f4"),
    ("lr_sh0", "<f4"), ("lr_shN", "<f4"), ("bias1", "<f4"), ("bias2", "<f4"),
    ("beta1", "<f4"), ("beta2", "<f4"), ("adam_eps", "<f4"), ("l1_weight", "<f4"),
    ("ssim_weight", "<f4"), ("opacity_reg", "<f4"), ("scale_reg", "<f4"), ("noise_scale", "<f4"),
    ("grad_norm_scale_x", "<f4"), ("grad_norm_scale_y", "<f4"), ("pad0", "<f4"), ("pad1", "<f4"),
])
STEP_PARAMS_WORDS = STEP_PARAMS_DTYPE.itemsize // 4
assert STEP_PARAMS_DTYPE.itemsize == 128


def step_params(**values) -> np.ndarray:
    """One StepParams record; unset fields are 0."""
    out = np.zeros((), STEP_PARAMS_DTYPE)
    for key, value in values.items():
        out[key] = value
    return out
