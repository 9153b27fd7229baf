"""fpbo on CUDA (native_cuda/fpbo.cu, hand-written: templated on the SH degree and one view,
its SH rows' Adam as a block over shared memory) against Vulkan: one update of every
parameter and both moments, float32 and compact rows (tests/parity_cases.py says how the
backends are compared)."""

import numpy as np
import pytest
from kernel_cases import assert_exact, assert_near, logit, step_param_words
from parity_cases import both
from render_cases import random_scene

from spirula.render.rasterizer import EPS2D, Rasterizer, pack_cameras
from spirula.runtime.sequence import Threads

pytestmark = pytest.mark.cuda

FPBO_LR = dict(lr_means=1e-3, lr_quats=2e-3, lr_scales=5e-3, lr_opacities=0.05, lr_sh0=2.5e-3, lr_shN=1.25e-4)
_FPBO_PARAMS = ("means", "quats", "scales", "opacities", "sh")


def fpbo_inputs(vk, sh_degree, sh_coeffs, views, seed, noise_scale=0.0, isects=(5, 10)):
    """Every binding of fpbo as numpy, with the per-view gradients of a real
    backward pass (Vulkan's rasterize_bwd of random image gradients), so both
    backends update from the same gradients. Every 7th splat is nearly
    transparent, for the MCMC noise gate."""
    from spirula.render.rasterizer import Splats

    kdeg = int(round(np.sqrt(sh_coeffs))) - 1
    s = random_scene(n=613, cameras=views, sh_degree=kdeg, seed=seed)
    n = len(s["means"])
    rng = np.random.default_rng(seed)
    opac = s["opacities"].copy()
    opac[::7] = rng.uniform(0.0005, 0.004, len(opac[::7]))
    raw = dict(
        means=s["means"],
        quats=s["quats"],
        scales=np.log(s["scales"]).astype(np.float32),
        opacities=logit(opac),
        sh=s["sh_coeffs"],
    )
    splats = Splats.from_numpy(
        vk,
        raw["means"],
        raw["quats"],
        raw["scales"],
        raw["opacities"],
        raw["sh"],
        activated=False,
        prefix="parity.fpbo.splat",
    )
    raster = Rasterizer(
        vk, s["width"], s["height"], views, capacity=n, isect_capacity=200_000, name="parity.fpbo.raster"
    )
    raster.set_cameras(s["viewmats"], s["Ks"])
    raster.set_backgrounds(None)
    vk.upload(raster.grad_colors, (rng.standard_normal((views, s["height"], s["width"], 3)) * 0.1).astype(np.float32))
    vk.upload(raster.grad_alphas, (rng.standard_normal((views, s["height"], s["width"])) * 0.05).astype(np.float32))
    rec = vk.recorder("parity.fpbo.grads")
    raster.record_project(rec, splats, sh_degree)
    raster.record_raster(rec)
    raster.record_raster_backward(rec, absgrad=True)
    rec.finish().run()
    rows = views * n
    per_view = dict(
        radii=vk.readback(raster.radii, shape=(rows, 2)),
        grad_xy=vk.readback(raster.grad_xy, shape=(rows, 2)),
        grad_xy_abs=vk.readback(raster.grad_xy_abs, shape=(rows, 2)),
        grad_conics=vk.readback(raster.grad_conics, shape=(rows, 3)),
        grad_rgb=vk.readback(raster.grad_rgb, shape=(rows, 3)),
        grad_opacity=vk.readback(raster.grad_opacity, shape=(rows,)),
        # dL/d depth (--geometry's distortion): read when DEPTH_GRAD
        grad_depth=(np.random.default_rng(seed + 1).standard_normal(rows) * 0.05).astype(np.float32),
        # dL/d splat normal (--geometry's normal consistency): read when NORMALS
        grad_normals=(np.random.default_rng(seed + 2).standard_normal((rows, 3)) * 0.05).astype(np.float32),
    )
    raster.free()
    splats.free(vk)
    inputs = dict(raw)
    for key, scale in (("m", 1e-3), ("v", 1e-6)):
        for name, a in raw.items():
            m = (rng.standard_normal(a.shape) * scale).astype(np.float32)
            inputs["%s_%s" % (key, name)] = np.abs(m) if key == "v" else m
    inputs.update(
        per_view,
        cameras=pack_cameras(s["viewmats"], s["Ks"]),
        num_isects=np.array([0, isects[0], 0], np.uint32),
        grad2d_sum=rng.uniform(0, 1, n).astype(np.float32),
        vis_count=rng.integers(0, 5, n).astype(np.uint32),
    )
    step = 7
    inputs["params"] = step_param_words(
        step=step,
        seed=0xC0FFEE + seed,
        n_views=views,
        n_splats=n,
        bias1=1 - 0.9**step,
        bias2=1 - 0.999**step,
        beta1=0.9,
        beta2=0.999,
        adam_eps=1e-15,
        opacity_reg=0.01,
        scale_reg=0.02,
        flatten_reg=5.0 if views == 2 else 0.0,  # the two-view cases also flatten (FLATTEN below)
        noise_scale=noise_scale,
        grad_norm_scale_x=s["width"] / 2.0,
        grad_norm_scale_y=s["height"] / 2.0,
        **FPBO_LR,
    )
    push = dict(
        n=n, n_views=views, width=s["width"], height=s["height"], eps2d=EPS2D, count_offset=1, isect_capacity=isects[1]
    )
    return inputs, push, n


