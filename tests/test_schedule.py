"""The training schedules and configuration (spirula/train/schedule.py and
config.py) against docs/design.md §9 and gsplat's simple_trainer: the means'
learning rate decays exponentially from lr_means x extent to lr_means_final x
extent over the run, every other rate is constant, one SH band more every
sh_every steps up to sh_degree, and the strategy picks its own defaults."""

import dataclasses
import json
import math

import pytest

from spirula.train.config import ADC, MCMC, TrainConfig, setting_names
from spirula.train.schedule import learning_rates, sh_degree_at
from spirula.train.spec import SettingError, value_type

# What the configuration of tests/workloads.py's ADC run wrote to config.json before the
# strategies had their own settings (flat: every field of both strategies, the testing aid,
# the live views' budget), dataset path included
OLD_CONFIG_JSON = """{"absgrad": false, "adam_eps": 1e-15, "background": null, "beta1": 0.9, "beta2": 0.999,
"cap_max": 1000, "compact": false, "dataset": "/data/tiny", "distortion_from": 2, "distortion_weight": 0.0,
"downscale": null, "eval_every": 0, "eval_split": "interval:8", "flatten_weight": 0.0, "geometry": false,
"grow_grad2d": 1e-07, "grow_scale3d": 0.01, "init_opacity": 0.1, "init_scale": 1.0, "inject_nan_every": 0,
"iterations": 20, "l1_weight": 0.8, "live_view_budget": 0.1, "log_every": 100, "lr_means": 0.00016,
"lr_means_final": 1.6e-06, "lr_opacities": 0.05, "lr_quats": 0.001, "lr_scales": 0.005, "lr_sh0": 0.0025,
"lr_shN_divisor": 20.0, "max_alpha": 0.99, "mcmc_keep_moments": true, "min_opacity": 0.005, "noise_lr": 500000.0,
"normal_from": 4, "normal_weight": 0.0, "opacity_reg": 0.0, "opacity_reset": true, "pipeline_steps": true,
"prune_scale3d": 0.1, "refine_every": 100, "refine_start": 1000, "refine_stop": 15000, "reset_every": 3000,
"save_every": 7000, "scale_reg": 0.0, "seed": 0, "sh_degree": 1, "sh_every": 2, "ssim_weight": 0.2,
"strategy": "adc", "vram_budget": null, "world_center": "cameras"}"""

EXTENT = 3.7


@pytest.mark.parametrize("strategy,opacity_lr", [("mcmc", 0.05), ("adc", 0.05)])
def test_learning_rates_at_the_start_middle_and_end(strategy, opacity_lr):
    cfg = TrainConfig(iterations=1000, strategy=strategy)
    start, middle, end = (learning_rates(cfg, s, EXTENT) for s in (0, 500, 1000))
    assert start.means == pytest.approx(1.6e-4 * EXTENT, rel=1e-12)
    # exponential: halfway is the geometric mean of the two ends
    assert middle.means == pytest.approx(math.sqrt(1.6e-4 * 1.6e-6) * EXTENT, rel=1e-12)
    assert end.means == pytest.approx(1.6e-6 * EXTENT, rel=1e-12)
    for lr in (start, middle, end):
        assert (lr.quats, lr.scales, lr.opacities, lr.sh0) == (1e-3, 5e-3, opacity_lr, 2.5e-3)
        assert lr.shN == pytest.approx(2.5e-3 / 20, rel=1e-15)


def test_means_rate_is_log_linear_in_the_step_and_clamped_past_the_end():
    cfg = TrainConfig(iterations=300, lr_means=2e-3, lr_means_final=2e-5)
    logs = [math.log(learning_rates(cfg, s, 1.0).means) for s in range(0, 301, 30)]
    steps = [b - a for a, b in zip(logs, logs[1:])]
    assert steps == pytest.approx([math.log(0.01) / 10] * 10, rel=1e-9)
    assert learning_rates(cfg, 5000, 1.0).means == pytest.approx(2e-5, rel=1e-12)
    assert learning_rates(cfg, -3, 1.0).means == pytest.approx(2e-3, rel=1e-12)


