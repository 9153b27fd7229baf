"""Appearance correction on the GPU (docs/design.md §2.8): the recording of ``ppisp_fwd``/
``ppisp_bwd``, ``bilagrid_fwd``/``bilagrid_bwd``/``bilagrid_tv`` and ``adam_small``
(reference: :mod:`spirula.reference.appearance`). Not yet part of the training step: when
it is, the forwards record between ``rasterize_fwd`` and ``loss_fwd`` and the backwards
between ``loss_bwd`` and ``rasterize_bwd``, reading the view's image from StepParams.
"""

from __future__ import annotations

from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import Threads, grid_stride_groups

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
                     n_frames: int, n_cameras: int):  # fmt: skip
    """Record ppisp_bwd's phases: ``grad_rgb`` of view ``view`` and the parameters' gradients
    added to ``grads`` (GRAD_T, as the device's kernels declare it). ``partials`` holds at
    least 37 x :func:`ppisp_threads` floats."""
    threads = ppisp_threads(width, height)
    bufs = dict(
        step=step, image_cameras=image_cameras, ppisp=ppisp, rgb_in=rgb_in, grad_out=grad_out,
        grad_rgb=grad_rgb, partials=partials, grads=grads,
    )  # fmt: skip
    push = dict(width=width, height=height, view=view, n_frames=n_frames, n_cameras=n_cameras, threads=threads)
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
                      at: int = 0):  # fmt: skip
    """Record one Adam step of ``params[:count]``; ``hyper[at:at + 6]`` = lr, beta1, beta2,
    1 - beta1^step, 1 - beta2^step, eps. ``grads`` is zeroed after use."""
    rec.dispatch(
        "adam_small", Threads(count), dict(params=params, grads=grads, m=m, v=v, hyper=hyper),
        push=dict(count=count, at=at),
    )  # fmt: skip
    return rec


def adam_hyper(lr: float, step: int, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-15) -> list:
    """The six scalars adam_small reads for Adam step ``step`` (1-based)."""
    return [lr, beta1, beta2, 1.0 - beta1**step, 1.0 - beta2**step, eps]
