"""--geometry: the depth distortion in rasterize_fwd/rasterize_bwd against the float64
reference (which tests/test_reference.py checks against the pairwise sum and finite differences)."""

import numpy as np
from reference.rasterize import rasterize_bwd, rasterize_fwd
from render_cases import gpu_render, random_scene
from test_rasterize_bwd import assert_grad_close

from spirula.render.api import rasterization_backward


def _ref_args(scene, meta):
    C, N = meta["radii"].shape[:2]
    opac = np.broadcast_to(scene["opacities"], (C, N))
    return (meta["means2d"], meta["conics"], meta["colors"], opac, meta["depths"], meta["radii"])


def test_distortion_forward_and_backward_match_reference():
    scene = random_scene(n=150, seed=21)
    W, H = scene["width"], scene["height"]
    colors, alphas, _, meta = gpu_render(scene, distortion=True)
    args = _ref_args(scene, meta)
    ref = rasterize_fwd(*args, W, H)
    # a running sum of <= ~10^2 float32 terms 2 w (z A - D), |z| <~ 10: error ~1e-6 x max
    scale = np.abs(ref["distortions"]).max()
    assert scale > 0.1
    np.testing.assert_allclose(meta["distortions"], ref["distortions"], atol=1e-5 * scale)
    # the colours are unchanged by the distortion variant
    plain, _, _, _ = gpu_render(scene)
    np.testing.assert_array_equal(colors, plain)

    rng = np.random.default_rng(1)
    gc = rng.standard_normal(colors.shape).astype(np.float32)
    gx = rng.standard_normal(alphas.shape).astype(np.float32)
    got = rasterization_backward(meta, gc, np.zeros_like(alphas), grad_distortions=gx)
    want = rasterize_bwd(*args, W, H, grad_colors=gc, grad_alphas=np.zeros_like(alphas), grad_distortions=gx)
    raster = meta["_context"].raster
    C, N = meta["radii"].shape[:2]
    vis = (meta["radii"] != 0).any(-1)
    opac = raster.device.readback(raster.grad_opacity, shape=(C * N,)).reshape(C, N)
    assert_grad_close(got["means2d"][vis], want["means2d"][vis], "means2d")
    assert_grad_close(opac[vis], want["opacities"][vis], "opacities")
    assert_grad_close(got["depths"][vis], want["depths"][vis], "depths")
