"""projection_bwd on each backend against the float64 reference's analytic gradients
(reference.projection.projection_bwd, which tests/test_reference.py checks against finite
differences), from random cotangents of its inputs: the 2D means, conics, colours,
opacities and (NORMALS) the splat normals of every (camera, splat). Through the whole
rasterizer: tests/test_rasterize_bwd.py."""

import numpy as np
import pytest
from kernel_cases import run_kernel, scene_inputs
from reference.projection import projection_bwd, projection_fwd
from render_cases import random_scene

from spirula.reference.normals import splat_normals_vjp
from spirula.render.rasterizer import EPS2D, FAR_PLANE, NEAR_PLANE
from spirula.runtime.sequence import Threads


def assert_grad_close(got, ref, name):
    """float32 against float64: each camera's term is accurate to ~1e-6 relative, summed over
    two cameras without atomics; where terms cancel only the absolute error is kept, so the
    bound scales with the largest: 1e-4 x max|ref| + 1e-3 x |ref| (tests/test_rasterize_bwd.py's)."""
    scale = np.abs(ref).max()
    err = np.abs(got - ref)
    bound = 1e-4 * scale + 1e-3 * np.abs(ref)
    assert (err <= bound).all(), "%s: worst %g (max|ref| %g)" % (name, err.max(), scale)


@pytest.mark.parametrize("activated", [True, False], ids=["activated", "log-logit"])
@pytest.mark.parametrize("sh_degree", [0, 1, 2, 3])
def test_projection_bwd_kernel_matches_reference(backend, sh_degree, activated):
    """Every output, w.r.t. the stored parameters (ACTIVATED off: log scales and logit
    opacities); NORMALS with the odd degrees; SH past the active degree: 0."""
    scene = random_scene(n=377, sh_degree=3, seed=40 + sh_degree)
    n, C, K = len(scene["means"]), len(scene["viewmats"]), scene["sh_coeffs"].shape[1]
    W, H = scene["width"], scene["height"]
    f64 = {k: np.asarray(scene[k], np.float64) for k in ("means", "quats", "scales", "opacities", "sh_coeffs")}
    cams = (np.asarray(scene["viewmats"], np.float64), np.asarray(scene["Ks"], np.float64))
    fwd = projection_fwd(*f64.values(), *cams, W, H, sh_degree, EPS2D, NEAR_PLANE, FAR_PLANE)
    vis = (fwd["radii"] != 0).any(-1)
    assert vis.mean() > 0.3
    normals = bool(sh_degree % 2)
    rng = np.random.default_rng(sh_degree)
    grads = dict(
        grad_xy=rng.standard_normal((C, n, 2)).astype(np.float32),
        grad_conics=rng.standard_normal((C, n, 3)).astype(np.float32),
        grad_rgb=rng.standard_normal((C, n, 3)).astype(np.float32),
        grad_opacity=rng.standard_normal((C, n)).astype(np.float32),
        grad_normals=rng.standard_normal((C, n, 3)).astype(np.float32),
    )
    inputs = dict(scene_inputs(scene, activated), radii=fwd["radii"].reshape(C * n, 2).astype(np.int32))
    inputs.update({k: v.reshape((C * n,) + v.shape[2:]) for k, v in grads.items()})  # [C*N, ...]
    outs = dict(
        grad_means=((n, 3), np.float32),
        grad_quats=((n, 4), np.float32),
        grad_scales=((n, 3), np.float32),
        grad_opacities=((n,), np.float32),
        grad_sh=((n, K, 3), np.float32),
    )
    out = run_kernel(
        backend,
        "projection_bwd",
        Threads(n),
        inputs,
        outs,
        push=dict(n=n, n_cameras=C, width=W, height=H, eps2d=EPS2D),
        spec=dict(SH_DEGREE=sh_degree, SH_COEFFS=K, ACTIVATED=int(activated), NORMALS=int(normals)),
    )
    ref = projection_bwd(
        *f64.values(),
        *cams,
        W,
        H,
        sh_degree,
        grad_means2d=grads["grad_xy"],
        grad_conics=grads["grad_conics"],
        grad_colors=grads["grad_rgb"],
        grad_opacities=grads["grad_opacity"],
        eps2d=EPS2D,
        near=NEAR_PLANE,
        far=FAR_PLANE,
    )
    if normals:  # the seen views' normal gradients, to the quaternion
        g = np.where(vis[..., None], grads["grad_normals"].astype(np.float64), 0.0)
        ref["quats"] = ref["quats"] + splat_normals_vjp(f64["quats"], f64["scales"], f64["means"], cams[0], g)
    if not activated:  # through exp (scales) and the sigmoid (opacities)
        ref["scales"] = ref["scales"] * f64["scales"]
        ref["opacities"] = ref["opacities"] * f64["opacities"] * (1 - f64["opacities"])
    for name, key in (("means", "grad_means"), ("quats", "grad_quats"), ("scales", "grad_scales")):
        assert_grad_close(out[key], ref[name], name)
    assert_grad_close(out["grad_opacities"], ref["opacities"], "opacities")
    active = (sh_degree + 1) ** 2
    assert_grad_close(out["grad_sh"][:, :active], ref["sh_coeffs"][:, :active], "sh")
    assert (out["grad_sh"][:, active:] == 0).all()
