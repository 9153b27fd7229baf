"""Watching training: the observer protocol the training loop calls between steps.

``spirula train`` hands ``train_run`` a list of :class:`LiveView` objects
(the native window here, the web viewer of spirula/view/web.py); after every
optimization step the loop calls ``on_step(step, trainer_state)`` on each, and
``close()`` once when training ends (normally, on Ctrl-C or on an error).

Rules for an implementation:

- ``on_step`` returns quickly: at most one frame of work (poll input, render
  once if the camera moved or new splats are due). Training waits for it.
- ``trainer_state.splats`` are the trainer's own device buffers, valid only
  during the call: render from them, never keep them (densification
  replaces them) and never write to them.
- A viewer the user closed keeps answering ``on_step`` as a no-op; training
  goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import numpy as np


@dataclasses.dataclass
class TrainerState:
    """What a live view may read after a training step.

    Attributes:
        step: steps done (1 after the first).
        iterations: the run's total steps.
        loss: this step's training loss (float).
        n_splats: splats now.
        splats: the trainer's :class:`~spirula.render.rasterizer.Splats` on
            ``device``: training coordinates, raw (log-scales, opacity
            logits), possibly compact SH (``splats.compact``).
        sh_degree: the SH degree trained at this step.
        world: the :class:`~spirula.train.world.WorldTransform` from dataset
            to training coordinates (``world.viewmats(vm)`` maps a dataset
            camera to one for ``splats``).
        device: the training :class:`~spirula.backends.base.Device`.
        background: [3] float32 colour behind the splats.
        max_alpha: the run's cap on one splat's alpha.
    """

    step: int
    iterations: int
    loss: float
    n_splats: int
    splats: object
    sh_degree: int
    world: object
    device: object
    background: np.ndarray
    max_alpha: float


@runtime_checkable
class LiveView(Protocol):
    """A viewer attached to a training run (see the module docstring)."""

    def on_step(self, step: int, trainer_state: TrainerState) -> None: ...

    def close(self) -> None: ...


def trainer_state(trainer, out: dict) -> TrainerState:
    """The :class:`TrainerState` of ``trainer`` after a step that returned ``out``
    (no GPU work: the splats stay on the device)."""
    from spirula.train.schedule import sh_degree_at

    return TrainerState(
        step=trainer.step,
        iterations=trainer.cfg.iterations,
        loss=float(out["loss"]),
        n_splats=trainer.model.n,
        splats=trainer.model.params,
        sh_degree=sh_degree_at(trainer.cfg, trainer.step),
        world=trainer.world,
        device=trainer.device,
        background=np.asarray(trainer.scene.background, np.float32),
        max_alpha=trainer.cfg.max_alpha,
    )