def run_fpbo(backends, sh_degree, sh_coeffs, views, mcmc, adc, seed, noise_scale=0.0, isects=(5, 10), absgrad=False):
    vk, _ = backends
    inputs, push, n = fpbo_inputs(vk, sh_degree, sh_coeffs, views, seed, noise_scale, isects)
    read = tuple(k for k in inputs if k.startswith(("m_", "v_")) or k in _FPBO_PARAMS) + ("grad2d_sum", "vis_count")
    outs = both(
        backends,
        "fpbo",
        Threads(n),
        inputs,
        {},
        read=read,
        push=push,
        spec=dict(
            SH_DEGREE=sh_degree,
            SH_COEFFS=sh_coeffs,
            MCMC_NOISE=int(mcmc),
            ADC_STATS=int(adc),
            N_VIEWS=views,
            ABSGRAD=int(absgrad),
            DEPTH_GRAD=int(views == 2),  # the two-view cases also add the depth gradient
            FLATTEN=int(views == 2),  # and the flattening regularizer's
            NORMALS=int(views == 2),  # and the splat normals' gradient
            LENSES=int(sh_degree % 2 == 0),  # pinholes through both CUDA instantiations
        ),
        defines=dict(SH_VEC4=int(3 * sh_coeffs % 4 == 0)),
    )
    return inputs, push, outs


FPBO_CASES = [  # sh_degree, SH_COEFFS, views, MCMC_NOISE, ADC_STATS, ABSGRAD
    (0, 1, 1, False, True, False),
    (1, 4, 1, True, False, False),
    (2, 9, 2, True, True, False),
    (3, 16, 2, False, True, False),
    (3, 16, 2, False, True, True),
    (1, 16, 1, True, True, False),
    (3, 16, 1, True, False, False),
    (2, 9, 1, False, True, True),
]


