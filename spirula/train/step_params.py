"""The per-step scalars the GPU reads (shaders/include/step_params.glsl).

A recorded step is replayed unchanged every step; what changes (the Adam step,
learning rates, the image of each view, the random seed) is written by the
host into host-visible memory before each step, and the step's first dispatch
copies it into this struct on the GPU. The layout is the struct's, read from
the GLSL (``spirula.contract.std430``): nothing here repeats it.
"""

from __future__ import annotations

import numpy as np

from spirula.contract.std430 import include_dtype

STEP_PARAMS_DTYPE = include_dtype("step_params.glsl", "StepParams")
STEP_PARAMS_WORDS = STEP_PARAMS_DTYPE.itemsize // 4
MAX_VIEWS = STEP_PARAMS_DTYPE["image_index"].shape[0]
# The words the host writes: all but ``prev_isects``, which the GPU writes at
# the end of each step (the pipelined step loop, spirula/train/trainer.py).
STEP_PARAMS_HOST_WORDS = STEP_PARAMS_DTYPE.fields["prev_isects"][1] // 4
PREV_ISECTS_WORD = STEP_PARAMS_HOST_WORDS
# ``prev_capacity`` when the previous step is known to be whole: fpbo never skips
NO_GUARD = 0xFFFFFFFF


def step_params(**values) -> np.ndarray:
    """One StepParams record; unset fields are 0."""
    out = np.zeros((), STEP_PARAMS_DTYPE)
    for key, value in values.items():
        out[key] = value
    return out
