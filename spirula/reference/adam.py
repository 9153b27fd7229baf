"""Adam, float64 reference of the update inside kernel fpbo (as torch.optim.Adam)."""

import numpy as np


def adam(p, g, m, v, lr, step, beta1=0.9, beta2=0.999, eps=1e-15):
    """One step: returns (p', m', v')."""
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    bias1, bias2 = 1 - beta1**step, 1 - beta2**step
    return p - lr / bias1 * m / (np.sqrt(v) / np.sqrt(bias2) + eps), m, v