@pytest.mark.parametrize(
    "sh_degree,sh_coeffs,views,mcmc,adc,absgrad",
    FPBO_CASES,
    ids=[
        "deg0",
        "deg1-vec4-noise",
        "deg2-2views-noise",
        "deg3-vec4-2views",
        "deg3-vec4-2views-absgrad",
        "deg1-of-16-vec4-noise",
        "deg3-noise",
        "deg2-absgrad",
    ],
)
def test_fpbo_one_update_matches(backends, sh_degree, sh_coeffs, views, mcmc, adc, absgrad):
    """One Adam update of every parameter and both moments, from the same
    per-view gradients. Tolerances: tests/test_fpbo.py holds the Vulkan kernel
    to a float64 reference within 1e-3 lr + 2^-22 |p| (parameters; Adam
    normalizes the step) and 1e-3 / 2e-3 relative + 1e-4 of the largest
    (first / second moments); two backends within twice that of each other.
    The MCMC noise adds 1e-4 of the step taken (Box-Muller's log, cos, sin a
    few ulps apart, and the gate and covariance seen through the updated
    opacity and scales). ADC: seen views exact, |dL/dmean2d| sums (of the
    per-pixel absolute sums with ABSGRAD) 1e-5 relative."""
    noise_scale = 50.0 if mcmc else 0.0
    inputs, push, (vk_out, cu_out) = run_fpbo(
        backends, sh_degree, sh_coeffs, views, mcmc, adc, seed=50 + sh_degree, noise_scale=noise_scale, absgrad=absgrad
    )
    lrs = dict(
        means=FPBO_LR["lr_means"],
        quats=FPBO_LR["lr_quats"],
        scales=FPBO_LR["lr_scales"],
        opacities=FPBO_LR["lr_opacities"],
    )
    for name in _FPBO_PARAMS:
        old = inputs[name].astype(np.float64)
        if name == "sh":
            lr = np.full(old.shape, FPBO_LR["lr_shN"])
            lr[:, 0] = FPBO_LR["lr_sh0"]
        else:
            lr = lrs[name]
        step_vk = vk_out[name] - old
        atol = 2e-3 * lr + 2.0**-21 * np.abs(vk_out[name]) + 1e-4 * np.abs(step_vk)
        assert_near(cu_out[name] - old, step_vk, atol, 0.0, name + " step")
        for key, rtol in (("m", 2e-3), ("v", 4e-3)):
            want = vk_out["%s_%s" % (key, name)]
            assert_near(cu_out["%s_%s" % (key, name)], want, 2e-4 * np.abs(want).max(), rtol, "%s_%s" % (key, name))
    # SH floats past the active degree: gradient 0, moments only decay
    active = (sh_degree + 1) ** 2
    for key, beta in (("m", 0.9), ("v", 0.999)):
        got = cu_out["%s_sh" % key][:, active:]
        assert_near(got, beta * inputs["%s_sh" % key][:, active:].astype(np.float64), 0.0, 1e-6, "inactive %s_sh" % key)
    if adc:
        vis = (inputs["radii"] != 0).any(-1).reshape(views, -1).sum(0)
        assert_exact(cu_out["vis_count"], vk_out["vis_count"], "vis_count")
        assert np.array_equal(cu_out["vis_count"], inputs["vis_count"] + vis)
        assert_near(
            cu_out["grad2d_sum"], vk_out["grad2d_sum"], 1e-6 * np.abs(vk_out["grad2d_sum"]).max(), 1e-5, "grad2d_sum"
        )
        grew = cu_out["grad2d_sum"][vis > 0] - inputs["grad2d_sum"][vis > 0]
        assert (grew >= 0).all() and (grew > 0).mean() > 0.9
        # the statistic: sum over the views a splat is seen in of |v (W/2, H/2)|,
        # v the 2D mean's gradient, or its per-pixel absolute sums with ABSGRAD
        v = inputs["grad_xy_abs" if absgrad else "grad_xy"].astype(np.float64).reshape(views, -1, 2)
        seen = (inputs["radii"] != 0).any(-1).reshape(views, -1)
        norm = np.hypot(v[..., 0] * push["width"] / 2, v[..., 1] * push["height"] / 2)
        want = inputs["grad2d_sum"] + (norm * seen).sum(0)
        assert_near(cu_out["grad2d_sum"], want, 1e-6 * np.abs(want).max(), 1e-5, "grad2d_sum (numpy)")
    else:
        assert_exact(cu_out["vis_count"], inputs["vis_count"], "vis_count untouched")
        assert_exact(cu_out["grad2d_sum"], inputs["grad2d_sum"], "grad2d_sum untouched")
    # the noise moved the nearly transparent splats far past an Adam step, on both
    moved = np.abs(cu_out["means"] - inputs["means"]).max(-1)
    if mcmc:
        assert (moved[::7] > 20 * FPBO_LR["lr_means"]).mean() > 0.5


def test_fpbo_changes_nothing_when_the_intersections_overflowed(backends):
    inputs, _, (vk_out, cu_out) = run_fpbo(
        backends, 3, 16, 2, True, True, seed=61, noise_scale=50.0, isects=(11, 10), absgrad=True
    )
    for name, got in cu_out.items():
        assert_exact(got, inputs[name], name)
        assert_exact(vk_out[name], inputs[name], name + " (vulkan)")


def _ulp(x, mantissa_bits, min_exponent):
    """The spacing of a float format with ``mantissa_bits`` stored bits at |x|."""
    e = np.floor(np.log2(np.maximum(np.abs(x), 2.0**min_exponent)))
    return 2.0 ** (e - mantissa_bits)


