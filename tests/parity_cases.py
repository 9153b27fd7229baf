"""What the CUDA parity tests of the hand-written twins share (tests/test_<kernel>_parity.py).

Each hand-written twin (native_cuda/<kernel>.cu: fpbo, rasterize_fwd, rasterize_bwd,
loss_fwd, loss_bwd, radix_sort_count, radix_sort_scatter, prefix_sum) runs the same
recorded work on both backends, from the same seeded, awkward inputs (N not a multiple
of the workgroup, 75x53 images, two cameras), and the outputs are compared; so do the
whole rasterizer and a training (tests/test_cuda_parity.py). The single-source kernels
have no parity test: CUDA compiles their shader's body, and their tests against the numpy
reference run on each backend (the ``backend`` fixture of conftest.py).

Tolerances (element-wise, ``ref`` = the Vulkan result):
- integer outputs (counts, keys, offsets, ids, sorted order, histograms): exact;
- float outputs of plain arithmetic: |d| <= 5e-3 + 5e-4 |ref| (both compilers
  keep IEEE float32 but fuse multiply-adds and approximate exp/rsqrt in their
  own ways, a few ulps apart);
- float outputs built from atomic sums (rasterize_bwd's gradients, and all
  that flows from them): |d| <= 5e-3 + 1e-3 |ref|, with at most 2e-3 of the
  elements outside (atomics add in a different order on each run, and a sum
  with cancellation keeps only its absolute error);
- where a float decides a branch (a Gaussian right at the cull, radius, alpha
  >= 1/255 or T <= 1e-4 cut-off), the ulps above can flip it: such rows and
  pixels are counted, at most 2e-3 of them, and left out of the comparisons
  that follow from the branch;
- the training kernels, whose outputs are far from O(1) (loss gradients of
  ~1e-4, Adam steps of ~lr, moments of ~1e-3 and ~1e-6), are held to
  tolerances scaled to their own magnitudes, each derived in its test's
  docstring from the tests that hold the Vulkan kernels to a float64
  reference (tests/test_loss.py, tests/test_fpbo.py): two backends may be
  twice that far apart. Random draws are bit-identical (integer hashing), so
  densification decisions and copies compare exactly; inputs keep clear of
  the thresholds (1e-3 relative) where a few ulps could flip a decision;
- a 1000-step training on each backend lands within 1 dB of test PSNR (see
  its docstring).

Skipped where there is no CUDA GPU or no built library (``make cuda``).
"""

import numpy as np
from kernel_cases import REPORT, assert_near, run_kernel, step_param_words
from render_cases import random_scene

from spirula.render.rasterizer import CHUNK_NONE, Rasterizer, Splats, tile_grid
from spirula.train.step_params import STEP_PARAMS_WORDS

ABS = 5e-3
R_PLAIN = 5e-4
R_ATOMIC = 1e-3
FLIP_FRACTION = 2e-3
ATOMIC_VIOLATIONS = 2e-3


def both(backends, *args, **kwargs):
    """run_kernel on (Vulkan, CUDA)."""
    vk, cu = backends
    return run_kernel(vk, *args, **kwargs), run_kernel(cu, *args, **kwargs)


def assert_close(got, want, r, what, violations=0.0, mask=None):
    """|got - want| <= ABS + r |want| (NaN only where both are NaN), on ``mask``
    rows if given, allowing a fraction ``violations`` of the elements outside."""
    assert_near(got, want, ABS, r, what, violations, mask)


def assert_few(flips, total, what):
    if REPORT:
        print("\nparity %-18s flipped %d/%d" % (what, flips, total))
    assert flips <= FLIP_FRACTION * total, "%s: %d of %d flipped (at most %g)" % (what, flips, total, FLIP_FRACTION)


# ---- rasterization: a rendered scene's inputs, chunks of tile lists ----------------------


