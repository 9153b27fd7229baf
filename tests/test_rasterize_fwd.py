"""rasterize_fwd: images against the reference, per pixel."""

import numpy as np
import pytest
from render_cases import gpu_render, random_scene, ref_render


def assert_image_close(got, ref):
    """|d| <= 1e-5 + 1% |ref| per pixel (the issue's bound; float32 compositing of
    ~10-100 terms is accurate to ~1e-6 here)."""
    bad = np.abs(got - ref) > 1e-5 + 0.01 * np.abs(ref)
    assert not bad.any(), "%d pixels off, worst %g" % (bad.sum(), np.abs(got - ref).max())


@pytest.mark.parametrize("seed,size", [(0, (75, 53)), (1, (16, 16)), (2, (129, 31))])
def test_images_match_reference(seed, size):
    scene = random_scene(n=400, width=size[0], height=size[1], seed=seed, sh_degree=seed % 4)
    bg = np.array([[0.2, 0.4, 0.6], [1.0, 1.0, 1.0]], np.float32)
    colors, alphas, depths, _ = gpu_render(scene, backgrounds=bg)
    rc, ra, rmeta = ref_render(scene, backgrounds=bg)
    assert colors.shape == (2, size[1], size[0], 3) and alphas.shape == (2, size[1], size[0], 1)
    assert_image_close(colors, rc)
    assert_image_close(alphas, ra)
    rd = np.where(ra > 0, rmeta["render_depths"] / np.where(ra > 0, ra, 1), 0)
    assert_image_close(depths, rd)


@pytest.mark.parametrize("seed,size", [(0, (75, 53)), (2, (129, 31))])
def test_median_depth_matches_reference(seed, size):
    """The median depth is one Gaussian's depth (its camera-space z, float32 on the GPU:
    rel. 1e-6), so it matches exactly up to rounding, except at pixels where T after a blend
    lies within float32 rounding of 0.5 and the crossing moves to the neighbouring Gaussian:
    at most 1e-3 of the pixels, as for the last contributor below."""
    scene = random_scene(n=400, width=size[0], height=size[1], seed=seed, sh_degree=seed % 4)
    _, alphas, _, meta = gpu_render(scene)
    _, ra, rmeta = ref_render(scene)
    got, want = meta["median_depths"], rmeta["median_depths"]
    assert got.shape == alphas.shape and got.dtype == np.float32
    off = np.abs(got - want) > 1e-5 + 1e-5 * np.abs(want)
    assert off.mean() < 1e-3, "%d of %d pixels off" % (off.sum(), off.size)
    assert (want > 0).mean() > 0.1 and ((want > 0) == (ra > 0.5)).mean() > 0.99


def test_median_depth_of_two_opaque_layers_is_the_front_layer():
    """Two wide, nearly opaque (o = 0.95) layers at z = 2 and z = 5: T drops to 0.05 at the
    front layer, so the median is 2 wherever the front layer is dense (o exp(-sigma) > 0.5),
    while the expected depth mixes in the back layer (about (2 * 0.95 + 5 * 0.0475) / 0.9975);
    outside both layers the median is 0."""
    W, H = 32, 32
    K = np.array([[[40.0, 0, 16.0], [0, 40.0, 16.0], [0, 0, 1]]], np.float32)
    scene = dict(
        means=np.array([[0, 0, 2.0], [0, 0, 5.0]], np.float32),
        quats=np.array([[1.0, 0, 0, 0]] * 2, np.float32),
        scales=np.array([[0.2, 0.2, 0.01], [0.5, 0.5, 0.01]], np.float32),
        opacities=np.array([0.95, 0.95], np.float32),
        sh_coeffs=np.ones((2, 1, 3), np.float32),
        viewmats=np.eye(4, dtype=np.float32)[None],
        Ks=K,
        width=W,
        height=H,
    )
    _, alphas, depths, meta = gpu_render(scene)
    med = meta["median_depths"][0, ..., 0]
    assert med[16, 16] == pytest.approx(2.0, rel=1e-6)
    assert depths[0, 16, 16, 0] > 2.1  # the expected depth is pulled back by the far layer
    assert med[0, 0] == 0.0 and alphas[0, 0, 0, 0] < 0.5
    front = np.abs(med - 2.0) < 1e-5
    assert front.sum() > 20 and ((med == 0) | front | (np.abs(med - 5.0) < 1e-5)).all()


def test_last_contributor_and_transmittance_match_reference():
    scene = random_scene(n=300, seed=4)
    _, alphas, _, meta = gpu_render(scene)
    _, ra, rmeta = ref_render(scene)
    raster = meta["_context"].raster
    last = raster.device.readback(raster.out_last)
    assert (last != rmeta["last"]).mean() < 1e-3  # a skip decision at 1/255 may flip
    np.testing.assert_allclose(1 - alphas[..., 0], rmeta["T_final"], atol=1e-5)


def test_alpha_cap_is_a_parameter(monkeypatch):
    """max_alpha = 0.999 (gsplat 1.5.3's cap) against the reference with the same
    cap, on near-opaque Gaussians where the cap decides the image."""
    import reference.rasterize

    scene = random_scene(n=200, seed=5)
    scene["opacities"] = np.full_like(scene["opacities"], 0.9995)
    default = gpu_render(scene)[0]
    colors, alphas, _, _ = gpu_render(scene, max_alpha=0.999)
    monkeypatch.setattr(reference.rasterize, "MAX_ALPHA", 0.999)
    rc, ra, _ = ref_render(scene)
    assert_image_close(colors, rc)
    assert_image_close(alphas, ra)
    assert np.abs(default - colors).max() > 1e-3  # the cap is not ignored
