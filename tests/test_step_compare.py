"""benchmarks/step_compare.py --as-sets: a refinement may put the same relocated
splats into other slots (4048077 and HEAD do), so splats are matched before
they are compared; a real difference must still show."""

import numpy as np
from conftest import load_benchmark


def _model(rng, n=200):
    means = rng.standard_normal((n, 3)).astype(np.float32)
    opac = rng.standard_normal(n).astype(np.float32)
    # a relocated splat and its copy: same parameters, different moments
    means[1], opac[1] = means[0], opac[0]
    return {
        "model/params/means": means,
        "model/params/opacities": opac,
        "model/exp_avg/means": rng.standard_normal((n, 3)).astype(np.float32),
        "meta": np.zeros(3, np.uint8),
    }


def test_a_permutation_compares_equal_and_a_change_does_not():
    sc = load_benchmark("step_compare")
    a = _model(np.random.default_rng(0))
    perm = np.random.default_rng(1).permutation(200)
    b = {k: (v[perm] if k.startswith("model/") else v) for k, v in a.items()}
    by_slot = sc.relative_differences(a, b)
    assert min(by_slot.values()) > 0.5
    matched = sc.relative_differences(a, sc.match_rows(a, b))
    assert max(matched.values()) == 0.0  # the coincident pair told apart by its moments
    b["model/params/opacities"] = b["model/params/opacities"] * 1.01
    changed = sc.relative_differences(a, sc.match_rows(a, b))
    assert abs(changed["params/opacities"] - 0.01) < 1e-6
