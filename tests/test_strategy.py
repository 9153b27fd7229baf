"""Density control (spirula/train/strategy.py and the densify_* kernels) on
hand-made splats: MCMC relocation and growth against gsplat's
compute_relocation, ADC clone/split/prune and the opacity reset, and when
each strategy acts. Every config keeps float32 storage (compact=False): the
checks are exact against numpy, and compact storage's rounding of uploads
and moments has its own tests (tests/test_compact.py)."""

import inspect
import types

import numpy as np
import pytest
from reference.densify import relocation
from train_cases import PARAMS, random_init, refine, sigmoid, tiny_scene

from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return tiny_scene(tmp_path_factory.mktemp("tiny"))


# ---- the interface ---------------------------------------------------------------------


def _reaches(obj, cls) -> bool:
    """Whether an instance of ``cls`` is reachable from ``obj`` through
    attributes, lists, tuples and dicts."""
    seen, todo = set(), [obj]
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(
            o, (type, types.ModuleType, types.FunctionType, str, bytes, int, float, np.ndarray)
        ):
            continue
        seen.add(id(o))
        if isinstance(o, cls):
            return True
        if isinstance(o, dict):
            todo += o.values()
        elif isinstance(o, (list, tuple, set)):
            todo += o
        todo += getattr(o, "__dict__", {}).values()
    return False


@pytest.mark.parametrize("strategy", ["mcmc", "adc"])
def test_a_strategy_gets_its_inputs_and_returns_its_changes(device, scene, monkeypatch, strategy):
    """Data flows down (as gsplat's step_post_backward): a strategy is made from
    its own settings (and the run's seed) alone, is handed the splats,
    statistics, step, extent and device, returns what it changed, and holds no
    trainer."""
    from spirula.train import strategy as strategies

    cfg = TrainConfig.from_settings(
        compact=False,
        iterations=20,
        strategy=strategy,
        cap_max=1000,
        sh_degree=1,
        refine_start=2,
        refine_every=3,
        reset_every=6,
        opacity_reset=True,
        grow_grad2d=1e-7,
    )
    made = strategies.make(cfg)
    assert list(inspect.signature(type(made)).parameters) == ["config", "seed"]
    assert made.config is cfg.strategy and type(cfg.strategy).name == strategy
    trainer = Trainer(scene, cfg, device, init=random_init(200, 1))
    got = []

    def adopt(changes, adopt=trainer.adopt):
        got.append((trainer.step - 1, trainer.model, changes))
        adopt(changes)

    monkeypatch.setattr(trainer, "adopt", adopt)
    for _ in range(10):
        n = trainer.model.n
        trainer.train_step()
        if got and got[-1][0] == trainer.step - 1:
            _, before, changes = got[-1]
            assert isinstance(changes, strategies.Changes)
            assert (changes.n_before, changes.n_after) == (n, trainer.model.n)
            assert trainer.model is changes.model
            if strategy == "mcmc":  # within the budget, in place
                assert changes.model is before and changes.n_after == int(1.05 * n)
                assert changes.relocated == trainer.strategy.relocated and not changes.stats_reset
            else:  # new buffers, written group by group into the same model; the statistics restart
                assert changes.model is before and changes.stats_reset
                assert changes.opacities_reset == (trainer.step - 1 == 6)
    assert [s for s, _, _ in got] == [3, 6, 9]  # 0-based steps, as gsplat
    assert not _reaches(trainer.strategy, Trainer)
    assert _reaches(types.SimpleNamespace(held=[{"by": trainer}]), Trainer)  # (the check can fail)
    trainer.free()


# ---- MCMC ----------------------------------------------------------------------------


def _mcmc_trainer(device, scene, arrays, moments=None, cap_max=1000, **cfg_kw):
    cfg = TrainConfig.from_settings(
        compact=False, iterations=100, strategy="mcmc", cap_max=cap_max, sh_degree=1, **cfg_kw
    )
    trainer = Trainer(scene, cfg, device, init=random_init(8, 1))
    trainer.model.upload(arrays, moments)
    return trainer


def _splats(n, seed, opacity=None):
    rng = np.random.default_rng(seed)
    a = random_init(n, 1, seed=seed)
    a["means"] = rng.normal(0, 0.3, (n, 3)).astype(np.float32)  # unique: identifies copies
    if opacity is not None:
        a["opacities"][:] = np.log(opacity / (1 - opacity))
    return a