def rendered_inputs(vk):
    """A scene rendered on Vulkan: the inputs rasterize_fwd/bwd read, as numpy."""
    scene = random_scene(n=400, sh_degree=3, seed=5)
    splats = Splats.from_numpy(
        vk,
        scene["means"],
        scene["quats"],
        scene["scales"],
        scene["opacities"],
        scene["sh_coeffs"],
        prefix="parity.splat",
    )
    raster = Rasterizer(
        vk, scene["width"], scene["height"], 2, capacity=len(scene["means"]), name="parity.raster", normals=True
    )
    raster.set_cameras(scene["viewmats"], scene["Ks"])
    raster.set_backgrounds(np.array([[0.2, 0.4, 0.6], [1.0, 0.0, 0.5]], np.float32))
    m = raster.forward(splats, 3, normals=True)
    rows = 2 * len(scene["means"])
    out = dict(
        ranges=vk.readback(raster.ranges),
        isect_ids=raster.intersections()[1],
        xyop=vk.readback(raster.xyop, shape=(rows, 4)),
        conics=vk.readback(raster.conics, shape=(rows, 4)),
        rgb=vk.readback(raster.rgb, shape=(rows, 4)),
        normals=vk.readback(raster.splat_normals, shape=(rows, 4)),
        backgrounds=vk.readback(raster.backgrounds),
        out_alphas=vk.readback(raster.out_alphas),
        out_last=vk.readback(raster.out_last),
        out_depths=vk.readback(raster.out_depths),
        width=scene["width"],
        height=scene["height"],
        rows=rows,
        m=m,
    )
    raster.free()
    splats.free(vk)
    return out


UNSPLIT = 1 << 24  # one chunk per tile list
CHUNK_CHANNELS = 9  # the chunk state of a rasterizer with geometry and normals (include/raster.glsl)


def raster_push(f, max_alpha=0.99, chunk=UNSPLIT):
    tw, th = tile_grid(f["width"], f["height"])
    push = dict(width=f["width"], height=f["height"], tile_width=tw, tile_height=th, max_alpha=max_alpha)
    return dict(push, chunk=chunk, chunk_channels=CHUNK_CHANNELS), (tw, th, 2)


