"""Density control on the GPU: MCMC (default) and adaptive density control.

Policy lives here (when to refine, how many splats); the work is done by the
``densify_*`` kernels, recorded into one sequence per refinement.

- :class:`MCMC` (Kheradmand et al. 2024, as gsplat's ``MCMCStrategy``): a
  fixed budget ``cap_max``. Every ``refine_every`` steps in
  (refine_start, refine_stop), dead splats (opacity <= min_opacity) move onto
  live ones drawn in proportion to opacity, then the count grows 5% (up to the
  budget) by drawing more; drawn splats share their opacity and shrink so
  the image is unchanged. Position noise is applied every step by ``fpbo``.
- :class:`ADC` (Kerbl et al. 2023, as gsplat's ``DefaultStrategy``): clone
  small and split large splats with a high screen-space gradient, prune
  transparent and oversized ones; with ``opacity_reset`` (on by default, as
  3DGS; gsplat 1.5.3's never runs), reset opacities every ``reset_every`` steps.

Data flows down, as in gsplat's ``strategy.step_post_backward(params,
optimizers, state, step, info)``: after each step the trainer hands
:meth:`Strategy.step_post_backward` the splats and their Adam moments
(``model``), the screen-space statistics fpbo accumulates (``stats``), the
step, the scene extent and the device; the strategy returns the
:class:`Changes` it made (or None) and the trainer takes them over. A
strategy holds its configuration, its own state (MCMC's relocation history)
and scratch buffers, never the trainer.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from spirula.render.scan import PrefixSum
from spirula.runtime.sequence import Threads


def make(cfg):
    """The strategy of TrainConfig ``cfg``: its own settings (``cfg.strategy``,
    :class:`~spirula.train.config.MCMC` or :class:`~spirula.train.config.ADC`)
    and the run's seed."""
    return STRATEGIES[cfg.strategy.name](cfg.strategy, cfg.seed)


@dataclasses.dataclass
class Changes:
    """What a strategy changed.

    ``model``: the splats afterwards, the :class:`SplatModel` passed in
    (ADC replaces its buffers group by group);
    ``n_before``, ``n_after``: the live count; ``relocated``: dead splats
    MCMC moved; ``stats_reset``: the statistics were resized to
    ``model.n`` and zeroed; ``opacities_reset``: ADC's opacity reset ran.
    """

    model: object
    n_before: int
    n_after: int
    relocated: int = 0
    stats_reset: bool = False
    opacities_reset: bool = False


def _seed(seed: int, step: int, salt: int) -> int:
    return (seed * 0x9E3779B1 + step * 0x85EBCA77 + salt * 0xC2B2AE3D) & 0xFFFFFFFF


def _scan_total(dev, scan, n: int) -> int:
    """The grand total of a scan of ``n`` values (one word read back)."""
    return int(dev.readback(scan.scratch, shape=(1,), offset=4 * scan.total_offset(n))[0])


