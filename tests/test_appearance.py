"""Appearance correction (docs/design.md §2.8): the float64 reference
(spirula/reference/appearance.py) against finite differences, and the kernels ppisp_fwd/bwd,
bilagrid_fwd/bwd, bilagrid_tv and adam_small against the reference on each backend (the
``backend`` fixture: the CUDA half runs with ``-m cuda`` where a CUDA GPU is), plus the two
backends against each other and the kernels' rows in SS_PROFILE's table."""

import re

import numpy as np
import pytest
from conftest import ROOT
from kernel_cases import REPORT, assert_near, profile_rows

from spirula.reference import appearance as ref
from spirula.reference.adam import adam
from spirula.train import appearance as app
from spirula.train.step_params import STEP_PARAMS_DTYPE, step_params

F32_EPS = 2.0**-24

# ---- the reference -------------------------------------------------------------------


def _fd(f, x, h=1e-6):
    """Central differences of the scalar f at every element of x (float64, step 1e-6:
    truncation ~1e-12 x the third derivative, rounding ~1e-16 / 1e-6)."""
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        out[i] = (f(xp) - f(xm)) / (2 * h)
    return out


def test_ppisp_reference_starts_as_the_identity():
    """ppisp_init: exposure 0, no vignetting, H = I, the CRF x -> x; only the intensity's
    1e-5 guard moves a pixel, by a factor I / (I + 1e-5)."""
    rgb = np.random.default_rng(3).uniform(0.1, 0.9, (5, 6, 3))
    p = ref.ppisp_unpack(ref.ppisp_init(2, 1), 2, 1)
    np.testing.assert_allclose(ref.color_homography(p["color"][1]), np.eye(3), atol=1e-15)
    out = ref.ppisp_fwd(rgb, p["exposure"][1], p["color"][1], p["vignetting"][0], p["crf"][0])
    np.testing.assert_allclose(out, rgb, rtol=1e-5 / rgb.sum(-1).min() + 1e-12)


def test_ppisp_reference_backward_matches_finite_differences():
    """Every parameter's and the image's gradient against central differences of
    sum(g out), within 1e-7 of the largest. The image's differences take a step of 2e-7:
    a CRF with gamma < 1 is steep near 0 (its third derivative ~ x^-2.6), where a step of
    1e-6 truncates by ~1e-6; rounding then costs ~1e-16 x |loss| (~50) / 4e-7 ~ 1e-8."""
    rgb, e, c8, vig, cp, g = ref.ppisp_case()
    got = ref.ppisp_bwd(rgb, e, c8, vig, cp, g)
    kw = dict(rgb=rgb, exposure=e, color=c8, vignetting=vig, crf_params=cp)

    def loss(**change):
        return float((ref.ppisp_fwd(**dict(kw, **change)) * g).sum())

    for name, key in (("color", "color"), ("vignetting", "vignetting"), ("crf_params", "crf"), ("rgb", "rgb")):
        fd = _fd(
            lambda x, name=name: loss(**{name: x}), np.array(kw[name], np.float64), 2e-7 if name == "rgb" else 1e-6
        )
        np.testing.assert_allclose(got[key], fd, atol=1e-7 * np.abs(fd).max(), err_msg=name)
        assert np.abs(fd).max() > 0.1, name
    fd = (loss(exposure=e + 2e-7) - loss(exposure=e - 2e-7)) / 4e-7
    assert abs(got["exposure"] - fd) <= 1e-7 * got["rows_abs"][0]  # a sum over pixels: of its terms' size


