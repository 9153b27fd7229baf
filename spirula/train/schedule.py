"""Learning-rate and SH-degree schedules (docs/design.md §9, as gsplat's
simple_trainer): the means' rate decays exponentially to 1% over the run,
scaled by the scene extent; the other rates are constant; one SH band more
every ``sh_every`` steps up to the configured degree."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class LearningRates:
    means: float
    quats: float
    scales: float
    opacities: float
    sh0: float
    shN: float


def learning_rates(cfg, step: int, extent: float) -> LearningRates:
    """Rates for 0-based ``step`` of a run of ``cfg.iterations`` steps."""
    frac = min(max(step / max(cfg.iterations, 1), 0.0), 1.0)
    lr0 = cfg.lr_means * extent
    lr1 = cfg.lr_means_final * extent
    return LearningRates(
        means=lr0 * (lr1 / lr0) ** frac,
        quats=cfg.lr_quats,
        scales=cfg.lr_scales,
        opacities=cfg.lr_opacities,
        sh0=cfg.lr_sh0,
        shN=cfg.lr_sh0 / cfg.lr_shN_divisor,
    )


def sh_degree_at(cfg, step: int) -> int:
    """Active SH degree at 0-based ``step``."""
    return min(step // cfg.sh_every, cfg.sh_degree)
