"""The densify_* kernels against numpy, on each backend: MCMC's weights, draws, relocation
and copies, ADC's classification, writes and opacity reset. Random draws are integer
hashing (include/random.glsl), so numpy draws the same (kernel_cases.np_random_*); inputs
keep clear (1e-3 relative) of every threshold where a few ulps could flip a decision, so
decisions and copies compare exactly. The strategies that drive these kernels:
tests/test_strategy.py; diverged splats: tests/test_finite.py."""

import numpy as np
import pytest
from kernel_cases import assert_exact, assert_near, logit, np_random_normal2, np_random_uniform, run_kernel

from spirula.runtime.sequence import Threads

# ---- MCMC -----------------------------------------------------------------------------------


@pytest.mark.parametrize("alive_only", [True, False], ids=["alive-only", "all"])
def test_densify_mcmc_weights(backend, alive_only):
    """Dead flags exact (no opacity within 1e-3 of min_opacity; diverged
    splats, with a non-finite opacity, mean, scale, rotation or SH
    coefficient, NaN payloads included, dead too); weights the float64
    sigmoid within 1e-5 relative (GLSL's exp: 3 + 2|x| ulp, |x| < 12)."""
    n, min_opacity = 3001, 0.005
    rng = np.random.default_rng(70)
    o = np.concatenate([rng.uniform(0.0001, 0.004, n // 3), rng.uniform(0.006, 0.99999, n - n // 3)])
    x = logit(rng.permutation(o))
    geometry = dict(
        means=rng.normal(0, 1, (n, 3)).astype(np.float32),
        scales=rng.uniform(-5, 0, (n, 3)).astype(np.float32),
        quats=rng.normal(0, 1, (n, 4)).astype(np.float32),
        sh=rng.normal(0, 0.3, (n, 4, 3)).astype(np.float32),
    )
    broken = np.array([5, 600, 1201, 1800, 2400, 2999, 1500, 2000, 2500])
    x[broken[:2]] = [np.nan, np.inf]
    geometry["means"][broken[2], 0] = np.nan
    geometry["scales"][broken[3], 1] = np.inf
    geometry["quats"][broken[4], 3] = -np.inf
    geometry["quats"][broken[5], 0] = np.nan
    geometry["sh"][broken[6], 3, 2] = -np.inf  # the last coefficient
    geometry["sh"].view(np.uint32)[broken[7], 0, 0] = 0x7F800001  # a signalling NaN, payload 1
    geometry["sh"].view(np.uint32)[broken[8], 2, 1] = 0xFFFFFFFF  # a negative NaN, all payload bits
    out = run_kernel(
        backend,
        "densify_mcmc_weights",
        (6, 2, 1),
        dict(opacities=x, **geometry),
        dict(weights=((n,), np.float32), dead=((n,), np.uint32)),
        push=dict(n=n, min_opacity=min_opacity),
        spec=dict(ALIVE_ONLY=int(alive_only), SH_COEFFS=4),
    )
    with np.errstate(invalid="ignore"):
        sig = 1 / (1 + np.exp(-x.astype(np.float64)))
    want_dead = sig <= min_opacity
    want_dead[broken] = True
    assert np.array_equal(out["dead"], want_dead.astype(np.uint32))
    assert (out["weights"][broken] == 0).all()
    dead = (out["dead"] == 1) & ~np.isin(np.arange(n), broken)
    live = out["dead"] == 0
    assert_near(out["weights"][live], sig[live], 0.0, 1e-5, "weights")
    assert (out["weights"][dead] == 0).all() == alive_only and (out["weights"][live] > 0).all()
    if not alive_only:
        assert_near(out["weights"][dead], sig[dead], 0.0, 1e-5, "weights of the dead")


def test_densify_mcmc_sample_draws_as_numpy(backend):
    """Bit-identical uniforms and correctly rounded products: the same draws
    as numpy's (pcg_hash in uint64), on every backend."""
    n, count_max, seed, stream = 5003, 2500, 0x1234ABCD, 2
    rng = np.random.default_rng(71)
    w = rng.uniform(0, 1, n).astype(np.float32)
    w[rng.random(n) < 0.2] = 0  # zero weights are never drawn
    csum = np.cumsum(w, dtype=np.float32)
    cdf = np.concatenate([[0], csum[:-1]]).astype(np.float32)
    total = np.float32(csum[-1])
    out = run_kernel(
        backend,
        "densify_mcmc_sample",
        Threads(count_max),
        dict(cdf=cdf, totals=np.array([-1, total], np.float32), counts=np.array([7, 7, count_max + 400], np.uint32)),
        dict(sample_src=((count_max,), np.uint32), copies=((n,), np.uint32)),
        push=dict(n=n, count_max=count_max, count_offset=2, total_offset=1, seed=seed, stream=stream),
        zero=("copies",),
    )
    u = np.minimum(
        np_random_uniform(seed, np.arange(count_max), stream) * total, total * np.float32(1.0 - 1.0 / 8388608.0)
    )
    want = np.searchsorted(cdf, u, side="right") - 1
    assert np.array_equal(out["sample_src"], want)
    assert np.array_equal(out["copies"], np.bincount(want, minlength=n))
    assert (w[out["sample_src"]] > 0).all()


@pytest.mark.parametrize("reset", [True, False], ids=["reset-source", "keep-moments"])
@pytest.mark.parametrize("compact", [False, True], ids=["f32", "compact"])
def test_densify_mcmc_relocate(backend, reset, compact):
    """Integers and untouched rows exact; the shared opacity and scale as the
    float64 reference (relocation, eq. 9) within 1e-5 + 1e-3 relative: pow,
    log and exp a few ulps off through 1 - (1 - o)^(1/n) and an alternating
    sum of up to 51 x 51 terms in float32. Compact: the moments are storage.py's
    rows of words (sh; means, quats, scales: 2 words; an odd n puts the last
    quats row in half of a vec4)."""
    from reference.densify import relocation

    from spirula.train import storage

    n, K, min_opacity = 601 if compact else 600, 4, 0.005
    rng = np.random.default_rng(72)
    copies = np.where(rng.random(n) < 0.5, 0, rng.integers(1, 70, n)).astype(np.uint32)
    inputs = dict(
        opacities=logit(rng.uniform(0.05, 0.995, n)),
        scales=rng.uniform(-5, -1, (n, 3)).astype(np.float32),
        copies=copies,
    )
    for key in ("m", "v"):
        for name, shape in (
            ("means", (n, 3)),
            ("quats", (n, 4)),
            ("scales", (n, 3)),
            ("opacities", (n,)),
            ("sh", (n, K, 3)),
        ):
            inputs["%s_%s" % (key, name)] = rng.standard_normal(shape).astype(np.float32)
            if compact and name != "opacities":
                x = inputs["%s_%s" % (key, name)]
                rows = storage.encode_moments(x) if name == "sh" else storage.encode_geom_moments(x)
                inputs["%s_%s" % (key, name)] = rows.view(np.float32)
    out = run_kernel(
        backend,
        "densify_mcmc_relocate",
        Threads(n),
        inputs,
        {},
        read=tuple(inputs),
        push=dict(n=n, min_opacity=min_opacity),
        spec=dict(RESET_SOURCE=int(reset), SH_COEFFS=K, COMPACT_ROWS=int(compact)),
    )
    drawn = copies > 0
    assert (out["copies"] == 0).all()
    for name in inputs:
        if name.startswith(("m_", "v_")):
            want = inputs[name].copy()
            if reset:
                want[drawn] = 0
            assert_exact(out[name], want, name)
    for name in ("opacities", "scales"):
        assert_exact(out[name][~drawn], inputs[name][~drawn], name + " untouched")
    # the formula (float64): n = min(c + 1, 51) sharing splats
    o = 1 / (1 + np.exp(-inputs["opacities"][drawn].astype(np.float64)))
    s = np.exp(inputs["scales"][drawn].astype(np.float64))
    shares = np.minimum(copies[drawn] + 1, 51)
    want = [relocation(oi, si, int(k)) for oi, si, k in zip(o, s, shares)]
    o_new = np.array([w[0] for w in want])
    s_new = np.array([w[1] for w in want])
    assert_near(
        1 / (1 + np.exp(-out["opacities"][drawn].astype(np.float64))),
        np.clip(o_new, min_opacity, 1 - 2**-23),
        1e-5,
        1e-3,
        "opacity'",
    )
    assert_near(np.exp(out["scales"][drawn].astype(np.float64)), s_new, 0.0, 1e-3, "scale'")


@pytest.mark.parametrize("append", [False, True], ids=["relocate", "append"])
@pytest.mark.parametrize("drawn", [True, False], ids=["drawn", "nothing-drawn"])
@pytest.mark.parametrize("reset", [True, False], ids=["reset-moments", "keep-moments"])
@pytest.mark.parametrize("compact", [False, True], ids=["f32", "compact"])
def test_densify_mcmc_copy_is_exact(backend, append, drawn, reset, compact):
    """Copies bit-exact; moments of the copies zeroed when appended or with
    RESET_MOMENTS, else kept, except in slots that held a diverged splat.
    Compact: sh and its moments are storage.py's rows of words."""
    from spirula.train import storage

    n, K, count = 2000, 9, 701 if compact else 700  # compact: an odd row count (quats in half a vec4)
    rows = n + count if append else n
    rng = np.random.default_rng(73)
    dead = (rng.random(n) < 0.3).astype(np.uint32)
    offsets = (np.cumsum(dead) - dead).astype(np.uint32)
    # sources are live splats (relocation draws with ALIVE_ONLY weights), so no
    # thread reads a row another one writes
    sample_src = rng.choice(np.flatnonzero(dead == 0), max(count, int(dead.sum()))).astype(np.uint32)
    inputs = {}
    for key in ("", "m_", "v_"):
        for name, shape in (
            ("means", (rows, 3)),
            ("quats", (rows, 4)),
            ("scales", (rows, 3)),
            ("opacities", (rows,)),
            ("sh", (rows, K, 3)),
        ):
            inputs[key + name] = rng.standard_normal(shape).astype(np.float32)
        if compact:  # the rows as words, viewed as the bindings' f32
            encode = storage.encode_moments if key else storage.encode_sh
            inputs[key + "sh"] = encode(inputs[key + "sh"]).view(np.float32)
            for name in storage.BF16_MOMENTS if key else ():  # bf16 rows of 2 words
                inputs[key + name] = storage.encode_geom_moments(inputs[key + name]).view(np.float32)
    diverged = np.flatnonzero(dead)[:5]  # dead because not finite
    for row, (name, value) in zip(
        diverged,
        [("opacities", np.nan), ("opacities", -np.inf), ("means", np.nan), ("scales", np.inf), ("sh", np.nan)],
    ):
        inputs[name].reshape(rows, -1)[row, -1] = value
    inputs.update(
        dead_offsets=offsets,
        totals=np.array([3, int(dead.sum())], np.uint32),
        sample_src=sample_src,
        weight_totals=np.array([0, 0, 12.5 if drawn else 0.0], np.float32),
    )
    groups = Threads(count if append else n)
    out = run_kernel(
        backend,
        "densify_mcmc_copy",
        groups,
        inputs,
        {},
        read=tuple(inputs),
        push=dict(n=n, count=count if append else 0, dead_total_offset=1, weight_total_offset=2),
        spec=dict(APPEND=int(append), SH_COEFFS=K, RESET_MOMENTS=int(reset), COMPACT_ROWS=int(compact)),
    )
    if append:
        dst, src = n + np.arange(count), sample_src[:count]
    else:
        dst = np.flatnonzero(dead)
        src = sample_src[offsets[dst]]
    zeroed = dst if append or reset else diverged
    for name in inputs:
        want = inputs[name].copy()
        if drawn and not name.startswith(("dead", "totals", "sample", "weight")):
            if name.startswith(("m_", "v_")):
                want[zeroed] = 0
            else:
                want[dst] = inputs[name][src]
        assert_exact(out[name], want, name)


# ---- ADC ------------------------------------------------------------------------------------

ADC_PUSH = dict(grow_grad2d=2e-4, grow_scale3d=0.05, prune_scale3d=0.5, min_opacity=0.005)


def adc_inputs(n, seed):
    """Splats kept away (1e-3 relative) from every threshold of the classification."""
    rng = np.random.default_rng(seed)
    scales = rng.uniform(-6, 0, (n, 3))
    opac = rng.uniform(-7, 5, n)
    vis = rng.integers(0, 5, n).astype(np.uint32)
    g = rng.uniform(0, 4e-4, n) * np.maximum(vis, 1)
    largest = np.exp(scales.max(1))
    o = 1 / (1 + np.exp(-opac))
    grad = g / np.maximum(vis, 1)

    def away(x, t):
        return np.abs(x / t - 1) > 1e-3

    keep = (
        away(largest, ADC_PUSH["grow_scale3d"])
        & away(largest, ADC_PUSH["prune_scale3d"])
        & away(largest / 1.6, ADC_PUSH["prune_scale3d"])
        & away(o, ADC_PUSH["min_opacity"])
        & away(grad, ADC_PUSH["grow_grad2d"])
    )
    idx = np.flatnonzero(keep)
    m = len(idx)
    return dict(
        scales=scales[idx].astype(np.float32),
        opacities=opac[idx].astype(np.float32),
        grad2d_sum=g[idx].astype(np.float32),
        vis_count=vis[idx],
        means=rng.normal(0, 1, (m, 3)).astype(np.float32),
        quats=rng.normal(0, 1, (m, 4)).astype(np.float32),
        sh=rng.normal(0, 0.3, (m, ADC_SH, 3)).astype(np.float32),
    )


ADC_SH = 4
# (parameter, flat index within the row, word): diverged splats, pruned
ADC_BROKEN = [
    ("opacities", 0, 0x7FC00000),
    ("means", 2, 0xFF800000),
    ("scales", 0, 0xFF800000),  # -inf: exp gives 0, finite, yet diverged
    ("scales", 1, 0x7F800000),
    ("quats", 3, 0x7F800001),
    ("sh", 3 * ADC_SH - 1, 0x7F800000),
    ("sh", 4, 0xFFFFFFFF),
]


def break_adc_inputs(ins):
    """Make rows 0, 7, 14, ... diverged, one word each (ADC_BROKEN); returns their rows."""
    rows = 7 * np.arange(len(ADC_BROKEN))
    for row, (name, k, word) in zip(rows, ADC_BROKEN):
        a = ins[name]
        a.reshape(len(a), -1).view(np.uint32)[row, k] = word
    return rows


@pytest.mark.parametrize("grow,prune_big", [(1, 0), (1, 1), (0, 1)], ids=["grow", "grow-prune-big", "prune-only"])
def test_densify_adc_classify_is_exact(backend, grow, prune_big):
    ins = adc_inputs(4000, 74)
    n = len(ins["opacities"])
    broken = break_adc_inputs(ins)
    out = run_kernel(
        backend,
        "densify_adc_classify",
        Threads(n),
        ins,
        dict(actions=((n,), np.uint32), out_counts=((n,), np.uint32)),
        push=dict(n=n, prune_big=prune_big, grow=grow, **ADC_PUSH),
        spec=dict(SH_COEFFS=ADC_SH),
    )
    largest = np.exp(ins["scales"].astype(np.float64).max(1))
    o = 1 / (1 + np.exp(-ins["opacities"].astype(np.float64)))
    grad = ins["grad2d_sum"] / np.maximum(ins["vis_count"], 1)
    high = bool(grow) & (grad > ADC_PUSH["grow_grad2d"])
    action = np.where(high, np.where(largest <= ADC_PUSH["grow_scale3d"], 1, 2), 0)
    child = np.where(action == 2, largest / 1.6, largest)
    with np.errstate(invalid="ignore"):
        prune = (o < ADC_PUSH["min_opacity"]) | (bool(prune_big) & (child > ADC_PUSH["prune_scale3d"]))
    prune[broken] = True
    action[broken] = out["actions"][broken]  # the action of a pruned splat does not matter
    assert np.array_equal(out["actions"], action)
    assert np.array_equal(out["out_counts"], np.where(prune, 0, np.where(action == 0, 1, 2)))
    assert len(set(action)) == (3 if grow else 1) and prune.any()


@pytest.mark.parametrize("compact", [False, True], ids=["f32", "compact"])
def test_densify_adc_write(backend, compact):
    """Kept and cloned rows and the moments bit-exact; split children's scales
    exact (one correctly rounded add), their means as numpy draws within 1e-4
    (Box-Muller, exp and the rotation a few ulps off). Compact: the moment groups
    (1, 2) copy storage.py's rows as words (sh; means, quats, scales: 2 words),
    bit for bit."""
    from spirula.train import storage

    n, K, seed = 1501 if compact else 1500, 4, 0xBADC0DE
    rng = np.random.default_rng(75)
    src = dict(
        src_means=rng.standard_normal((n, 3)).astype(np.float32),
        src_quats=rng.standard_normal((n, 4)).astype(np.float32),
        src_scales=rng.uniform(-5, -1, (n, 3)).astype(np.float32),
        src_opacities=rng.standard_normal(n).astype(np.float32),
        src_sh=rng.standard_normal((n, K, 3)).astype(np.float32),
    )
    actions = rng.integers(0, 3, n).astype(np.uint32)
    counts = np.where(rng.random(n) < 0.1, 0, np.where(actions == 0, 1, 2)).astype(np.uint32)
    offsets = (np.cumsum(counts) - counts).astype(np.uint32)
    total = int(counts.sum())
    outs = dict(
        dst_means=((total, 3), np.float32),
        dst_quats=((total, 4), np.float32),
        dst_scales=((total, 3), np.float32),
        dst_opacities=((total,), np.float32),
        dst_sh=((total, K, 3), np.float32),
    )
    live = counts > 0
    if compact:  # the moments' rows, as the moment groups see them
        msrc = dict(src, src_sh=storage.encode_moments(src["src_sh"]).view(np.float32))
        mouts = dict(outs, dst_sh=((total, storage.moment_row_words(True, K)), np.float32))
        for name in storage.BF16_MOMENTS:
            msrc["src_" + name] = storage.encode_geom_moments(src["src_" + name]).view(np.float32)
            mouts["dst_" + name] = ((total, 2), np.float32)
        psrc = dict(src, src_sh=storage.encode_sh(src["src_sh"]).view(np.float32))
        pouts = dict(outs, dst_sh=((total, storage.sh_row_words(True, K)), np.float32))
    for group in (1, 2, 0) if compact else (0, 1, 2):
        if compact:
            src, outs = (psrc, pouts) if group == 0 else (msrc, mouts)
        out = run_kernel(
            backend,
            "densify_adc_write",
            Threads(n),
            dict(src, actions=actions, offsets=offsets, out_counts=counts),
            outs,
            push=dict(n=n, seed=seed),
            spec=dict(GROUP=group, SH_COEFFS=K, COMPACT_ROWS=int(compact)),
        )
        first, second = offsets[live], offsets[live & (actions != 0)] + 1
        written = np.zeros(total, bool)
        written[first] = written[second] = True
        assert written.all()  # every output row, once
        split = np.zeros(total, bool)
        split[offsets[live & (actions == 2)]] = split[offsets[live & (actions == 2)] + 1] = True
        if group == 0:
            # kept and cloned splats: both rows copies of the source, bit for bit
            rows = np.repeat(np.arange(n), counts)
            for name in ("means", "quats", "scales", "opacities", "sh"):
                got, want = out["dst_" + name].view(np.uint32), src["src_" + name].view(np.uint32)[rows]
                assert np.array_equal(got[~split], want[~split]), name
            # split children: the parent's quats, opacity and SH, its scales + log(1 / 1.6)
            for name in ("quats", "opacities", "sh"):
                got, want = out["dst_" + name].view(np.uint32), src["src_" + name].view(np.uint32)[rows]
                assert np.array_equal(got[split], want[split]), name
            assert np.array_equal(
                out["dst_scales"][offsets[live & (actions == 2)] + 1],
                src["src_scales"][live & (actions == 2)] + np.float32(-0.47000362924573558),
            )
            # child c of split splat i sits at mean + R (s * z), z from streams 4c, 4c + 2
            i = np.flatnonzero(live & (actions == 2))
            q = src["src_quats"][i].astype(np.float64)
            q /= np.linalg.norm(q, axis=1, keepdims=True)
            w, x, y, z = q.T
            R = np.stack(
                [
                    np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                    np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                    np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
                ],
                1,
            )
            s = np.exp(src["src_scales"][i].astype(np.float64))
            for c in (0, 1):
                z01, z23 = np_random_normal2(seed, i, 4 * c), np_random_normal2(seed, i, 4 * c + 2)
                zz = np.stack([z01[0], z01[1], z23[0]], -1)
                want = src["src_means"][i] + np.einsum("nij,nj->ni", R, s * zz)
                assert_near(out["dst_means"][offsets[i] + c], want, 1e-4, 1e-4, "split child %d" % c)
        else:
            zero = np.zeros(total, bool)
            zero[offsets[live & (actions == 2)]] = True
            zero[second] = True
            for name in ("means", "quats", "scales", "opacities", "sh"):
                got, key = out["dst_" + name].view(np.uint32), "src_" + name
                assert (got[zero] == 0).all(), name
                want = src[key].view(np.uint32)[np.repeat(np.arange(n), counts)]
                assert np.array_equal(got[~zero], want[~zero]), name


def test_densify_adc_reset_is_exact(backend):
    n = 3333
    rng = np.random.default_rng(76)
    ins = dict(
        opacities=rng.uniform(-8, 8, n).astype(np.float32),
        m_opacities=rng.standard_normal(n).astype(np.float32),
        v_opacities=rng.standard_normal(n).astype(np.float32),
    )
    ceiling = float(logit(0.01))
    out = run_kernel(
        backend, "densify_adc_reset", (7, 2, 1), ins, {}, read=tuple(ins), push=dict(n=n, ceiling_logit=ceiling)
    )
    assert np.array_equal(out["opacities"], np.minimum(ins["opacities"], np.float32(ceiling)))
    assert (out["m_opacities"] == 0).all() and (out["v_opacities"] == 0).all()
