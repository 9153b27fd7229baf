"""Analytic and edge cases of the whole render: behind the camera, tile
borders, a Gaussian covering the image, no Gaussians, empty tiles, opacity 0
and 1, a zero scale, NaN input, out-of-memory."""

import numpy as np
import pytest
from render_cases import gpu_render, ref_render
from test_rasterize_fwd import assert_image_close

from spirula.errors import OutOfMemoryError, SpirulaError
from spirula.render.api import rasterization, rasterization_backward

W, H, F = 48, 40, 50.0


def scene_of(means, scales=0.05, opacities=0.8, sh=None, width=W, height=H):
    means = np.asarray(means, np.float32).reshape(-1, 3)
    n = len(means)
    return dict(
        means=means,
        quats=np.tile(np.float32([1, 0, 0, 0]), (n, 1)),
        scales=np.broadcast_to(np.float32(scales), (n, 3)).copy(),
        opacities=np.broadcast_to(np.float32(opacities), (n,)).copy(),
        sh_coeffs=np.zeros((n, 1, 3), np.float32) if sh is None else np.asarray(sh, np.float32),
        viewmats=np.eye(4, dtype=np.float32)[None],
        Ks=np.float32([[[F, 0, width / 2], [0, F, height / 2], [0, 0, 1]]]),
        width=width,
        height=height,
        sh_degree=0,
    )


def test_single_isotropic_gaussian_is_the_analytic_blob():
    """A Gaussian of scale s at depth z, on the axis: conic = 1/((f s/z)^2 + 0.3),
    colour 0.5 (zero SH), and at pixel offset d, alpha = o exp(-d^2 conic / 2)."""
    s, z, o = 0.1, 5.0, 0.7
    colors, alphas, depths, meta = gpu_render(scene_of([0, 0, z], scales=s, opacities=o))
    var = (F * s / z) ** 2 + 0.3
    np.testing.assert_allclose(meta["conics"][0, 0], [1 / var, 0, 1 / var], rtol=1e-5)
    assert meta["radii"][0, 0].tolist() == [int(np.ceil(3.33 * np.sqrt(var)))] * 2
    ys, xs = np.mgrid[0:H, 0:W] + 0.5
    d2 = (xs - W / 2) ** 2 + (ys - H / 2) ** 2
    alpha = np.minimum(0.99, o * np.exp(-0.5 * d2 / var))
    alpha = np.where(alpha >= 1 / 255, alpha, 0)
    np.testing.assert_allclose(alphas[0, ..., 0], alpha, atol=1e-6)
    np.testing.assert_allclose(colors[0], np.repeat(0.5 * alpha[..., None], 3, -1), atol=1e-6)
    np.testing.assert_allclose(depths[0, ..., 0][alpha > 0], z, rtol=1e-6)


def test_gaussian_behind_the_camera_is_culled():
    colors, alphas, _, meta = gpu_render(
        scene_of([[0, 0, -2.0], [0, 0, 0.005]]), backgrounds=np.float32([[0.1, 0.2, 0.3]])
    )
    assert not meta["radii"].any() and meta["n_isects"] == 0
    assert np.all(alphas == 0) and np.allclose(colors, [0.1, 0.2, 0.3])


@pytest.mark.parametrize("x_pixel", [16.0, 15.999, 32.0])
def test_gaussian_exactly_on_a_tile_border(x_pixel):
    x = (x_pixel - W / 2) * 4.0 / F
    scene = scene_of([x, 0.0, 4.0], scales=0.02)
    colors, alphas, _, meta = gpu_render(scene)
    rc, ra, rmeta = ref_render(scene)
    assert meta["tiles_touched"].tolist() == rmeta["tiles"].tolist()
    assert_image_close(colors, rc)
    assert_image_close(alphas, ra)


def test_gaussian_covering_the_whole_image_touches_every_tile():
    scene = scene_of([0, 0, 3.0], scales=5.0, opacities=0.5)
    colors, alphas, _, meta = gpu_render(scene)
    assert meta["tiles_touched"][0, 0] == 3 * 3
    rc, ra, _ = ref_render(scene)
    assert_image_close(colors, rc)
    assert np.all(alphas > 0.4)


def test_no_gaussians_renders_the_background():
    scene = scene_of(np.zeros((0, 3)))
    bg = np.float32([[0.25, 0.5, 1.0]])
    colors, alphas, depths, meta = gpu_render(scene, backgrounds=bg)
    assert meta["n_isects"] == 0 and meta["radii"].shape == (1, 0, 2)
    assert np.all(colors == bg[0]) and np.all(alphas == 0) and np.all(depths == 0)
    grads = rasterization_backward(meta, np.ones_like(colors))
    assert grads["means"].shape == (0, 3) and grads["sh_coeffs"].shape == (0, 1, 3)