class Strategy:
    """``config``: the strategy's own settings (:class:`~spirula.train.config.MCMC`
    or :class:`~spirula.train.config.ADC`: refine_*, min_opacity and the rest);
    ``seed``: the run's (the refinements' random draws)."""

    def __init__(self, config, seed: int = 0):
        self.config, self.seed = config, seed

    # the most splats the run may hold (device limits, memory budget), set by the trainer
    limit = 1 << 62
    limit_reason = None

    def capacity(self, n: int) -> int:
        """Splats to allocate room for when training starts from ``n``: ``n``
        (buffers grow with the live count, docs/design.md, memory)."""
        return n

    def row_bytes(self) -> dict:
        """Bytes per splat of the strategy's own per-splat buffers, by name."""
        return {}

    @staticmethod
    def say(msg: str):
        """A one-line message for the user (the trainer's log)."""

    def refine_due(self, step: int) -> bool:
        c = self.config
        return c.refine_start < step < c.refine_stop and step % c.refine_every == 0

    def due(self, step: int) -> bool:
        """Whether :meth:`step_post_backward` after step ``step`` may change
        the splats (the trainer submits no step ahead of it then)."""
        return self.refine_due(step)

    def step_post_backward(self, model, stats, step: int, extent: float, device):
        """After step ``step`` (0-based, as gsplat): refine (and reset) when due.

        ``model``: :class:`~spirula.train.model.SplatModel`; ``stats``:
        (grad2d_sum [N] f32, vis_count [N] u32) buffers; ``extent``: the scene
        extent in training coordinates. Returns :class:`Changes`, or None when
        nothing was due.
        """
        raise NotImplementedError

    def free(self, device):
        """Return the strategy's scratch buffers to the pool."""

    def state_dict(self, model, stats, device) -> dict:
        """The strategy's state for a checkpoint, as numpy arrays."""
        return {}

    def load_state_dict(self, state: dict, stats, device):
        pass

    def metrics(self) -> dict:
        """What metrics.json reports about densification."""
        return dict(relocated=None, relocated_by_step=None)


