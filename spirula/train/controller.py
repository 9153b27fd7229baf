"""PPISP's controller on the GPU (docs/design.md §2.8, "PPISP's controller"): the recording
of ``ppisp_ctrl_fwd``, ``ppisp_ctrl_mlp`` and ``ppisp_ctrl_bwd`` (reference
:mod:`spirula.reference.ppisp_ctrl`), and :class:`Controller`, the networks of one run (one
per PPISP camera), their Adam moments and scratch, trained in the run's last phase
(``controller_activation_ratio``) by spirula/train/appearance.py's ``Appearance``.

The networks predict a view's exposure and colour latents from its render and write them
into the view's frame slot of a copy of the PPISP parameters, which ``ppisp_fwd`` and
``ppisp_bwd`` then read as any frame's; the camera's vignetting and CRF stay the fitted ones.
"""

from __future__ import annotations

import math

import numpy as np

from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import Threads

# include/ppisp_ctrl.glsl's layout of one camera's weights: (out, in) per layer in order, each
# [out, in] then its bias
LAYERS = ((16, 3), (32, 16), (64, 32), (128, 1601), (128, 128), (128, 128), (9, 128))
CTRL_SIZE = sum(o * i + o for o, i in LAYERS)  # 241,961
CTRL_CONV = sum(o * i + o for o, i in LAYERS[:3])  # 2,720: ppisp_ctrl_bwd's partial rows
CTRL_ACT = 1601 + 3 * 128 + 9  # the activations: x0, h1, h2, h3, out
N_IN, HIDDEN = 1601, 128
CELL_ROWS, DELTA_ROWS = 112, 48  # per cell: feat, a2, a1; dz2, dm
CHUNK = 256  # cells one thread of ppisp_ctrl_bwd's phase 1 sums
REDUCE = 256  # values one thread of its phase 2 sums
# nv-tlabs/ppisp PPISPConfig: the controller's Adam (lr 1e-3, betas 0.9/0.999, eps 1e-15), constant
CONTROLLER_LR = 1e-3