def test_bilagrid_reference_backward_and_tv_match_finite_differences():
    """The grid's and the image's gradient (the luminance's path included; some pixels are
    outside [0, 1], so their gz is clamped) and the TV's gradient, within 1e-7."""
    grid, rgb, g = ref.bilagrid_case()
    ggrid, grgb = ref.bilagrid_bwd(grid, rgb, g)
    fd = _fd(lambda x: float((ref.bilagrid_fwd(x, rgb) * g).sum()), grid)
    np.testing.assert_allclose(ggrid, fd, atol=1e-7 * np.abs(fd).max())
    fd = _fd(lambda x: float((ref.bilagrid_fwd(grid, x) * g).sum()), rgb)
    np.testing.assert_allclose(grgb, fd, atol=1e-7 * np.abs(fd).max())
    grids = np.random.default_rng(1).normal(size=(2, 3, 4, 5, 12))
    _, gtv = ref.bilagrid_tv(grids)
    fd = _fd(lambda x: ref.bilagrid_tv(x)[0], grids)
    np.testing.assert_allclose(gtv, fd, atol=1e-7 * np.abs(fd).max())
    # the identity grid changes nothing, and has no variation
    ident = ref.bilagrid_identity(1, 4, 5, 6)
    np.testing.assert_allclose(ref.bilagrid_fwd(ident[0], rgb), rgb, atol=1e-15)
    assert ref.bilagrid_tv(ident)[0] == 0.0


def test_the_kernels_read_the_views_image_where_step_params_keeps_it():
    text = (ROOT / "shaders" / "include" / "appearance.glsl").read_text()
    word = int(re.search(r"STEP_IMAGE_INDEX_WORD = (\d+)u;", text).group(1))
    assert STEP_PARAMS_DTYPE.fields["image_index"][1] == 4 * word
    for field in ("prev_capacity", "prev_isects"):  # adam_small's guard, as fpbo's
        at = int(re.search(r"STEP_%s_WORD = (\d+)u;" % field.upper(), text).group(1))
        assert STEP_PARAMS_DTYPE.fields[field][1] == 4 * at, field
    assert int(re.search(r"PPISP_ROWS = (\d+)u;", text).group(1)) == app.PPISP_ROWS == ref.PPISP_ROWS


# ---- the kernels ---------------------------------------------------------------------


class _Bufs:
    """Pool buffers from arrays (float32 unless given as another dtype), freed together."""

    def __init__(self, dev):
        self.dev, self.b = dev, {}

    def __getitem__(self, k):
        return self.b[k]

    def put(self, name, arr):
        arr = np.ascontiguousarray(arr)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        self.b[name] = self.dev.pool.alloc("test.appearance." + name, arr.shape, arr.dtype)
        self.dev.upload(self.b[name], arr)

    def empty(self, name, shape):
        self.b[name] = self.dev.pool.alloc("test.appearance." + name, shape, np.float32)

    def read(self, name):
        return self.dev.readback(self.b[name])

    def free(self):
        for b in self.b.values():
            self.dev.pool.free(b)


def _step(view, image):
    idx = np.zeros(STEP_PARAMS_DTYPE["image_index"].shape, np.uint32)
    idx[view] = image
    return np.frombuffer(step_params(image_index=idx).tobytes(), np.uint32)


F_FRAMES, N_CAMERAS, VIEWS, VIEW = 3, 2, 2, 1
FRAME, CAMERA = 2, 1  # the view's image and its camera


def _ppisp_inputs(H=11, W=14):
    rgb, e, c8, vig, cp, g = ref.ppisp_case(H, W)
    rng = np.random.default_rng(7)
    p = ref.ppisp_unpack(rng.normal(0.0, 0.3, ref.ppisp_layout(F_FRAMES, N_CAMERAS)["size"][0]), F_FRAMES, N_CAMERAS)
    p["exposure"][FRAME], p["color"][FRAME], p["vignetting"][CAMERA], p["crf"][CAMERA] = e, c8, vig, cp
    flat = ref.ppisp_pack(p["exposure"], p["color"], p["vignetting"], p["crf"]).astype(np.float32).astype(np.float64)
    rgb, g = (x.astype(np.float32).astype(np.float64) for x in (rgb, g))
    images = np.zeros((VIEWS, H, W, 3))
    images[VIEW] = rgb
    grads = np.zeros((VIEWS, H, W, 3))
    grads[VIEW] = g
    return flat, images, grads


