"""Non-finite splats (shaders/include/finite.glsl) on the Vulkan device: the
finiteness test is decided on the bits, so a driver that folds isnan/isinf
to false (allowed without float controls) still sees NaN and Inf; every kind
of parameter, SH included, with +inf, -inf and NaNs of any sign and payload,
makes a splat dead for MCMC (densify_mcmc_weights) and pruned for ADC
(densify_adc_classify). The kernels on each backend: tests/test_densify.py."""

import re

import numpy as np
import pytest

from spirula.contract.kernel import shader_dir
from spirula.runtime.sequence import Threads

# the words every check must call non-finite: both infinities, the quiet NaN,
# signalling NaNs with the smallest and largest payloads, negative NaNs
NONFINITE = {
    "+inf": 0x7F800000,
    "-inf": 0xFF800000,
    "nan": 0x7FC00000,
    "snan-payload-1": 0x7F800001,
    "nan-payload-max": 0x7FFFFFFF,
    "-snan-payload": 0xFFBFFFFF,
    "-nan": 0xFFC00000,
}
# and the finite words nearest to them, and the other awkward ones
FINITE_EDGES = [0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x80000001, 0x00800000, 0x80000000, 0x00000000, 0x3F800000]
KINDS = ["opacities", "means", "scales", "quats", "sh"]
K = 4  # SH coefficients per colour channel in these tests


def _run(dev, kernel, groups, inputs, outputs, push, spec=None):
    bufs = {}
    for name, arr in inputs.items():
        arr = np.ascontiguousarray(arr)
        bufs[name] = dev.pool.alloc("finite." + name, arr.shape, arr.dtype)
        dev.upload(bufs[name], arr)
    for name, (shape, dtype) in outputs.items():
        bufs[name] = dev.pool.alloc("finite." + name, shape, dtype)
    rec = dev.recorder("finite." + (kernel if isinstance(kernel, str) else kernel.name))
    rec.dispatch(kernel, groups, bufs, push=push, spec=spec)
    rec.finish().run()
    out = {name: dev.readback(bufs[name]) for name in outputs}
    for b in bufs.values():
        dev.pool.free(b)
    return out


def test_the_finiteness_test_reads_bits_not_isnan():
    """isnan/isinf may be folded to false by a Vulkan compiler without float
    controls; an integer test of the exponent bits may not."""
    code = re.sub(r"//[^\n]*", "", (shader_dir() / "include" / "finite.glsl").read_text())
    assert not re.search(r"\bis(nan|inf)\s*\(", code)
    assert "floatBitsToUint" in code


def test_finite1_is_false_exactly_when_the_exponent_bits_are_all_ones(device, test_kernels):
    rng = np.random.default_rng(90)
    words = np.concatenate(
        [
            np.array(list(NONFINITE.values()) + FINITE_EDGES, np.uint32),
            rng.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32),
            # every exponent-all-ones word with random sign and payload
            (rng.integers(0, 2**23, 500).astype(np.uint32) | np.uint32(0x7F800000))
            ^ (rng.integers(0, 2, 500).astype(np.uint32) << np.uint32(31)),
        ]
    )
    n = len(words)
    out = _run(
        device,
        test_kernels.get("finite_bits"),
        Threads(n),
        dict(words=words),
        dict(finite=((n,), np.uint32)),
        push=dict(n=n),
    )
    want = np.isfinite(words.view(np.float32))
    assert np.array_equal(out["finite"], want.astype(np.uint32))
    assert (~want).sum() >= 500 + len(NONFINITE)


def _splats_with_one_bad_value_per_row(n_good, seed):
    """Healthy splats (opacity 0.3 to 0.9, small), then one row per (kind,
    value): that parameter kind holds that non-finite word in one component
    (a different one each row, SH's last one included), the rest healthy."""
    rng = np.random.default_rng(seed)
    cases = [(kind, name) for kind in KINDS for name in NONFINITE]
    n = n_good + len(cases)
    o = rng.uniform(0.3, 0.9, n)
    a = dict(
        opacities=np.log(o / (1 - o)).astype(np.float32),
        means=rng.normal(0, 1, (n, 3)).astype(np.float32),
        scales=rng.uniform(-6, -4, (n, 3)).astype(np.float32),
        quats=rng.normal(0, 1, (n, 4)).astype(np.float32),
        sh=rng.normal(0, 0.3, (n, K, 3)).astype(np.float32),
    )
    for row, (kind, name) in enumerate(cases, start=n_good):
        flat = a[kind].reshape(n, -1)
        col = (row * 7) % flat.shape[1] if row % 3 else flat.shape[1] - 1
        flat[row : row + 1].view(np.uint32)[0, col] = NONFINITE[name]
    bad = np.arange(n_good, n)
    return a, bad, cases


@pytest.mark.parametrize("alive_only", [True, False], ids=["alive-only", "all"])
def test_mcmc_counts_every_kind_of_nonfinite_splat_dead(device, alive_only):
    a, bad, cases = _splats_with_one_bad_value_per_row(300, seed=91)
    n = len(a["opacities"])
    out = _run(
        device,
        "densify_mcmc_weights",
        Threads(n),
        a,
        dict(weights=((n,), np.float32), dead=((n,), np.uint32)),
        push=dict(n=n, min_opacity=0.005),
        spec=dict(ALIVE_ONLY=int(alive_only), SH_COEFFS=K),
    )
    good = np.setdiff1d(np.arange(n), bad)
    for row, case in zip(bad, cases):
        assert out["dead"][row] == 1 and out["weights"][row] == 0, case
    assert not out["dead"][good].any()
    o = 1 / (1 + np.exp(-a["opacities"][good].astype(np.float64)))
    # GLSL's exp: 3 + 2|x| ulp for |x| < 1, then the division: 1e-6 relative
    np.testing.assert_allclose(out["weights"][good], o, rtol=1e-6)


@pytest.mark.parametrize("grow", [0, 1], ids=["prune-only", "grow"])
def test_adc_prunes_every_kind_of_nonfinite_splat(device, grow):
    """Pruned whatever else it would be: half the broken rows carry a high
    screen-space gradient (would be cloned or split)."""
    a, bad, cases = _splats_with_one_bad_value_per_row(300, seed=92)
    n = len(a["opacities"])
    grad = np.zeros(n, np.float32)
    grad[bad[::2]] = 1.0
    out = _run(
        device,
        "densify_adc_classify",
        Threads(n),
        dict(**a, grad2d_sum=grad, vis_count=np.ones(n, np.uint32)),
        dict(actions=((n,), np.uint32), out_counts=((n,), np.uint32)),
        push=dict(
            n=n,
            grow_grad2d=2e-4,
            grow_scale3d=0.05,
            prune_scale3d=0.5,
            min_opacity=0.005,
            prune_big=1,
            grow=grow,
        ),
        spec=dict(SH_COEFFS=K),
    )
    good = np.setdiff1d(np.arange(n), bad)
    for row, case in zip(bad, cases):
        assert out["out_counts"][row] == 0, case
    assert (out["out_counts"][good] == 1).all() and not out["actions"][good].any()