def _moments(arrays, seed):
    rng = np.random.default_rng(seed)
    return dict(
        exp_avg={k: rng.normal(0, 1e-3, v.shape).astype(np.float32) for k, v in arrays.items()},
        exp_avg_sq={k: rng.uniform(1e-8, 1e-6, v.shape).astype(np.float32) for k, v in arrays.items()},
    )


def test_mcmc_relocation_by_hand(device, scene):
    """One live splat (opacity 0.5) and one dead: the dead one becomes its copy
    and both take 1 - sqrt(1 - 0.5) = 0.29289 and 0.95216 x the scale. The
    source's Adam moments restart at 0, and the copy's too (by default it
    would keep its slot's, as in gsplat: test below)."""
    a = _splats(2, seed=1)
    a["opacities"][:] = [0.0, np.log(0.003 / 0.997)]
    a["scales"][0] = np.log([0.1, 0.05, 0.2])
    trainer = _mcmc_trainer(device, scene, a, _moments(a, 2), cap_max=2, mcmc_keep_moments=False)
    refine(trainer, 600)
    got = trainer.model.download()
    p = got["params"]
    assert trainer.model.n == 2
    o_new = 1 - np.sqrt(0.5)
    coeff = 0.5 / (2 * o_new - o_new**2 / np.sqrt(2))  # i = 1: o'; i = 2: o' - o'^2 / sqrt(2)
    assert (o_new, coeff) == pytest.approx((0.2928932, 0.9521520), abs=1e-7)
    np.testing.assert_allclose(sigmoid(p["opacities"]), [o_new, o_new], rtol=1e-6)
    np.testing.assert_allclose(np.exp(p["scales"]), [[0.1 * coeff, 0.05 * coeff, 0.2 * coeff]] * 2, rtol=1e-6)
    for name in ("means", "quats", "sh"):
        np.testing.assert_array_equal(p[name], [a[name][0], a[name][0]], err_msg=name)
    for group in ("exp_avg", "exp_avg_sq"):
        for name in PARAMS:
            assert not got[group][name].any(), (group, name)
    trainer.free()


def _groups(before_means, after_means):
    """For each splat after refinement, the index of the splat before whose
    position it has (copies are bit-exact), or -1."""
    index = {m.tobytes(): i for i, m in enumerate(before_means)}
    return np.array([index.get(m.tobytes(), -1) for m in after_means])


@pytest.mark.parametrize("keep_moments", [False, True], ids=["reset-moments", "keep-moments"])
def test_mcmc_relocation_moves_dead_splats_onto_live_ones(device, scene, keep_moments):
    n = 300
    rng = np.random.default_rng(4)
    o = rng.uniform(0.05, 0.95, n)
    dead = rng.choice(n, 40, replace=False)
    o[dead] = rng.uniform(0.0005, 0.0045, 40)
    a = _splats(n, seed=3)
    a["opacities"][:] = np.log(o / (1 - o))
    mom = _moments(a, 5)
    trainer = _mcmc_trainer(
        device,
        scene,
        a,
        mom,
        cap_max=n,  # at the budget: relocation only
        mcmc_keep_moments=keep_moments,
    )
    refine(trainer, 600)
    got = trainer.model.download()
    p = got["params"]
    assert trainer.model.n == n
    assert sigmoid(p["opacities"]).min() > 0.005
    src = _groups(a["means"], p["means"])
    assert (src >= 0).all() and not np.isin(src, dead).any()
    alive = np.setdiff1d(np.arange(n), dead)
    assert (src[alive] == alive).all()  # live splats stay where they are
    shares = np.bincount(src, minlength=n)
    assert shares[dead].sum() == 0 and (shares[alive] >= 1).all() and (shares > 1).sum() >= 20
    for i in range(n):
        s = src[i]
        g = shares[s]
        o_want, scale_want = relocation(o[s], np.exp(a["scales"][s].astype(np.float64)), g)
        assert sigmoid(p["opacities"][i]) == pytest.approx(o_want, rel=2e-6), i
        np.testing.assert_allclose(np.exp(p["scales"][i]), scale_want, rtol=2e-6, err_msg=str(i))
        for name in ("quats", "sh"):
            np.testing.assert_array_equal(p[name][i], a[name][s])
        for group in ("exp_avg", "exp_avg_sq"):
            for name in PARAMS:
                if g == 1 or (keep_moments and i != s):  # untouched, or relocated keeping its own
                    np.testing.assert_array_equal(got[group][name][i], mom[group][name][i])
                else:  # the source drawn from, or relocated from 0
                    assert not got[group][name][i].any(), (i, group, name)
    trainer.free()


