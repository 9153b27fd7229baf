"""Appearance correction on the GPU (docs/design.md §2.8): the recording of ``ppisp_fwd``/
``ppisp_bwd``, ``bilagrid_fwd``/``bilagrid_bwd``/``bilagrid_tv`` and ``adam_small``
(reference: :mod:`spirula.reference.appearance`), and :class:`Appearance`, the models of
one training run (``TrainConfig.appearance``): their parameters, Adam moments and scratch
on the GPU, recorded into the training step (spirula/train/step.py) between
``rasterize_fwd`` and ``loss_fwd`` and between ``loss_bwd`` and ``rasterize_bwd``, and
optimised there by ``adam_small``. The host writes :data:`APP_WORDS` words per step (the
view's frame, the models' and the controller's Adam scalars) beside the step's StepParams;
nothing is read back. With PPISP, the run's last phase trains PPISP's controller instead
(spirula/train/controller.py; docs/design.md §2.8): :meth:`Appearance.controller_on`.
"""

from __future__ import annotations

import math

import numpy as np

from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import Threads, grid_stride_groups
from spirula.train.controller import CONTROLLER_LR, CTRL_SIZE, Controller, record_ctrl_backward, record_ctrl_forward

PPISP_ROWS = 37  # shaders/include/appearance.glsl PPISP_ROWS
PIXELS_PER_THREAD = 32  # ppisp_bwd's phase 0: about this many pixels per thread
MAX_THREADS = 65536  # ... and at most this many threads (the partials: 37 x 4 x this bytes)
REDUCE = 256  # values one thread of phase 1 sums


def ppisp_size(n_frames: int, n_cameras: int) -> int:
    """Floats of the PPISP parameter buffer: exposure [F], colour [F,8], vignetting
    [C,3,5], CRF [C,3,4]."""
    return 9 * n_frames + 27 * n_cameras


