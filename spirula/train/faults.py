"""Testing aids: faults put into a run on purpose, to see it survive them (the
soak test, benchmarks/soak.py and tests/test_soak.py; docs/testing.md).

They are no training setting: a run's config.json never holds them and
``--resume`` does not bring them back. ``spirula train --set
inject_nan_every=N`` (the soak test's way in, through a subprocess) or
``Trainer(..., faults=FaultInjection(inject_nan_every=N))`` turn them on.
"""

from __future__ import annotations

import dataclasses

from spirula.train.spec import setting, validate


@dataclasses.dataclass
class FaultInjection:
    """The hook the trainer calls after each step (:meth:`after_step`); it
    submits no step ahead of one after which :meth:`due` (the hook touches the
    splats on the host's side)."""

    inject_nan_every: int = setting(
        0,
        "Testing aid (the soak test, docs/testing.md): every N steps, NaN into one parameter of 1% of the splats"
        " (means, quats, scales, opacities, sh in turn); 0: never",
        ge=0,
    )

    def __post_init__(self):
        validate(self)

    def due(self, step: int) -> bool:
        """Whether a fault goes in after ``step`` steps."""
        return bool(self.inject_nan_every) and step % self.inject_nan_every == 0

    def after_step(self, trainer):
        """After a step: NaN into 1% of the splats when due (:meth:`Trainer.inject_nan`)."""
        if self.due(trainer.step):
            trainer.inject_nan(self.inject_nan_every)