def test_means_rate_scales_with_the_scene_extent():
    cfg = TrainConfig(iterations=100)
    assert learning_rates(cfg, 40, 10.0).means == pytest.approx(10 * learning_rates(cfg, 40, 1.0).means, rel=1e-12)


def test_an_explicit_opacity_rate_wins_over_the_strategy_default():
    for strategy in ("mcmc", "adc"):
        assert learning_rates(TrainConfig(strategy=strategy, lr_opacities=0.07), 0, 1.0).opacities == 0.07


@pytest.mark.parametrize(
    "step,degree", [(0, 0), (999, 0), (1000, 1), (1999, 1), (2000, 2), (2999, 2), (3000, 3), (3001, 3), (29_999, 3)]
)
def test_sh_degree_grows_one_band_every_1000_steps(step, degree):
    assert sh_degree_at(TrainConfig(), step) == degree


def test_sh_degree_stops_at_the_configured_degree():
    cfg = TrainConfig(sh_degree=1, sh_every=10)
    assert [sh_degree_at(cfg, s) for s in (0, 9, 10, 19, 20, 1000)] == [0, 0, 1, 1, 1, 1]
    assert sh_degree_at(TrainConfig(sh_degree=0), 10_000) == 0


def test_defaults_follow_design_section_2():
    c = TrainConfig()
    assert (c.iterations, c.strategy.name, c.sh_degree, c.sh_every) == (30_000, "mcmc", 3, 1000)
    assert (c.l1_weight, c.ssim_weight) == (0.8, 0.2)
    assert (c.beta1, c.beta2, c.adam_eps) == (0.9, 0.999, 1e-15)
    assert (c.lr_means, c.lr_means_final, c.lr_quats, c.lr_scales, c.lr_sh0, c.lr_shN_divisor) == (
        1.6e-4,
        1.6e-6,
        1e-3,
        5e-3,
        2.5e-3,
        20.0,
    )
    for s in (MCMC(), ADC()):
        assert (s.refine_start, s.refine_every, s.min_opacity) == (500, 100, 0.005)
    a = ADC()
    assert (a.grow_grad2d, a.grow_scale3d, a.prune_scale3d, a.reset_every) == (0.0002, 0.01, 0.1, 3000)


def test_mcmc_strategy_defaults():
    """gsplat's MCMCStrategy with simple_trainer's MCMC settings."""
    c = TrainConfig(strategy=MCMC())
    s = c.strategy
    assert (s.cap_max, s.noise_lr) == (1_000_000, 5e5)
    assert (s.init_opacity, s.init_scale, s.refine_stop, s.opacity_reg, s.scale_reg) == (0.5, 0.1, 25_000, 0.01, 0.01)
    # gsplat 1.5.3's rates, not 0.025 / reset moments: +0.6 dB (docs/design.md §9)
    assert c.lr_opacities == 0.05 and s.mcmc_keep_moments
    # config.json files of before 0.05 became the default hold null
    assert TrainConfig.from_dict(dict(strategy="mcmc", lr_opacities=None)).lr_opacities == 0.05


def test_adc_strategy_defaults():
    """gsplat's DefaultStrategy (3DGS)."""
    c = TrainConfig(strategy=ADC())
    s = c.strategy
    assert (s.init_opacity, s.init_scale, s.refine_stop, s.opacity_reg, s.scale_reg) == (0.1, 1.0, 15_000, 0.0, 0.0)
    assert c.lr_opacities == 0.05
    # 3DGS's opacity reset (gsplat 1.5.3's never runs, a precedence bug): measured better
    assert s.opacity_reset and not s.absgrad


def test_a_strategy_name_gives_that_strategys_defaults():
    assert TrainConfig(strategy="adc") == TrainConfig(strategy=ADC())
    assert TrainConfig().strategy == MCMC() and TrainConfig(strategy="mcmc") == TrainConfig()