def run_ppisp(dev, flat, images, grads, image=FRAME, reg=0.0):
    V, H, W, _ = images.shape
    bufs = _Bufs(dev)
    try:
        bufs.put("step", _step(VIEW, image))
        cams = np.zeros(F_FRAMES, np.uint32)
        cams[FRAME] = CAMERA
        bufs.put("image_cameras", cams)
        bufs.put("ppisp", flat)
        bufs.put("rgb_in", images)
        bufs.put("grad_out", grads)
        bufs.put("grads", np.zeros(flat.size, np.float32))  # float bits: GRAD_T uint or float alike
        for k in ("rgb_out", "grad_rgb"):
            bufs.empty(k, images.shape)
        bufs.empty("partials", (app.PPISP_ROWS * app.ppisp_threads(W, H),))
        rec = dev.recorder("test.ppisp")
        common = dict(width=W, height=H, view=VIEW, n_frames=F_FRAMES, n_cameras=N_CAMERAS)
        app.record_ppisp_fwd(rec, bufs["step"], bufs["image_cameras"], bufs["ppisp"], bufs["rgb_in"],
                             bufs["rgb_out"], **common)  # fmt: skip
        app.record_ppisp_bwd(rec, *(bufs[k] for k in ("step", "image_cameras", "ppisp", "rgb_in", "grad_out",
                             "grad_rgb", "partials", "grads")), **common, reg=reg)  # fmt: skip
        rec.finish().run()
        threads = app.ppisp_threads(W, H)
        rows = bufs.read("partials").reshape(app.PPISP_ROWS, threads)[:, 0]
        return bufs.read("rgb_out")[VIEW], bufs.read("grad_rgb")[VIEW], bufs.read("grads"), rows
    finally:
        bufs.free()


def _ppisp_want(flat, images, grads):
    p = ref.ppisp_unpack(flat, F_FRAMES, N_CAMERAS)
    args = (p["exposure"][FRAME], p["color"][FRAME], p["vignetting"][CAMERA], p["crf"][CAMERA])
    out = ref.ppisp_fwd(images[VIEW], *args)
    bwd = ref.ppisp_bwd(images[VIEW], *args, grads[VIEW])
    return p, out, bwd


# Per pixel, the kernels' float32 stages are each a few ulps of their inputs: exp2 and pow
# (2-3 ulps, times the exponent, ~1 here), the homography's cross products and the
# intensity ratio (~10 ulps), the CRF's decoded parameters: ~2e-6 of the output's scale,
# held to 2e-5 of each output's largest (10x) ...
PIXEL_TOL = 2e-5
# ... plus what the conditioning makes of them: the colour stage's blue is a difference
# (I - r - g) and a CRF with gamma < 1 is steep near 0 (slope ~ gamma toe out / x), so a
# pixel's float32 error is modelled as a perturbation of its input by PERTURB x its
# intensity (the colour stage alone measured 3e-7 x I; 4e-6 is ~13x that) and every
# output may move by what the reference's moves under it (the largest of 4 sign draws).
PERTURB = 4e-6


def _ppisp_sensitivity(flat, images, grads):
    p = ref.ppisp_unpack(flat, F_FRAMES, N_CAMERAS)
    args = (p["exposure"][FRAME], p["color"][FRAME], p["vignetting"][CAMERA], p["crf"][CAMERA])
    rgb = images[VIEW]
    base = ref.ppisp_fwd(rgb, *args), ref.ppisp_bwd(rgb, *args, grads[VIEW])
    rng = np.random.default_rng(11)
    delta = PERTURB * np.abs(rgb).sum(-1, keepdims=True)
    so, sg, st = 0.0, 0.0, 0.0
    for _ in range(4):
        moved = rgb + delta * rng.choice([-1.0, 1.0], rgb.shape)
        o, b = ref.ppisp_fwd(moved, *args), ref.ppisp_bwd(moved, *args, grads[VIEW])
        so = np.maximum(so, np.abs(o - base[0]))
        sg = np.maximum(sg, np.abs(b["rgb"] - base[1]["rgb"]))
        st = np.maximum(st, np.abs(b["terms"] - base[1]["terms"]).reshape(-1, app.PPISP_ROWS).sum(0))
    return so, sg, st


