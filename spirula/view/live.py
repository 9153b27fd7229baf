"""Watching training: the one hook the training loop calls between steps.

``spirula train`` hands ``train_run(..., live_hook=live_hook(viewers))`` its
:class:`LiveView` objects (the native window of spirula/view/window.py, the
web viewer of spirula/view/web.py, or both). ``train_run`` makes their
:class:`LiveHook` once its trainer exists (the hook is the
:class:`spirula.train.run.StepHook` the loop calls: training imports no
viewer). The hook owns the one :class:`~spirula.view.session.ViewRenderer`
every live view renders through (one set of rasterizer buffers, resized only
when a view asks for another size; one recorded sequence, replayed while only
the camera changes). After every optimization step the hook binds the
trainer's splats to it and calls ``on_step(step, state)`` on each view with
one :class:`TrainerState`; ``close()`` once when training ends (normally, on
Ctrl-C or on an error).

Rules for an implementation:

- ``on_step`` returns quickly: at most one frame of work (poll input, render
  once if the camera moved or new splats are due). Training waits for it.
  The hook also holds the views to a share of the wall time
  (``LiveViewConfig.live_view_budget``, 0.1; ``spirula train --set
  live_view_budget=0.2``): after a step whose views took time ``c``, it
  skips them until training has run about ``c / budget`` again, so a frame
  that costs more than a step (a 1280x720 frame is ~13 ms against a 2 ms step
  on a small scene on the H200) slows training by at most the budget
  instead of 7x, and the views' frame rate follows what the budget affords.
- Render through ``state.render`` (or ``state.view``) during the call only:
  the splats are the trainer's own buffers, which densification replaces.
- A viewer the user closed keeps answering ``on_step`` as a no-op; training
  goes on.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Protocol, runtime_checkable

import numpy as np

from spirula.train.spec import setting, validate


@dataclasses.dataclass
class LiveViewConfig:
    """The live views' own settings (not training's: never in a run's config.json)."""

    # issue #15: at most 10% slower with a viewer open (docs/viewer.md)
    live_view_budget: float = setting(
        0.1,
        "The share of wall time the live views (--viewer, --viewer-port) may take; 1: a frame every step",
        gt=0,
        le=1,
    )

    def __post_init__(self):
        validate(self)


@dataclasses.dataclass
class TrainerState:
    """What a live view sees after a training step.

    Attributes:
        step: steps done (1 after the first).
        iterations: the run's total steps.
        loss: this step's training loss (float).
        n_splats: splats now.
        sh_degree: the SH degree trained at this step.
        view: the :class:`~spirula.view.session.ViewRenderer` of the
            current splats, shared by every live view (dataset cameras in).
    """

    step: int
    iterations: int
    loss: float
    n_splats: int
    sh_degree: int
    view: object

    def render(self, viewmat, K, width: int, height: int) -> np.ndarray:
        """[H,W,3] float32 of the current splats (background composited) from
        a dataset camera: OpenCV world->camera ``viewmat`` [4,4], ``K`` [3,3]."""
        return self.view.render(viewmat, K, width, height)

    def render_rgb8(self, viewmat, K, width: int, height: int) -> np.ndarray:
        """[H,W,3] uint8 of :meth:`render` (``to_uint8`` of it, bit for bit),
        converted on the GPU (``pack_rgba8``): a quarter of the read back."""
        return self.view.render_rgb8(viewmat, K, width, height)


@runtime_checkable
class LiveView(Protocol):
    """A viewer attached to a training run (see the module docstring)."""

    def on_step(self, step: int, state: TrainerState) -> None: ...

    def close(self) -> None: ...


class LiveHook:
    """The training loop's side of the live views: ``viewers`` (LiveView
    objects) and the one renderer they share, on the training ``device``.

    ``world``: the trainer's :class:`~spirula.data.world.WorldTransform`;
    ``background`` [3] and ``max_alpha``: the run's. The renderer's
    rasterizer is made at the first frame a view asks for. ``budget``: the
    share of wall time the views may take (module docstring); ``clock``:
    seconds, monotonic (a test's fake).
    """

    def __init__(
        self,
        viewers,
        device,
        world,
        background,
        max_alpha: float,
        budget: float = LiveViewConfig.live_view_budget,
        clock=time.perf_counter,
    ):
        from spirula.view.session import ViewRenderer

        self.viewers = list(viewers)
        self.view = ViewRenderer.for_training(device, world, background, max_alpha)
        self.budget, self.clock = float(budget), clock
        self.next_call = None  # clock time before which the views are skipped
        self.calls = 0

    def on_step(self, step: int, iterations: int, loss: float, splats, sh_degree: int):
        """After step ``step``: the trainer's :class:`~spirula.render.rasterizer.Splats`
        (raw, float32 or compact) trained at ``sh_degree``. Skipped while the
        views are over their time budget."""
        t0 = self.clock()
        if self.next_call is not None and t0 < self.next_call:
            return
        self.calls += 1
        self.view.use_splats(splats, sh_degree)
        state = TrainerState(step, iterations, float(loss), splats.n, sh_degree, self.view)
        for viewer in self.viewers:
            viewer.on_step(step, state)
        t1 = self.clock()
        # spent (t1 - t0) of the budget: training runs (t1 - t0) / budget - (t1 - t0) before the next call
        self.next_call = t1 + (t1 - t0) * (1.0 / self.budget - 1.0)

    def close(self):
        """Close every view, then free the renderer."""
        try:
            for viewer in self.viewers:
                viewer.close()
        finally:
            self.view.close()


def live_hook(viewers, config: LiveViewConfig | None = None):
    """What ``train_run(..., live_hook=...)`` takes for ``viewers`` (LiveView
    objects) with their ``config`` (default :class:`LiveViewConfig`): the maker
    of their :class:`LiveHook`; None without viewers."""
    viewers = list(viewers)
    budget = (config or LiveViewConfig()).live_view_budget
    return functools.partial(LiveHook, viewers, budget=budget) if viewers else None
