"""``spirula selftest``: every kernel on small seeded cases against the float64
numpy reference (:mod:`spirula.reference`), on either backend.

Each check returns :class:`Row` s: the kernel(s), the largest error, the
tolerance and whether every value is within it. The tolerances are the
kernel tests' (``tests/test_<kernel>.py``, where each has its origin);
integer outputs (sort order, intersections, tile ranges, counts) match
exactly, and their error is the number of entries that differ.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Row:
    kernel: str
    error: float
    tolerance: str
    ok: bool


def _within(kernel, got, ref, bound, tolerance) -> Row:
    """|got - ref| <= bound everywhere (NaN fails)."""
    err = np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64))
    ok = bool(np.all(err <= bound)) and err.size > 0
    return Row(kernel, float(np.nanmax(err)) if err.size and not np.isnan(err).all() else float("nan"), tolerance, ok)


def _exact(kernel, got, ref) -> Row:
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return Row(kernel, float(max(got.size, ref.size)), "exact", False)
    wrong = int(np.count_nonzero(got != ref))
    return Row(kernel, float(wrong), "exact", wrong == 0)


def _merge(kernel, rows) -> Row:
    """One row for several outputs of one kernel: the worst of each."""
    return Row(kernel, max(r.error for r in rows), rows[0].tolerance, all(r.ok for r in rows))


def random_scene(n=300, cameras=2, width=75, height=53, sh_degree=3, seed=0, spread=1.0):
    """Seeded, awkward Gaussians (N and image sizes no multiple of any
    workgroup or tile, every SH band) in front of ``cameras`` cameras at
    slightly different poses: a dict of float32 inputs for
    :func:`spirula.render.api.rasterization`."""
    rng = np.random.default_rng(seed)
    means = np.c_[rng.uniform(-1.2, 1.2, (n, 2)) * spread, rng.uniform(2.5, 6.0, n)].astype(np.float32)
    quats = rng.standard_normal((n, 4)).astype(np.float32)
    scales = np.exp(rng.uniform(-3.5, -1.2, (n, 3))).astype(np.float32)
    opacities = rng.uniform(0.05, 0.95, n).astype(np.float32)
    K = (sh_degree + 1) ** 2
    sh = (rng.standard_normal((n, K, 3)) * np.r_[0.6, np.full(K - 1, 0.15)][None, :, None]).astype(np.float32)
    viewmats, Ks = [], []
    for c in range(cameras):
        a = 0.12 * c
        R = np.array([[np.cos(a), 0, -np.sin(a)], [0, 1, 0], [np.sin(a), 0, np.cos(a)]])
        vm = np.eye(4)
        vm[:3, :3] = R
        vm[:3, 3] = [0.2 * c, -0.1 * c, 0.3 * c]
        viewmats.append(vm)
        f = 0.9 * width
        Ks.append([[f, 0, width / 2 + 1.3 * c], [0, f * 1.05, height / 2 - 0.7 * c], [0, 0, 1]])
    return dict(
        means=means,
        quats=quats,
        scales=scales,
        opacities=opacities,
        sh_coeffs=sh,
        viewmats=np.array(viewmats, np.float32),
        Ks=np.array(Ks, np.float32),
        width=width,
        height=height,
        sh_degree=sh_degree,
    )


def raw_params(scene) -> dict:
    """The training's stored parameters of a :func:`random_scene`: means, quats,
    log-scales, opacity logits and sh [N,K,3], float32 as the scene's."""
    s = scene
    return dict(
        means=s["means"],
        quats=s["quats"],
        scales=np.log(s["scales"]),
        opacities=np.log(s["opacities"] / (1 - s["opacities"])),
        sh=s["sh_coeffs"],
    )


def _f64(scene):
    return {k: (np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v) for k, v in scene.items()}


# ---- the runtime: transfers and the prefix sum -------------------------------------------


def check_runtime(dev, size=1 << 16):
    from spirula.render.scan import PrefixSum

    rng = np.random.default_rng(0)
    x = rng.integers(0, 1000, size, dtype=np.uint32)
    pool = dev.pool
    buf = pool.alloc("selftest.values", (size,), np.uint32)
    other = pool.alloc("selftest.copy", (size,), np.uint32)
    dev.upload(buf, x)
    rows = [_exact("upload + readback", dev.readback(buf), x)]
    dev.fill(other, 7)
    rows.append(_exact("fill", dev.readback(other), np.full(size, 7, np.uint32)))
    dev.copy(buf, other)
    rows.append(_exact("copy", dev.readback(other), x))
    scan = PrefixSum(dev, size)
    rec = dev.recorder("selftest.scan")
    scan.record(rec, buf, size)
    rec.finish().run()
    expect = np.zeros_like(x)
    np.cumsum(x[:-1], dtype=np.uint32, out=expect[1:])
    rows.append(_exact("prefix_sum", dev.readback(buf), expect))
    for b in (buf, other, scan.scratch):
        pool.free(b)
    return rows


