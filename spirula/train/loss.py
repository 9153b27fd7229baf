"""The training loss on the GPU: 0.8 * L1 + 0.2 * (1 - SSIM) (kernels
``loss_fwd`` and ``loss_bwd``). Only the loss value leaves the GPU."""

from __future__ import annotations

import numpy as np


class LossBuffers:
    """Scratch of the loss for V views of W x H: the SSIM derivative maps,
    per-workgroup partial sums, and the loss values [loss, L1, SSIM, MSE]."""

    def __init__(self, device, n_views: int, width: int, height: int, name: str = "loss"):
        self.device = device
        self.n_views, self.width, self.height = n_views, width, height
        self.groups = device.kernel("loss_fwd").groups((width, height, n_views))  # one thread per pixel
        pool = device.pool
        self.ssim_grads = pool.alloc(name + ".ssim_grads", (n_views, height, width, 9), np.float32, "image")
        self.partials = pool.alloc(name + ".partials", (int(np.prod(self.groups)), 4), np.float32, "image")
        self.loss_out = pool.alloc(name + ".out", (4,), np.float32, "other", zero=True)

    def record(self, rec, colors, gt_images, params, grad_colors):
        """Record loss_fwd and loss_bwd: ``grad_colors`` [V,H,W,3] receives dloss/dcolors."""
        push = dict(width=self.width, height=self.height)
        rec.dispatch(
            "loss_fwd",
            self.groups,
            dict(colors=colors, gt_images=gt_images, params=params, ssim_grads=self.ssim_grads, partials=self.partials),
            push=push,
        )
        rec.dispatch(
            "loss_bwd",
            self.groups,
            dict(
                colors=colors,
                gt_images=gt_images,
                params=params,
                ssim_grads=self.ssim_grads,
                partials=self.partials,
                grad_colors=grad_colors,
                loss_out=self.loss_out,
            ),
            push=dict(push, n_views=self.n_views, n_partials=int(np.prod(self.groups))),
        )

    def free(self):
        for b in (self.ssim_grads, self.partials, self.loss_out):
            self.device.pool.free(b)


def pack_rgba8(images, masks=None) -> np.ndarray:
    """[I,H,W,3] floats in [0,1] -> [I,H,W] uint32 RGBA8 (what loss_fwd reads).

    The alpha byte carries the loss mask (``masks`` [I,H,W] bool, True = keep;
    None keeps every pixel): 255 keep, 0 drop (shaders/include/ssim.glsl
    ``loss_keep``). The image's own alpha was composited before, so the byte
    is free, and the mask needs no buffer or binding of its own."""
    q = np.clip(np.rint(np.asarray(images, np.float32) * 255.0), 0, 255).astype(np.uint32)
    a = np.uint32(255 << 24) if masks is None else np.where(np.asarray(masks, bool), np.uint32(255 << 24), np.uint32(0))
    return q[..., 0] | (q[..., 1] << 8) | (q[..., 2] << 16) | a


def masked_counts(mask) -> tuple:
    """``(masked_pixels, masked_valid)`` of one [H,W] bool mask (None: no mask):
    the dropped pixels, and those at "valid" SSIM positions (the 11x11 window
    inside the image): StepParams' fields of the same names, summed over views."""
    if mask is None:
        return 0, 0
    drop = ~np.asarray(mask, bool)
    return int(drop.sum()), int(drop[5:-5, 5:-5].sum())
