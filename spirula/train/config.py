"""Training configuration: one dataclass, defaults in docs/design.md §9
(3DGS / gsplat simple_trainer), written to ``config.json`` with every run.

Every default lives here: the fields' own, each strategy's
(:data:`STRATEGY_DEFAULTS`, for the fields left at None) and the demo's
(:meth:`TrainConfig.demo`). The CLI only maps the options a user typed onto
fields."""

from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class StrategyDefaults:
    """The values a strategy gives the TrainConfig fields left at None."""

    init_opacity: float
    init_scale: float  # x mean distance to the 3 nearest points
    refine_stop: int
    opacity_reg: float
    scale_reg: float


STRATEGY_DEFAULTS = {
    # gsplat's MCMCStrategy and simple_trainer's MCMC settings
    "mcmc": StrategyDefaults(init_opacity=0.5, init_scale=0.1, refine_stop=25_000, opacity_reg=0.01, scale_reg=0.01),
    # gsplat's DefaultStrategy (3DGS)
    "adc": StrategyDefaults(init_opacity=0.1, init_scale=1.0, refine_stop=15_000, opacity_reg=0.0, scale_reg=0.0),
}


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


@dataclasses.dataclass
class TrainConfig:
    iterations: int = 30_000
    strategy: str = "mcmc"  # 'mcmc' | 'adc'
    cap_max: int = 1_000_000  # MCMC splat budget (lowered to what the device limits and vram_budget allow)
    # device memory the run may use ("8GiB", "512MiB", "8GB", bytes); None: 85% of the device's
    vram_budget: str | None = None
    sh_degree: int = 3
    sh_every: int = 1000  # one SH band more every N steps
    seed: int = 0
    # compact storage: SH past the DC in fp16; the moments of SH, means, quats, scales in bf16 (train/storage.py).
    # Off by default: at 30,000 steps it lost 0.6 dB against float32 (issue #46); it becomes the default
    # again when benchmarks/compact_quality.py's long-run gate passes (docs/performance.md)
    compact: bool = False
    # loss: l1_weight * L1 + ssim_weight * (1 - SSIM)
    l1_weight: float = 0.8
    ssim_weight: float = 0.2
    # Adam
    beta1: float = 0.9
    beta2: float = 0.999
    adam_eps: float = 1e-15
    # rendering: cap on one splat's alpha at a pixel (docs/design.md §2.4: 0.99; gsplat 1.5.3 0.999)
    max_alpha: float = 0.99
    # live views (--viewer, --viewer-port): the share of wall time they may take
    # (spirula/view/live.py; issue #15: at most 10% slower with a viewer open)
    live_view_budget: float = 0.1
    # geometry regularizers (--geometry; docs/training.md, "Geometry"): the depth distortion
    # sum_ij w_i w_j |z_i - z_j| per pixel (camera z in the normalized training world), averaged
    # over the pixels, times distortion_weight, from step distortion_from on.
    # None: GEOMETRY_DISTORTION_WEIGHT with geometry, else 0 (off); from: iterations // 10
    geometry: bool = False
    distortion_weight: float | None = None
    distortion_from: int | None = None
    # flattening: + flatten_weight x the mean over splats of each splat's smallest scale (in the
    # normalized training world), pushing every splat to a disc on the surface (Gaussian Surfels,
    # PGSR). Its own weight, not turned on by --geometry: 0 (off) by default (docs/training.md)
    flatten_weight: float = 0.0
    # normal consistency (2DGS): + normal_weight x the mean over pixels of a (1 - N . n_d), N the
    # rendered normal image, n_d the normal of the rendered (accumulated) depth image, a the
    # alpha; from step normal_from on. None: GEOMETRY_NORMAL_WEIGHT with geometry, else 0
    # (off); from: iterations x 7 // 30
    normal_weight: float | None = None
    normal_from: int | None = None
    lr_means: float = 1.6e-4  # x scene extent, decaying to lr_means_final x extent
    lr_means_final: float = 1.6e-6
    lr_quats: float = 1e-3
    lr_scales: float = 5e-3
    lr_opacities: float = 0.05  # gsplat's; 0.025 with MCMC lost 0.6 dB (docs/design.md §9)
    lr_sh0: float = 2.5e-3
    lr_shN_divisor: float = 20.0
    # initialization (None: the strategy's default, STRATEGY_DEFAULTS)
    init_opacity: float | None = None  # MCMC 0.5, ADC 0.1
    init_scale: float | None = None  # x mean distance to 3 nearest points; MCMC 0.1, ADC 1.0
    # densification, shared
    refine_start: int = 500
    refine_every: int = 100
    refine_stop: int | None = None  # MCMC 25,000, ADC 15,000
    min_opacity: float = 0.005
    # MCMC
    noise_lr: float = 5e5
    mcmc_keep_moments: bool = True  # relocated splats keep their slot's Adam moments (gsplat 1.5.3)
    # training coordinates: centred on the cameras' mean, or on the point they look at ('focus')
    world_center: str = "cameras"
    opacity_reg: float | None = None  # MCMC 0.01, ADC 0
    scale_reg: float | None = None
    # ADC
    grow_grad2d: float = 0.0002
    grow_scale3d: float = 0.01  # x extent: smaller splats are cloned, larger split
    prune_scale3d: float = 0.1  # x extent: larger splats are pruned (after step reset_every)
    reset_every: int = 3000  # the opacity reset's period; oversized splats are pruned past it
    # cap every opacity at 2 x min_opacity every reset_every steps (3DGS). gsplat 1.5.3's
    # DefaultStrategy never runs its reset (`step % reset_every == 0 & step > 0` chains to
    # `0 > 0`); with it, test PSNR was higher on every seed and scene measured (docs/performance.md,
    # "Quality"; notes/performance-history.md, "ADC: the opacity reset by default")
    opacity_reset: bool = True
    absgrad: bool = False
    # data
    downscale: int | None = None
    eval_split: str = "interval:8"
    background: str | None = None  # default: white for Blender, black otherwise
    # run
    eval_every: int = 0
    save_every: int = 7000
    log_every: int = 100  # a plain progress line every N steps when stderr is not a terminal
    # submit each step before reading the previous one's results (spirula/train/trainer.py): the GPU
    # stays busy across steps; False: one waited-for step at a time (same results, bit for bit)
    pipeline_steps: bool = True
    # testing aid (the soak test, docs/testing.md): every N steps, NaN into one parameter of 1% of
    # the splats (means, quats, scales, opacities, sh in turn); 0: never
    inject_nan_every: int = 0

    def __post_init__(self):
        if self.strategy not in STRATEGY_DEFAULTS:
            raise ValueError("strategy must be 'mcmc' or 'adc', got %r" % self.strategy)
        for name, value in dataclasses.asdict(STRATEGY_DEFAULTS[self.strategy]).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.world_center not in ("cameras", "focus"):
            raise ValueError("world_center must be 'cameras' or 'focus', got %r" % self.world_center)
        if not 0 <= self.sh_degree <= 3:
            raise ValueError("sh_degree must be 0..3")
        if self.distortion_weight is None:
            self.distortion_weight = GEOMETRY_DISTORTION_WEIGHT if self.geometry else 0.0
        if self.distortion_from is None:
            # 2DGS starts at 3,000 of 30,000 steps: the splats first cover the views
            self.distortion_from = self.iterations // 10
        if self.distortion_weight < 0:
            raise ValueError("distortion_weight must be >= 0, got %r" % self.distortion_weight)
        if self.flatten_weight < 0:
            raise ValueError("flatten_weight must be >= 0, got %r" % self.flatten_weight)
        if self.normal_weight is None:
            self.normal_weight = GEOMETRY_NORMAL_WEIGHT if self.geometry else 0.0
        if self.normal_from is None:
            self.normal_from = self.iterations * 7 // 30
        if self.normal_weight < 0:
            raise ValueError("normal_weight must be >= 0, got %r" % self.normal_weight)

    @classmethod
    def demo(cls, **fields) -> TrainConfig:
        """The built-in demo scene's settings (``spirula train`` without a
        dataset), with ``fields`` on top: a recognizable scene within 5 minutes
        on lavapipe with 2 cores (400 steps: 88 s of training, ~22 dB; 1,500
        steps: 27.6 dB in ~7 min)."""
        # the demo's seed points are sparse (~6,000): full-size seeds cover the
        # views from the first step (27.5 dB after 1,500 steps, against 26.6
        # with MCMC's 0.1 meant for dense SfM clouds)
        return cls(**{**dict(iterations=400, cap_max=30_000, log_every=50, init_scale=1.0), **fields})

    def opacity_lr(self) -> float:
        # None: a config.json from before 0.05 became the default for both strategies
        return 0.05 if self.lr_opacities is None else self.lr_opacities

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
