"""rasterize_fwd on CUDA (native_cuda/rasterize_fwd.cu, hand-written: shared-memory batches)
against Vulkan, whole tile lists and chunks of them (tests/parity_cases.py says how they
are compared)."""

import numpy as np
import pytest
from kernel_cases import assert_exact, assert_near
from parity_cases import (
    CHUNK_CHANNELS,
    FLIP_FRACTION,
    R_PLAIN,
    UNSPLIT,
    assert_close,
    assert_few,
    both,
    chunk_state_shape,
    chunked_forward,
    raster_push,
)

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("normals", [False, True], ids=["", "normals"])
@pytest.mark.parametrize("distortion", [False, True], ids=["plain", "distortion"])
@pytest.mark.parametrize("max_alpha", [0.99, 0.999])
def test_rasterize_fwd_matches(backends, forward_inputs, max_alpha, distortion, normals):
    f = forward_inputs
    push, groups = raster_push(f, max_alpha)
    C, H, W = 2, f["height"], f["width"]
    outs = dict(
        out_colors=((C, H, W, 3), np.float32),
        out_alphas=((C, H, W), np.float32),
        out_depths=((C, H, W), np.float32),
        out_last=((C, H, W), np.uint32),
        out_median=((C, H, W), np.float32),
        out_distort=((C, H, W), np.float32),
        out_normals=((C, H, W, 3), np.float32),
        chunk_state=(chunk_state_shape(f, UNSPLIT), np.float32),
    )
    ins = {k: f[k] for k in ("ranges", "isect_ids", "xyop", "conics", "rgb", "backgrounds", "normals")}
    spec = dict(DISTORTION=int(distortion), NORMALS=int(normals))
    zero = ("out_distort", "out_normals", "chunk_state")
    vk_out, cu_out = both(backends, "rasterize_fwd", groups, ins, outs, push=push, spec=spec, zero=zero)
    # a Gaussian at the alpha >= 1/255 or T <= 1e-4 cut-off may flip: count those pixels
    same = cu_out["out_last"] == vk_out["out_last"]
    assert_few((~same).sum(), same.size, "out_last")
    assert_close(cu_out["out_colors"], vk_out["out_colors"], R_PLAIN, "colors", FLIP_FRACTION)
    assert_close(cu_out["out_alphas"], vk_out["out_alphas"], R_PLAIN, "alphas", FLIP_FRACTION)
    assert_close(cu_out["out_depths"], vk_out["out_depths"], R_PLAIN, "depths", FLIP_FRACTION)
    # the median is one Gaussian's depth, exact unless T lands at 0.5 within rounding (a flip)
    same = cu_out["out_median"] == vk_out["out_median"]
    assert_few((~same).sum(), same.size, "out_median")
    assert (vk_out["out_alphas"] > 0.5).mean() > 0.2
    assert (vk_out["out_median"] > 0).mean() > 0.2
    # the distortion: a running sum as the depth's (same error model)
    assert_close(cu_out["out_distort"], vk_out["out_distort"], R_PLAIN, "distortion", FLIP_FRACTION)
    assert (vk_out["out_distort"] > 0).any() == distortion
    # the normal image: blended as the colour (same error model)
    assert_close(cu_out["out_normals"], vk_out["out_normals"], R_PLAIN, "normals", FLIP_FRACTION)
    assert (np.abs(vk_out["out_normals"]) > 0.1).any() == normals


@pytest.mark.parametrize("distortion,normals", [(False, False), (True, True)], ids=["plain", "geometry"])
def test_rasterize_fwd_chunk_state_matches(backends, chunky_inputs, distortion, normals):
    """The forward with chunk = 256: the images and the state at every boundary. The state's
    sums behind are final - prefix, each within the images' error (R_PLAIN of the totals): the
    tolerance is relative to each channel's largest value."""
    f = chunky_inputs
    vk_out, cu_out = (chunked_forward(dev, f, distortion, normals) for dev in backends)
    same = cu_out["out_last"] == vk_out["out_last"]
    assert_few((~same).sum(), same.size, "out_last")
    assert_close(cu_out["out_colors"], vk_out["out_colors"], R_PLAIN, "colors", FLIP_FRACTION)
    assert_close(cu_out["out_alphas"], vk_out["out_alphas"], R_PLAIN, "alphas", FLIP_FRACTION)
    vs, cs = vk_out["chunk_state"], cu_out["chunk_state"]
    written = np.abs(vs).max(axis=(1, 2)) > 0
    assert written.sum() >= 8
    for ch in range(CHUNK_CHANNELS):
        scale = max(np.abs(vs[:, ch]).max(), 1e-3)
        assert_near(cs[:, ch], vs[:, ch], R_PLAIN * scale, R_PLAIN, "chunk_state[%d]" % ch, FLIP_FRACTION)
    # an unsplit forward is the same image
    whole = chunked_forward(backends[1], f, distortion, normals, UNSPLIT)
    assert_exact(whole["out_colors"], cu_out["out_colors"], "unsplit colors")
