"""Density control, float64 reference of the densify_* kernels.

- ``relocation``: MCMC (Kheradmand et al. 2024, eq. 9; gsplat's
  compute_relocation): what ``densify_mcmc_relocate`` gives each of the
  splats that share one drawn splat (``densify_mcmc_weights``,
  ``densify_mcmc_sample`` and ``densify_mcmc_copy`` choose and copy them;
  the draws are random, so they are checked by where copies come from);
- ``adc_refine``: adaptive density control (Kerbl et al. 2023, gsplat's
  DefaultStrategy): what ``densify_adc_classify`` decides and
  ``densify_adc_write`` writes, splat by splat;
- ``adc_reset``: ``densify_adc_reset``'s opacity ceiling.
"""

from __future__ import annotations

from math import comb

import numpy as np

SPLIT_SHRINK = 1.6  # a split child's scale is its parent's / 1.6


def relocation(o, scale, n_share):
    """The opacity and scale of each of ``n_share`` splats that replace one of
    opacity ``o`` and scale ``scale``."""
    o_new = 1 - (1 - o) ** (1 / n_share)
    denom = sum(
        comb(i - 1, k) * (-1) ** k / np.sqrt(k + 1) * o_new ** (k + 1) for i in range(1, n_share + 1) for k in range(i)
    )
    return o_new, scale * o / denom


def adc_refine(
    scales,
    opacities,
    grad2d_sum,
    vis_count,
    grow_grad2d,
    grow_scale3d,
    prune_scale3d,
    min_opacity,
    prune_big,
    finite=None,
):
    """[(source index, kind)] of every splat after clone, split and prune, in
    output order; kind: 'same' (kept, with its moments), 'clone' (a copy with
    zero moments), 'child' (one of two split children: scale / 1.6, a mean
    drawn from the parent's Gaussian, zero moments). ``scales``: log [N,3];
    ``opacities``: logits [N]; ``grow_scale3d``, ``prune_scale3d``: already
    times the scene extent; ``finite``: [N] bool, whether all of a splat's
    parameters are finite (None: all are); a diverged splat is pruned."""
    largest = np.exp(np.asarray(scales, np.float64)).max(1)
    o = 1 / (1 + np.exp(-np.asarray(opacities, np.float64)))
    grad = np.asarray(grad2d_sum, np.float64) / np.maximum(vis_count, 1)
    out = []
    for i in range(len(o)):
        high = grad[i] > grow_grad2d
        split = high and largest[i] > grow_scale3d
        child = largest[i] / SPLIT_SHRINK if split else largest[i]
        if o[i] < min_opacity or (prune_big and child > prune_scale3d) or (finite is not None and not finite[i]):
            continue
        out += [(i, "child")] * 2 if split else [(i, "same")] + ([(i, "clone")] if high else [])
    return out


def adc_reset(opacities, min_opacity):
    """Opacity logits capped at twice ``min_opacity``."""
    o = 1 / (1 + np.exp(-np.asarray(opacities, np.float64)))
    c = np.minimum(o, 2 * min_opacity)
    return np.log(c / (1 - c))