def test_mcmc_growth_adds_five_percent_drawn_by_opacity(device, scene):
    n = 400
    rng = np.random.default_rng(6)
    o = rng.uniform(0.05, 0.95, n)
    a = _splats(n, seed=7)
    a["opacities"][:] = np.log(o / (1 - o))
    mom = _moments(a, 8)
    trainer = _mcmc_trainer(device, scene, a, mom, cap_max=1000)
    refine(trainer, 600)
    got = trainer.model.download()
    p = got["params"]
    assert trainer.model.n == 420
    src = _groups(a["means"], p["means"])
    assert (src[:n] == np.arange(n)).all() and (src[n:] >= 0).all()
    shares = np.bincount(src, minlength=n)
    for i in range(420):
        s = src[i]
        o_want, scale_want = relocation(o[s], np.exp(a["scales"][s].astype(np.float64)), shares[s])
        assert sigmoid(p["opacities"][i]) == pytest.approx(o_want, rel=2e-6), i
        np.testing.assert_allclose(np.exp(p["scales"][i]), scale_want, rtol=2e-6, err_msg=str(i))
    # drawn in proportion to opacity: the drawn are more opaque than the average
    assert o[src[n:]].mean() > o.mean()
    for group in ("exp_avg", "exp_avg_sq"):
        for name in PARAMS:
            # the sources keep their moments (gsplat's sample_add), the new splats start at 0
            np.testing.assert_array_equal(got[group][name][:n], mom[group][name], err_msg=name)
            assert not got[group][name][n:].any(), (group, name)
    trainer.free()


@pytest.mark.parametrize("cap_max,want", [(1000, 315), (305, 305), (300, 300)])
def test_mcmc_refine_relocates_then_grows_within_the_budget(device, scene, cap_max, want):
    n = 300
    a = _splats(n, seed=9)
    o = np.random.default_rng(10).uniform(0.05, 0.95, n)
    dead = np.arange(0, n, 10)
    o[dead] = 0.002
    a["opacities"][:] = np.log(o / (1 - o))
    mom = _moments(a, 11)
    trainer = _mcmc_trainer(device, scene, a, mom, cap_max=cap_max)
    refine(trainer, 600)
    got = trainer.model.download()
    assert trainer.model.n == want
    assert sigmoid(got["params"]["opacities"]).min() > 0.005
    src = _groups(a["means"], got["params"]["means"])
    assert (src >= 0).all() and not np.isin(src, dead).any()
    for group in ("exp_avg", "exp_avg_sq"):
        for name in PARAMS:
            # relocated splats keep their slot's moments (the default, as gsplat), new ones start at 0
            np.testing.assert_array_equal(got[group][name][dead], mom[group][name][dead], err_msg=name)
            assert not got[group][name][n:].any()
    out = trainer.train_step()  # and training goes on
    assert np.isfinite(out["loss"])
    trainer.free()


