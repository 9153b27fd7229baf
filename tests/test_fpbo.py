"""fpbo: the fused projection backward + Adam update, against the reference
(projection and rasterization gradients from spirula/reference, chained to the
stored log-scales and opacity logits, plus the regularizers, then Adam)."""

import numpy as np
import pytest
from reference.adam import fpbo_expected
from reference.render import rasterization_bwd
from render_cases import random_scene

from spirula.selftest import gpu_fpbo_step, raw_params
from spirula.train.model import SplatModel

LR = dict(lr_means=1e-3, lr_quats=2e-3, lr_scales=5e-3, lr_opacities=0.05, lr_sh0=2.5e-3, lr_shN=1.25e-4)


@pytest.mark.parametrize(
    "sh_degree,step,views,flatten_reg,normals,lenses",
    [
        (0, 1, 1, 0.0, False, True),
        (3, 7, 1, 0.0, False, False),
        (2, 3, 2, 0.0, False, True),
        (3, 2, 2, 0.0, False, False),
        (1, 3, 2, 40.0, False, True),
        (1, 4, 2, 0.0, True, False),
    ],
)
def test_fpbo_matches_reference_update(device, sh_degree, step, views, flatten_reg, normals, lenses):
    """flatten_reg > 0: with FLATTEN (--geometry's flattening, tests/test_geometry.py); 40 / 150
    splats makes its gradient (0.27 x the smallest scale) of the order of the rendering's.
    normals: with NORMALS and DEPTH_GRAD (--geometry's normal consistency): cotangents of the
    normal and accumulated depth images too, the reference's render_normals_bwd and depth.
    lenses: fpbo's LENSES (pinhole cameras: the same update with the lens backward compiled
    in or left out, as a training run without lenses records it)."""
    s = random_scene(n=150, cameras=views, sh_degree=sh_degree, seed=30 + sh_degree)
    rng = np.random.default_rng(4)
    n, K = len(s["means"]), s["sh_coeffs"].shape[1]
    raw = raw_params(s)
    moments = {
        k: {
            name: (rng.standard_normal(a.shape) * 1e-3 * (1 if k == "exp_avg" else 1e-3) ** 1).astype(np.float32)
            for name, a in raw.items()
        }
        for k in ("exp_avg", "exp_avg_sq")
    }
    for a in moments["exp_avg_sq"].values():
        np.abs(a, out=a)
    model = SplatModel(device, n, n, K)
    model.upload(raw, moments)
    reg = dict(opacity_reg=0.01, scale_reg=0.02, flatten_reg=flatten_reg)
    nc = {} if normals else None
    gc, vis, count = gpu_fpbo_step(device, model, s, sh_degree, step, rng, lr=LR, reg=reg, normals=nc, lenses=lenses)
    got = model.download()

    # reference: gradients w.r.t. activated values, chained to the raw ones
    f64 = {k: np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v for k, v in s.items()}
    gd = None if nc is None else nc["grad_depths"][..., None].astype(np.float64)
    g = rasterization_bwd(**f64, grad_colors=gc.astype(np.float64), grad_depths=gd)
    if normals:
        from spirula.reference.normals import render_normals_bwd

        gn = render_normals_bwd(**f64, grad_normals=nc["grad_normals"].astype(np.float64))
        for k in ("means", "quats", "scales", "opacities"):
            g[k] = g[k] + gn[k]
    want = fpbo_expected(raw, moments, g, s["scales"], s["opacities"], reg, LR, step)
    for name, (want_p, want_m, want_v, lr) in want.items():
        # Adam normalizes the gradient: an update is at most ~lr, so its float32
        # error is ~1e-6 x lr beyond the parameter's own rounding (1 ulp)
        step_err = np.abs(got["params"][name] - want_p)
        assert (step_err <= 1e-3 * lr + 2**-22 * np.abs(want_p)).all(), (name, step_err.max())
        np.testing.assert_allclose(
            got["exp_avg"][name], want_m, rtol=1e-3, atol=1e-4 * np.abs(want_m).max() + 1e-12, err_msg=name
        )
        np.testing.assert_allclose(
            got["exp_avg_sq"][name], want_v, rtol=2e-3, atol=1e-4 * np.abs(want_v).max() + 1e-18, err_msg=name
        )
    # density-control statistics: visible splats counted once, with a positive gradient norm
    assert np.array_equal(count, vis.sum(0))
    model.free()