@pytest.mark.parametrize(
    "sh_degree,sh_coeffs,views", [(3, 16, 1), (2, 9, 2), (1, 4, 1)], ids=["deg3", "deg2-2v", "deg1"]
)
def test_fpbo_compact_update_matches(backends, sh_degree, sh_coeffs, views):
    """COMPACT fpbo (storage.glsl rows: fp16 SH past the DC, bf16 SH moments,
    stochastic rounding with the same random bits on both backends). Before
    rounding, the two backends' values are as close as in
    test_fpbo_one_update_matches; the rounding then picks one of the two
    neighbours of each, the same one unless a threshold falls between them:
    at most one ulp of the 16-bit format apart (fp16: 10 stored bits,
    subnormal below 2^-14; bf16: 7 bits) on top of the float32 tolerance."""
    from spirula.train import storage

    vk, _ = backends
    inputs, push, n = fpbo_inputs(vk, sh_degree, sh_coeffs, views, 80 + sh_degree, 0.0, (5, 10))
    inputs["sh"] = storage.encode_sh(inputs["sh"]).view(np.float32)
    for key in ("m", "v"):
        inputs[key + "_sh"] = storage.encode_moments(inputs[key + "_sh"]).view(np.float32)
        for name in storage.BF16_MOMENTS:  # bf16 rows of 2 words
            inputs["%s_%s" % (key, name)] = storage.encode_geom_moments(inputs["%s_%s" % (key, name)]).view(np.float32)
    read = tuple(k for k in inputs if k.startswith(("m_", "v_")) or k in _FPBO_PARAMS)
    spec = dict(
        SH_DEGREE=sh_degree, SH_COEFFS=sh_coeffs, MCMC_NOISE=0, ADC_STATS=0, N_VIEWS=views, ABSGRAD=0, DEPTH_GRAD=1
    )
    vk_out, cu_out = both(
        backends, "fpbo", Threads(n), inputs, {}, read=read, push=push, spec=spec, defines=dict(COMPACT=1)
    )
    old = storage.decode_sh(inputs["sh"].view(np.uint32), sh_coeffs).astype(np.float64).reshape(n, -1)
    vk_sh = storage.decode_sh(vk_out["sh"].view(np.uint32), sh_coeffs).reshape(n, -1)
    cu_sh = storage.decode_sh(cu_out["sh"].view(np.uint32), sh_coeffs).reshape(n, -1)
    lr = np.full(old.shape, FPBO_LR["lr_shN"])
    lr[:, :3] = FPBO_LR["lr_sh0"]
    step_vk = vk_sh - old
    atol = 2e-3 * lr + 2.0**-21 * np.abs(vk_sh) + 1e-4 * np.abs(step_vk)
    atol[:, 3:] += _ulp(np.maximum(np.abs(vk_sh), np.abs(cu_sh))[:, 3:], 10, -14)
    assert_near(cu_sh - old, step_vk, atol, 0.0, "sh step")
    for key, rtol in (("m", 2e-3), ("v", 4e-3)):
        vk_m = storage.decode_moments(vk_out[key + "_sh"].view(np.uint32), sh_coeffs)
        cu_m = storage.decode_moments(cu_out[key + "_sh"].view(np.uint32), sh_coeffs)
        ulp = _ulp(np.maximum(np.abs(vk_m), np.abs(cu_m)), 7, -126)
        assert_near(cu_m, vk_m, 2e-4 * np.abs(vk_m).max() + ulp, rtol, key + "_sh")
        for name, width in (("means", 3), ("quats", 4), ("scales", 3)):
            vk_m = storage.decode_geom_moments(vk_out["%s_%s" % (key, name)].view(np.uint32), width)
            cu_m = storage.decode_geom_moments(cu_out["%s_%s" % (key, name)].view(np.uint32), width)
            ulp = _ulp(np.maximum(np.abs(vk_m), np.abs(cu_m)), 7, -126)
            assert_near(cu_m, vk_m, 2e-4 * np.abs(vk_m).max() + ulp, rtol, "%s_%s" % (key, name))
        assert_near(
            cu_out[key + "_opacities"],
            vk_out[key + "_opacities"],
            2e-4 * np.abs(vk_out[key + "_opacities"]).max(),
            rtol,
            key + "_opacities",
        )
    # the parameters of the geometry (float32): their steps as in test_fpbo_one_update_matches,
    # the moments they read being the same bf16 values on both
    for name in ("means", "quats", "scales", "opacities"):
        lr = FPBO_LR["lr_" + name]
        step_vk = vk_out[name].astype(np.float64) - inputs[name]
        step_cu = cu_out[name].astype(np.float64) - inputs[name]
        assert_near(step_cu, step_vk, 2e-3 * lr + 2.0**-21 * np.abs(vk_out[name]), 0.0, name + " step")
    # the padding halves stay 0 on both
    for out in (vk_out, cu_out):
        words = out["sh"].view(np.uint32)
        if (3 * sh_coeffs - 3) % 2:
            assert not (words[:, -1] >> 16).any()
        for key in ("m", "v"):
            for name in ("means", "scales"):
                assert not (out["%s_%s" % (key, name)].view(np.uint32).reshape(n, 2)[:, 1] >> 16).any()
