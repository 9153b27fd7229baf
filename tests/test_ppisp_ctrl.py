"""PPISP's controller (docs/design.md §2.8, "PPISP's controller"): the float64 reference
(spirula/reference/ppisp_ctrl.py) against finite differences, and the kernels
ppisp_ctrl_fwd, ppisp_ctrl_mlp and ppisp_ctrl_bwd against the reference on each backend (the
``backend`` fixture: the CUDA half runs with ``-m cuda`` where a CUDA GPU is), the two
backends against each other, and the kernels' rows in SS_PROFILE's table."""

import numpy as np
import pytest
from conftest import ROOT
from kernel_cases import REPORT, assert_near, profile_rows

from spirula.reference import appearance as app_ref
from spirula.reference import ppisp_ctrl as ref
from spirula.train import controller as ctl
from spirula.train.step_params import STEP_PARAMS_DTYPE, step_params

F_FRAMES, N_CAMERAS, VIEWS, VIEW = 3, 2, 2, 1
FRAME, CAMERA = 2, 1  # the view's frame and its camera


def test_layout_is_the_networks():
    """241,961 floats a camera (design.md's count), the same in the reference and the
    recording, and torch's init bounds: +-1/sqrt(fan_in) for fc1 (1601 inputs)."""
    assert ref.CTRL_SIZE == ctl.CTRL_SIZE == 241_961
    assert ref.CONV_SIZE == ctl.CTRL_CONV == 2720
    w = ctl.controller_initial(2, 0)
    assert w.shape == (2, ref.CTRL_SIZE) and not np.array_equal(w[0], w[1])
    fc1 = ref.unpack(w[0])["fc1"][0]
    assert np.abs(fc1).max() <= 1 / np.sqrt(1601) and np.abs(fc1).max() > 0.99 / np.sqrt(1601)
    assert np.array_equal(w, ctl.controller_initial(2, 0))  # from the run's seed


def test_bins_are_torchs_adaptive_pool():
    """torch.nn.AdaptiveAvgPool2d(5)'s bins: floor(i n / 5) to ceil((i + 1) n / 5),
    overlapping where n is no multiple of 5, and one row repeated where n < 5."""
    assert ref.bins(10) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    assert ref.bins(7) == [(0, 2), (1, 3), (2, 5), (4, 6), (5, 7)]
    assert ref.bins(3) == [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]


def test_reference_backward_matches_finite_differences():
    """ctrl_bwd's weight gradients against central differences of out . g, at every
    convolution weight and bias and 300 seeded MLP weights (step 1e-6; the network is
    piecewise linear, so away from a ReLU's or the max's switch the differences are
    exact but for rounding, ~1e-9)."""
    rgb, w, g = ref.ctrl_case(H=11, W=17)
    got = ref.ctrl_bwd(rgb, w, g)["grads"]
    rng = np.random.default_rng(3)
    idx = np.concatenate([np.arange(ref.CONV_SIZE), rng.choice(np.arange(ref.CONV_SIZE, ref.CTRL_SIZE), 300)])
    h = 1e-6
    for i in idx:
        wp, wm = w.copy(), w.copy()
        wp[i] += h
        wm[i] -= h
        fd = (ref.ctrl_fwd(rgb, wp)["out"] @ g - ref.ctrl_fwd(rgb, wm)["out"] @ g) / (2 * h)
        assert abs(fd - got[i]) <= 1e-6 + 1e-6 * abs(fd), (i, fd, got[i])
    assert np.abs(got[: ref.CONV_SIZE]).max() > 1e-3  # the convolutions get a gradient


def _step(view, frame):
    idx = np.zeros(STEP_PARAMS_DTYPE["image_index"].shape, np.uint32)
    idx[view] = frame
    return np.frombuffer(step_params(image_index=idx).tobytes(), np.uint32)


def _inputs(H=20, W=26, seed=0):
    rgb, w, g = ref.ctrl_case(H, W, seed)
    weights = ctl.controller_initial(N_CAMERAS, seed + 1).astype(np.float64)
    weights[CAMERA] = w
    weights = weights.astype(np.float32).astype(np.float64)
    images = np.random.default_rng(seed + 2).uniform(0, 1, (VIEWS, H, W, 3))
    images[VIEW] = rgb
    return weights, images.astype(np.float32).astype(np.float64), g.astype(np.float32).astype(np.float64)