def test_empty_tiles_are_exactly_background():
    # one small Gaussian near the top-left corner: the other tiles are empty
    x, y = (4 - W / 2) * 4 / F, (4 - H / 2) * 4 / F
    bg = np.float32([[0.3, 0.6, 0.9]])
    colors, alphas, _, meta = gpu_render(scene_of([x, y, 4.0], scales=0.01), backgrounds=bg)
    assert meta["tiles_touched"][0, 0] == 1
    assert np.all(colors[0, 16:, :] == bg[0]) and np.all(colors[0, :, 16:] == bg[0])
    assert np.all(alphas[0, 16:] == 0) and alphas[0, 4, 4, 0] > 0


def test_opacity_zero_is_culled_and_one_saturates_at_099():
    # the second Gaussian's centre projects onto a pixel centre (27.5, 20.5)
    scene = scene_of([[0, 0, 4.0], [0.28, 0.04, 4.0]], scales=0.2, opacities=[0.0, 1.0])
    colors, alphas, _, meta = gpu_render(scene)
    assert not meta["radii"][0, 0].any() and meta["radii"][0, 1].all()
    assert abs(alphas.max() - 0.99) < 1e-6
    rc, ra, _ = ref_render(scene)
    assert_image_close(colors, rc)


def test_zero_scale_is_a_point_blurred_by_eps2d():
    scene = scene_of([0.1, -0.05, 3.0], scales=0.0)
    colors, alphas, _, meta = gpu_render(scene)
    np.testing.assert_allclose(meta["conics"][0, 0], [1 / 0.3, 0, 1 / 0.3], rtol=1e-5)
    rc, ra, _ = ref_render(scene)
    assert_image_close(alphas, ra)


@pytest.mark.parametrize("field", ["means", "quats", "scales", "opacities", "sh_coeffs"])
def test_nan_input_is_a_clear_error(field):
    scene = scene_of([[0, 0, 3.0], [0.1, 0, 3.0]])
    scene[field] = scene[field].copy()
    scene[field].reshape(-1)[-1] = np.nan
    with pytest.raises(SpirulaError, match=field + r" holds a non-finite value \(nan at index"):
        rasterization(**scene)


def test_nan_on_the_gpu_is_culled_not_a_hang(device):
    """Training keeps its parameters on the GPU; a NaN there must not hang the
    rasterizer or spread: that Gaussian is culled."""
    from spirula.render.rasterizer import Rasterizer, Splats

    s = scene_of([[0, 0, 3.0], [0.2, 0, 3.0], [0.1, 0.1, 3.0]])
    s["means"][1, 0] = np.nan
    s["quats"][2] = np.nan
    splats = Splats.from_numpy(device, s["means"], s["quats"], s["scales"], s["opacities"], s["sh_coeffs"])
    raster = Rasterizer(device, W, H, 1, capacity=3)
    raster.set_cameras(s["viewmats"], s["Ks"])
    raster.set_backgrounds(None)
    raster.forward(splats, 0)
    radii = device.readback(raster.radii, shape=(3, 2))
    assert radii[0].all() and not radii[1].any() and not radii[2].any()
    assert np.isfinite(device.readback(raster.out_colors)).all()
    raster.free()
    splats.free(device)


def test_inf_on_the_gpu_is_culled_not_a_hang(device):
    """+inf or -inf in any parameter culls that Gaussian (an infinite scale or
    opacity used to pass every comparison and draw an infinite box)."""
    from spirula.render.rasterizer import Rasterizer, Splats

    s = scene_of([[0, 0, 3.0]] + [[0.1 * i, 0, 3.0] for i in range(1, 7)])
    s["means"][1, 0] = np.inf
    s["means"][2, 2] = -np.inf
    s["scales"][3, 1] = np.inf
    s["opacities"][4] = np.inf
    s["quats"][5, 0] = np.inf
    s["quats"][6] = np.float32([1, 0, 0, -np.inf])
    splats = Splats.from_numpy(device, s["means"], s["quats"], s["scales"], s["opacities"], s["sh_coeffs"])
    raster = Rasterizer(device, W, H, 1, capacity=7)
    raster.set_cameras(s["viewmats"], s["Ks"])
    raster.set_backgrounds(None)
    raster.forward(splats, 0)
    radii = device.readback(raster.radii, shape=(7, 2))
    assert radii[0].all() and not radii[1:].any(), radii
    assert np.isfinite(device.readback(raster.out_colors)).all()
    raster.free()
    splats.free(device)


def test_an_image_too_large_for_the_device_is_a_clear_error(device):
    side = 1 << 15  # 32768^2 RGB float32 = 12 GiB: past any device's per-buffer limit
    with pytest.raises(OutOfMemoryError, match=r"api\.raster\.colors.*needs .*GiB"):
        rasterization(**scene_of([0, 0, 3.0], width=side, height=side))
