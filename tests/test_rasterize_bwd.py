"""rasterize_bwd and projection_bwd against the reference's analytic gradients
(which tests/test_reference.py checks against finite differences)."""

import numpy as np
import pytest
from render_cases import gpu_render, random_scene, ref_grads

from spirula.render.api import rasterization_backward

INPUTS = ("means", "quats", "scales", "opacities", "sh_coeffs")


def assert_grad_close(got, ref, name):
    """float32 gradients: each pixel's term is accurate to ~1e-6 relative, and a
    Gaussian's gradient sums up to ~10^3 of them in atomic (arbitrary) order, so
    the error scales with the largest gradient: worst seen 3e-6 x max|ref| on
    lavapipe; bound 1e-4 x max|ref| + 1e-3 x |ref|."""
    scale = np.abs(ref).max()
    err = np.abs(got - ref)
    bound = 1e-4 * scale + 1e-3 * np.abs(ref)
    assert (err <= bound).all(), "%s: worst %g (max|ref| %g)" % (name, err.max(), scale)


@pytest.mark.parametrize("sh_degree", [0, 3])
@pytest.mark.parametrize(
    "float_atomics,shuffle_sums",
    [(True, False), (False, False), (True, True)],
    ids=["native-atomics", "cas-atomics", "shuffle-sums"],
)
def test_gradients_of_every_input_match_reference(sh_degree, float_atomics, shuffle_sums):
    from spirula.backends import open_device
    from spirula.backends.vulkan import vkinfo
    from spirula.backends.vulkan.device import shuffle_sums_defines

    device = open_device("vulkan", float_atomics=float_atomics)
    assert device.float_atomics == (float_atomics and device.info.atomic_float_add)
    if shuffle_sums:  # the NVIDIA default's variant, compiled on this device too where it can run
        defines = shuffle_sums_defines(device.info)
        if not defines:
            lo, hi = device.info.subgroup_size_range
            assert lo != hi or not device.info.subgroup_operations & vkinfo.SUBGROUP_SHUFFLE
            pytest.skip("%s has no subgroup shuffles in one subgroup size" % device.info.name)
        device.defines.update(defines)
        assert device.shuffle_sums
    elif device.shuffle_sums:  # NVIDIA's default
        del device.defines["SHUFFLE_SUMS"], device.defines["SUBGROUP_LOG2"]
    scene = random_scene(n=200, sh_degree=sh_degree, seed=10 + sh_degree)
    bg = np.array([[0.3, 0.1, 0.0], [0.0, 0.5, 1.0]], np.float32)
    colors, alphas, _, meta = gpu_render(scene, backgrounds=bg, device=device)
    rng = np.random.default_rng(7)
    gc = rng.standard_normal(colors.shape).astype(np.float32)
    ga = rng.standard_normal(alphas.shape).astype(np.float32)
    got = rasterization_backward(meta, gc, ga)
    ref = ref_grads(scene, gc, ga, backgrounds=bg)
    for name in INPUTS:
        assert got[name].shape == scene[name].shape
        assert_grad_close(got[name], ref[name], name)


def test_shuffle_sums_are_on_by_default_for_nvidia_only():
    """The subgroup sums as shuffles are the default where they were measured
    faster (NVIDIA) and the device can run them (subgroup shuffles, one
    subgroup size); the butterfly's step count comes from that size."""
    from types import SimpleNamespace

    from spirula.backends import open_device
    from spirula.backends.vulkan import vkinfo
    from spirula.backends.vulkan.device import shuffle_sums_defines

    device = open_device("vulkan")
    info = device.info
    offered = bool(info.subgroup_operations & vkinfo.SUBGROUP_SHUFFLE)
    lo, hi = info.subgroup_size_range
    one_size = lo == hi
    assert device.shuffle_sums is (offered and one_size and info.vendor_id == vkinfo.VENDOR_NVIDIA)
    if device.shuffle_sums:
        assert 1 << device.defines["SUBGROUP_LOG2"] == info.subgroup_size
    else:
        assert "SHUFFLE_SUMS" not in device.defines
    device.close()
    shuffle = vkinfo.SUBGROUP_SHUFFLE
    for size_range, ops, want in (
        ((32, 32), shuffle, dict(SHUFFLE_SUMS=1, SUBGROUP_LOG2=5)),
        ((8, 8), shuffle, dict(SHUFFLE_SUMS=1, SUBGROUP_LOG2=3)),
        ((32, 32), 0, {}),  # no shuffles
        ((8, 64), shuffle, {}),  # several sizes: the butterfly's steps are unknown
    ):
        assert shuffle_sums_defines(SimpleNamespace(subgroup_size_range=size_range, subgroup_operations=ops)) == want


def test_rasterize_bwd_per_camera_outputs_match_reference():
    """The raster stage alone: dL/d(means2d, conics, colours, opacities) per camera."""
    from reference.rasterize import rasterize_bwd

    scene = random_scene(n=150, seed=21)
    colors, alphas, _, meta = gpu_render(scene)
    gc = np.random.default_rng(1).standard_normal(colors.shape).astype(np.float32)
    got = rasterization_backward(meta, gc, np.zeros_like(alphas), absgrad=True)
    raster = meta["_context"].raster
    C, N = meta["radii"].shape[:2]

    def read(buf, w):
        return raster.device.readback(buf, shape=(C * N, w)).reshape(C, N, w)

    opac = np.broadcast_to(scene["opacities"], (C, N))
    ref = rasterize_bwd(
        meta["means2d"],
        meta["conics"],
        meta["colors"],
        opac,
        meta["depths"],
        meta["radii"],
        scene["width"],
        scene["height"],
        grad_colors=gc,
        grad_alphas=np.zeros_like(alphas),
    )
    vis = (meta["radii"] != 0).any(-1)
    assert_grad_close(got["means2d"][vis], ref["means2d"][vis], "means2d")
    assert_grad_close(read(raster.grad_conics, 3)[vis], ref["conics"][vis], "conics")
    assert_grad_close(read(raster.grad_rgb, 3)[vis], ref["colors"][vis], "colors")
    assert_grad_close(read(raster.grad_opacity, 1)[vis][:, 0], ref["opacities"][vis], "opacities")
    # |dL/dmean2d| summed per pixel bounds the plain sum's magnitude
    assert np.all(got["means2d_absgrad"] + 1e-6 >= np.abs(got["means2d"]))


def test_gradients_with_gsplat_alpha_cap(monkeypatch):
    """max_alpha = 0.999: where o exp(-sigma) lies between 0.99 and 0.999 the
    gradient flows (unclamped), and 1 - alpha divides down to 1e-3."""
    import reference.rasterize

    scene = random_scene(n=200, seed=12)
    scene["opacities"] = np.random.default_rng(3).uniform(0.985, 0.9999, 200).astype(np.float32)
    colors, alphas, _, meta = gpu_render(scene, max_alpha=0.999)
    rng = np.random.default_rng(8)
    gc = rng.standard_normal(colors.shape).astype(np.float32)
    ga = rng.standard_normal(alphas.shape).astype(np.float32)
    got = rasterization_backward(meta, gc, ga)
    monkeypatch.setattr(reference.rasterize, "MAX_ALPHA", 0.999)
    ref = ref_grads(scene, gc, ga)
    for name in INPUTS:
        assert_grad_close(got[name], ref[name], name)