def chunk_ids(f, chunk):
    """Entries of the chunk table (Rasterizer.chunk_ids)."""
    return f["ranges"].shape[0] + -(-max(f["m"], 1) // chunk) + 1


def chunk_table(f, chunk):
    """[ids, 2] uint32: rasterize_chunks' table, in numpy (chunk k of tile t at t + start / chunk + k)."""
    table = np.full((chunk_ids(f, chunk), 2), CHUNK_NONE, np.uint32)
    for t, (s, e) in enumerate(f["ranges"].astype(np.int64)):
        for k in range(-(-(e - s) // chunk)):
            table[t + s // chunk + k] = (t, k)
    return table


def chunk_state_shape(f, chunk):
    return (-(-max(f["m"], 1) // chunk) + 1, CHUNK_CHANNELS, 256)


def chunky_rendered_inputs(vk):
    """tests/test_rasterize_chunks.py's scene (lists of 0 to ~2,300 entries, pixels saturating
    in a middle chunk) rendered on Vulkan: the inputs rasterize_fwd/bwd read, as numpy."""
    from test_rasterize_chunks import chunky_scene

    scene = chunky_scene()
    splats = Splats.from_numpy(
        vk, scene["means"], scene["quats"], scene["scales"], scene["opacities"], scene["sh_coeffs"], prefix="pc.splat"
    )
    raster = Rasterizer(
        vk, scene["width"], scene["height"], 2, capacity=len(scene["means"]), name="pc.raster", normals=True
    )
    raster.set_cameras(scene["viewmats"], scene["Ks"])
    raster.set_backgrounds(np.array([[0.2, 0.4, 0.6], [1.0, 0.0, 0.5]], np.float32))
    m = raster.forward(splats, 1, normals=True)
    rows = 2 * len(scene["means"])
    out = dict(
        ranges=vk.readback(raster.ranges),
        isect_ids=raster.intersections()[1],
        xyop=vk.readback(raster.xyop, shape=(rows, 4)),
        conics=vk.readback(raster.conics, shape=(rows, 4)),
        rgb=vk.readback(raster.rgb, shape=(rows, 4)),
        normals=vk.readback(raster.splat_normals, shape=(rows, 4)),
        backgrounds=vk.readback(raster.backgrounds),
        width=scene["width"],
        height=scene["height"],
        rows=rows,
        m=m,
    )
    raster.free()
    splats.free(vk)
    n = out["ranges"][:, 1].astype(np.int64) - out["ranges"][:, 0]
    assert n.max() > 8 * 256 and (n == 0).any()
    return out


def chunked_forward(dev, f, distortion, normals, chunk=256):
    """rasterize_fwd with ``chunk`` on ``dev``: its outputs and chunk_state."""
    push, groups = raster_push(f, chunk=chunk)
    C, H, W = 2, f["height"], f["width"]
    outs = dict(
        out_colors=((C, H, W, 3), np.float32),
        out_alphas=((C, H, W), np.float32),
        out_depths=((C, H, W), np.float32),
        out_last=((C, H, W), np.uint32),
        out_median=((C, H, W), np.float32),
        out_distort=((C, H, W), np.float32),
        out_normals=((C, H, W, 3), np.float32),
        chunk_state=(chunk_state_shape(f, chunk), np.float32),
    )
    ins = {k: f[k] for k in ("ranges", "isect_ids", "xyop", "conics", "rgb", "backgrounds", "normals")}
    spec = dict(DISTORTION=int(distortion), NORMALS=int(normals))
    zero = ("out_distort", "out_normals", "chunk_state")
    return run_kernel(dev, "rasterize_fwd", groups, ins, outs, push=push, spec=spec, zero=zero)


# ---- the loss ----------------------------------------------------------------------------


def loss_case(V, H, W, seed):
    """Rendered views near their ground truth; view v reads dataset image V - v
    (image 0 is a decoy), so a wrong image index shows."""
    rng = np.random.default_rng(seed)
    gt_bytes = rng.integers(0, 256, (V + 1, H, W, 3)).astype(np.uint32)
    gt_views = gt_bytes[1:][::-1] / 255.0
    smooth = np.cumsum(rng.standard_normal((V, H, W, 3)) * 0.05, axis=2)
    colors = np.clip(gt_views * 0.7 + 0.2 + smooth, 0.01, 0.99)
    colors = np.where(np.abs(colors - gt_views) < 2e-3, colors + 5e-3, colors)  # sign(x - y) away from 0
    packed = gt_bytes[..., 0] | (gt_bytes[..., 1] << 8) | (gt_bytes[..., 2] << 16) | np.uint32(255 << 24)
    return colors.astype(np.float32), packed.astype(np.uint32), list(range(V, 0, -1))


def run_loss(dev, colors, gt, image_index, l1_weight=0.8, ssim_weight=0.2, masked=(0, 0)):
    from spirula.train.loss import LossBuffers

    V, H, W, _ = colors.shape
    pool = dev.pool
    bufs = dict(
        colors=pool.alloc("parity.loss.colors", colors.shape, np.float32),
        gt=pool.alloc("parity.loss.gt", gt.shape, np.uint32),
        params=pool.alloc("parity.loss.params", (STEP_PARAMS_WORDS,), np.uint32),
        grads=pool.alloc("parity.loss.grads", colors.shape, np.float32),
    )
    dev.upload(bufs["colors"], colors)
    dev.upload(bufs["gt"], gt)
    dev.upload(
        bufs["params"],
        step_param_words(
            n_views=V,
            image_index=image_index + [0] * (8 - V),
            l1_weight=l1_weight,
            ssim_weight=ssim_weight,
            masked_pixels=masked[0],
            masked_valid=masked[1],
        ),
    )
    loss = LossBuffers(dev, V, W, H)
    rec = dev.recorder("parity.loss")
    loss.record(rec, bufs["colors"], bufs["gt"], bufs["params"], bufs["grads"])
    rec.finish().run()
    out = dict(
        loss_out=dev.readback(loss.loss_out),
        grad_colors=dev.readback(bufs["grads"]),
        ssim_grads=dev.readback(loss.ssim_grads),
        partials=dev.readback(loss.partials),
    )
    for b in list(bufs.values()) + [loss.ssim_grads, loss.partials, loss.loss_out]:
        pool.free(b)
    return out


def masked_loss_case(V, H, W):
    """loss_case with loss masks (the ground truth's alpha byte 0 drops a pixel): colours,
    ground truth, image indices, the keep masks of the images, StepParams' masked counts."""
    from spirula.train.loss import masked_counts

    colors, gt, index = loss_case(V, H, W, seed=H + W)
    rng = np.random.default_rng(W)
    keep = rng.random(gt.shape) < 0.7
    keep[:, H // 3 : H // 3 + 7, W // 4 : W // 4 + 12] = False
    gt = np.where(keep, gt, gt & np.uint32(0x00FFFFFF)).astype(np.uint32)
    counts = [masked_counts(keep[i]) for i in index]
    masked = (sum(c[0] for c in counts), sum(c[1] for c in counts))
    return colors, gt, index, keep, masked