def run_ctrl(dev, weights, images, g):
    """The controller's forward and backward on view VIEW (frame FRAME, camera CAMERA):
    (out [9], the ppisp buffer, grads [N_CAMERAS, CTRL_SIZE], dx0 [1601])."""
    V, H, W, _ = images.shape
    pool = dev.pool
    net = ctl.Controller(dev, F_FRAMES, N_CAMERAS, weights=weights, category="other")
    bufs = []

    def put(name, arr):
        arr = np.ascontiguousarray(arr)
        b = pool.alloc("test.ctrl." + name, arr.shape, arr.dtype, "other")
        dev.upload(b, arr)
        bufs.append(b)
        return b

    try:
        step = put("step", _step(VIEW, FRAME))
        cams = np.zeros(F_FRAMES, np.uint32)
        cams[FRAME] = CAMERA
        image_cameras = put("image_cameras", cams)
        rgb = put("rgb", images.astype(np.float32))
        lay = app_ref.ppisp_layout(F_FRAMES, N_CAMERAS)
        pg = np.full(lay["size"][0], np.nan, np.float32)  # only the frame's slot is read
        pg[FRAME] = g[0]
        pg[F_FRAMES + 8 * FRAME : F_FRAMES + 8 * FRAME + 8] = g[1:]
        dev.upload(net.pgrads, pg)
        nan = np.full(net.grads.shape, np.nan, np.float32)  # written where the camera's rows are
        dev.upload(net.grads, nan)
        dev.upload(net.ppisp, np.full(net.ppisp.shape, np.nan, np.float32))
        scratch = net.scratch(W, H)
        rec = dev.recorder("test.ctrl")
        ctl.record_ctrl_forward(rec, net, step, image_cameras, rgb, scratch, VIEW, F_FRAMES)
        ctl.record_ctrl_backward(rec, net, step, image_cameras, rgb, scratch, VIEW, F_FRAMES)
        rec.finish().run()
        act, dact = dev.readback(net.act), dev.readback(net.dact)
        return act[1985:1994], dev.readback(net.ppisp), dev.readback(net.grads).reshape(N_CAMERAS, -1), dact[:1601]
    finally:
        for b in bufs:
            pool.free(b)
        net.free()


# float32 sums of up to 1,601 products of O(1) values against float64: worst seen 2e-6
# relative to the largest entry on lavapipe, x50
REL = 1e-4


def check_ctrl(got, weights, images, g):
    out, ppisp, grads, dx0 = got
    want = ref.ctrl_fwd(images[VIEW], weights[CAMERA])
    bwd = ref.ctrl_bwd(images[VIEW], weights[CAMERA], g)
    assert_near(out, want["out"], REL * np.abs(want["out"]).max(), 0, "ppisp_ctrl out")
    slot = np.concatenate([[ppisp[FRAME]], ppisp[F_FRAMES + 8 * FRAME : F_FRAMES + 8 * FRAME + 8]])
    assert np.array_equal(slot, out), "the heads write the frame's slot"
    others = np.delete(np.arange(ppisp.size), [FRAME, *range(F_FRAMES + 8 * FRAME, F_FRAMES + 8 * FRAME + 8)])
    assert np.isnan(ppisp[others]).all(), "only the frame's slot is written"
    assert_near(dx0, bwd["x0"], REL * np.abs(bwd["x0"]).max(), 0, "ppisp_ctrl_mlp dL/dx0")
    want_g = bwd["grads"]
    for name, (o, n, m) in ref.LAYOUT.items():
        sl = slice(o, o + n * m + n)
        assert_near(grads[CAMERA, sl], want_g[sl], REL * np.abs(want_g[sl]).max(), 0, "grads " + name)
    assert np.isnan(grads[1 - CAMERA]).all(), "the other camera's rows are not written"
    if REPORT:
        print("ppisp_ctrl: worst |d grads| %.3g" % np.abs(grads[CAMERA] - want_g).max())


def test_ppisp_ctrl_kernels_match_reference(backend):
    weights, images, g = _inputs()
    check_ctrl(run_ctrl(backend, weights, images, g), weights, images, g)


def test_ppisp_ctrl_kernels_on_a_large_view_reduce_in_several_passes(backend):
    """A view of 301 x 400: 13,300 cells, 52 chunks of 256, so one reduction pass more;
    bins of 20 x 27 cells (h = 100, w = 133: no multiple of 5 across, overlapping bins)."""
    weights, images, g = _inputs(H=301, W=400, seed=4)
    assert ctl.n_chunks(400, 301) > 1
    check_ctrl(run_ctrl(backend, weights, images, g), weights, images, g)


@pytest.mark.cuda
def test_ppisp_ctrl_kernels_agree_between_vulkan_and_cuda(backends):
    """The same inputs on both, within the reference tolerance of each other."""
    vk, cu = backends
    weights, images, g = _inputs(60, 80)
    a, b = run_ctrl(vk, weights, images, g), run_ctrl(cu, weights, images, g)
    for x, y, what in zip(a, b, ("out", "ppisp", "grads", "dx0")):
        x, y = np.nan_to_num(x, nan=0.0), np.nan_to_num(y, nan=0.0)
        assert_near(x, y, REL * max(np.abs(y).max(), 1e-30), 0, "ppisp_ctrl " + what)


PROFILE_CODE = """
import os, sys; sys.path.insert(0, 'tests')
import test_ppisp_ctrl as t  # its conftest import turns SS_PROFILE off: on again
os.environ['SS_PROFILE'] = '1'
from spirula.backends import open_device
dev = open_device(sys.argv[1])
t.run_ctrl(dev, *t._inputs())
"""


def _profile_rows(backend_name):
    return profile_rows(PROFILE_CODE, backend_name, ROOT)


def test_profiler_rows_name_the_controller_kernels():
    """SS_PROFILE's kernel table has one row per kernel, under its name: the 20 x 26 view
    (48 cells, one chunk) records 2 + 4 forward, 4 + 3 backward dispatches."""
    rows = _profile_rows("vulkan")
    assert rows["ppisp_ctrl_fwd"] == 2 and rows["ppisp_ctrl_mlp"] == 8 and rows["ppisp_ctrl_bwd"] == 3, rows


@pytest.mark.cuda
def test_profiler_rows_on_cuda_are_vulkans(cuda):
    assert _profile_rows("cuda") == _profile_rows("vulkan")