def check_sort(dev, n=2048 * 5 + 123, bits=20):
    """A stable sort of keys with many ties (tests/test_radix_sort.py)."""
    from spirula.render.sort import RadixSort

    rng = np.random.default_rng(n + bits)
    keys = rng.integers(0, 1 << bits, n, dtype=np.uint64).astype(np.uint32)
    keys[: n // 2] %= 7
    pool = dev.pool
    bufs = [pool.alloc("selftest.sort%d" % i, (n,), np.uint32) for i in range(4)]
    count = pool.alloc("selftest.sort.count", (1,), np.uint32)
    dev.upload(bufs[0], keys)
    dev.upload(bufs[1], np.arange(n, dtype=np.uint32))
    dev.upload(count, np.array([n], np.uint32))
    sort = RadixSort(dev, n)
    rec = dev.recorder("selftest.sort")
    out_k, out_v = sort.record(rec, *bufs, n, bits, count)
    rec.finish().run()
    order = np.argsort(keys, kind="stable").astype(np.uint32)
    got = np.r_[dev.readback(out_k), dev.readback(out_v)]
    row = _exact("radix_sort_count + radix_sort_scatter", got, np.r_[keys[order], order])
    for b in bufs + [count, sort.hist, sort.scan.scratch]:
        pool.free(b)
    return [row]


# ---- the rasterizer, forward and backward -----------------------------------------------

# tests/test_projection_fwd.py: float32 vs float64 through a 2x2 inverse of condition ~1e2
PROJ_TOL = 1e-4
# tests/test_rasterize_fwd.py: float32 compositing of ~10-100 terms, per pixel
IMAGE_ATOL, IMAGE_RTOL = 1e-5, 0.01
# tests/test_rasterize_bwd.py: atomic sums of ~10^3 terms, relative to the largest gradient
GRAD_SCALE_TOL, GRAD_RTOL = 1e-4, 1e-3


def _grad_row(kernel, pairs) -> Row:
    rows = []
    for got, ref in pairs:
        ref = np.asarray(ref, np.float64)
        bound = GRAD_SCALE_TOL * np.abs(ref).max() + GRAD_RTOL * np.abs(ref)
        rows.append(_within(kernel, got, ref, bound, "1e-4 max|ref| + 1e-3 |ref|"))
    return _merge(kernel, rows)


def check_render(dev):
    from spirula.reference.intersect import intersect
    from spirula.reference.rasterize import rasterize_bwd
    from spirula.reference.render import rasterization as ref_rasterization
    from spirula.reference.render import rasterization_bwd as ref_rasterization_bwd
    from spirula.render.api import rasterization, rasterization_backward

    scene = random_scene(n=300, cameras=2, width=75, height=53, sh_degree=3, seed=0)
    W, H, n = scene["width"], scene["height"], len(scene["means"])
    bg = np.array([[0.2, 0.4, 0.6], [1.0, 1.0, 1.0]], np.float32)
    colors, alphas, depths, meta = rasterization(**scene, backgrounds=bg, device=dev)
    rc, ra, ref = ref_rasterization(**_f64(scene), backgrounds=bg.astype(np.float64))
    rows = []

    # projection_fwd: element-wise where both keep the splat; a cull decision may
    # flip where a box edge meets the image edge (at most 1% of rows); radii +-1
    vis, rvis = (meta["radii"] != 0).any(-1), (ref["radii"] != 0).any(-1)
    both = vis & rvis
    parts = [
        _within("projection_fwd", meta[k][both], ref[k][both], PROJ_TOL + PROJ_TOL * np.abs(ref[k][both]), "")
        for k in ("means2d", "conics", "colors", "depths")
    ]
    row = _merge("projection_fwd", parts)
    row.tolerance = "1e-4 + 1e-4 |ref| (radii +-1, <= 1% cull flips)"
    row.ok &= (vis != rvis).mean() <= 0.01 and np.abs(meta["radii"][both] - ref["radii"][both]).max(initial=0) <= 1
    rows.append(row)

    # intersections and tile ranges: exact, from the GPU's own projection
    raster = meta["_context"].raster
    keys, ids = raster.intersections()
    T = raster.tiles
    C = len(scene["viewmats"])
    ri = intersect(meta["means2d"], meta["radii"], meta["depths"], W, H, meta["conics"], scene["opacities"])
    got = np.stack([ids // n, keys % T, ids % n], 1).astype(np.int64)
    want = np.array([(c, t, g) for c, t, _, g in ri["isects"]], np.int64).reshape(-1, 3)
    r = _exact("intersect_tile_count + intersect_tile_write", got, want)
    r.ok &= bool(np.array_equal(meta["tiles_touched"], ri["tiles"])) and meta["n_isects"] == len(want)
    rows.append(r)
    ranges = dev.readback(raster.ranges).reshape(C, T, 2)
    nonempty = ri["tile_ranges"][..., 1] > ri["tile_ranges"][..., 0]
    rows.append(
        _exact("tile_ranges", np.where(nonempty[..., None], ranges, 0), ri["tile_ranges"] * nonempty[..., None])
    )

    # rasterize_fwd: colours, alphas and depths per pixel
    rd = np.where(ra > 0, ref["render_depths"] / np.where(ra > 0, ra, 1), 0)
    parts = [
        _within("rasterize_fwd", g, w, IMAGE_ATOL + IMAGE_RTOL * np.abs(w), "1e-5 + 1% |ref|")
        for g, w in ((colors, rc), (alphas, ra), (depths, rd))
    ]
    # the median depth is one splat's depth: exact up to rounding, but where T lands within
    # float32 rounding of 0.5 the crossing moves to the next splat (at most 1e-3 of the pixels)
    med, want = meta["median_depths"], ref["median_depths"]
    off = float(np.mean(np.abs(med - want) > 1e-5 + 1e-5 * np.abs(want)))
    parts.append(Row("rasterize_fwd", off, "", off <= 1e-3 and bool((want > 0).any())))
    rows.append(_merge("rasterize_fwd", parts))

    # backward through random cotangents: rasterize_bwd per camera, then
    # projection_bwd's gradients of every input
    rng = np.random.default_rng(7)
    gc = rng.standard_normal(colors.shape).astype(np.float32)
    ga = rng.standard_normal(alphas.shape).astype(np.float32)
    grads = rasterization_backward(meta, gc, ga)

    def read(buf, w):
        return dev.readback(buf, shape=(C * n, w)).reshape(C, n, w)

    rref = rasterize_bwd(
        meta["means2d"],
        meta["conics"],
        meta["colors"],
        np.broadcast_to(scene["opacities"], (C, n)),
        meta["depths"],
        meta["radii"],
        W,
        H,
        backgrounds=bg,
        grad_colors=gc,
        grad_alphas=ga,
    )
    rows.append(
        _grad_row(
            "rasterize_bwd",
            [
                (grads["means2d"][vis], rref["means2d"][vis]),
                (read(raster.grad_conics, 3)[vis], rref["conics"][vis]),
                (read(raster.grad_rgb, 3)[vis], rref["colors"][vis]),
                (read(raster.grad_opacity, 1)[vis][:, 0], rref["opacities"][vis]),
            ],
        )
    )
    full = ref_rasterization_bwd(
        **_f64(scene), backgrounds=bg.astype(np.float64), grad_colors=gc.astype(np.float64), grad_alphas=ga
    )
    names = ("means", "quats", "scales", "opacities", "sh_coeffs")
    rows.append(_grad_row("projection_bwd", [(grads[k], full[k]) for k in names]))
    return rows


# ---- the loss ---------------------------------------------------------------------------


def pack_unpack(images):
    """Ground truth exactly as the GPU sees it (8 bits per channel)."""
    return np.clip(np.rint(images * 255), 0, 255) / 255.0


def loss_case(V, H, W, seed):
    """Rendered colours [V,H,W,3] and ground-truth images [V+1,H,W,3] (image 0
    unused), away from x == y where L1 is not differentiable."""
    rng = np.random.default_rng(seed)
    gt_images = (rng.integers(0, 256, (V + 1, H, W, 3)) / 255.0).astype(np.float32)
    smooth = np.cumsum(rng.standard_normal((V, H, W, 3)) * 0.05, axis=2)
    colors = np.clip(gt_images[1:] * 0.7 + 0.2 + smooth, 0.01, 0.99)
    gt = pack_unpack(gt_images[1:])
    colors = np.where(np.abs(colors - gt) < 2e-3, colors + 5e-3, colors)
    return colors.astype(np.float32), gt_images


def gpu_loss(device, colors, gt_images, image_index, l1_weight=0.8, ssim_weight=0.2, masks=None):
    """loss_fwd and loss_bwd on ``colors`` against ``gt_images[image_index]``:
    ([loss, l1, ssim, mse], d loss / d colors). ``masks``: None, or [I,H,W]
    bool (True = keep) of the images, carried in the ground truth's alpha."""
    from spirula.train.loss import LossBuffers, masked_counts, pack_rgba8
    from spirula.train.step_params import STEP_PARAMS_WORDS, step_params

    V, H, W, _ = colors.shape
    pool = device.pool
    buf_colors = pool.alloc("selftest.colors", colors.shape, np.float32)
    device.upload(buf_colors, colors.astype(np.float32))
    gt = pool.alloc("selftest.gt", gt_images.shape[:3], np.uint32)
    device.upload(gt, pack_rgba8(gt_images, masks))
    params = pool.alloc("selftest.params", (STEP_PARAMS_WORDS,), np.uint32)
    counts = [masked_counts(None if masks is None else masks[i]) for i in image_index]
    p = step_params(
        image_index=list(image_index) + [0] * (8 - V),
        l1_weight=l1_weight,
        ssim_weight=ssim_weight,
        n_views=V,
        masked_pixels=sum(c[0] for c in counts),
        masked_valid=sum(c[1] for c in counts),
    )
    device.upload(params, np.frombuffer(p.tobytes(), np.uint32))
    grads = pool.alloc("selftest.grads", colors.shape, np.float32)
    loss = LossBuffers(device, V, W, H)
    rec = device.recorder("selftest.loss")
    loss.record(rec, buf_colors, gt, params, grads)
    rec.finish().run()
    out = device.readback(loss.loss_out), device.readback(grads)
    for b in (buf_colors, gt, params, grads, loss.ssim_grads, loss.partials, loss.loss_out):
        pool.free(b)
    return out


def check_loss(dev, checked=48):
    """loss_fwd against the reference (tests/test_loss.py: rtol 2e-5, atol
    1e-6); loss_bwd against central differences of the reference at
    ``checked`` random entries (1e-5 max|fd| + 1e-3 |fd|, the max over the
    entries checked: no looser than the test's over all)."""
    from spirula.reference.loss import loss_terms

    colors, gt_images = loss_case(1, 16, 19, seed=16)
    out, grad = gpu_loss(dev, colors, gt_images, image_index=[1])
    gt = pack_unpack(gt_images[1:2])
    ref = loss_terms(colors, gt)
    want = np.array([ref["loss"], ref["l1"], ref["ssim"], ref["mse"]])
    rows = [_within("loss_fwd", out, want, 1e-6 + 2e-5 * np.abs(want), "1e-6 + 2e-5 |ref|")]
    x = colors.astype(np.float64)
    rng = np.random.default_rng(1)
    picks = [np.unravel_index(i, x.shape) for i in rng.choice(x.size, checked, replace=False)]
    fd = []
    for idx in picks:
        xp, xm = x.copy(), x.copy()
        xp[idx] += 1e-6
        xm[idx] -= 1e-6
        fd.append((loss_terms(xp, gt)["loss"] - loss_terms(xm, gt)["loss"]) / 2e-6)
    fd = np.array(fd)
    got = np.array([grad[idx] for idx in picks])
    bound = 1e-5 * np.abs(fd).max() + 1e-3 * np.abs(fd)
    rows.append(_within("loss_bwd", got, fd, bound, "1e-5 max|fd| + 1e-3 |fd|"))
    return rows


# ---- fpbo: projection backward + Adam, fused --------------------------------------------

FPBO_LR = dict(lr_means=1e-3, lr_quats=2e-3, lr_scales=5e-3, lr_opacities=0.05, lr_sh0=2.5e-3, lr_shN=1.25e-4)


FPBO_REG = dict(opacity_reg=0.01, scale_reg=0.02)


def gpu_fpbo_step(
    dev, model, scene, sh_degree, step, rng, lr=FPBO_LR, reg=FPBO_REG, seed=0, adc_stats=True, normals=None, lenses=True
):
    """One fpbo update of ``model`` (in place) from the gradients of random
    colour gradients (0.1 N(0, 1), drawn from ``rng``) on ``scene``'s views
    (:func:`random_scene`), projected and rasterized on ``dev``: the case of
    the selftest, tests/test_fpbo.py and tests/test_compact.py. Returns
    (grad_colors [V,H,W,3] f32, visible [V,N] bool, vis_count [N] u32). ``normals``: a dict
    to take the normal consistency's case too (NORMALS, --geometry): random cotangents of
    the normal image (0.1 N(0, 1)) and of the accumulated depth image (0.02 N(0, 1)) are
    added, and stored in it as ``grad_normals`` [V,H,W,3] and ``grad_depths`` [V,H,W].
    ``lenses``: fpbo's LENSES (the scene's cameras are pinholes either way)."""
    from spirula.render.rasterizer import Rasterizer
    from spirula.train.optimizer import record_fpbo
    from spirula.train.step_params import STEP_PARAMS_WORDS, step_params

    views, n, pool = len(scene["viewmats"]), model.n, dev.pool
    nc = normals is not None
    H, W = scene["height"], scene["width"]
    raster = Rasterizer(dev, W, H, views, capacity=n, isect_capacity=100_000, normals=nc)
    raster.set_cameras(scene["viewmats"], scene["Ks"])
    raster.set_backgrounds(None)
    gc = (rng.standard_normal((views, H, W, 3)) * 0.1).astype(np.float32)
    dev.upload(raster.grad_colors, gc)
    if nc:
        normals["grad_normals"] = (rng.standard_normal((views, H, W, 3)) * 0.1).astype(np.float32)
        normals["grad_depths"] = (rng.standard_normal((views, H, W)) * 0.02).astype(np.float32)
        dev.upload(raster.grad_normal_image, normals["grad_normals"])
        dev.upload(raster.grad_depth_image, normals["grad_depths"])
    params = pool.alloc("fpbo_case.params", (STEP_PARAMS_WORDS,), np.uint32)
    p = step_params(
        step=step,
        seed=seed,
        n_views=views,
        n_splats=n,
        bias1=1 - 0.9**step,
        bias2=1 - 0.999**step,
        beta1=0.9,
        beta2=0.999,
        adam_eps=1e-15,
        **lr,
        **reg,
    )
    dev.upload(params, np.frombuffer(p.tobytes(), np.uint32))
    stats = (
        pool.alloc("fpbo_case.g2d", (n,), np.float32, zero=True),
        pool.alloc("fpbo_case.cnt", (n,), np.uint32, zero=True),
    )
    rec = dev.recorder("fpbo_case")
    raster.record_project(rec, model.params, sh_degree, normals=nc)
    raster.record_raster(rec, normals=nc)
    raster.record_raster_backward(rec, normals=nc)
    flatten = reg.get("flatten_reg", 0.0) > 0
    record_fpbo(
        rec,
        model,
        raster,
        params,
        stats,
        sh_degree,
        mcmc_noise=False,
        adc_stats=adc_stats,
        depth_grad=nc,
        flatten=flatten,
        normals=nc,
        lenses=lenses,
    )
    rec.finish().run()
    visible = (dev.readback(raster.radii, shape=(views, n, 2)) != 0).any(-1)
    count = dev.readback(stats[1])
    for b in (params, *stats):
        pool.free(b)
    raster.free()
    return gc, visible, count


def check_fpbo(dev, sh_degree=3, step=7, n=150, compact=False):
    """One fused update against the reference gradients (projection and
    rasterization, chained to log-scales and opacity logits, plus the
    regularizers) and Adam; tolerances of tests/test_fpbo.py: an update is at
    most ~lr, so 1e-3 lr + 1 ulp of the parameter; moments rtol 1e-3 and 2e-3
    with atol 1e-4 of their largest. ``compact``: on --compact's rows, from
    values they hold, plus one ulp of fp16 (SH past the DC) or bf16 (the
    moments of SH, means, quats, scales) for the stochastic rounding of the
    stores (tests/test_compact.py)."""
    from spirula.reference.adam import fpbo_expected
    from spirula.reference.render import rasterization_bwd
    from spirula.train import storage
    from spirula.train.model import SplatModel

    s = random_scene(n=n, cameras=1, sh_degree=sh_degree, seed=30 + sh_degree)
    rng = np.random.default_rng(4)
    K = s["sh_coeffs"].shape[1]
    raw = raw_params(s)
    moments = dict(
        exp_avg={k: (rng.standard_normal(a.shape) * 1e-3).astype(np.float32) for k, a in raw.items()},
        exp_avg_sq={k: np.abs(rng.standard_normal(a.shape) * 1e-6).astype(np.float32) for k, a in raw.items()},
    )
    if compact:  # values the compact rows hold exactly
        raw["sh"] = s["sh_coeffs"] = storage.decode_sh(storage.encode_sh(raw["sh"]), K)
        for key in moments:
            for name in moments[key]:
                moments[key][name] = storage.quantize(name, moments[key][name], True, K)
    model = SplatModel(dev, n, n, K, compact=compact)
    model.upload(raw, moments)
    gc, vis, count = gpu_fpbo_step(dev, model, s, sh_degree, step, rng)
    got = model.download()
    model.free()

    g = rasterization_bwd(**_f64(s), grad_colors=gc.astype(np.float64))
    want = fpbo_expected(raw, moments, g, s["scales"], s["opacities"], FPBO_REG, FPBO_LR, step)
    params_rows, m_rows = [], []
    kernel = "fpbo (compact)" if compact else "fpbo"
    for name, (want_p, want_m, want_v, lr) in want.items():
        bound = 1e-3 * lr + 2**-22 * np.abs(want_p)
        m_bound = 1e-4 * np.abs(want_m).max() + 1e-12 + 1e-3 * np.abs(want_m)
        v_bound = 1e-4 * np.abs(want_v).max() + 1e-18 + 2e-3 * np.abs(want_v)
        if compact and name == "sh":
            bound = bound + _ulp(np.maximum(np.abs(got["params"][name]), np.abs(want_p)), 10, -14)
            bound[:, 0] = (1e-3 * lr + 2**-22 * np.abs(want_p))[:, 0]  # the DC stays float32
        if compact and name in ("sh",) + storage.BF16_MOMENTS:  # bf16 moments
            m_bound = m_bound + _ulp(np.maximum(np.abs(got["exp_avg"][name]), np.abs(want_m)), 7, -126)
            v_bound = v_bound + _ulp(np.maximum(np.abs(got["exp_avg_sq"][name]), np.abs(want_v)), 7, -126)
        tolerance = "1e-3 lr + 2^-22 |p|" + (" + 1 fp16 ulp" if compact else "")
        params_rows.append(_within(kernel, got["params"][name], want_p, bound, tolerance))
        m_rows.append(_within("", got["exp_avg"][name], want_m, m_bound, ""))
        m_rows.append(_within("", got["exp_avg_sq"][name], want_v, v_bound, ""))
    row = _merge(kernel, params_rows)
    row.tolerance += " (moments: 1e-3, 2e-3 rel%s)" % (" + 1 bf16 ulp" if compact else "")
    row.ok &= all(r.ok for r in m_rows) and bool(np.array_equal(count, vis.sum(0)))
    return [row]


def _ulp(x, mantissa_bits, min_exponent):
    """The spacing of a binary float format with ``mantissa_bits`` stored bits at |x|."""
    e = np.floor(np.log2(np.maximum(np.abs(np.asarray(x, np.float64)), 2.0**min_exponent)))
    return 2.0 ** (e - mantissa_bits)


def check_fpbo_compact(dev):
    return check_fpbo(dev, compact=True)


# ---- densification ----------------------------------------------------------------------


def _splats(n, seed, sh_coeffs=4):
    """Raw splats with unique means (a copy is found by its mean's bits)."""
    rng = np.random.default_rng(seed)
    o = rng.uniform(0.05, 0.95, n)
    return dict(
        means=rng.normal(0, 0.3, (n, 3)).astype(np.float32),
        quats=rng.standard_normal((n, 4)).astype(np.float32),
        scales=np.log(rng.uniform(0.06, 0.2, (n, 3))).astype(np.float32),
        opacities=np.log(o / (1 - o)).astype(np.float32),
        sh=rng.uniform(-0.5, 0.5, (n, sh_coeffs, 3)).astype(np.float32),
    )


def _sources(before, after):
    index = {m.tobytes(): i for i, m in enumerate(before)}
    return np.array([index.get(m.tobytes(), -1) for m in after])


def _sigmoid(x):
    return 1 / (1 + np.exp(-np.asarray(x, np.float64)))


def check_mcmc(dev):
    """Relocation (40 of 300 dead) then, separately, 5% growth: each splat
    after is a bit-exact copy of a live one, with the opacity and scale the
    relocation formula gives for the number sharing it: rel 2e-6 as
    tests/test_strategy.py, plus what 1 - pow(1 - o, 1/n) loses to
    cancellation, a few ulps of 1 (2^-22) in o' and 2^-22 / o' relative in
    the scale (o' near 0.04 reaches 3e-6 relative on lavapipe)."""
    from spirula.reference.densify import relocation
    from spirula.train.config import MCMC
    from spirula.train.model import SplatModel
    from spirula.train.strategy import MCMCStrategy

    rows = []
    for case, (n, n_dead, cap) in enumerate(((300, 40, 300), (400, 0, 1000))):
        rng = np.random.default_rng(4 + case)
        a = _splats(n, seed=3 + case)
        o = _sigmoid(a["opacities"])
        dead = rng.choice(n, n_dead, replace=False)
        o[dead] = rng.uniform(0.0005, 0.0045, n_dead)
        a["opacities"] = np.log(o / (1 - o)).astype(np.float32)
        model = SplatModel(dev, n, cap, 4)
        model.upload(a)
        strategy = MCMCStrategy(MCMC(cap_max=cap))
        strategy.refine(model, 600, dev)
        got = model.download()["params"]
        n_after = model.n
        model.free()
        for b in strategy._bufs.values():
            dev.pool.free(b)
        for scan in (strategy._scan_u, strategy._scan_f):
            dev.pool.free(scan.scratch)
        src = _sources(a["means"], got["means"])
        ok = n_after == min(cap, int(1.05 * n)) and (src >= 0).all() and not np.isin(src, dead).any()
        if not ok:
            rows.append(Row("densify_mcmc_*", float("nan"), "sources live, count", False))
            continue
        shares = np.bincount(src, minlength=n)
        o_want, s_want = zip(*(relocation(o[s], np.exp(a["scales"][s].astype(np.float64)), shares[s]) for s in src))
        o_want, s_want = np.array(o_want), np.array(s_want)
        rows.append(_within("", _sigmoid(got["opacities"]), o_want, 2e-6 * o_want + 2.0**-22, ""))
        rel = 2e-6 + 2.0**-22 / o_want[:, None]
        rows.append(_within("", np.exp(got["scales"].astype(np.float64)), s_want, rel * s_want, ""))
        rows.append(
            _exact(
                "", np.r_[got["quats"].ravel(), got["sh"].ravel()], np.r_[a["quats"][src].ravel(), a["sh"][src].ravel()]
            )
        )
        rows[-1].error = 0.0 if rows[-1].ok else rows[-1].error
    row = _merge("densify_mcmc_weights/sample/relocate/copy", rows)
    row.tolerance = "2e-6 |ref| + 2^-22 in o' (copies exact)"
    return [row]


def check_adc(dev):
    """Clone, split and prune of hand-placed splats (tests/test_strategy.py's
    case) against :func:`spirula.reference.densify.adc_refine`: the splats
    after match exactly, a child's log-scale within 1e-6; then the opacity
    reset (rtol 1e-5)."""
    from spirula.reference.densify import SPLIT_SHRINK, adc_refine, adc_reset
    from spirula.train.config import ADC
    from spirula.train.model import SplatModel
    from spirula.train.strategy import ADCStrategy

    cfg = ADC()
    ext, big = 1.0, 0.2
    scale = [0.005, 0.05, 0.005, 0.05, 0.05, 0.005, big, big]
    opac = np.array([0.5, 0.6, 0.003, 0.7, 0.4, 0.004, 0.5, 0.5])
    grad = np.array([3e-3, 2e-3, 1e-3, 1e-4, 0.0, 5e-3, 1e-4, 4e-3], np.float32)
    vis = np.array([10, 5, 2, 1, 0, 1, 1, 2], np.uint32)
    a = _splats(8, seed=12)
    a["scales"] = np.log(np.array(scale)[:, None] * [1.0, 0.5, 0.25]).astype(np.float32)
    a["opacities"] = np.log(opac / (1 - opac)).astype(np.float32)
    rows = []
    for step in (600, 3100):  # before and after the first reset (prune_big)
        model = SplatModel(dev, 8, 8, 4)
        model.upload(a)
        stats = (dev.pool.alloc("selftest.g2d", (8,), np.float32), dev.pool.alloc("selftest.cnt", (8,), np.uint32))
        dev.upload(stats[0], grad)
        dev.upload(stats[1], vis)
        changes = ADCStrategy(cfg).refine(model, stats, step, ext, dev)
        model = changes.model
        got = model.download()["params"]
        n_after = model.n
        model.free()
        for b in stats:
            dev.pool.free(b)
        want = adc_refine(
            a["scales"],
            a["opacities"],
            grad,
            vis,
            cfg.grow_grad2d,
            cfg.grow_scale3d * ext,
            cfg.prune_scale3d * ext,
            cfg.min_opacity,
            step > cfg.reset_every,
        )
        if n_after != len(want):
            rows.append(Row("", float(abs(n_after - len(want))), "", False))
            continue
        j = np.array([w[0] for w in want])
        child = np.array([w[1] == "child" for w in want])
        same = ~child
        rows.append(
            _exact(
                "",
                np.r_[got["quats"].ravel(), got["opacities"], got["sh"].ravel()],
                np.r_[a["quats"][j].ravel(), a["opacities"][j], a["sh"][j].ravel()],
            )
        )
        rows.append(
            _exact(
                "",
                np.r_[got["means"][same].ravel(), got["scales"][same].ravel()],
                np.r_[a["means"][j[same]].ravel(), a["scales"][j[same]].ravel()],
            )
        )
        for r in rows[-2:]:
            r.error = 0.0 if r.ok else r.error
        rows.append(_within("", got["scales"][child], a["scales"][j[child]] - np.log(SPLIT_SHRINK), 1e-6, ""))
    row = _merge("densify_adc_classify + densify_adc_write", rows)
    row.tolerance = "exact (child log-scale 1e-6)"
    out = [row]

    n = 50
    b = _splats(n, seed=14)
    o = np.r_[np.linspace(0.02, 0.99, 40), np.linspace(0.001, 0.0099, 10)]
    b["opacities"] = np.log(o / (1 - o)).astype(np.float32)
    model = SplatModel(dev, n, n, 4)
    model.upload(b)
    ADCStrategy(cfg).reset_opacity(model, dev)
    got = model.download()["params"]["opacities"]
    model.free()
    want = _sigmoid(adc_reset(b["opacities"], cfg.min_opacity))
    out.append(_within("densify_adc_reset", _sigmoid(got), want, 1e-5 * want, "1e-5 |ref|"))
    return out


def check_tsdf(dev):
    """tsdf_integrate: two synthetic views (surface, half-transparent and empty pixels) into a
    slab of a volume, against the float64 reference. Voxels within 1e-5; a voxel centre
    within float32 rounding of a pixel edge may read the neighbour pixel (<= 1e-3 of them)."""
    from spirula.mesh.cameras import look_at
    from spirula.mesh.tsdf import TSDFVolume
    from spirula.reference.tsdf import tsdf_integrate

    rng = np.random.default_rng(21)
    H, W = 30, 40
    K = np.array([[30.0, 0, W / 2 + 0.3], [0, 30.0, H / 2 - 0.2], [0, 0, 1]])
    vol = TSDFVolume(dev, [-1.3, -0.9, -1.1], 0.1, (20, 17, 23), 0.4, name="selftest.tsdf", x_offset=3)
    cfg = vol.config
    t, w, c = np.full(vol.dims, 0.4), np.zeros(vol.dims), np.zeros(vol.dims + (4,))
    try:
        for eye in ((0.0, -3.0, 0.2), (2.9, 0.5, 0.3)):
            alpha = rng.choice([0.0, 0.02, 0.3, 0.7, 0.95], (H, W)).astype(np.float32)
            depth = np.where(alpha > 0.5, rng.uniform(2.5, 3.5, (H, W)), 0).astype(np.float32)
            color = (rng.uniform(0, 1, (H, W, 3)) * alpha[..., None]).astype(np.float32)
            vm = look_at(eye, (0.05, 0.0, -0.05))
            vol.integrate(depth, alpha, color, vm, K)
            t, w, c = tsdf_integrate(
                t, w, c, depth, alpha, color, vm, K, vol.origin, 0.1, 0.4,
                cfg.alpha_surface, cfg.alpha_empty, cfg.carve_weight, 3,
            )  # fmt: skip
        gt, gw, gc = vol.extract()
    finally:
        vol.free()
    bad = (np.abs(gt - t) > 1e-5) | (np.abs(gw - w) > 1e-5) | (np.abs(gc - c[..., :3]) > 1e-5).any(-1)
    off = float(bad.mean())
    return [Row("tsdf_integrate", off, "1e-5; <= 1e-3 of voxels flip", off <= 1e-3 and bool((w > 0).any()))]


def check_pack(dev):
    """pack_rgba8: an image with every rounding tie, NaN and infinities, against
    its reference (spirula/reference/pack.py), exactly."""
    from spirula.reference.pack import pack_rgba8, rgb8_case
    from spirula.render.pack import record_pack_rgba8

    rgb = rgb8_case(45, 61, seed=3).reshape(-1, 3)
    src = dev.pool.alloc("selftest.rgb", rgb.shape, np.float32)
    dst = dev.pool.alloc("selftest.packed", (rgb.shape[0],), np.uint32)
    try:
        dev.upload(src, rgb)
        record_pack_rgba8(dev.recorder("selftest.pack"), src, dst, rgb.shape[0]).finish().run()
        got = dev.readback(dst)
    finally:
        dev.pool.free(src)
        dev.pool.free(dst)
    return [_exact("pack_rgba8", got, pack_rgba8(rgb))]


def check_normal_consistency(dev):
    """normal_consistency_fwd/bwd (--geometry) on a smooth depth surface with holes, seen by
    a pinhole and by a fisheye whose corners lie past its valid angle (the rays through the
    lens, lens_ray), against the float64 reference (tests/test_normals.py: 2e-5 of each
    output's largest)."""
    from spirula.reference.normals import normal_consistency_bwd, normal_consistency_case, normal_consistency_fwd
    from spirula.reference.projection import OPENCV_FISHEYE, PINHOLE
    from spirula.render.raster_buffers import pack_cameras
    from spirula.train.normal_consistency import record_normal_consistency

    N, d, a, Ks, g = normal_consistency_case()
    C, H, W = d.shape
    models = [PINHOLE] * (C - 1) + [OPENCV_FISHEYE]
    dists = np.zeros((C, 12))
    dists[-1, 0] = -0.05  # theta_d stops growing at theta 2.58 rad: the corners have no ray
    Ks = Ks.copy()
    Ks[-1] = [[4.5, 0, 8.6], [0, 4.6, 6.4], [0, 0, 1]]
    cams = pack_cameras(np.broadcast_to(np.eye(4), (C, 4, 4)), Ks, models, dists)
    f32 = np.float32
    arrays = dict(normals=N, depths=d, alphas=a, cameras=cams, grad_loss=g)
    bufs = {k: dev.pool.alloc("selftest.nc." + k, v.shape, f32) for k, v in arrays.items()}
    for k in ("out_loss", "grad_depths"):
        bufs[k] = dev.pool.alloc("selftest.nc." + k, (C, H, W), f32)
    bufs["grad_normals"] = dev.pool.alloc("selftest.nc.grad_normals", (C, H, W, 3), f32)
    try:
        for k, v in arrays.items():
            dev.upload(bufs[k], v.astype(f32))
        rec = dev.recorder("selftest.normal_consistency")
        record_normal_consistency(rec, *(bufs[k] for k in ("normals", "depths", "alphas", "cameras")), W, H, C, **{
            k: bufs[k] for k in ("out_loss", "grad_loss", "grad_normals", "grad_depths")
        })  # fmt: skip
        rec.finish().run()
        got = [dev.readback(bufs[k]) for k in ("out_loss", "grad_normals", "grad_depths")]
    finally:
        for b in bufs.values():
            dev.pool.free(b)
    want = [normal_consistency_fwd(N, d, a, Ks, models, dists), *normal_consistency_bwd(N, d, a, Ks, g, models, dists)]
    names = ("normal_consistency_fwd", "normal_consistency_bwd", "normal_consistency_bwd")
    return [_within(n, x, w, 2e-5 * np.abs(w).max(), "2e-5 max|ref|") for n, x, w in zip(names, got, want)]


def check_appearance(dev):
    """ppisp_fwd/bwd, bilagrid_fwd/bwd/tv and adam_small on small cases against the float64
    reference (tests/test_appearance.py: 2e-5 of each output's largest; the parameter sums
    (2e-5 + their terms' count x 2^-24) of the sum of their terms' magnitudes; Adam a few
    ulps, its v 1e-4 for beta2's float32 rounding)."""
    from spirula.reference import appearance as ref
    from spirula.reference.adam import adam
    from spirula.train import appearance as app
    from spirula.train.step_params import step_params

    f32 = np.float32
    rgb, e, c8, vig, cp, g = ref.ppisp_case()
    H, W, _ = rgb.shape
    rgb, g = rgb.astype(f32), g.astype(f32)
    flat = ref.ppisp_pack([e], c8, vig, cp).astype(f32)
    grid, brgb, bg = ref.bilagrid_case()
    grid, brgb, bg = grid.astype(f32), brgb.astype(f32), bg.astype(f32)
    BH, BW, _ = brgb.shape
    shape = grid.shape[:3]
    threads = app.ppisp_threads(W, H)
    p0 = np.linspace(-1.0, 1.0, 64).astype(f32)
    pg = np.cos(np.arange(64)).astype(f32)
    arrays = dict(
        step=np.frombuffer(step_params().tobytes(), np.uint32), image_cameras=np.zeros(1, np.uint32), ppisp=flat,
        rgb=rgb, g=g, pgrads=np.zeros_like(flat), grid=grid, brgb=brgb, bg=bg, ggrid=np.zeros_like(grid),
        params=p0, grads=pg, m=np.zeros_like(p0), v=np.zeros_like(p0),
        hyper=np.array(app.adam_hyper(2e-3, 1), f32),
        no_overflow=np.zeros(64, np.uint32),  # adam_small's guard: count 0, prev_isects 0, never skipped
    )  # fmt: skip
    bufs = {k: dev.pool.alloc("selftest.app." + k, v.shape, v.dtype) for k, v in arrays.items()}
    for k, like in (("out", rgb), ("grgb", rgb), ("bout", brgb), ("bgrgb", brgb), ("terms", grid)):
        bufs[k] = dev.pool.alloc("selftest.app." + k, like.shape, f32)
    bufs["partials"] = dev.pool.alloc("selftest.app.partials", (app.PPISP_ROWS * threads,), f32)
    try:
        for k, v in arrays.items():
            dev.upload(bufs[k], v)
        b = bufs
        rec = dev.recorder("selftest.appearance")
        app.record_ppisp_fwd(rec, b["step"], b["image_cameras"], b["ppisp"], b["rgb"], b["out"], W, H, 0, 1, 1)
        app.record_ppisp_bwd(rec, b["step"], b["image_cameras"], b["ppisp"], b["rgb"], b["g"], b["grgb"],
                             b["partials"], b["pgrads"], W, H, 0, 1, 1)  # fmt: skip
        app.record_bilagrid_fwd(rec, b["step"], b["grid"], b["brgb"], b["bout"], BW, BH, 0, 1, shape)
        app.record_bilagrid_bwd(rec, b["step"], b["grid"], b["brgb"], b["bg"], b["bgrgb"], b["ggrid"], BW, BH, 0, 1,
                                shape)  # fmt: skip
        rec.finish().run()
        got = {k: dev.readback(b[k]) for k in ("out", "grgb", "pgrads", "bout", "bgrgb", "ggrid")}
        rec = dev.recorder("selftest.appearance_tv")
        app.record_bilagrid_tv(rec, b["grid"], b["ggrid"], b["terms"], 1, 1.0, shape)
        guard = (b["no_overflow"], 0, 0, b["no_overflow"])
        app.record_adam_small(rec, b["params"], b["grads"], b["m"], b["v"], b["hyper"], p0.size, 0, guard)
        rec.finish().run()
        got.update({k: dev.readback(b[k]) for k in ("ggrid", "terms", "params", "m", "v")})
    finally:
        for buf in bufs.values():
            dev.pool.free(buf)
    x64 = lambda a: a.astype(np.float64)  # noqa: E731
    want = ref.ppisp_fwd(x64(rgb), e, c8, vig, cp)
    bwd = ref.ppisp_bwd(x64(rgb), e, c8, vig, cp, x64(g))
    wp = ref.ppisp_pack([bwd["exposure"]], bwd["color"], bwd["vignetting"], bwd["crf"])
    scale = np.abs(bwd["rows"]).max() + bwd["rows_abs"].max()
    n = -(-W * H // threads) + 2 * app.REDUCE
    rows = [
        _within("ppisp_fwd", got["out"], want, 2e-5 * np.abs(want).max(), "2e-5 max|ref|"),
        _within("ppisp_bwd", got["grgb"], bwd["rgb"], 2e-5 * np.abs(bwd["rgb"]).max(), "2e-5 max|ref|"),
        _within("ppisp_bwd", got["pgrads"], wp, (2e-5 + n * 2.0**-24) * scale, "sums: (2e-5 + n ulp) sum|terms|"),
    ]
    wout = ref.bilagrid_fwd(x64(grid), x64(brgb))
    wgg, wgr, gabs = ref.bilagrid_bwd(x64(grid), x64(brgb), x64(bg), with_abs=True)
    tv, gtv = ref.bilagrid_tv(x64(grid)[None])
    rows += [
        _within("bilagrid_fwd", got["bout"], wout, 2e-5 * np.abs(wout).max(), "2e-5 max|ref|"),
        _within("bilagrid_bwd", got["bgrgb"], wgr, 2e-5 * np.abs(wgr).max(), "2e-5 max|ref|"),
        _within(
            "bilagrid_bwd",
            got["ggrid"] - gtv[0],
            wgg,
            (2e-5 + BH * BW * 2.0**-24) * gabs + 2e-5 * np.abs(gtv).max(),
            "(2e-5 + HW ulp) sum|terms|",
        ),  # fmt: skip
        _within("bilagrid_tv", got["terms"].astype(np.float64).sum(), tv, 1e-5 * tv, "1e-5 |ref|"),
    ]
    wp, wm, wv = adam(x64(p0), x64(pg), 0.0, 0.0, 2e-3, 1)
    rows += [
        _within("adam_small", got["params"], wp, 1e-5 * 2e-3 + 2.0**-23 * np.abs(wp), "1e-5 lr + ulp"),
        _within("adam_small", got["v"], wv, 1e-4 * np.abs(wv), "1e-4 |ref| (float32 beta2)"),
    ]
    return rows


def check_ppisp_ctrl(dev):
    """PPISP's controller (ppisp_ctrl_fwd, ppisp_ctrl_mlp, ppisp_ctrl_bwd) on a 12 x 17 render
    against the float64 reference (tests/test_ppisp_ctrl.py: 1e-4 of each output's largest):
    its prediction and its weights' gradient for a seeded cotangent."""
    from spirula.reference import ppisp_ctrl as ref
    from spirula.train import controller as ctl
    from spirula.train.step_params import step_params

    rgb, w, g = ref.ctrl_case(12, 17, seed=5)
    rgb, w, g = (x.astype(np.float32) for x in (rgb, w, g))
    net = ctl.Controller(dev, 1, 1, weights=w, category="other")
    bufs = []
    try:
        for name, arr in (("step", np.frombuffer(step_params().tobytes(), np.uint32)),
                          ("cameras", np.zeros(1, np.uint32)), ("rgb", rgb[None])):  # fmt: skip
            bufs.append(dev.pool.alloc("selftest.ctrl." + name, arr.shape, arr.dtype))
            dev.upload(bufs[-1], np.ascontiguousarray(arr))
        step, cams, img = bufs
        dev.upload(net.pgrads, np.concatenate([g, np.zeros(27, np.float32)]))
        scratch = net.scratch(17, 12)
        rec = dev.recorder("selftest.ppisp_ctrl")
        ctl.record_ctrl_forward(rec, net, step, cams, img, scratch, 0, 1)
        ctl.record_ctrl_backward(rec, net, step, cams, img, scratch, 0, 1)
        rec.finish().run()
        out, grads = dev.readback(net.ppisp)[:9], dev.readback(net.grads)
    finally:
        for b in bufs:
            dev.pool.free(b)
        net.free()
    x64 = lambda a: a.astype(np.float64)  # noqa: E731
    want = ref.ctrl_fwd(x64(rgb), x64(w))["out"]
    wg = ref.ctrl_bwd(x64(rgb), x64(w), x64(g))["grads"]
    conv, mlp = slice(0, ref.CONV_SIZE), slice(ref.CONV_SIZE, ref.CTRL_SIZE)
    return [
        _within("ppisp_ctrl_fwd", out, want, 1e-4 * np.abs(want).max(), "1e-4 max|ref|"),
        _within("ppisp_ctrl_mlp", grads[mlp], wg[mlp], 1e-4 * np.abs(wg[mlp]).max(), "1e-4 max|ref|"),
        _within("ppisp_ctrl_bwd", grads[conv], wg[conv], 1e-4 * np.abs(wg[conv]).max(), "1e-4 max|ref|"),
    ]


def check_match(dev):
    """match_top2 + match_mutual: COLMAP's cross-checked ratio matching of two sets of
    random RootSIFT-like descriptors (half of b a noisy copy of a) against the reference
    (spirula/reference/match.py; tests/test_match.py): the same matches (integer dots)."""
    from spirula.features.match import DescriptorMatcher
    from spirula.reference import match as ref

    rng = np.random.default_rng(6)

    def unit(v):  # SIFT's bytes: a unit vector x 512, rounded
        return np.minimum(np.round(512 * v / np.linalg.norm(v, axis=1, keepdims=True)), 255).astype(np.uint8)

    va = rng.random((300, 128)) ** 4
    a = unit(va)
    b = unit(np.concatenate([va[:150] + 0.02 * rng.random((150, 128)), rng.random((200, 128)) ** 4]))
    m = DescriptorMatcher(dev, capacity=512)
    try:
        got = m.match(a, b)
    finally:
        m.close()
    want = ref.match(a, b)
    same = got.shape == want.shape and bool((got == want).all())
    ok = same and len(want) > 100
    return [Row("match_top2 + match_mutual", float(not same), "exact (%d matches)" % len(want), ok)]


def check_sift(dev):
    """The sift_* kernels: the whole SIFT extraction of a 96x72 image of random blobs against
    the float64 reference (spirula/reference/sift.py; tests/test_sift.py): keypoints (x, y,
    orientation) matched within 0.01 both ways for all but 1% (near-threshold decisions
    flip), matched descriptors' bytes within 1 (a rounding half)."""
    from scipy.spatial import cKDTree

    from spirula.features.sift import SiftExtractor
    from spirula.reference import sift as ref

    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[0:72, 0:96] + 0.5
    img = np.full((72, 96), 0.5)
    for cx, cy, r, a in zip(
        rng.uniform(0, 96, 60), rng.uniform(0, 72, 60), rng.uniform(1.5, 6, 60), rng.uniform(-0.4, 0.4, 60)
    ):
        img += a * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
    img = np.round(np.clip(img, 0, 1) * 255).astype(np.uint8)
    ex = SiftExtractor(dev, 96, 72, capacity=2048)
    try:
        kp, desc = ex.extract(img)
    finally:
        ex.close()
    rk, rd = ref.extract(img / 255.0)

    def f(k):
        return np.c_[k[:, :2], 10 * np.cos(k[:, 3]), 10 * np.sin(k[:, 3])]

    if len(kp) == 0 or len(rk) == 0:
        return [Row("sift_*", float(abs(len(kp) - len(rk))), "<= 1% unmatched", False)]
    d, j = cKDTree(f(rk)).query(f(kp))
    back, _ = cKDTree(f(kp)).query(f(rk))
    ok = d <= 0.01
    unmatched = max(1 - ok.mean(), (back > 0.01).mean())
    bytes_off = int(np.abs(desc[ok].astype(int) - rd[j[ok]].astype(int)).max()) if ok.any() else 255
    return [
        Row("sift_* keypoints", float(unmatched), "<= 1% unmatched", bool(unmatched <= 0.01 and len(rk) > 20)),
        Row("sift_* descriptors", float(bytes_off), "bytes within 1", bytes_off <= 1),
    ]


def check_nn(dev):
    """The neural-network runtime's kernels (spirula/nn/) in one recorded sequence against the
    float64 reference (spirula/reference/nn.py), each within its derived float bound:
    nn_linear (fp16 weights), nn_layer_norm, nn_gelu, nn_softmax, nn_matmul inside
    global multi-head attention, nn_upsample_bilinear, nn_conv2d, nn_conv_transpose2d and
    nn_window_partition inside Hiera's windowed attention, nn_max_pool2d inside its q-pooled
    multiscale attention, nn_upsample_bicubic, nn_add and nn_transpose inside its position
    embedding, nn_upsample_nearest (SAM 2's FPN), nn_pos_sine (its position encoding)."""
    from spirula import nn
    from spirula.reference import nn as ref

    rng = np.random.default_rng(5)

    def f32(a):
        return np.asarray(a, np.float32).astype(np.float64)

    x, w, b = f32(rng.normal(size=(4, 21))), rng.normal(0.0, 0.3, (7, 21)), f32(rng.normal(size=7))
    xn, g, beta = f32(rng.normal(1.0, 2.0, (3, 40))), f32(rng.normal(1.0, 0.2, 40)), f32(rng.normal(0.0, 0.2, 40))
    xg, xs = f32(np.linspace(-8.0, 8.0, 101)), f32(rng.normal(0.0, 4.0, (3, 40)))
    T, C, heads = 6, 8, 2
    xa, b1, b2 = f32(rng.normal(size=(T, C))), f32(rng.normal(0.0, 0.1, 3 * C)), f32(rng.normal(0.0, 0.1, C))
    w1, w2 = rng.normal(0.0, C**-0.5, (3 * C, C)), rng.normal(0.0, C**-0.5, (C, C))
    xu = f32(rng.normal(size=(2, 5, 6)))
    xw = f32(rng.normal(size=(1, 5, 4, C)))  # windows of 3: padded to 6 x 6
    xm, w3 = f32(rng.normal(size=(1, 4, 5, C // 2))), rng.normal(0.0, (C // 2) ** -0.5, (3 * C, C // 2))
    pos, win = f32(rng.normal(size=(C, 3, 4))), f32(rng.normal(size=(C, 2, 2)))
    xc, wc, wt = (
        f32(rng.normal(size=(1, 4, 9, 10))),
        rng.normal(0.0, 0.2, (6, 2, 3, 3)),
        rng.normal(0.0, 0.3, (4, 3, 2, 2)),
    )
    made = []

    def t(a):
        made.append(nn.Tensor.from_numpy(dev, a, "selftest.nn"))
        return made[-1]

    def hw(a):
        made.append(nn.HalfWeight(dev, a, "selftest.nn.w"))
        return made[-1]

    try:
        rec = dev.recorder("selftest.nn")
        outs = [
            nn.linear(rec, t(x), hw(w), t(b)),
            nn.layer_norm(rec, t(xn), t(g), t(beta)),
            nn.gelu(rec, t(xg)),
            nn.softmax(rec, t(xs), 0.7),
            nn.multi_head_attention(rec, t(xa), hw(w1), t(b1), hw(w2), t(b2), heads),
            nn.upsample_bilinear(rec, t(xu), (9, 13)),
            nn.conv2d(rec, t(xc), hw(wc.reshape(6, -1)), 3, stride=2, padding=1, groups=2),
            nn.conv_transpose2d(rec, t(xc), hw(nn.conv_transpose_weight(wt)), 2, stride=2),
            nn.windowed_attention(rec, t(xw), 3, hw(w1), t(b1), hw(w2), t(b2), heads),
            nn.multiscale_attention(rec, t(xm), hw(w3), t(b1), hw(w2), t(b2), heads, 2),
            nn.hiera_pos_embed(rec, t(pos), t(win), (6, 8)),
            nn.upsample_nearest(rec, t(xu), (10, 13)),
            nn.pos_sine(rec, 16, (6, 9)),
        ]
        made.extend(outs)
        rec.finish().run()
        got = [o.numpy() for o in outs]
    finally:
        for m in made:
            m.free()
    attn = (xa, ref.half(w1), b1, ref.half(w2), b2, heads)
    return [
        _within("nn_linear", got[0], ref.linear(x, w, b), ref.linear_bound(x, w, b, True), "fp16 w + f32 sum"),
        _within("nn_layer_norm", got[1], ref.layer_norm(xn, g, beta), ref.layer_norm_bound(xn, g, beta), "f32 bound"),
        _within("nn_gelu", got[2], ref.gelu(xg), ref.gelu_bound(xg), "A&S erf + f32"),
        _within("nn_softmax", got[3], ref.softmax(xs, 0.7), ref.softmax_bound(xs, 0.7), "f32 bound"),
        _within(
            "nn_matmul (attention)",
            got[4],
            ref.multi_head_attention(*attn),
            ref.multi_head_attention_bound(xa, *attn[1:]),
            "f32 bound",
        ),  # fmt: skip
        _within(
            "nn_upsample_bilinear",
            got[5],
            ref.upsample_bilinear(xu, (9, 13)),
            ref.upsample_bilinear_bound(xu, (9, 13)),
            "f32 bound",
        ),  # fmt: skip
        _within(
            "nn_conv2d",
            got[6],
            ref.conv2d(xc, ref.half(wc), None, (2, 2), (1, 1), 2),
            ref.conv2d_bound(xc, wc, None, (2, 2), (1, 1), 2),
            "f32 sum",
        ),  # fmt: skip
        _within(
            "nn_conv_transpose2d",
            got[7],
            ref.conv_transpose2d(xc, ref.half(wt), None, (2, 2)),
            ref.conv_transpose2d_bound(xc, wt, None, (2, 2)),
            "f32 sum",
        ),  # fmt: skip
        _within(
            "nn_window_partition (windowed attention)",
            got[8],
            ref.windowed_attention(xw, 3, *attn[1:]),
            ref.windowed_attention_bound(xw, 3, *attn[1:]),
            "f32 bound",
        ),  # fmt: skip
        _within(
            "nn_max_pool2d (multiscale attention)",
            got[9],
            ref.multiscale_attention(xm, ref.half(w3), b1, ref.half(w2), b2, heads, 2),
            ref.multiscale_attention_bound(xm, w3, b1, w2, b2, heads, 2),
            "f32 bound",
        ),  # fmt: skip
        _within(
            "nn_upsample_bicubic, nn_add, nn_transpose (position embedding)",
            got[10],
            ref.hiera_pos_embed(pos, win, (6, 8)),
            ref.hiera_pos_embed_bound(pos, win, (6, 8)),
            "f32 bound",
        ),  # fmt: skip
        _exact("nn_upsample_nearest", got[11], ref.upsample_nearest(xu, (10, 13))),
        _within("nn_pos_sine", got[12], ref.pos_sine(16, (6, 9)), ref.pos_sine_bound(16, (6, 9)), "sin 2^-11"),
    ]


CHECKS = (
    check_runtime,
    check_sort,
    check_render,
    check_loss,
    check_fpbo,
    check_fpbo_compact,
    check_mcmc,
    check_adc,
    check_tsdf,
    check_pack,
    check_normal_consistency,
    check_appearance,
    check_ppisp_ctrl,
    check_sift,
    check_match,
    check_nn,
)


def run(dev, checks=CHECKS) -> list:
    """Every check's rows, in order; a check that raises gives one failing row."""
    rows = []
    for check in checks:
        try:
            rows += check(dev)
        except Exception as exc:  # a kernel that fails to run is a failure too
            rows.append(Row(check.__name__[6:], float("nan"), "%s: %s" % (type(exc).__name__, exc), False))
    return rows


def table(rows) -> str:
    w = max(len(r.kernel) for r in rows)
    lines = ["%-*s  %10s  %-48s  %s" % (w, "kernel", "max error", "tolerance", "pass")]
    for r in rows:
        lines.append("%-*s  %10.3g  %-48s  %s" % (w, r.kernel, r.error, r.tolerance, "ok" if r.ok else "FAIL"))
    return "\n".join(lines)
