"""Training configuration: :class:`TrainConfig`, which holds the strategy's own
settings (:class:`MCMC` or :class:`ADC`, as gsplat's ``simple_trainer`` holds
an ``MCMCStrategy`` or a ``DefaultStrategy``); defaults in docs/design.md §9
(3DGS / gsplat), written to ``config.json`` with every run.

Every default lives here: the fields' own, each strategy's (its dataclass's
fields) and the demo's (:meth:`TrainConfig.demo`). Each field's metadata is a
:class:`~spirula.train.spec.Spec` (help text, ``spirula train``
option, accepted values, whether it may change on ``--resume``): the CLI
generates its options from them and maps only the options a user typed onto
fields.

Every setting also has a flat name, its field's name, unique across
TrainConfig and both strategies: ``--set NAME=VALUE`` and ``config.json`` use
it (``"strategy": "mcmc"`` names the strategy; its fields sit beside the
others). :meth:`TrainConfig.settings` gives the flat dict,
:meth:`TrainConfig.from_dict` reads it (and a nested ``"strategy": {"name":
..., ...}`` too); a setting of the other strategy is ignored, as every
config.json before the strategies had their own dataclasses held all of them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import ClassVar

from spirula.train.spec import SettingError, check, setting, spec_fields, validate, value_type

# --geometry's distortion weight. Spirula's depths are camera z in a world normalized to the
# cameras' extent (data/world.py), so |z_i - z_j| is O(0.01..1) where 2DGS's NDC depth differences
# are ~near/z^2 smaller: 2DGS's 100 (unbounded scenes) on NDC depth is ~0.1..1 here. Measured on
# the synthetic sphere (tests/geometry_cases.py, 400 steps, lavapipe): 0.5 lowered the distortion
# 14%, the median and expected depth errors 2% and 6%, and raised test PSNR 0.06 dB; 5 lowered the
# distortion 30% but made the depths worse and cost 1 dB (it thins the splats out).
GEOMETRY_DISTORTION_WEIGHT = 0.5
# --geometry's normal consistency weight: 2DGS's 0.05 (its loss is the same: mean over pixels of
# alpha (1 - N . n_d), N the rendered normal, n_d the normal of the rendered depth); 2DGS starts
# it at 7,000 of 30,000 steps (after densification has shaped the surface): 7/30 of any run here
GEOMETRY_NORMAL_WEIGHT = 0.05


# -- the strategies -----------------------------------------------------------------
# Settings both strategies have, each with its own default (the strategy's field says it)
_SHARED = dict(
    init_opacity=dict(help="Seed splats' opacity", gt=0, lt=1),
    init_scale=dict(help="Seed splats' scale, x the mean distance to the 3 nearest points", gt=0),
    refine_start=dict(help="Densification starts after this step", ge=0),
    refine_every=dict(help="Densify every N steps", ge=1),
    refine_stop=dict(help="Densification stops at this step", ge=0),
    min_opacity=dict(help="Below it a splat is dead (relocated, or pruned)", ge=0, lt=1),
    opacity_reg=dict(help="Regularizer weight: mean opacity", ge=0),
    scale_reg=dict(help="Regularizer weight: mean scale", ge=0),
)


def _shared(name: str, default):
    return setting(default, **_SHARED[name])


@dataclasses.dataclass
class StrategyConfig:
    """What both strategies' settings share: their ``name`` (the flat value of
    ``strategy``), and the fields of ``_SHARED`` each declares with its default."""

    name: ClassVar[str] = ""

    def __post_init__(self):
        validate(self)


@dataclasses.dataclass
class MCMC(StrategyConfig):
    """3DGS as MCMC (Kheradmand et al. 2024), as gsplat's ``MCMCStrategy`` with
    simple_trainer's MCMC settings: a fixed splat budget; dead splats move onto
    live ones, the count grows 5% per refinement, the means get noise every step."""

    name: ClassVar[str] = "mcmc"

    cap_max: int = setting(
        1_000_000,
        "MCMC splat budget (lowered to what the device limits and --vram-budget allow)",
        flag="--cap-max",
        ge=1,
        le=2**31 - 1,  # splat indices are 32-bit
    )
    noise_lr: float = setting(5e5, "MCMC position noise, x the means' learning rate", ge=0)
    # gsplat 1.5.3's relocate keeps a relocated slot's moments: +0.6 dB against restarting them (docs/design.md §9)
    mcmc_keep_moments: bool = setting(
        True,
        "Relocated splats keep their slot's Adam moments (gsplat 1.5.3) instead of restarting at 0",
    )
    init_opacity: float = _shared("init_opacity", 0.5)
    init_scale: float = _shared("init_scale", 0.1)
    refine_start: int = _shared("refine_start", 500)
    refine_every: int = _shared("refine_every", 100)
    refine_stop: int = _shared("refine_stop", 25_000)
    min_opacity: float = _shared("min_opacity", 0.005)
    opacity_reg: float = _shared("opacity_reg", 0.01)
    scale_reg: float = _shared("scale_reg", 0.01)


@dataclasses.dataclass
class ADC(StrategyConfig):
    """Adaptive density control (Kerbl et al. 2023), as gsplat's ``DefaultStrategy``:
    clone small and split large splats with a high screen-space gradient, prune
    transparent and oversized ones, reset opacities periodically."""

    name: ClassVar[str] = "adc"

    grow_grad2d: float = setting(0.0002, "ADC: clone/split above this mean screen-space gradient", ge=0)
    grow_scale3d: float = setting(0.01, "ADC: smaller splats (x extent) are cloned, larger split", ge=0)
    prune_scale3d: float = setting(0.1, "ADC: larger splats (x extent) are pruned (after step reset_every)", ge=0)
    reset_every: int = setting(3000, "ADC: the opacity reset's period; oversized splats are pruned past it", ge=1)
    # 3DGS's reset. gsplat 1.5.3's DefaultStrategy never runs its reset (`step % reset_every == 0
    # & step > 0` chains to `0 > 0`); with it, test PSNR was higher on every seed and scene
    # measured (docs/performance.md, "Quality"; notes/performance-history.md)
    opacity_reset: bool = setting(
        True,
        "ADC: cap every opacity at 2 x min_opacity every reset_every steps (3DGS; gsplat 1.5.3's never runs)",
    )
    absgrad: bool = setting(False, "ADC: grow on the AbsGS gradient (sum of per-pixel |dL/dmean2d|)")
    init_opacity: float = _shared("init_opacity", 0.1)
    init_scale: float = _shared("init_scale", 1.0)
    refine_start: int = _shared("refine_start", 500)
    refine_every: int = _shared("refine_every", 100)
    refine_stop: int = _shared("refine_stop", 15_000)
    min_opacity: float = _shared("min_opacity", 0.005)
    opacity_reg: float = _shared("opacity_reg", 0.0)
    scale_reg: float = _shared("scale_reg", 0.0)


STRATEGIES = {cls.name: cls for cls in (MCMC, ADC)}


# -- the run ----------------------------------------------------------------------------
@dataclasses.dataclass
class TrainConfig:
    """Every training setting; ``strategy`` holds the densification's own
    (:class:`MCMC` or :class:`ADC`; a name gives that strategy's defaults)."""

    iterations: int = setting(30_000, "Training steps", flag="--iterations", ge=1, le=1_000_000_000)
    strategy: MCMC | ADC = setting(
        default_factory=MCMC,
        help="Densification: MCMC (budget --cap-max) or classic adaptive density control",
        flag="--strategy",
        choices=tuple(STRATEGIES),
        resumable=False,
    )
    vram_budget: str | None = setting(
        None,
        "Device memory the run may use (8GiB, 512MiB, 8GB, bytes); MCMC's cap and ADC's growth stop there",
        flag="--vram-budget",
        metavar="SIZE",
        default_help="85% of the device's memory",
    )
    sh_degree: int = setting(3, "SH degree", flag="--sh-degree", ge=0, le=3, resumable=False)
    # the training images on the GPU or streamed from host memory through a ring of slots
    # (spirula/train/step.py ImageSize, docs/training.md "Image streaming"); None: streamed when
    # the images would take device memory the splats need (spirula/train/memory.py stream_images)
    stream_images: bool | None = setting(
        None,
        "Keep the training images in host memory and upload each ahead of its step (a ring of a few"
        " slots on the GPU) instead of holding them all on the GPU; same results",
        flag="--stream-images",
        negatable=True,
        default_help="when the images would take memory the splats need within the budget",
    )
    sh_every: int = setting(1000, "One SH band more every N steps, up to the SH degree", ge=1)
    seed: int = setting(0, "Random seed", flag="--seed", ge=0)
    # off by default: at 30,000 steps it lost 0.6 dB against float32 (issue #46); it becomes the
    # default again when benchmarks/compact_quality.py's long-run gate passes (docs/performance.md)
    compact: bool = setting(
        False,
        "Store the SH coefficients past the DC in fp16 and the Adam moments of the SH, means, quats"
        " and scales in bf16, rounded stochastically (44% fewer bytes per SH3 splat)",
        flag="--compact",
        negatable=True,
    )
    # loss: l1_weight * L1 + ssim_weight * (1 - SSIM)
    l1_weight: float = setting(0.8, "Loss weight of L1", ge=0)
    ssim_weight: float = setting(0.2, "Loss weight of 1 - SSIM", ge=0)
    beta1: float = setting(0.9, "Adam's beta1", ge=0, lt=1)
    beta2: float = setting(0.999, "Adam's beta2", ge=0, lt=1)
    adam_eps: float = setting(1e-15, "Adam's epsilon", ge=0)
    # docs/design.md §2.4: 0.99; gsplat 1.5.3 0.999
    max_alpha: float = setting(0.99, "Cap on one splat's alpha at a pixel; renders of the run use it too", gt=0, lt=1)
    # geometry regularizers (docs/training.md, "Geometry"): the depth distortion
    # sum_ij w_i w_j |z_i - z_j| per pixel (camera z in the normalized training world), averaged
    # over the pixels, times distortion_weight, from step distortion_from on
    geometry: bool = setting(
        False,
        "Regularize geometry for meshing: depth distortion and normal consistency (docs/training.md,"
        " 'Geometry'; tune with --set distortion_weight=W --set distortion_from=STEP --set normal_weight=W"
        " --set normal_from=STEP)",
        flag="--geometry",
    )
    distortion_weight: float | None = setting(
        None, "Weight of the depth distortion; null: 0.5 with geometry, else 0 (off)", ge=0
    )
    distortion_from: int | None = setting(None, "The step the depth distortion starts at; null: iterations / 10", ge=0)
    # flattening: the mean over splats of each splat's smallest scale (Gaussian Surfels, PGSR); not
    # turned on by --geometry (docs/training.md)
    flatten_weight: float = setting(0.0, "Weight of the flattening term (mean smallest scale); 0: off", ge=0)
    # normal consistency (2DGS): the mean over pixels of a (1 - N . n_d), N the rendered normal
    # image, n_d the normal of the rendered (accumulated) depth image, a the alpha
    normal_weight: float | None = setting(
        None, "Weight of the normal consistency; null: 0.05 with geometry, else 0 (off)", ge=0
    )
    normal_from: int | None = setting(
        None, "The step the normal consistency starts at; null: iterations x 7 / 30", ge=0
    )
    lr_means: float = setting(1.6e-4, "Means' learning rate at the start, x scene extent", ge=0)
    lr_means_final: float = setting(1.6e-6, "Means' learning rate at the end (exponential decay), x extent", ge=0)
    lr_quats: float = setting(1e-3, "Rotations' learning rate", ge=0)
    lr_scales: float = setting(5e-3, "Log-scales' learning rate", ge=0)
    # gsplat's; 0.025 with MCMC lost 0.6 dB (docs/design.md §9)
    lr_opacities: float = setting(0.05, "Opacity logits' learning rate", ge=0)
    lr_sh0: float = setting(2.5e-3, "SH DC learning rate", ge=0)
    lr_shN_divisor: float = setting(20.0, "Higher SH bands learn at lr_sh0 / this", gt=0)
    world_center: str = setting(
        "cameras",
        "Training coordinates centred on the cameras' mean, or on the point they look at",
        choices=("cameras", "focus"),
        resumable=False,
    )
    # data
    downscale: int | None = setting(
        None, "Use images_N (computed and cached when missing)", flag="--downscale", ge=1, resumable=False
    )
    eval_split: str = setting("interval:8", "interval:N or none", flag="--eval-split", resumable=False)
    background: str | None = setting(
        None,
        "Background colour",
        flag="--background",
        choices=("white", "black"),
        default_help="white for Blender scenes, black otherwise",
    )
    # appearance correction (docs/training.md, "Appearance"; docs/design.md §2.8): per training
    # image exposure and colour (PPISP, with the camera's vignetting and response), or a
    # bilateral grid per image (BilaRF), fitted with the splats; train_run resolves None from
    # the dataset (appearance_for)
    appearance: str | None = setting(
        None,
        "Per-image appearance correction fitted with the splats: PPISP (exposure, white balance,"
        " vignetting, response curve), a bilateral grid per image, both, or none",
        flag="--appearance",
        choices=("none", "ppisp", "bilagrid", "both"),
        resumable=False,
        default_help="ppisp for videos, photos, COLMAP and nerfstudio captures; none for Blender scenes and the demo",
    )
    appearance_lr: float = setting(
        2e-3,
        "Adam's learning rate of the appearance models (PPISP's and gsplat's bilateral grids' 2e-3), before"
        " their warm-up and decay",
        gt=0,
    )
    bilagrid_lr: float | None = setting(
        None,
        "Adam's learning rate of the bilateral grids (bilagrid, both), before their warm-up and decay",
        gt=0,
        default_help="appearance_lr",
    )
    exposure_from_exif: bool = setting(
        True,
        "Start PPISP's per-image exposures from the photos' EXIF (exposure time, f-number, ISO) where every"
        " training image has them",
        flag="--exposure-from-exif",
        negatable=True,
        resumable=False,
    )
    # PPISP's controller (docs/training.md, "Appearance"; docs/design.md §2.8): a small CNN per
    # camera that predicts a view's exposure and colour from its render, trained in the run's
    # last phase (from int(controller_activation_ratio x iterations) on: ISP and splats frozen)
    controller: bool | None = setting(
        None,
        "Train PPISP's controller in the run's last phase, so novel views get a predicted exposure and"
        " colour (metrics.json: psnr_controller)",
        flag="--controller",
        negatable=True,
        resumable=False,
        default_help="off (gsplat's default too): the phase freezes the splats for its steps",
    )
    controller_activation_ratio: float = setting(
        0.8, "The fraction of the run after which PPISP's controller trains (nv-tlabs/ppisp's 0.8)", gt=0, le=1
    )
    controller_lr: float = setting(1e-3, "Adam's learning rate of PPISP's controller (nv-tlabs/ppisp's 1e-3)", gt=0)
    # run
    eval_every: int = setting(0, "Evaluate on the test images every N steps (0: never)", flag="--eval-every", ge=0)
    save_every: int = setting(7000, "Checkpoint every N steps", flag="--save-every", ge=0)
    log_every: int = setting(100, "A plain progress line every N steps when stderr is not a terminal", ge=1)
    # submit each step before reading the previous one's results (spirula/train/trainer.py): the GPU
    # stays busy across steps; False: one waited-for step at a time (same results, bit for bit)
    pipeline_steps: bool = setting(True, "Submit each step before the previous one's results are read")

    # the demo scene's settings (`spirula train` without a dataset), flat: its seed points are
    # sparse (~6,000): full-size seeds cover the views from the first step (27.5 dB after 1,500
    # steps, against 26.6 with MCMC's 0.1 meant for dense SfM clouds)
    # rendered with constant appearance, like a Blender scene: no appearance correction
    DEMO: ClassVar[dict] = dict(iterations=400, cap_max=30_000, log_every=50, init_scale=1.0, appearance="none")

    def __post_init__(self):
        if isinstance(self.strategy, str):
            self.strategy = STRATEGIES[check(type(self), "strategy", self.strategy)]()
        if not isinstance(self.strategy, StrategyConfig):
            raise SettingError("--strategy %r: expected one of %s" % (self.strategy, ", ".join(STRATEGIES)))
        validate(self)
        if self.distortion_weight is None:
            self.distortion_weight = GEOMETRY_DISTORTION_WEIGHT if self.geometry else 0.0
        if self.distortion_from is None:
            # 2DGS starts at 3,000 of 30,000 steps: the splats first cover the views
            self.distortion_from = self.iterations // 10
        if self.normal_weight is None:
            self.normal_weight = GEOMETRY_NORMAL_WEIGHT if self.geometry else 0.0
        if self.normal_from is None:
            self.normal_from = self.iterations * 7 // 30

    @classmethod
    def demo(cls, **settings) -> TrainConfig:
        """The built-in demo scene's settings (``spirula train`` without a
        dataset), with flat ``settings`` on top: a recognizable scene within 5
        minutes on lavapipe with 2 cores (400 steps: 88 s of training, ~22 dB;
        1,500 steps: 27.6 dB in ~7 min)."""
        return cls.from_settings(**{**cls.DEMO, **settings})

    # -- flat settings: --set, config.json --------------------------------------------
    def settings(self) -> dict:
        """The flat settings: ``strategy`` its name, its fields beside the others."""
        out = {name: getattr(self, name) for name in spec_fields(self) if name != "strategy"}
        out["strategy"] = self.strategy.name
        out.update(dataclasses.asdict(self.strategy))
        return out

    @classmethod
    def from_settings(cls, **flat) -> TrainConfig:
        """A config from flat settings (:meth:`settings`' names); a name that
        is no setting is a :class:`SettingError`; a setting of the strategy
        not chosen is ignored."""
        names = setting_names()
        unknown = sorted(set(flat) - set(names))
        if unknown:
            raise SettingError("%s: no such setting (one of %s)" % (unknown[0], ", ".join(sorted(names))))
        for name, value in flat.items():  # the other strategy's too: ignored, but not nonsense
            if name != "strategy" and not dataclasses.is_dataclass(value):
                check(names[name][0][0], name, value)
        return cls.from_dict(flat)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """A config from a ``config.json`` dict: flat (:meth:`settings`, every
        config.json so far) or nested (``"strategy": {"name": "adc", ...}``).
        Keys that are no setting (``dataset``, settings since removed) and the
        other strategy's settings are ignored; a null where a setting has no
        null is its default (``lr_opacities`` in config.json files of before
        0.05 became both strategies' default)."""
        flat = flatten(d)
        name = check(cls, "strategy", flat.get("strategy", MCMC.name))
        strategy = STRATEGIES[name]
        own = {k: v for k, v in flat.items() if k in spec_fields(strategy)}
        top = {k: v for k, v in flat.items() if k in spec_fields(cls) and k != "strategy"}
        return cls(strategy=strategy(**_drop_nulls(strategy, own)), **_drop_nulls(cls, top))

    def replace(self, **flat) -> TrainConfig:
        """This config with flat ``settings`` changed (``refine_start=...`` reaches the strategy)."""
        return type(self).from_settings(**{**self.settings(), **flat})

    def controller_for(self, appearance: str | None) -> bool:
        """Whether a run with appearance correction ``appearance`` trains PPISP's controller:
        with PPISP (ppisp, both) and ``controller`` on. Off by default: its phase freezes the
        splats for the last 20% of the steps, which cost the plain render 0.7 dB on the
        perturbed capture (docs/training.md, "Appearance"); gsplat's default is off too."""
        if appearance not in ("ppisp", "both"):
            return False
        return bool(self.controller)

    def appearance_for(self, source: str) -> str:
        """The appearance correction of a run on a dataset of kind ``source`` (Scene.source):
        the setting, or its default: none for Blender/NeRF-synthetic scenes (rendered with
        constant appearance), PPISP for captures (COLMAP, nerfstudio; videos and photos go
        through SfM into COLMAP)."""
        if self.appearance is not None:
            return self.appearance
        return "none" if source == "blender" else "ppisp"

    def to_json(self) -> str:
        """What ``config.json`` holds: the flat settings."""
        return json.dumps(self.settings(), indent=1, sort_keys=True)


def flatten(d: dict) -> dict:
    """A config dict with a nested strategy (``{"strategy": {"name": ..., ...}}``) as flat settings."""
    nested = d.get("strategy")
    if not isinstance(nested, dict):
        return dict(d)
    out = {k: v for k, v in d.items() if k != "strategy"}
    out.update({k: v for k, v in nested.items() if k != "name"})
    out["strategy"] = nested.get("name", MCMC.name)
    return out


def _drop_nulls(cls, values: dict) -> dict:
    return {k: v for k, v in values.items() if v is not None or value_type(cls, k)[1]}


@functools.cache
def setting_names() -> dict:
    """``{flat name: (owner classes, Spec)}`` of every training setting, in
    order: TrainConfig's, with each strategy's after ``strategy`` (a shared
    setting once, with both owners)."""
    out = {}
    for name, (_, s) in spec_fields(TrainConfig).items():
        out[name] = ((TrainConfig,), s)
        if name == "strategy":
            for strategy in STRATEGIES.values():
                for sname, (_, ss) in spec_fields(strategy).items():
                    owners = out.get(sname, ((), ss))[0]
                    out[sname] = (owners + (strategy,), ss)
    return out