def test_each_strategy_owns_its_settings():
    """As gsplat's strategies: MCMC has the budget and the noise, ADC the growth
    and prune thresholds and the reset; both the refine schedule, the seeds and
    the regularizers, each with its own defaults; TrainConfig none of them."""
    mcmc, adc = ({f.name for f in dataclasses.fields(s)} for s in (MCMC, ADC))
    assert {"cap_max", "noise_lr", "mcmc_keep_moments"} <= mcmc - adc
    assert {"grow_grad2d", "grow_scale3d", "prune_scale3d", "reset_every", "opacity_reset", "absgrad"} <= adc - mcmc
    shared = {"init_opacity", "init_scale", "refine_start", "refine_every", "refine_stop", "min_opacity"}
    assert shared | {"opacity_reg", "scale_reg"} == mcmc & adc
    assert not (mcmc | adc) & {f.name for f in dataclasses.fields(TrainConfig)}
    # testing aids and the viewers' settings are neither
    assert not {"inject_nan_every", "live_view_budget"} & set(setting_names())


def test_explicit_values_are_kept_even_when_falsy():
    c = TrainConfig.from_settings(
        strategy="mcmc", init_opacity=0.3, init_scale=2.0, refine_stop=0, opacity_reg=0.0, scale_reg=0.0
    )
    s = c.strategy
    assert (s.init_opacity, s.init_scale, s.refine_stop, s.opacity_reg, s.scale_reg) == (0.3, 2.0, 0, 0.0, 0.0)


@pytest.mark.parametrize(
    "bad,words",
    [
        (dict(strategy="3dgs"), "--strategy"),
        (dict(sh_degree=4), "--sh-degree 4: expected an integer from 0 to 3"),
        (dict(sh_degree=-1), "--sh-degree"),
        (dict(flatten_weight=-1), "flatten_weight=-1: expected a number >= 0"),
        (dict(max_alpha=1.0), "max_alpha=1.0: expected a number > 0 and < 1"),
        (dict(world_center="middle"), 'world_center="middle": expected one of cameras, focus'),
        (dict(cap_max=0), "--cap-max 0: expected an integer from 1 to 2147483647"),
        (dict(strategy="adc", opacity_reset="yes"), 'opacity_reset="yes": expected true or false'),
        (dict(iterations=1.5), "--iterations 1.5: expected an integer from 1 to 1000000000"),
        (dict(background="blue"), "--background"),
    ],
)
def test_invalid_config_is_refused_in_one_line_naming_the_setting(bad, words):
    """The settings' metadata (spirula/train/spec.py) says what each accepts:
    a value outside is a SettingError (a SpirulaError, exit status 2; also a
    ValueError) naming the option, or the setting, and what it accepts."""
    with pytest.raises(SettingError) as err:
        TrainConfig.from_settings(**bad)
    assert isinstance(err.value, ValueError) and err.value.exit_code == 2
    assert words in str(err.value) and "\n" not in str(err.value)


def test_settings_are_stored_as_their_type():
    """JSON numbers from --set: an integer given to a number is a float, a whole float given to an integer an int."""
    c = TrainConfig.from_settings(lr_means=1, cap_max=2e3, iterations=100.0)
    assert (type(c.lr_means), type(c.strategy.cap_max), type(c.iterations)) == (float, int, int)


def test_an_unknown_setting_is_refused():
    with pytest.raises(SettingError, match="no_such_setting: no such setting"):
        TrainConfig.from_settings(no_such_setting=1)


def test_every_setting_says_what_it_is():
    """Help text for every field (the CLI's and docs/training.md's), and the
    metadata issue #45 validates from: a range or choices where a number or
    a word has one, and whether it may change on --resume."""
    for name, (owners, s) in setting_names().items():
        assert s.help.strip(), name
        assert s.resumable in (True, False)
        for owner in owners:
            kind, _ = value_type(owner, name)
            if kind in (int, float):
                assert s.ge is not None or s.gt is not None, name
    assert not setting_names()["strategy"][1].resumable and not setting_names()["sh_degree"][1].resumable


@pytest.mark.parametrize("strategy", ["mcmc", "adc"])
def test_config_json_round_trip(strategy):
    cfg = TrainConfig.from_settings(
        iterations=1234,
        strategy=strategy,
        cap_max=777,
        sh_degree=2,
        seed=5,
        lr_opacities=0.04,
        downscale=4,
        background="white",
        eval_split="none",
        absgrad=True,
    )
    text = cfg.to_json()
    assert json.loads(text) == cfg.settings()
    back = TrainConfig.from_dict(json.loads(text))
    assert back == cfg
    assert back.to_json() == text