class MCMCStrategy(Strategy):
    """Relocation and growth within ``cap_max`` splats. ``relocated``: dead
    splats moved by the last refinement; ``relocated_total``: by all;
    ``history``: [step, relocated] of every refinement (kept in checkpoints),
    so that a run whose relocation stalled shows it in metrics.json."""

    relocated = 0
    relocated_total = 0

    def __init__(self, config, seed: int = 0):
        super().__init__(config, seed)
        self.history = []
        self.cap = config.cap_max  # the budget; the trainer lowers it to what the device and memory allow

    def free(self, device):
        bufs = getattr(self, "_bufs", None)
        if bufs is not None:
            for buf in list(bufs.values()) + [self._scan_u.scratch, self._scan_f.scratch]:
                device.pool.free(buf)
            self._bufs = None

    def row_bytes(self) -> dict:
        return {"mcmc.weights": 4, "mcmc.dead": 4, "mcmc.sample_src": 4, "mcmc.copies": 4}

    def state_dict(self, model, stats, device) -> dict:
        return dict(history=np.asarray(self.history, np.int64).reshape(-1, 2))

    def load_state_dict(self, state: dict, stats, device):
        self.history = [[int(s), int(c)] for s, c in np.asarray(state.get("history", ()), np.int64).reshape(-1, 2)]
        self.relocated_total = sum(c for _, c in self.history)
        self.relocated = self.history[-1][1] if self.history else 0

    def metrics(self) -> dict:
        return dict(relocated=self.relocated_total, relocated_by_step=self.history)

    def step_post_backward(self, model, stats, step: int, extent: float, device):
        if self.refine_due(step):
            return self.refine(model, step, device)
        return None

    def _scratch(self, model, dev):
        """Scratch for ``model.n`` splats with room for ``model.capacity``."""
        pool, cap, n = dev.pool, model.capacity, max(model.n, 1)
        if getattr(self, "_bufs", None) is None:
            self._bufs = dict(
                weights=pool.alloc("mcmc.weights", (n,), np.float32, "splat", scratch=True, capacity=4 * cap),
                dead=pool.alloc("mcmc.dead", (n,), np.uint32, "splat", scratch=True, capacity=4 * cap),
                sample_src=pool.alloc("mcmc.sample_src", (n,), np.uint32, "splat", scratch=True, capacity=4 * cap),
                copies=pool.alloc("mcmc.copies", (n,), np.uint32, "splat", scratch=True, capacity=4 * cap, zero=True),
                counts=pool.alloc("mcmc.counts", (4,), np.uint32, "other", zero=True),
            )
            self._scan_u = PrefixSum(dev, cap, name="mcmc.scan_u")
            self._scan_f = PrefixSum(dev, cap, name="mcmc.scan_f", dtype=np.float32)
        for key in ("weights", "dead", "sample_src", "copies"):
            buf = self._bufs[key]
            if buf.capacity < 4 * cap:
                pool.reserve(buf, 4 * cap, keep=False)
                if key == "copies":
                    dev.fill(buf, 0)
            pool.resize(buf, (n,), keep=False)
        self._scan_u.reserve(cap)
        self._scan_f.reserve(cap)
        return self._bufs

    def refine(self, model, step: int, device) -> Changes:
        """Relocate dead splats, then grow by 5% (up to the cap). Room for the
        grown count is reserved before the refinement is recorded (GROWTH x,
        within the cap): nothing reallocates inside the recording."""
        from spirula.runtime.buffers import GROWTH

        cfg, dev = self.config, device
        n = model.n
        cap = max(min(cfg.cap_max, self.cap), n)
        n_add = max(0, min(cap, int(1.05 * n)) - n)
        if n + n_add > model.capacity:
            model.reserve(min(int(np.ceil((n + n_add) * GROWTH)), cap))
        b = self._scratch(model, dev)
        p = model.params
        moments = model.moment_bindings()
        groups = Threads(n)
        dev.upload(b["counts"], np.array([0, n_add, 0, 0], np.uint32))
        rec = dev.recorder("mcmc.refine")
        self._record_draw(
            rec, p, n, model.sh_coeffs, alive_only=True, count_offset=None, seed=_seed(self.seed, step, 1), stream=0
        )
        rec.dispatch(
            "densify_mcmc_relocate",
            groups,
            dict(opacities=p.opacities, scales=p.scales, copies=b["copies"], **moments),
            push=dict(n=n, min_opacity=cfg.min_opacity),
            spec=dict(RESET_SOURCE=1, SH_COEFFS=model.sh_coeffs, COMPACT_ROWS=int(model.compact)),
        )
        rec.dispatch(
            "densify_mcmc_copy",
            groups,
            dict(
                **p.bindings(),
                **moments,
                dead_offsets=b["dead"],
                totals=self._scan_u.scratch,
                sample_src=b["sample_src"],
                weight_totals=self._scan_f.scratch,
            ),
            push=dict(
                n=n,
                count=0,
                dead_total_offset=self._scan_u.total_offset(n),
                weight_total_offset=self._scan_f.total_offset(n),
            ),
            spec=dict(
                APPEND=0,
                SH_COEFFS=model.sh_coeffs,
                RESET_MOMENTS=int(not cfg.mcmc_keep_moments),
                COMPACT_ROWS=int(model.compact),
            ),
        )
        if n_add > 0:
            model.set_count(n + n_add)  # within the room reserved above: no reallocation
            self._record_draw(
                rec,
                p,
                n,
                model.sh_coeffs,
                alive_only=False,
                count_offset=1,
                seed=_seed(self.seed, step, 2),
                stream=2,
                count_max=n_add,
            )
            rec.dispatch(
                "densify_mcmc_relocate",
                groups,
                dict(opacities=p.opacities, scales=p.scales, copies=b["copies"], **moments),
                push=dict(n=n, min_opacity=cfg.min_opacity),
                spec=dict(RESET_SOURCE=0, SH_COEFFS=model.sh_coeffs, COMPACT_ROWS=int(model.compact)),
            )
            rec.dispatch(
                "densify_mcmc_copy",
                Threads(n_add),
                dict(
                    **p.bindings(),
                    **moments,
                    dead_offsets=b["dead"],
                    totals=self._scan_u.scratch,
                    sample_src=b["sample_src"],
                    weight_totals=self._scan_f.scratch,
                ),
                push=dict(n=n, count=n_add, dead_total_offset=0, weight_total_offset=self._scan_f.total_offset(n)),
                spec=dict(APPEND=1, SH_COEFFS=model.sh_coeffs, COMPACT_ROWS=int(model.compact)),
            )
        rec.finish().run()
        # one word read back every refine_every steps: how many were relocated
        dead = dev.readback(self._scan_u.scratch, shape=(1,), offset=4 * self._scan_u.total_offset(n))
        self.relocated = int(dead[0])
        self.relocated_total += self.relocated
        self.history.append([step, self.relocated])
        return Changes(model, n_before=n, n_after=model.n, relocated=self.relocated)

    def _record_draw(self, rec, p, n, sh_coeffs, alive_only, count_offset, seed, stream, count_max=None):
        """Weights, their prefix sum, and the draws (count: the dead count when
        count_offset is None, else counts[count_offset])."""
        b = self._bufs
        rec.dispatch(
            "densify_mcmc_weights",
            Threads(n),
            dict(**p.bindings(), weights=b["weights"], dead=b["dead"]),
            push=dict(n=n, min_opacity=self.config.min_opacity),
            spec=dict(ALIVE_ONLY=int(alive_only), SH_COEFFS=sh_coeffs, COMPACT_ROWS=int(p.compact)),
        )
        if count_offset is None:
            self._scan_u.record(rec, b["dead"], n)
            counts, offset, count_max = self._scan_u.scratch, self._scan_u.total_offset(n), n
        else:
            counts, offset = b["counts"], count_offset
        self._scan_f.record(rec, b["weights"], n)
        rec.dispatch(
            "densify_mcmc_sample",
            Threads(count_max),
            dict(
                cdf=b["weights"],
                totals=self._scan_f.scratch,
                counts=counts,
                sample_src=b["sample_src"],
                copies=b["copies"],
            ),
            push=dict(
                n=n,
                count_max=count_max,
                count_offset=offset,
                total_offset=self._scan_f.total_offset(n),
                seed=seed,
                stream=stream,
            ),
        )