def n_cells(width: int, height: int) -> int:
    """The 3x3 cells of a W x H view (the max pool's output, floor)."""
    return (width // 3) * (height // 3)


def n_chunks(width: int, height: int) -> int:
    return max(1, -(-n_cells(width, height) // CHUNK))


def controller_initial(n_cameras: int, seed: int) -> np.ndarray:
    """torch's default init of each camera's network (nn.Conv2d, nn.Linear: weights and
    biases uniform in +-1 / sqrt(fan_in)), drawn from ``seed``: [n_cameras, CTRL_SIZE]."""
    rng = np.random.default_rng([seed, 0x9915])
    out = np.empty((n_cameras, CTRL_SIZE), np.float32)
    for c in range(n_cameras):
        at = 0
        for o, i in LAYERS:
            bound = 1.0 / math.sqrt(i)
            out[c, at : at + o * i + o] = rng.uniform(-bound, bound, o * i + o)
            at += o * i + o
    return out


class ControllerScratch:
    """The per-view scratch of one image size: ``cells`` [112, n_cells], ``argmax``
    [2, n_cells] u32, ``deltas`` [48, n_cells], ``partials`` [2720, chunks]."""

    def __init__(self, pool, width: int, height: int, name: str = "controller", category: str = "appearance"):
        if width < 3 or height < 3:
            raise ValueError("PPISP's controller needs a view of at least 3 x 3 pixels, not %d x %d" % (width, height))
        self.width, self.height = width, height
        n, k = n_cells(width, height), n_chunks(width, height)
        tag = "%s.%dx%d." % (name, width, height)
        self.cells = pool.alloc(tag + "cells", (CELL_ROWS * n,), np.float32, category, zero=False)
        self.argmax = pool.alloc(tag + "argmax", (2 * n,), np.uint32, category, zero=False)
        self.deltas = pool.alloc(tag + "deltas", (DELTA_ROWS * n,), np.float32, category, zero=False)
        self.partials = pool.alloc(tag + "partials", (CTRL_CONV * k,), np.float32, category, zero=False)

    def free(self, pool):
        for b in (self.cells, self.argmax, self.deltas, self.partials):
            pool.free(b)


def record_ctrl_forward(rec, net, step: Buffer, image_cameras: Buffer, rgb_in: Buffer, scratch: ControllerScratch,
                        view: int, n_frames: int):  # fmt: skip
    """Record the network of view ``view``'s camera (``net``: a :class:`Controller`'s
    buffers) on ``rgb_in`` [V,H,W,3]: the cells, the pooled features, the MLP into
    ``net.act``, and the prediction (exposure, colour) into the view's frame slot of
    ``net.ppisp`` (``ppisp_fwd``'s layout with ``n_frames`` frames). ``step``: the words
    whose word 4 + view is the frame; ``image_cameras`` [F]."""
    w, h = scratch.width, scratch.height
    push = dict(width=w, height=h, view=view, n_frames=n_frames)
    bufs = dict(step=step, image_cameras=image_cameras, weights=net.weights, rgb_in=rgb_in, cells=scratch.cells,
                argmax=scratch.argmax, act=net.act)  # fmt: skip
    rec.dispatch("ppisp_ctrl_fwd", Threads(n_cells(w, h)), bufs, push=push, spec=dict(PHASE=0))
    rec.dispatch("ppisp_ctrl_fwd", Threads(N_IN), bufs, push=push, spec=dict(PHASE=1))
    return record_ctrl_mlp(rec, net, step, image_cameras, view, n_frames)


def record_ctrl_mlp(rec, net, step: Buffer, image_cameras: Buffer, view: int, n_frames: int, backward: bool = False):
    """Record the MLP's four layers forward (0 to 3) or backward (3 to 0)."""
    bufs = dict(step=step, image_cameras=image_cameras, weights=net.weights, act=net.act, dact=net.dact,
                ppisp=net.ppisp, pgrads=net.pgrads, grads=net.grads)  # fmt: skip
    for layer in (3, 2, 1, 0) if backward else (0, 1, 2, 3):
        n_in, n_out = (N_IN if layer == 0 else HIDDEN), (9 if layer == 3 else HIDDEN)
        threads = n_out * n_in + n_out + n_in if backward else n_out
        rec.dispatch("ppisp_ctrl_mlp", Threads(threads), bufs, push=dict(view=view, n_frames=n_frames, layer=layer),
                     spec=dict(PHASE=int(backward)))  # fmt: skip
    return rec


def record_ctrl_backward(rec, net, step: Buffer, image_cameras: Buffer, rgb_in: Buffer, scratch: ControllerScratch,
                         view: int, n_frames: int):  # fmt: skip
    """Record the backward from ``net.pgrads`` (ppisp_bwd's gradient of the frame slot's
    exposure and colour) to ``net.grads`` [n_cameras, CTRL_SIZE]: the camera's rows
    written, the others left as they are."""
    record_ctrl_mlp(rec, net, step, image_cameras, view, n_frames, backward=True)
    w, h = scratch.width, scratch.height
    chunks = n_chunks(w, h)
    bufs = dict(step=step, image_cameras=image_cameras, weights=net.weights, rgb_in=rgb_in, cells=scratch.cells,
                argmax=scratch.argmax, dact=net.dact, deltas=scratch.deltas, partials=scratch.partials,
                grads=net.grads)  # fmt: skip
    push = dict(width=w, height=h, view=view, n_frames=n_frames, chunk=CHUNK, chunks=chunks, n_in=0, n_out=1)
    rec.dispatch("ppisp_ctrl_bwd", Threads(n_cells(w, h)), bufs, push=push, spec=dict(PHASE=0))
    rec.dispatch("ppisp_ctrl_bwd", Threads(CTRL_CONV * chunks), bufs, push=push, spec=dict(PHASE=1))
    n = chunks
    while n > 1:
        n_out = -(-n // REDUCE)
        rec.dispatch("ppisp_ctrl_bwd", Threads(CTRL_CONV * n_out), bufs, push=dict(push, n_in=n, n_out=n_out),
                     spec=dict(PHASE=2))  # fmt: skip
        n = n_out
    rec.dispatch("ppisp_ctrl_bwd", Threads(CTRL_CONV), bufs, push=push, spec=dict(PHASE=3))
    return rec


class Controller:
    """The networks of ``n_cameras`` cameras and their buffers (pool category ``category``):
    ``weights``, ``grads`` (GRAD_T bits, zeroed by adam_small after use), Adam's ``m`` and
    ``v`` [n_cameras, CTRL_SIZE]; the activations ``act`` and their gradients ``dact``
    [CTRL_ACT]; ``ppisp``, the PPISP parameters of ``n_frames`` frames and ``n_cameras``
    cameras whose frame slot the network writes (the rest copied from the fitted ones
    before), with its gradient ``pgrads``; and per image size a :class:`ControllerScratch`.
    ``weights``: the starting weights (default :func:`controller_initial` from ``seed``)."""

    def __init__(self, device, n_frames: int, n_cameras: int, seed: int = 0, weights=None, category="appearance"):
        self.device, self.n_frames, self.n_cameras, self.category = device, n_frames, n_cameras, category
        pool = device.pool
        self._bufs, self._scratch = [], {}

        def alloc(name, shape, zero=True):
            buf = pool.alloc("controller." + name, shape, np.float32, category, zero=zero)
            self._bufs.append(buf)
            return buf

        try:
            n = n_cameras * CTRL_SIZE
            self.weights = alloc("weights", (n,), zero=False)
            w0 = controller_initial(n_cameras, seed) if weights is None else weights
            device.upload(self.weights, np.asarray(w0, np.float32).reshape(n))
            self.grads, self.m, self.v = (alloc(k, (n,)) for k in ("grads", "m", "v"))
            self.act, self.dact = alloc("act", (CTRL_ACT,)), alloc("dact", (CTRL_ACT,))
            p = 9 * n_frames + 27 * n_cameras  # appearance.ppisp_size
            self.ppisp, self.pgrads = alloc("ppisp", (p,)), alloc("pgrads", (p,))
        except BaseException:
            self.free()
            raise

    def scratch(self, width: int, height: int) -> ControllerScratch:
        """The scratch of a ``width`` x ``height`` view (made on first use, kept)."""
        key = (width, height)
        if key not in self._scratch:
            self._scratch[key] = ControllerScratch(self.device.pool, width, height, category=self.category)
        return self._scratch[key]

    def state_dict(self) -> dict:
        rb = self.device.readback
        return dict(ctrl=rb(self.weights), ctrl_m=rb(self.m), ctrl_v=rb(self.v))

    def load_state_dict(self, state: dict):
        for k, b in (("ctrl", self.weights), ("ctrl_m", self.m), ("ctrl_v", self.v)):
            self.device.upload(b, np.asarray(state[k], np.float32).reshape(b.shape))

    def free(self):
        pool = self.device.pool
        for s in self._scratch.values():
            s.free(pool)
        for b in self._bufs:
            pool.free(b)
        self._bufs, self._scratch = [], {}
