"""Adam, float64 reference of the update inside kernel fpbo (as torch.optim.Adam)."""

import numpy as np


def adam(p, g, m, v, lr, step, beta1=0.9, beta2=0.999, eps=1e-15):
    """One step: returns (p', m', v')."""
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    bias1, bias2 = 1 - beta1**step, 1 - beta2**step
    return p - lr / bias1 * m / (np.sqrt(v) / np.sqrt(bias2) + eps), m, v


def fpbo_expected(raw, moments, grads, scales, opacities, reg, lrs, step):
    """What one fpbo step leaves, in float64.

    ``raw``: the stored parameters by name (means, quats, log-scales, opacity
    logits, sh ``[N,K,3]``); ``moments``: ``{"exp_avg": {...}, "exp_avg_sq":
    {...}}`` by the same names; ``grads``: the reference gradients with respect
    to the activated values (``rasterization_bwd``: means, quats, scales,
    opacities, sh_coeffs); ``scales``/``opacities``: the activated values;
    ``reg``: opacity_reg, scale_reg and (optional) flatten_reg; ``lrs``: the StepParams learning rates
    (lr_means, ..., lr_sh0 for coefficient 0, lr_shN for the rest).
    Returns ``{name: (p', m', v')}``: the gradients chained to the raw
    parameters (exp, sigmoid) with the regularizers' added, then Adam.
    """
    n = len(opacities)
    sc, op = np.asarray(scales, np.float64), np.asarray(opacities, np.float64)
    chained = dict(
        means=grads["means"],
        quats=grads["quats"],
        sh=grads["sh_coeffs"],
        scales=grads["scales"] * sc + reg["scale_reg"] / (3 * n) * sc + flatten_grad(sc, reg.get("flatten_reg", 0.0)),
        opacities=(grads["opacities"] + reg["opacity_reg"] / n) * op * (1 - op),
    )
    out = {}
    for name, value in raw.items():
        if name == "sh":
            lr = np.full(value.shape, lrs["lr_shN"])
            lr[:, 0] = lrs["lr_sh0"]
        else:
            lr = lrs["lr_" + name]
        out[name] = adam(
            value.astype(np.float64),
            chained[name],
            moments["exp_avg"][name].astype(np.float64),
            moments["exp_avg_sq"][name].astype(np.float64),
            lr,
            step,
        ) + (lr,)
    return out


def flatten_loss(scales, weight):
    """--geometry's flattening regularizer: ``weight`` x the mean over splats of each
    splat's smallest scale (``scales`` [N,3], activated). Returns a float."""
    return weight * float(np.min(np.asarray(scales, np.float64), axis=1).mean())


def flatten_grad(scales, weight):
    """d :func:`flatten_loss` / d log-scale, [N,3] float64: weight / N x the scale at
    each splat's smallest axis (the first of equal ones, as np.argmin and fpbo), 0 elsewhere."""
    sc = np.asarray(scales, np.float64)
    out = np.zeros_like(sc)
    k = np.argmin(sc, axis=1)
    rows = np.arange(len(sc))
    out[rows, k] = weight / max(len(sc), 1) * sc[rows, k]
    return out