def _sum_bound(rows_abs, W, H):
    """The parameter sums' error: each per-pixel term PIXEL_TOL of its own size, plus the
    float sums (phase 0's run of ~W H / threads terms, then 256 per reduction pass:
    n ulps of the sum of magnitudes at worst)."""
    threads = app.ppisp_threads(W, H)
    n = -(-W * H // threads) + 2 * app.REDUCE
    return (PIXEL_TOL + n * F32_EPS) * rows_abs


def check_ppisp(got, flat, images, grads):
    out, grgb, gparams, rows = got
    H, W = images.shape[1:3]
    p, want_out, bwd = _ppisp_want(flat, images, grads)
    so, sg, st = _ppisp_sensitivity(flat, images, grads)
    assert_near(out, want_out, PIXEL_TOL * np.abs(want_out).max() + so, 0, "ppisp_fwd")
    assert_near(grgb, bwd["rgb"], PIXEL_TOL * np.abs(bwd["rgb"]).max() + sg, 0, "ppisp_bwd grad_rgb")
    bound = _sum_bound(bwd["rows_abs"], W, H) + st
    assert_near(rows, bwd["rows"], bound, 0, "ppisp_bwd rows")
    lay = ref.ppisp_layout(F_FRAMES, N_CAMERAS)
    gp = ref.ppisp_unpack(gparams, F_FRAMES, N_CAMERAS)
    assert_near(gp["exposure"][FRAME], bwd["exposure"], bound[0], 0, "exposure")
    assert_near(gp["vignetting"][CAMERA], bwd["vignetting"], bound[10:25].reshape(3, 5), 0, "vignetting")
    assert_near(gp["crf"][CAMERA], bwd["crf"], bound[25:].reshape(3, 4), 0, "crf")
    # colour: the homography's VJP (linear in dL/dH) of the rows' error, plus its own
    # float32 rounding (~1e-5 of its terms' magnitudes)
    c8 = p["color"][FRAME]
    unit = [np.abs(ref.color_homography_vjp(c8, np.eye(9)[k].reshape(3, 3))) for k in range(9)]
    cbound = sum(u * (b + PIXEL_TOL * abs(r)) for u, b, r in zip(unit, bound[1:10], bwd["rows"][1:10]))
    assert_near(gp["color"][FRAME], bwd["color"], cbound, 0, "color")
    # nothing else moved
    touched = np.zeros(lay["size"][0], bool)
    for name, idx in (("exposure", FRAME), ("color", FRAME), ("vignetting", CAMERA), ("crf", CAMERA)):
        o, s = lay[name]
        per = int(np.prod(s[1:]))
        touched[o + idx * per : o + (idx + 1) * per] = True
    assert (gparams[~touched] == 0).all()
    assert np.abs(gparams[touched]).min() > 0
    return so, sg


def test_ppisp_kernels_match_reference(backend):
    flat, images, grads = _ppisp_inputs()
    check_ppisp(run_ppisp(backend, flat, images, grads), flat, images, grads)


def test_ppisp_kernels_on_a_large_view_reduce_in_several_passes(backend):
    """A view of 300 x 500: 4,688 threads in phase 0, then two reduction passes."""
    flat, images, grads = _ppisp_inputs(300, 500)
    assert app.ppisp_threads(500, 300) > app.REDUCE
    check_ppisp(run_ppisp(backend, flat, images, grads), flat, images, grads)


def test_ppisp_novel_view_passes_through(backend):
    """An image without parameters (index >= n_frames): no stage, no gradient."""
    flat, images, grads = _ppisp_inputs()
    out, grgb, gparams, _ = run_ppisp(backend, flat, images, grads, image=F_FRAMES)
    assert np.array_equal(out, images[VIEW].astype(np.float32))
    assert np.array_equal(grgb, grads[VIEW].astype(np.float32))
    assert (gparams == 0).all()


GRID = (4, 5, 6)  # GL, GH, GW


def test_ppisp_regularisers_match_the_reference(backend):
    """With reg 1 (and no image gradient) phase 2 adds the gradient of PPISP's regularisers
    (nv-tlabs/ppisp's weights) over every frame and camera: the reference's value's central
    differences, within float32's few ulps of the sums (1e-6) and of the differences (1e-7)."""
    flat, images, grads = _ppisp_inputs()
    got = run_ppisp(backend, flat, images, np.zeros_like(grads), reg=1.0)[2]
    want = _fd(lambda x: ref.ppisp_reg(x, F_FRAMES, N_CAMERAS), flat.copy())
    assert np.abs(want).max() > 1e-3
    assert_near(got, want, 1e-6 + 1e-5 * np.abs(want).max(), 0, "regularisers")
    assert ref.ppisp_reg(ref.ppisp_init(F_FRAMES, N_CAMERAS), F_FRAMES, N_CAMERAS) == 0.0


def _bilagrid_inputs(H=13, W=17):
    grid, rgb, g = ref.bilagrid_case(H, W, *GRID)
    grids = ref.bilagrid_identity(2, *GRID) + np.random.default_rng(5).normal(0, 0.2, (2, *GRID, 12))
    grids[1] = grid
    grids = grids.astype(np.float32).astype(np.float64)
    images = np.zeros((VIEWS, H, W, 3))
    images[VIEW] = rgb
    gout = np.zeros((VIEWS, H, W, 3))
    gout[VIEW] = g
    return grids, images.astype(np.float32).astype(np.float64), gout.astype(np.float32).astype(np.float64)


def run_bilagrid(dev, grids, images, gout, image=1, weight=10.0):
    V, H, W, _ = images.shape
    F = grids.shape[0]
    bufs = _Bufs(dev)
    try:
        bufs.put("step", _step(VIEW, image))
        bufs.put("grids", grids)
        bufs.put("rgb_in", images)
        bufs.put("grad_out", gout)
        bufs.put("grad_grids", np.zeros(grids.shape, np.float32))
        for k in ("rgb_out", "grad_rgb"):
            bufs.empty(k, images.shape)
        bufs.empty("tv_terms", grids.shape)
        rec = dev.recorder("test.bilagrid")
        common = dict(width=W, height=H, view=VIEW, n_grids=F, grid_shape=GRID)
        app.record_bilagrid_fwd(rec, bufs["step"], bufs["grids"], bufs["rgb_in"], bufs["rgb_out"], **common)
        app.record_bilagrid_bwd(rec, *(bufs[k] for k in ("step", "grids", "rgb_in", "grad_out", "grad_rgb",
                                "grad_grids")), **common)  # fmt: skip
        rec.finish().run()
        got = [bufs.read(k) for k in ("rgb_out", "grad_rgb", "grad_grids")]
        rec = dev.recorder("test.bilagrid_tv")
        app.record_bilagrid_tv(rec, bufs["grids"], bufs["grad_grids"], bufs["tv_terms"], F, weight, GRID)
        rec.finish().run()
        return got + [bufs.read("tv_terms"), bufs.read("grad_grids")]
    finally:
        bufs.free()


def check_bilagrid(got, grids, images, gout, image=1, weight=10.0):
    out, grgb, ggrid, terms, ggrid_tv = got
    want_out = ref.bilagrid_fwd(grids[image], images[VIEW])
    want_ggrid, want_grgb, gabs = ref.bilagrid_bwd(grids[image], images[VIEW], gout[VIEW], with_abs=True)
    # each output a sum of 8 corners x 4 products of magnitude ~1: a few ulps of the
    # terms (~1e-6), held to PIXEL_TOL of the output's largest
    assert_near(out[VIEW], want_out, PIXEL_TOL * np.abs(want_out).max(), 0, "bilagrid_fwd")
    assert_near(grgb[VIEW], want_grgb, PIXEL_TOL * np.abs(want_grgb).max(), 0, "bilagrid_bwd grad_rgb")
    # atomic sums in any order of the at most H W contributions of a node: H W ulps of
    # the sum of their magnitudes at worst
    H, W = images.shape[1:3]
    full = np.zeros_like(grids)
    full[image] = want_ggrid
    bound = np.zeros_like(grids)
    bound[image] = (PIXEL_TOL + H * W * F32_EPS) * gabs
    assert_near(ggrid, full, bound, 0, "bilagrid_bwd grad_grids")
    tv, gtv = ref.bilagrid_tv(grids)
    # the value: each term ~3 ulps, summed in float64 here; the gradient: <= 6 terms
    assert abs(terms.astype(np.float64).sum() - tv) <= 1e-5 * tv
    assert_near(ggrid_tv - ggrid, weight * gtv, PIXEL_TOL * weight * np.abs(gtv).max(), 0, "bilagrid_tv")


def test_bilagrid_kernels_match_reference(backend):
    grids, images, gout = _bilagrid_inputs()
    check_bilagrid(run_bilagrid(backend, grids, images, gout), grids, images, gout)


def test_bilagrid_novel_view_passes_through(backend):
    grids, images, gout = _bilagrid_inputs()
    out, grgb, ggrid, _, _ = run_bilagrid(backend, grids, images, gout, image=5)
    assert np.array_equal(out[VIEW], images[VIEW].astype(np.float32))
    assert np.array_equal(grgb[VIEW], gout[VIEW].astype(np.float32))
    assert (ggrid == 0).all()


def run_adam(dev, p, grads_per_step, lr, overflow=(False,), steps=None):
    """Adam steps of ``grads_per_step`` (Adam step numbers ``steps``, default 1, 2, ...);
    ``overflow[k]``: the guard says run k's intersections overflowed (``"count"``: 5 past
    the capacity 4) or the step before it did (``"prev"``: prev_isects 5 > prev_capacity 4)."""
    from spirula.train.step_params import NO_GUARD, step_params

    bufs = _Bufs(dev)
    try:
        bufs.put("params", p)
        bufs.put("m", np.zeros_like(p))
        bufs.put("v", np.zeros_like(p))
        bufs.put("grads", np.zeros(p.shape, np.float32))
        bufs.put("hyper", np.zeros(8, np.float32))
        bufs.put("num_isects", np.zeros(4, np.uint32))
        bufs.put("step", step_params(prev_capacity=NO_GUARD).reshape(1).view(np.uint32).copy())
        for k, (step, g) in enumerate(zip(steps or range(1, len(grads_per_step) + 1), grads_per_step)):
            how = overflow[k % len(overflow)]
            dev.upload(bufs["grads"], g.astype(np.float32))
            dev.upload(bufs["hyper"], np.array([0.0, 0.0] + app.adam_hyper(lr, step), np.float32))
            dev.upload(bufs["num_isects"], np.array([0, 0, 5 if how == "count" else 0, 0], np.uint32))
            sp = step_params(prev_capacity=4 if how == "prev" else NO_GUARD, prev_isects=5)
            dev.upload(bufs["step"], sp.reshape(1).view(np.uint32).copy())
            rec = dev.recorder("test.adam_small")
            guard = (bufs["num_isects"], 2, 4, bufs["step"])
            app.record_adam_small(rec, *(bufs[k] for k in ("params", "grads", "m", "v", "hyper")), p.size, 2, guard)
            rec.finish().run()
        return [bufs.read(k) for k in ("params", "m", "v", "grads")]
    finally:
        bufs.free()


def test_adam_small_matches_torch_adam(backend):
    """Three steps of Adam (lr 2e-3, eps 1e-15, as both references) on 1,000 parameters,
    one with a zero gradient after its first step (its moments decay and it keeps moving,
    as torch's dense Adam); the gradient is zeroed after each step. float32: m and v a few
    ulps of their terms (1e-6); each step rounds p - lr m / sqrt(v) to half an ulp of p and its
    update to a few ulps of lr: 3 steps x (an ulp of p + 1e-5 lr)."""
    rng = np.random.default_rng(2)
    p = rng.normal(0, 1, 1000).astype(np.float32).astype(np.float64)
    gs = [rng.normal(0, 1, 1000).astype(np.float32).astype(np.float64) for _ in range(3)]
    gs[1][7] = gs[2][7] = 0.0
    lr = 2e-3
    got = run_adam(backend, p, gs, lr)
    want_p, m, v, m_abs = p, np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for step, g in enumerate(gs, 1):
        want_p, m, v = adam(want_p, g, m, v, lr, step)
        m_abs = 0.9 * m_abs + 0.1 * np.abs(g)  # the size of m's terms: m cancels
    assert_near(got[0], want_p, 3 * (1e-5 * lr + 2 * F32_EPS * np.abs(want_p)), 0, "params")
    assert_near(got[1], m, 1e-6 * m_abs, 0, "m")
    # v's weight 1 - beta2 is 1 - float32(0.999) in the shared adam_update (fpbo's too):
    # 4.7e-5 relative off torch's 0.001
    assert_near(got[2], v, 1e-30, 1e-4, "v")
    assert (got[3] == 0).all()
    assert got[0][7] != np.float32(p[7]) and m[7] != 0


@pytest.mark.parametrize("how", ["count", "prev"])
def test_adam_small_skips_a_step_fpbo_skips(backend, how):
    """A step fpbo skips (its own count past the capacity, or the step before it's) changes
    no parameter and no moment and leaves its gradient zeroed; the trainer runs it again
    with the same Adam step: bit for bit the run in which it never overflowed."""
    rng = np.random.default_rng(3)
    p = rng.normal(0, 1, 300).astype(np.float32).astype(np.float64)
    gs = [rng.normal(0, 1, 300).astype(np.float32).astype(np.float64) for _ in range(2)]
    whole = run_adam(backend, p, gs, 2e-3)
    skipped = run_adam(backend, p, [gs[0], 100 * gs[1], gs[1]], 2e-3, (False, how, False), steps=[1, 2, 2])
    for a, b in zip(whole, skipped):
        assert np.array_equal(a, b)
    assert not np.array_equal(whole[0], p.astype(np.float32))


# ---- both backends, and the profiler --------------------------------------------------


@pytest.mark.cuda
def test_appearance_kernels_agree_between_vulkan_and_cuda(backends):
    """The same inputs on both: each within the reference tolerances of the other's
    reference check (both are checked against the reference above; here they meet)."""
    vk, cu = backends
    flat, images, grads = _ppisp_inputs(60, 80)
    a, b = run_ppisp(vk, flat, images, grads), run_ppisp(cu, flat, images, grads)
    for x, y, what in zip(a, b, ("out", "grad_rgb", "grads", "rows")):
        assert_near(x, y, PIXEL_TOL * max(np.abs(y).max(), 1e-30), PIXEL_TOL, "ppisp " + what)
    grids, images, gout = _bilagrid_inputs(40, 50)
    a, b = run_bilagrid(vk, grids, images, gout), run_bilagrid(cu, grids, images, gout)
    for x, y, what in zip(a, b, ("out", "grad_rgb", "grad_grids", "tv_terms", "grad_grids_tv")):
        assert_near(x, y, PIXEL_TOL * max(np.abs(y).max(), 1e-30), PIXEL_TOL, "bilagrid " + what)
    if REPORT:
        print("appearance: Vulkan and CUDA agree")


PROFILE_CODE = """
import os, sys; sys.path.insert(0, 'tests')
import test_appearance as t  # its conftest import turns SS_PROFILE off: on again
os.environ['SS_PROFILE'] = '1'
from spirula.backends import open_device
dev = open_device(sys.argv[1])
t.run_ppisp(dev, *t._ppisp_inputs())
t.run_bilagrid(dev, *t._bilagrid_inputs())
import numpy as np
t.run_adam(dev, np.zeros(10), [np.ones(10)], 1e-3)
"""
APPEARANCE_KERNELS = ("ppisp_fwd", "ppisp_bwd", "bilagrid_fwd", "bilagrid_bwd", "bilagrid_tv", "adam_small")


def _profile_rows(backend_name):
    return profile_rows(PROFILE_CODE, backend_name, ROOT)


def test_profiler_rows_name_the_appearance_kernels():
    """SS_PROFILE's kernel table has one row per kernel, under its name: ppisp_bwd's three
    phases (1 + 1 + 1 dispatches on the 11 x 14 view) share its row."""
    rows = _profile_rows("vulkan")
    for name in APPEARANCE_KERNELS:
        assert name in rows, name
    assert rows["ppisp_bwd"] == 3 and rows["ppisp_fwd"] == 1 and rows["adam_small"] == 1


@pytest.mark.cuda
def test_profiler_rows_on_cuda_are_vulkans(cuda):
    assert _profile_rows("cuda") == _profile_rows("vulkan")