def test_mcmc_position_noise_moves_transparent_splats_along_their_covariance(device, scene):
    """fpbo's MCMC noise (gsplat's inject_noise_to_position): after the Adam
    step, mean += Sigma z * sigmoid(100 ((1 - o) - 0.995)) * lr_means * noise_lr
    with z ~ N(0, I) and Sigma = R S^2 R^T of the updated splat. Opaque splats
    do not move; transparent ones move by standard normal z."""
    n = 300
    init = random_init(n, 1, seed=18)
    o = np.r_[np.linspace(0.3, 0.9, n // 2), np.linspace(0.001, 0.004, n // 2)]
    init["opacities"] = np.log(o / (1 - o)).astype(np.float32)
    runs = []
    for noise_lr in (0.0, 5e5):
        cfg = TrainConfig.from_settings(
            compact=False, iterations=100, strategy="mcmc", cap_max=n, sh_degree=1, noise_lr=noise_lr
        )
        trainer = Trainer(scene, cfg, device, init=init)
        trainer.train_step()
        runs.append((trainer.model.download()["params"], trainer.extent))
        trainer.free()
    (quiet, extent), (noisy, _) = runs
    for name in ("quats", "scales", "opacities", "sh"):
        np.testing.assert_allclose(noisy[name], quiet[name], rtol=1e-5, atol=1e-6, err_msg=name)
    step = noisy["means"].astype(np.float64) - quiet["means"]
    np.testing.assert_allclose(step[: n // 2], 0, atol=1e-6)  # gate < 1e-12
    o_new = sigmoid(noisy["opacities"])
    gate = sigmoid(100 * ((1 - o_new) - 0.995))
    scale = 1.6e-4 * extent * 5e5 * gate
    from reference.projection import quat_to_rotmat

    R = quat_to_rotmat(noisy["quats"].astype(np.float64))
    M = R * np.exp(noisy["scales"].astype(np.float64))[:, None, :]
    cov = M @ M.transpose(0, 2, 1)
    z = np.linalg.solve(cov[n // 2 :], (step[n // 2 :] / scale[n // 2 :, None])[..., None])[
        ..., 0
    ]  # batched: b as [M,3,1] (numpy 2)
    # 450 draws: the mean within 4 sigma (0.19), the spread within ~15%
    assert abs(z.mean()) < 0.19 and 0.85 < z.std() < 1.15, (z.mean(), z.std())
    assert np.abs(z).max() < 6


# ---- ADC -----------------------------------------------------------------------------


@pytest.mark.parametrize("step", [600, 3100], ids=["before-first-reset", "after-first-reset"])
def test_adc_refine_clones_splits_and_prunes(device, scene, step):
    cfg = TrainConfig(compact=False, iterations=5000, strategy="adc", sh_degree=1)
    trainer = Trainer(scene, cfg, device, init=random_init(8, 1))
    ext = trainer.extent
    big = 0.2 * ext  # > prune_scale3d x extent, and so are its split children (/ 1.6)
    #            clone      split       pruned     kept       unseen     clone+prune  big kept?  big split
    scale = [0.005 * ext, 0.05 * ext, 0.005 * ext, 0.05 * ext, 0.05 * ext, 0.005 * ext, big, big]
    opac = [0.5, 0.6, 0.003, 0.7, 0.4, 0.004, 0.5, 0.5]
    grad = [3e-3, 2e-3, 1e-3, 1e-4, 0.0, 5e-3, 1e-4, 4e-3]
    vis = [10, 5, 2, 1, 0, 1, 1, 2]  # mean gradients: 3e-4, 4e-4, ... against grow_grad2d 2e-4
    a = _splats(8, seed=12)
    a["scales"] = np.log(np.array(scale)[:, None] * [1.0, 0.5, 0.25]).astype(np.float32)
    a["opacities"] = np.log(np.array(opac) / (1 - np.array(opac))).astype(np.float32)
    mom = _moments(a, 13)
    trainer.model.upload(a, mom)
    device.upload(trainer.stats[0], np.array(grad, np.float32))
    device.upload(trainer.stats[1], np.array(vis, np.uint32))
    refine(trainer, step)
    got = trainer.model.download()
    p = got["params"]
    prune_big = step > cfg.strategy.reset_every
    # (old index, kind) of each output, in order
    want = [(0, "same"), (0, "clone"), (1, "child"), (1, "child"), (3, "same"), (4, "same")]
    want += [] if prune_big else [(6, "same"), (7, "child"), (7, "child")]
    assert trainer.model.n == len(want)
    for i, (j, kind) in enumerate(want):
        for name in ("quats", "opacities", "sh"):
            np.testing.assert_array_equal(p[name][i], a[name][j], err_msg="%d %s" % (i, name))
        if kind == "child":
            np.testing.assert_allclose(p["scales"][i], a["scales"][j] - np.log(1.6), atol=1e-6)
            # mean = parent + R (s z), z ~ N(0, I): z back in the parent's frame
            from reference.projection import quat_to_rotmat

            R = quat_to_rotmat(a["quats"][j : j + 1].astype(np.float64))[0]
            z = R.T @ (p["means"][i] - a["means"][j]) / np.exp(a["scales"][j].astype(np.float64))
            assert 0 < np.abs(z).max() < 6, z
        else:
            np.testing.assert_array_equal(p["means"][i], a["means"][j])
            np.testing.assert_array_equal(p["scales"][i], a["scales"][j])
        for group in ("exp_avg", "exp_avg_sq"):
            for name in PARAMS:
                m = got[group][name][i]
                if kind == "same":
                    np.testing.assert_array_equal(m, mom[group][name][j], err_msg="%d %s %s" % (i, group, name))
                else:
                    assert not m.any(), (i, kind, group, name)
    children = [i for i, (_, kind) in enumerate(want) if kind == "child"]
    assert not np.array_equal(p["means"][children[0]], p["means"][children[1]])
    # the statistics restart, and the step records again for the new count
    assert not device.readback(trainer.stats[0], shape=(trainer.model.n,)).any()
    assert not device.readback(trainer.stats[1], shape=(trainer.model.n,)).any()
    assert np.isfinite(trainer.train_step()["loss"])
    trainer.free()


@pytest.mark.parametrize("absgrad", [False, True], ids=["grad", "absgrad"])
def test_adc_statistics_accumulate_the_screen_space_gradient(device, scene, absgrad):
    """After a step, each visible splat's grad2d_sum holds |dL/d mean2d| scaled
    by (W/2, H/2) (gsplat's DefaultStrategy); with absgrad, the per-pixel sum
    of absolute gradients that rasterize_bwd leaves in grad_xy_abs."""
    cfg = TrainConfig.from_settings(compact=False, iterations=100, strategy="adc", sh_degree=1, absgrad=absgrad)
    trainer = Trainer(scene, cfg, device, init=random_init(80, 1, seed=16))
    trainer.train_step()
    n, r = trainer.model.n, trainer.raster
    visible = (device.readback(r.radii, shape=(n, 2)) != 0).any(-1)
    xy = device.readback(r.grad_xy_abs if absgrad else r.grad_xy, shape=(n, 2)).astype(np.float64)
    want = np.where(visible, np.linalg.norm(xy * [trainer.width / 2, trainer.height / 2], axis=1), 0)
    got_sum = device.readback(trainer.stats[0], shape=(n,))
    got_count = device.readback(trainer.stats[1], shape=(n,))
    assert visible.sum() > n // 2
    np.testing.assert_array_equal(got_count, visible.astype(np.uint32))
    np.testing.assert_allclose(got_sum, want, rtol=1e-5, atol=1e-12)
    trainer.free()


def test_adc_opacity_reset_caps_opacities_at_twice_min_opacity(device, scene):
    cfg = TrainConfig(compact=False, iterations=100, strategy="adc", sh_degree=1)
    trainer = Trainer(scene, cfg, device, init=random_init(8, 1))
    a = _splats(50, seed=14)
    o = np.r_[np.linspace(0.02, 0.99, 40), np.linspace(0.001, 0.0099, 10)]
    a["opacities"] = np.log(o / (1 - o)).astype(np.float32)
    mom = _moments(a, 15)
    trainer.model.upload(a, mom)
    trainer.strategy.reset_opacity(trainer.model, device)
    got = trainer.model.download()
    np.testing.assert_allclose(sigmoid(got["params"]["opacities"]), np.minimum(o, 0.01), rtol=1e-5)
    np.testing.assert_array_equal(got["params"]["opacities"][40:], a["opacities"][40:])
    for group in ("exp_avg", "exp_avg_sq"):
        assert not got[group]["opacities"].any()
        for name in ("means", "quats", "scales", "sh"):
            np.testing.assert_array_equal(got[group][name], mom[group][name])
    for name in ("means", "quats", "scales", "sh"):
        np.testing.assert_array_equal(got["params"][name], a[name])
    trainer.free()


def test_mcmc_schedule_refines_at_its_steps(device, scene, monkeypatch):
    from spirula.train import strategy as strategies

    calls = []
    monkeypatch.setattr(strategies.MCMCStrategy, "refine", lambda self, model, step, device: calls.append(step))
    cfg = TrainConfig.from_settings(
        compact=False, strategy="mcmc", cap_max=100, sh_degree=1, refine_start=5, refine_every=5, refine_stop=31
    )
    trainer = Trainer(scene, cfg, device, init=random_init(8, 1))
    for s in range(40):
        trainer.strategy.step_post_backward(trainer.model, trainer.stats, s, trainer.extent, device)
    assert calls == [10, 15, 20, 25, 30]
    trainer.free()


@pytest.mark.parametrize("opacity_reset", [False, True], ids=["no-reset", "opacity-reset"])
def test_adc_schedule_refines_and_resets_at_its_steps(device, scene, monkeypatch, opacity_reset):
    """step_post_backward(..., s, ...) with the 0-based index of the step just done, as gsplat.
    With opacity_reset=false no opacity reset ever runs, as in gsplat 1.5.3's DefaultStrategy: its
    test `step % reset_every == 0 & step > 0` parses as the chain `step % reset_every == (0 & step) > 0`,
    whose second link is `0 > 0`; with opacity_reset (3DGS, the default), every reset_every steps."""
    from spirula.train import strategy as strategies

    calls = []

    def refine(self, model, stats, step, extent, device):
        calls.append(("refine", step))
        return strategies.Changes(model, model.n, model.n)

    monkeypatch.setattr(strategies.ADCStrategy, "refine", refine)
    monkeypatch.setattr(strategies.ADCStrategy, "reset_opacity", lambda self, model, device: calls.append(("reset",)))
    cfg = TrainConfig.from_settings(
        compact=False,
        strategy="adc",
        sh_degree=1,
        refine_start=5,
        refine_every=5,
        reset_every=15,
        refine_stop=31,
        opacity_reset=opacity_reset,
    )
    trainer = Trainer(scene, cfg, device, init=random_init(8, 1))
    for s in range(40):
        trainer.strategy.step_post_backward(trainer.model, trainer.stats, s, trainer.extent, device)
    reset = [("reset",)] if opacity_reset else []
    assert calls == [
        ("refine", 10),
        ("refine", 15),
        *reset,
        ("refine", 20),
        ("refine", 25),
        ("refine", 30),
        *reset,
    ]
    trainer.free()


@pytest.mark.parametrize("keep_moments", [False, True], ids=["reset-moments", "keep-moments"])
def test_mcmc_diverged_splats_are_relocated_never_drawn(device, scene, keep_moments):
    """A splat with a non-finite opacity, mean, scale, rotation or SH
    coefficient (a diverged splat) counts as dead: it is overwritten by a copy of a live splat, with
    its moments restarted at 0 even where relocated splats keep theirs (its
    moments are NaN too and would make the copy diverge again), and the draws,
    for relocation and for growth, go on (a single NaN weight would otherwise
    poison the prefix sum of weights)."""
    n = 200
    a = _splats(n, seed=17, opacity=np.random.default_rng(18).uniform(0.05, 0.95, n))
    a["opacities"][3] = np.nan
    a["opacities"][170] = np.inf
    a["means"][77, 1] = np.nan
    a["scales"][150, 2] = np.inf
    a["quats"][160, 0] = np.nan
    a["sh"][120, -1, 2] = -np.inf  # the last SH coefficient
    broken = np.array([3, 77, 120, 150, 160, 170])
    mom = _moments(a, 19)
    for group in mom.values():
        for v in group.values():
            v[broken] = np.nan
    trainer = _mcmc_trainer(device, scene, a, mom, cap_max=1000, mcmc_keep_moments=keep_moments)
    refine(trainer, 600)
    got = trainer.model.download()
    p = got["params"]
    assert trainer.strategy.relocated == len(broken)
    assert trainer.model.n == 210  # growth went on, 5%
    for group in got.values():
        for name, v in group.items():
            assert np.isfinite(v).all(), name
    for group in ("exp_avg", "exp_avg_sq"):
        for name in PARAMS:
            assert not got[group][name][broken].any(), (group, name)
    src = _groups(a["means"], p["means"])
    assert (src >= 0).all() and not np.isin(src, broken).any()
    trainer.free()


def test_adc_prunes_diverged_splats(device, scene):
    """A splat with any non-finite parameter (NaN, +inf or -inf; SH included)
    is pruned by ADC's refinement, whether or not it would have grown; the
    others are kept or cloned as usual."""
    cfg = TrainConfig(compact=False, iterations=5000, strategy="adc", sh_degree=1)
    trainer = Trainer(scene, cfg, device, init=random_init(8, 1))
    ext = trainer.extent
    a = _splats(8, seed=21, opacity=np.full(8, 0.5))
    a["scales"][:] = np.log(0.005 * ext)
    a["opacities"][1] = np.nan
    a["means"][2, 2] = np.inf
    a["scales"][3, 0] = -np.inf  # exp(-inf) = 0: finite, but not a splat
    a["quats"][4, 3] = np.nan
    a["sh"][5, -1, 0] = np.inf
    trainer.model.upload(a, _moments(a, 22))
    grad = np.float32([0, 3e-3, 0, 3e-3, 0, 3e-3, 3e-3, 0])  # 3e-3 > grow_grad2d: would clone
    device.upload(trainer.stats[0], grad)
    device.upload(trainer.stats[1], np.ones(8, np.uint32))
    refine(trainer, 600)
    p = trainer.model.download()["params"]
    assert trainer.model.n == 4  # 0 and 7 kept, 6 kept and cloned
    for name in PARAMS:
        assert np.isfinite(p[name]).all(), name
    assert _groups(a["means"], p["means"]).tolist() == [0, 6, 6, 7]
    trainer.free()