class ADCStrategy(Strategy):
    """Clone, split, prune and opacity reset (gsplat DefaultStrategy defaults).
    Growth stops at ``limit`` splats (the device limits and memory budget):
    past it a refinement only prunes."""

    stopped = False  # growth stopped at the limit (said once)

    def reset_due(self, step: int) -> bool:
        """Whether the opacity reset runs after step ``step`` (``opacity_reset`` on)."""
        c = self.config
        return c.opacity_reset and step % c.reset_every == 0 and 0 < step < c.refine_stop

    def due(self, step: int) -> bool:
        return self.refine_due(step) or self.reset_due(step)

    def step_post_backward(self, model, stats, step: int, extent: float, device):
        changes = None
        if self.refine_due(step):
            changes = self.refine(model, stats, step, extent, device)
            model = changes.model
        if self.reset_due(step):
            reset = self.reset_opacity(model, device)
            if changes is None:
                changes = reset
            else:
                changes.opacities_reset = True
        return changes

    def _classify(self, rec, model, stats, step, extent, scratch, grow: bool):
        cfg, p = self.config, model.params
        actions, counts, offsets, scan = scratch
        n = model.n
        rec.dispatch(
            "densify_adc_classify",
            Threads(n),
            dict(**p.bindings(), grad2d_sum=stats[0], vis_count=stats[1], actions=actions, out_counts=counts),
            push=dict(
                n=n,
                grow_grad2d=cfg.grow_grad2d,
                grow_scale3d=cfg.grow_scale3d * extent,
                prune_scale3d=cfg.prune_scale3d * extent,
                min_opacity=cfg.min_opacity,
                prune_big=int(step > cfg.reset_every),
                grow=int(grow),
            ),
            spec=dict(SH_COEFFS=model.sh_coeffs, COMPACT_ROWS=int(model.compact)),
        )
        rec.copy(counts, offsets, nbytes=4 * max(n, 1))
        scan.record(rec, offsets, n)
        rec.finish().run()
        return _scan_total(model.device, scan, n)

    def refine(self, model, stats, step: int, extent: float, device) -> Changes:
        """Clone, split and prune into new buffers, one group (parameters, first,
        second moments) at a time, each old group freed after its copy: the
        pool never holds two whole models. The statistics restart at 0."""
        dev = device
        n = model.n
        pool = dev.pool
        actions = pool.alloc("adc.actions", (max(n, 1),), np.uint32, "splat", scratch=True)
        counts = pool.alloc("adc.counts", (max(n, 1),), np.uint32, "splat", scratch=True)
        offsets = pool.alloc("adc.offsets", (max(n, 1),), np.uint32, "splat", scratch=True)
        scan = PrefixSum(dev, max(n, 1), name="adc.scan")
        scratch = (actions, counts, offsets, scan)
        new_n = self._classify(dev.recorder("adc.classify"), model, stats, step, extent, scratch, grow=True)
        if new_n > max(self.limit, n):
            # past the limit: this refinement prunes only
            new_n = self._classify(dev.recorder("adc.classify"), model, stats, step, extent, scratch, grow=False)
            if not self.stopped:
                self.stopped = True
                self.say(
                    "step %d: ADC stops growing at %s splats (%s); pruning goes on"
                    % (step, f"{n:,}", self.limit_reason or "the splat limit")
                )
        from spirula.train.model import GROUPS

        cap = max(new_n, 1)
        for group in range(len(GROUPS)):
            src = model.groups()[group]
            dst = model.alloc_group(group, new_n, cap)
            rec = dev.recorder("adc.write")
            rec.dispatch(
                "densify_adc_write",
                Threads(n),
                dict(
                    **src.bindings("src_"), **dst.bindings("dst_"), actions=actions, offsets=offsets, out_counts=counts
                ),
                push=dict(n=n, seed=_seed(self.seed, step, 3)),
                spec=dict(GROUP=group, SH_COEFFS=model.sh_coeffs, COMPACT_ROWS=int(model.compact)),
            )
            rec.finish().run()
            src.free(dev)
            setattr(model, GROUPS[group][0], dst)
        model.n, model.capacity = new_n, cap
        for b in (actions, counts, offsets, scan.scratch):
            pool.free(b)
        for stat in stats:
            item = stat.dtype.itemsize
            pool.resize(stat, (min(stat.shape[0], cap),), keep=False)
            if stat.capacity < item * cap or stat.capacity > 1.3 * item * cap:
                pool.reserve(stat, item * cap, keep=False)
            pool.resize(stat, (new_n,), keep=False)
            dev.fill(stat, 0)
        return Changes(model, n_before=n, n_after=new_n, stats_reset=True)

    def reset_opacity(self, model, device) -> Changes:
        """Cap every opacity at twice min_opacity; their Adam moments restart at 0."""
        cfg, dev = self.config, device
        o = 2.0 * cfg.min_opacity
        rec = dev.recorder("adc.reset")
        rec.dispatch(
            "densify_adc_reset",
            Threads(model.n),
            model.bindings("opacities"),
            push=dict(n=model.n, ceiling_logit=float(np.log(o / (1 - o)))),
        )
        rec.finish().run()
        return Changes(model, n_before=model.n, n_after=model.n, opacities_reset=True)

    def state_dict(self, model, stats, device) -> dict:
        n = model.n
        return dict(grad2d_sum=device.readback(stats[0], shape=(n,)), vis_count=device.readback(stats[1], shape=(n,)))

    def load_state_dict(self, state: dict, stats, device):
        if "grad2d_sum" in state:
            n = len(state["grad2d_sum"])
            for stat, key in zip(stats, ("grad2d_sum", "vis_count")):
                device.pool.resize(stat, (max(n, 1),), keep=False)
                if n:
                    device.upload(stat, np.asarray(state[key]))


STRATEGIES = {"mcmc": MCMCStrategy, "adc": ADCStrategy}  # by the name of their settings' dataclass