def test_config_json_is_flat_with_the_strategys_own_settings():
    """config.json: one key per setting, the names of --set; "strategy" names
    the strategy, whose settings sit beside the others (the other's are not there)."""
    mcmc, adc = (json.loads(TrainConfig(strategy=s).to_json()) for s in ("mcmc", "adc"))
    assert mcmc["strategy"] == "mcmc" and mcmc["cap_max"] == 1_000_000 and "grow_grad2d" not in mcmc
    assert adc["strategy"] == "adc" and adc["reset_every"] == 3000 and "cap_max" not in adc
    assert set(mcmc) - {"cap_max", "noise_lr", "mcmc_keep_moments"} == set(adc) - {
        "grow_grad2d",
        "grow_scale3d",
        "prune_scale3d",
        "reset_every",
        "opacity_reset",
        "absgrad",
    }


def test_a_nested_config_json_loads_too():
    """{"strategy": {"name": ..., settings}}: the strategy's dataclass as JSON."""
    cfg = TrainConfig.from_settings(strategy="adc", reset_every=500, iterations=77)
    nested = dict(cfg.settings(), strategy=dict(dataclasses.asdict(cfg.strategy), name="adc"))
    for key in dataclasses.asdict(cfg.strategy):
        nested.pop(key)
    assert TrainConfig.from_dict(nested) == cfg


def test_a_config_json_of_before_the_strategies_had_their_own_settings_loads():
    """Every config.json written before (flat, every field of both strategies,
    the testing aid and the live views' budget) loads as it trained."""
    old = json.loads(OLD_CONFIG_JSON)
    cfg = TrainConfig.from_dict(old)
    assert cfg.strategy == ADC(grow_grad2d=1e-7, refine_start=1000)
    assert cfg == TrainConfig(iterations=20, strategy=cfg.strategy, sh_degree=1, sh_every=2)
    # switching the strategy (--resume --strategy mcmc) keeps the values the run had, as before
    mcmc = TrainConfig.from_dict(dict(old, strategy="mcmc")).strategy
    assert mcmc == MCMC(
        cap_max=1000,
        init_opacity=0.1,
        init_scale=1.0,
        refine_start=1000,
        refine_stop=15_000,
        opacity_reg=0,
        scale_reg=0,
    )


def test_config_json_ignores_keys_it_does_not_know():
    """config.json also holds the dataset path (spirula/train/run.py)."""
    d = dict(json.loads(TrainConfig(strategy="adc").to_json()), dataset="/data/garden", future_option=3)
    assert TrainConfig.from_dict(d) == TrainConfig(strategy="adc")


def test_replace_reaches_the_strategys_settings():
    cfg = TrainConfig().replace(iterations=10, refine_start=3, cap_max=5)
    assert (cfg.iterations, cfg.strategy.refine_start, cfg.strategy.cap_max) == (10, 3, 5)
    assert TrainConfig(strategy="adc").replace(cap_max=5) == TrainConfig(strategy="adc")  # MCMC's: ignored


def test_demo_settings_live_in_the_configuration():
    """`spirula train` without a dataset trains TrainConfig.demo(); what is
    given on top wins, and every other field keeps TrainConfig's default."""
    demo = TrainConfig.demo()
    assert (demo.iterations, demo.strategy.cap_max, demo.log_every, demo.strategy.init_scale) == (400, 30_000, 50, 1.0)
    assert demo.strategy.init_opacity == TrainConfig().strategy.init_opacity == 0.5
    assert TrainConfig.demo(iterations=1500, init_scale=0.1) == TrainConfig.from_settings(
        iterations=1500, cap_max=30_000, log_every=50, init_scale=0.1, appearance="none"
    )
    adc = TrainConfig.demo(strategy="adc")
    assert (adc.strategy.refine_stop, adc.strategy.init_opacity) == (15_000, 0.1)