def ppisp_threads(width: int, height: int) -> int:
    """Threads of ppisp_bwd's phase 0 for one W x H view (the partials' row stride)."""
    return max(1, min(MAX_THREADS, -(-width * height // PIXELS_PER_THREAD)))


def record_ppisp_fwd(rec, step: Buffer, image_cameras: Buffer, ppisp: Buffer, rgb_in: Buffer, rgb_out: Buffer,
                     width: int, height: int, view: int, n_frames: int, n_cameras: int):  # fmt: skip
    """Record PPISP on view ``view`` of ``rgb_in`` [V,H,W,3] into ``rgb_out``. ``step`` holds
    StepParams (its image_index[view] is the frame), ``image_cameras`` [F] u32 the camera of
    each frame."""
    kernel = rec.device.kernel("ppisp_fwd")
    push = dict(width=width, height=height, view=view, n_frames=n_frames, n_cameras=n_cameras)
    bufs = dict(step=step, image_cameras=image_cameras, ppisp=ppisp, rgb_in=rgb_in, rgb_out=rgb_out)
    rec.dispatch(kernel, grid_stride_groups(kernel, width * height), bufs, push=push)
    return rec


def record_ppisp_bwd(rec, step: Buffer, image_cameras: Buffer, ppisp: Buffer, rgb_in: Buffer, grad_out: Buffer,
                     grad_rgb: Buffer, partials: Buffer, grads: Buffer, width: int, height: int, view: int,
                     n_frames: int, n_cameras: int, reg: float = 0.0):  # fmt: skip
    """Record ppisp_bwd's phases: ``grad_rgb`` of view ``view`` and the parameters' gradients
    added to ``grads`` (GRAD_T, as the device's kernels declare it). ``partials`` holds at
    least 37 x :func:`ppisp_threads` floats. ``reg``: the weight of PPISP's regularisers
    (1: nv-tlabs/ppisp's; 0: none), whose gradients phase 2 adds too."""
    threads = ppisp_threads(width, height)
    bufs = dict(
        step=step, image_cameras=image_cameras, ppisp=ppisp, rgb_in=rgb_in, grad_out=grad_out,
        grad_rgb=grad_rgb, partials=partials, grads=grads,
    )  # fmt: skip
    push = dict(width=width, height=height, view=view, n_frames=n_frames, n_cameras=n_cameras, threads=threads,
                reg=float(reg))  # fmt: skip
    rec.dispatch("ppisp_bwd", Threads(threads), bufs, push=dict(push, n_in=0, n_out=1), spec=dict(PHASE=0))
    n = threads
    while n > 1:
        n_out = -(-n // REDUCE)
        rec.dispatch(
            "ppisp_bwd", Threads(PPISP_ROWS * n_out), bufs, push=dict(push, n_in=n, n_out=n_out), spec=dict(PHASE=1)
        )
        n = n_out
    rec.dispatch("ppisp_bwd", Threads(1), bufs, push=dict(push, n_in=1, n_out=1), spec=dict(PHASE=2))
    return rec


def _grid_push(width, height, view, n_grids, grid_shape):
    gl, gh, gw = grid_shape
    return dict(width=width, height=height, view=view, n_grids=n_grids, grid_w=gw, grid_h=gh, grid_l=gl)


def record_bilagrid_fwd(rec, step: Buffer, grids: Buffer, rgb_in: Buffer, rgb_out: Buffer, width: int, height: int,
                        view: int, n_grids: int, grid_shape=(8, 16, 16)):  # fmt: skip
    """Record the bilateral grid on view ``view``: ``grids`` [F, GL, GH, GW, 12],
    ``grid_shape`` (GL, GH, GW), gsplat's default (8, 16, 16)."""
    kernel = rec.device.kernel("bilagrid_fwd")
    bufs = dict(step=step, grids=grids, rgb_in=rgb_in, rgb_out=rgb_out)
    push = _grid_push(width, height, view, n_grids, grid_shape)
    rec.dispatch(kernel, grid_stride_groups(kernel, width * height), bufs, push=push)
    return rec


def record_bilagrid_bwd(rec, step: Buffer, grids: Buffer, rgb_in: Buffer, grad_out: Buffer, grad_rgb: Buffer,
                        grad_grids: Buffer, width: int, height: int, view: int, n_grids: int,
                        grid_shape=(8, 16, 16)):  # fmt: skip
    """Record the grid's backward: ``grad_rgb`` of view ``view``, ``grad_grids`` added to."""
    kernel = rec.device.kernel("bilagrid_bwd")
    bufs = dict(step=step, grids=grids, rgb_in=rgb_in, grad_out=grad_out, grad_rgb=grad_rgb, grad_grids=grad_grids)
    push = _grid_push(width, height, view, n_grids, grid_shape)
    rec.dispatch(kernel, grid_stride_groups(kernel, width * height), bufs, push=push)
    return rec


def record_bilagrid_tv(rec, grids: Buffer, grad_grids: Buffer, tv_terms: Buffer, n_grids: int, weight: float,
                       grid_shape=(8, 16, 16)):  # fmt: skip
    """Record the total variation: each element's terms into ``tv_terms`` (their sum is
    the value) and ``weight`` x its gradient added to ``grad_grids``."""
    gl, gh, gw = grid_shape
    kernel = rec.device.kernel("bilagrid_tv")
    push = dict(n_grids=n_grids, grid_w=gw, grid_h=gh, grid_l=gl, weight=float(weight))
    n = n_grids * gl * gh * gw * 12
    rec.dispatch(kernel, grid_stride_groups(kernel, n), dict(grids=grids, grad_grids=grad_grids, tv_terms=tv_terms),
                 push=push)  # fmt: skip
    return rec


def record_adam_small(rec, params: Buffer, grads: Buffer, m: Buffer, v: Buffer, hyper: Buffer, count: int,
                      at: int, guard: tuple):  # fmt: skip
    """Record one Adam step of ``params[:count]``; ``hyper[at:at + 6]`` = lr, beta1, beta2,
    1 - beta1^step, 1 - beta2^step, eps. ``grads`` is zeroed after use. ``guard``: the
    training step's (num_isects, count_offset, isect_capacity, StepParams buffer), as
    fpbo's: a step fpbo skips (its intersections overflowed, or the step before it did)
    leaves the parameters and moments as they were, its gradients zeroed."""
    num_isects, count_offset, isect_capacity, step = guard
    rec.dispatch(
        "adam_small", Threads(count),
        dict(params=params, grads=grads, m=m, v=v, hyper=hyper, num_isects=num_isects, step=step),
        push=dict(count=count, at=at, count_offset=count_offset, isect_capacity=isect_capacity),
    )  # fmt: skip
    return rec


def adam_hyper(lr: float, step: int, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-15) -> list:
    """The six scalars adam_small reads for Adam step ``step`` (1-based)."""
    return [lr, beta1, beta2, 1.0 - beta1**step, 1.0 - beta2**step, eps]


# ---- the models of a training run -------------------------------------------------------

MODES = ("none", "ppisp", "bilagrid", "both")
# host_in words of the appearance per step (after StepParams and the camera): words 0-11 as
# StepParams' head (word 4 + view: the view's frame, its index in the training list, which
# the kernels read as STEP_IMAGE_INDEX_WORD), then Adam's six scalars for PPISP, for the grids
# and for PPISP's controller
APP_WORDS = 30
HYPER_PPISP, HYPER_BILAGRID, HYPER_CTRL = 12, 18, 24
# nv-tlabs/ppisp PPISPConfig: the controller trains from 0.8 of the run on
CONTROLLER_ACTIVATION_RATIO = 0.8
# nv-tlabs/ppisp PPISPConfig: Adam lr 2e-3 (eps 1e-15, betas 0.9/0.999); LinearLR from 0.01 x
# over 500 steps, then ExponentialLR to 0.01 x over 30,000 steps: fractions of its 30,000-step
# runs, which Spirula applies to the run's length (the same at 30,000 steps; a 300-step run
# warms up over 5)
REFERENCE_STEPS = 30_000
PPISP_LR, PPISP_WARMUP, PPISP_DECAY_STEPS = 2e-3, 500, 30_000
# gsplat simple_trainer: the grids' Adam lr 2e-3 x sqrt(batch 1), eps 1e-15; LinearLR from 0.01 x
# over 1,000 steps, then ExponentialLR to 0.01 x over the run (30,000 steps); total variation
# weight 10
BILAGRID_LR, BILAGRID_WARMUP, BILAGRID_TV = 2e-3, 1000, 10.0
GRID_SHAPE = (8, 16, 16)  # (GL, GH, GW), gsplat's
START_FACTOR = FINAL_FACTOR = 0.01


def warmup_exp_lr(k: int, base: float, warmup: int, decay_steps: int) -> float:
    """torch's SequentialLR([LinearLR(start 0.01, warmup), ExponentialLR(0.01 ** (1 /
    decay_steps))], milestones=[warmup]) after ``k`` scheduler steps (0-based Adam step)."""
    if k < warmup:
        return base * (START_FACTOR + (1.0 - START_FACTOR) * k / warmup)
    return base * FINAL_FACTOR ** ((k - warmup) / max(1, decay_steps))


def _scaled(steps: int, iterations: int) -> int:
    return max(1, round(steps * iterations / REFERENCE_STEPS))


def ppisp_lr(k: int, iterations: int, base: float = PPISP_LR) -> float:
    """PPISP's learning rate at Adam step ``k`` (0-based) of a run of ``iterations`` steps."""
    return warmup_exp_lr(k, base, _scaled(PPISP_WARMUP, iterations), _scaled(PPISP_DECAY_STEPS, iterations))


def bilagrid_lr(k: int, iterations: int, base: float = BILAGRID_LR) -> float:
    """The grids' learning rate at Adam step ``k`` (0-based) of a run of ``iterations`` steps."""
    return warmup_exp_lr(k, base, _scaled(BILAGRID_WARMUP, iterations), iterations)


def _softplus_inv(x: float) -> float:
    return math.log(math.expm1(x))


def ppisp_initial(n_frames: int, n_cameras: int) -> np.ndarray:
    """PPISP's starting parameters (the identity): exposure 0, colour 0, vignetting 0, each
    channel's CRF toe = shoulder = gamma = 1 and centre 0.5 (nv-tlabs/ppisp's init)."""
    out = np.zeros(ppisp_size(n_frames, n_cameras), np.float32)
    crf = out[9 * n_frames + 15 * n_cameras :].reshape(n_cameras, 3, 4)
    crf[:] = (_softplus_inv(0.7), _softplus_inv(0.7), _softplus_inv(0.9), 0.0)
    return out


def bilagrid_initial(n_frames: int, grid_shape=GRID_SHAPE) -> np.ndarray:
    """Identity grids [F, GL, GH, GW, 12]: every node's 3x4 matrix [I | 0]."""
    out = np.zeros((n_frames, *grid_shape, 12), np.float32)
    out[..., [0, 5, 10]] = 1.0
    return out


def controller_start(iterations: int, ratio: float = CONTROLLER_ACTIVATION_RATIO) -> int:
    """The first step (0-based) of the controller's phase: int(ratio x iterations), as
    nv-tlabs/ppisp's activation step (25,000 of gsplat's 30,000 at its trainer's 0.8333)."""
    return int(ratio * iterations)


def camera_of_frames(frames) -> list:
    """The PPISP camera of each frame: one camera per image size, in order of first use
    (the datasets name no camera per image; a video or one phone's photos are one)."""
    sizes = {}
    return [sizes.setdefault((f.width, f.height), len(sizes)) for f in frames]


class Appearance:
    """The appearance models of one run (``mode``: ppisp, bilagrid or both) over the
    training ``frames`` (the training list: frame k is train image k), and their buffers
    (pool category ``appearance``): the parameters, Adam's gradients and moments, PPISP's
    partial sums, per training image size the corrected image and its gradient, and the
    ``words`` the step copies from host_in (:meth:`host_words`). ``exposures``: [F] stops
    PPISP's per-image exposures start from (default 0, the identity)."""

    def __init__(self, device, mode: str, frames, iterations: int, lr: float = PPISP_LR, grid_lr: float | None = None,
                 controller: bool = False, controller_ratio: float = CONTROLLER_ACTIVATION_RATIO,
                 controller_lr: float = CONTROLLER_LR, seed: int = 0, exposures=None):  # fmt: skip
        if mode not in MODES or mode == "none":
            raise ValueError("appearance %r: expected one of ppisp, bilagrid, both" % (mode,))
        self.device, self.mode, self.iterations, self.lr = device, mode, iterations, lr
        self.controller_lr = controller_lr
        self.grid_lr = lr if grid_lr is None else grid_lr
        self.ppisp_on = mode in ("ppisp", "both")
        self.bilagrid_on = mode in ("bilagrid", "both")
        self.n_frames = len(frames)
        self.cameras = camera_of_frames(frames)
        self.n_cameras = max(self.cameras) + 1 if self.cameras else 0
        self.names = [f.name for f in frames]
        pool = device.pool
        self._bufs = []

        def alloc(name, shape, dtype=np.float32, zero=True):
            buf = pool.alloc("appearance." + name, shape, dtype, "appearance", zero=zero)
            self._bufs.append(buf)
            return buf

        self.words = alloc("words", (APP_WORDS,), np.uint32)
        # PPISP's controller: trained from step controller_start (0-based) on, with PPISP only
        self.controller = None
        self.controller_start = controller_start(iterations, controller_ratio)
        self.size = {}  # (W, H) -> dict of that size's corrected images and gradients
        if self.ppisp_on:
            n = ppisp_size(self.n_frames, self.n_cameras)
            self.image_cameras = alloc("image_cameras", (self.n_frames,), np.uint32, zero=False)
            device.upload(self.image_cameras, np.asarray(self.cameras, np.uint32))
            self.ppisp = alloc("ppisp", (n,), zero=False)
            start = ppisp_initial(self.n_frames, self.n_cameras)
            if exposures is not None:  # [F] stops, e.g. from EXIF (spirula.data.exif); exposure leads
                start[: self.n_frames] = np.asarray(exposures, np.float32)
            device.upload(self.ppisp, start)
            self.ppisp_grads, self.ppisp_m, self.ppisp_v = (alloc("ppisp_" + k, (n,)) for k in ("grads", "m", "v"))
            most = max(ppisp_threads(w, h) for w, h in {(f.width, f.height) for f in frames})
            self.partials = alloc("ppisp_partials", (PPISP_ROWS * most,), zero=False)
            if controller:
                self.controller = Controller(device, self.n_frames, self.n_cameras, seed)
                # its per-view scratch (152 MiB at 1080p) made now, not when its phase starts: the
                # memory budget then counts it before the splats take the rest (memory.splat_limit)
                for w, h in sorted({(f.width, f.height) for f in frames}):
                    self.controller.scratch(w, h)
        if self.bilagrid_on:
            shape = (self.n_frames, *GRID_SHAPE, 12)
            self.grids = alloc("grids", shape, zero=False)
            device.upload(self.grids, bilagrid_initial(self.n_frames))
            self.grid_grads, self.grid_m, self.grid_v, self.tv_terms = (
                alloc("grids_" + k, shape) for k in ("grads", "m", "v", "tv")
            )
        for f in frames:
            wh = (f.width, f.height)
            if wh not in self.size:
                n_images = 2 if mode == "both" else 1
                self.size[wh] = {
                    k: alloc("%dx%d.%s" % (wh[0], wh[1], k), (1, wh[1], wh[0], 3), zero=False)
                    for i in range(n_images)
                    for k in ("rgb%d" % i, "grad%d" % i)
                }

    def host_words(self, k: int, frame: int) -> np.ndarray:
        """The words of step ``k`` (0-based) on training frame ``frame``."""
        out = np.zeros(APP_WORDS, np.uint32)
        out[4] = frame
        t = k + 1
        hyper = np.zeros(18, np.float32)
        hyper[:6] = adam_hyper(ppisp_lr(k, self.iterations, self.lr), t)
        hyper[6:12] = adam_hyper(bilagrid_lr(k, self.iterations, self.grid_lr), t)
        # the controller's Adam counts its own steps, from its phase's first
        hyper[12:] = adam_hyper(self.controller_lr, max(1, k - self.controller_start + 1))
        out[HYPER_PPISP:] = hyper.view(np.uint32)
        return out

    def record_forward(self, rec, raster) -> Buffer:
        """Record the models on ``raster``'s rendered view; returns the corrected image the
        loss reads."""
        w, h = raster.width, raster.height
        bufs = self.size[(w, h)]
        rgb = raster.out_colors
        i = 0
        if self.ppisp_on:
            record_ppisp_fwd(rec, self.words, self.image_cameras, self.ppisp, rgb, bufs["rgb0"], w, h, 0,
                             self.n_frames, self.n_cameras)  # fmt: skip
            rgb, i = bufs["rgb0"], 1
        if self.bilagrid_on:
            out = bufs["rgb%d" % i]
            record_bilagrid_fwd(rec, self.words, self.grids, rgb, out, w, h, 0, self.n_frames, GRID_SHAPE)
            rgb = out
        return rgb

    def loss_grad(self, raster) -> Buffer:
        """Where the loss writes dL/d (the corrected image)."""
        bufs = self.size[(raster.width, raster.height)]
        return bufs["grad1"] if self.mode == "both" else bufs["grad0"]

    def record_backward(self, rec, raster):
        """Record the models' backward from :meth:`loss_grad` into ``raster.grad_colors``,
        with their regularisers (PPISP's, the grids' total variation)."""
        w, h = raster.width, raster.height
        bufs = self.size[(w, h)]
        if self.bilagrid_on:
            rgb_in = bufs["rgb0"] if self.mode == "both" else raster.out_colors
            grad_out = self.loss_grad(raster)
            grad_rgb = bufs["grad0"] if self.mode == "both" else raster.grad_colors
            record_bilagrid_bwd(rec, self.words, self.grids, rgb_in, grad_out, grad_rgb, self.grid_grads, w, h, 0,
                                self.n_frames, GRID_SHAPE)  # fmt: skip
            record_bilagrid_tv(rec, self.grids, self.grid_grads, self.tv_terms, self.n_frames, BILAGRID_TV, GRID_SHAPE)
        if self.ppisp_on:
            record_ppisp_bwd(rec, self.words, self.image_cameras, self.ppisp, raster.out_colors, bufs["grad0"],
                             raster.grad_colors, self.partials, self.ppisp_grads, w, h, 0, self.n_frames,
                             self.n_cameras, reg=1.0)  # fmt: skip

    def record_optimize(self, rec, raster, step_params: Buffer):
        """Record Adam on every parameter (gradients zeroed after), skipped with fpbo when
        ``raster``'s intersections overflowed (``step_params``: the step's StepParams)."""
        guard = (raster.offsets_scan.scratch, raster.total_offset, raster.isect_capacity, step_params)
        if self.ppisp_on:
            record_adam_small(rec, self.ppisp, self.ppisp_grads, self.ppisp_m, self.ppisp_v, self.words,
                              self.ppisp.shape[0], HYPER_PPISP, guard)  # fmt: skip
        if self.bilagrid_on:
            record_adam_small(rec, self.grids, self.grid_grads, self.grid_m, self.grid_v, self.words,
                              int(np.prod(self.grids.shape)), HYPER_BILAGRID, guard)  # fmt: skip

    # -- PPISP's controller (docs/design.md §2.8) -----------------------------------------
    def controller_on(self, k: int) -> bool:
        """Step ``k`` (0-based) trains the controller: every ISP parameter and the splats
        frozen (no rasterize_bwd, fpbo or appearance Adam recorded), the render detached."""
        return self.controller is not None and k >= self.controller_start

    def controller_trained(self, steps: int) -> bool:
        """After ``steps`` steps the controller has trained (at least one step)."""
        return self.controller is not None and steps > self.controller_start

    def record_controller_forward(self, rec, raster):
        """Record the controller on ``raster``'s render and PPISP with its prediction in place
        of the frame's exposure and colour (the camera's vignetting and CRF kept; no grid:
        a novel view has none); returns (the corrected image, where the loss writes its
        gradient)."""
        ctrl, w, h = self.controller, raster.width, raster.height
        bufs = self.size[(w, h)]
        rec.copy(self.ppisp, ctrl.ppisp)  # the fitted parameters; the frame's slot is written next
        record_ctrl_forward(rec, ctrl, self.words, self.image_cameras, raster.out_colors, ctrl.scratch(w, h), 0,
                            self.n_frames)  # fmt: skip
        record_ppisp_fwd(rec, self.words, self.image_cameras, ctrl.ppisp, raster.out_colors, bufs["rgb0"], w, h, 0,
                         self.n_frames, self.n_cameras)  # fmt: skip
        return bufs["rgb0"], bufs["grad0"]

    def record_controller_backward(self, rec, raster):
        """Record ppisp_bwd into the frame slot's gradient (no regularisers), then the
        controller's backward into its weights' gradient."""
        ctrl, w, h = self.controller, raster.width, raster.height
        bufs = self.size[(w, h)]
        rec.fill(ctrl.pgrads, 0)
        record_ppisp_bwd(rec, self.words, self.image_cameras, ctrl.ppisp, raster.out_colors, bufs["grad0"],
                         raster.grad_colors, self.partials, ctrl.pgrads, w, h, 0, self.n_frames,
                         self.n_cameras, reg=0.0)  # fmt: skip
        record_ctrl_backward(rec, ctrl, self.words, self.image_cameras, raster.out_colors, ctrl.scratch(w, h), 0,
                             self.n_frames)  # fmt: skip

    def record_controller_optimize(self, rec, raster, step_params: Buffer):
        """Record the controller's Adam (adam_small; lr controller_lr, eps 1e-15, constant),
        skipped as fpbo's step when ``raster``'s intersections overflowed."""
        ctrl = self.controller
        guard = (raster.offsets_scan.scratch, raster.total_offset, raster.isect_capacity, step_params)
        record_adam_small(rec, ctrl.weights, ctrl.grads, ctrl.m, ctrl.v, self.words, ctrl.weights.shape[0],
                          HYPER_CTRL, guard)  # fmt: skip

    # -- checkpoints and export ------------------------------------------------------------
    def _named(self) -> dict:
        out = {}
        if self.ppisp_on:
            out.update(ppisp=self.ppisp, ppisp_m=self.ppisp_m, ppisp_v=self.ppisp_v)
        if self.bilagrid_on:
            out.update(grids=self.grids, grids_m=self.grid_m, grids_v=self.grid_v)
        return out

    def state_dict(self) -> dict:
        """The parameters and Adam moments, as numpy arrays (the controller's: ``ctrl``,
        ``ctrl_m``, ``ctrl_v``)."""
        out = {k: self.device.readback(b) for k, b in self._named().items()}
        if self.controller is not None:
            out.update(self.controller.state_dict())
        return out

    def load_state_dict(self, state: dict):
        for k, b in self._named().items():
            if k not in state:
                raise KeyError("the checkpoint holds no appearance/%s" % k)
            self.device.upload(b, np.asarray(state[k], np.float32).reshape(b.shape))
        # a checkpoint of before the controller existed keeps its initial weights
        if self.controller is not None and "ctrl" in state:
            self.controller.load_state_dict(state)

    def isp(self) -> dict:
        """What renders need to apply a frame's appearance (:func:`apply_appearance`), as
        numpy; also what ``appearance.npz`` in the run folder holds."""
        out = dict(
            mode=self.mode, n_frames=self.n_frames, n_cameras=self.n_cameras,
            cameras=np.asarray(self.cameras, np.int32), names=np.asarray(self.names),
        )  # fmt: skip
        if self.ppisp_on:
            out["ppisp"] = self.device.readback(self.ppisp)
        if self.bilagrid_on:
            out["grids"] = self.device.readback(self.grids)
        if self.controller is not None:
            out["controller"] = self.device.readback(self.controller.weights)
        return out

    def free(self):
        if self.controller is not None:
            self.controller.free()
            self.controller = None
        for b in self._bufs:
            self.device.pool.free(b)
        self._bufs = []


def apply_appearance(device, img: np.ndarray, isp: dict, frame: int | None, camera: int | None,
                     controller: bool = False) -> np.ndarray:  # fmt: skip
    """A render [H,W,3] through a run's appearance models (:meth:`Appearance.isp`), on the
    GPU with the training kernels: ``frame`` None for the per-frame stages' identity (a
    novel view: exposure 0, colour 0, no grid), else training frame ``frame``'s; ``camera``
    None for no per-camera stage (vignetting, CRF), else that camera's. One call; a viewer
    that applies the same appearance to every frame keeps an :class:`AppearanceLook`.
    ``controller``: a novel view's exposure and colour from PPISP's controller on ``img``
    (the camera's network; ``isp["controller"]``) instead of the identity."""
    look = AppearanceLook(device, isp, frame, camera, controller)
    try:
        return look(img)
    finally:
        look.close()


class AppearanceLook:
    """One frame's appearance (``frame``, ``camera``: as :func:`apply_appearance`) applied
    to renders of any size: the one-frame parameters are uploaded once, and the buffers and
    the recorded ``ppisp_fwd`` / ``bilagrid_fwd`` sequence are kept per image size, so a
    viewer's frame is one upload, one replay and one read back (``spirula view
    --appearance-of``). ``controller`` (a novel view: ``frame`` None, a ``camera``): the
    exposure and colour come from PPISP's controller run on each image first."""

    def __init__(self, device, isp: dict, frame: int | None, camera: int | None, controller: bool = False):
        self.device, self.mode = device, str(isp["mode"])
        self.frame, self.camera = frame, camera
        self._bufs, self._size_bufs, self._size, self._seq = [], [], None, None
        self._net = None
        if self.mode == "none":
            return
        F, C = int(isp["n_frames"]), int(isp["n_cameras"])
        try:
            self._words = self._put(self._bufs, "words", np.zeros(12, np.uint32))  # frame 0 of a one-frame model
            self._ppisp = self._grid = None
            if self.mode in ("ppisp", "both"):
                flat = np.asarray(isp["ppisp"], np.float32)
                small = np.zeros(ppisp_size(1, 1), np.float32)
                if frame is not None:
                    small[0] = flat[frame]
                    small[1:9] = flat[F + 8 * frame : F + 8 * frame + 8]
                if camera is not None:
                    small[9:24] = flat[9 * F + 15 * camera : 9 * F + 15 * camera + 15]
                    small[24:36] = flat[9 * F + 15 * C + 12 * camera : 9 * F + 15 * C + 12 * camera + 12]
                self._cameras = self._put(self._bufs, "cameras", np.zeros(1, np.uint32))
                if controller and frame is None and camera is not None and "controller" in isp:
                    w = np.asarray(isp["controller"], np.float32).reshape(-1, CTRL_SIZE)[camera]
                    self._net = Controller(device, 1, 1, weights=w)
                    device.upload(self._net.ppisp, small)  # its frame slot is the network's
                    self._ppisp = self._net.ppisp
                else:
                    self._ppisp = self._put(self._bufs, "ppisp", small)
            if self.mode in ("bilagrid", "both") and frame is not None:
                grid = np.ascontiguousarray(np.asarray(isp["grids"], np.float32)[frame : frame + 1])
                self._grid, self._grid_shape = self._put(self._bufs, "grid", grid), tuple(grid.shape[1:4])
        except BaseException:
            self.close()
            raise

    def _put(self, into: list, name: str, arr: np.ndarray) -> Buffer:
        arr = np.ascontiguousarray(arr)
        b = self.device.pool.alloc("appearance.apply." + name, arr.shape, arr.dtype, "appearance")
        self.device.upload(b, arr)
        into.append(b)
        return b

    def _record(self, W: int, H: int):
        for b in self._size_bufs:
            self.device.pool.free(b)
        self._size_bufs, self._size, self._seq = [], None, None
        zeros = np.zeros((1, H, W, 3), np.float32)
        self._rgb_in = rgb = self._put(self._size_bufs, "rgb_in", zeros)
        rec = self.device.recorder("appearance.apply")
        if self._net is not None:
            record_ctrl_forward(rec, self._net, self._words, self._cameras, rgb, self._net.scratch(W, H), 0, 1)
        if self._ppisp is not None:
            out = self._put(self._size_bufs, "ppisp_out", zeros)
            record_ppisp_fwd(rec, self._words, self._cameras, self._ppisp, rgb, out, W, H, 0, 1,
                             0 if self.camera is None else 1)  # fmt: skip
            rgb = out
        if self._grid is not None:
            out = self._put(self._size_bufs, "grid_out", zeros)
            record_bilagrid_fwd(rec, self._words, self._grid, rgb, out, W, H, 0, 1, self._grid_shape)
            rgb = out
        self._rgb_out, self._seq, self._size = rgb, rec.finish(), (W, H)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        """``img`` [H,W,3] float32 (a render) -> [H,W,3] float32 with the appearance."""
        if self.mode == "none":
            return img
        H, W, _ = img.shape
        if self._size != (W, H) or self._seq is None or self._seq.stale:
            self._record(W, H)
        self.device.upload(self._rgb_in, np.asarray(img, np.float32)[None])
        self._seq.run()
        return self.device.readback(self._rgb_out)[0]

    def close(self):
        if self._net is not None:
            self._net.free()
            self._net = None
        for b in self._size_bufs + self._bufs:
            self.device.pool.free(b)
        self._size_bufs, self._bufs, self._seq, self._size = [], [], None, None
