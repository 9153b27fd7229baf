"""rasterize_bwd on CUDA (native_cuda/rasterize_bwd.cu, hand-written: warp shuffles and
shared-memory staging) against Vulkan, whole tile lists and chunks of them
(tests/parity_cases.py says how they are compared)."""

import numpy as np
import pytest
from parity_cases import (
    ATOMIC_VIOLATIONS,
    R_ATOMIC,
    UNSPLIT,
    assert_close,
    both,
    chunk_ids,
    chunk_state_shape,
    chunk_table,
    chunked_forward,
    raster_push,
)

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize(
    "absgrad,distortion,normals",
    [(False, False, False), (True, False, False), (False, True, False), (False, False, True), (True, True, True)],
)
def test_rasterize_bwd_matches(backends, forward_inputs, absgrad, distortion, normals):
    f = forward_inputs
    push, groups = raster_push(f)
    C, H, W, rows = 2, f["height"], f["width"], f["rows"]
    rng = np.random.default_rng(11)
    names = ("ranges", "isect_ids", "xyop", "conics", "rgb", "backgrounds", "out_alphas", "out_last", "out_depths")
    ins = {k: f[k] for k in names + ("normals",)}
    ins.update(
        grad_colors=rng.standard_normal((C, H, W, 3)).astype(np.float32),
        grad_alphas=rng.standard_normal((C, H, W)).astype(np.float32),
        grad_distort=rng.standard_normal((C, H, W)).astype(np.float32),
        grad_normal_image=rng.standard_normal((C, H, W, 3)).astype(np.float32),
        grad_depth_image=rng.standard_normal((C, H, W)).astype(np.float32),
        chunk_table=chunk_table(f, UNSPLIT),
        chunk_state=np.zeros(chunk_state_shape(f, UNSPLIT), np.float32),
    )
    push["chunk_ids"] = chunk_ids(f, UNSPLIT)
    groups = push["chunk_ids"]
    outs = dict(
        grad_xy=((rows, 2), np.float32),
        grad_conics=((rows, 3), np.float32),
        grad_rgb=((rows, 3), np.float32),
        grad_opacity=((rows,), np.float32),
        grad_xy_abs=((rows, 2), np.float32),
        grad_depth=((rows,), np.float32),
        grad_normals=((rows, 3), np.float32),
    )
    spec = dict(ABSGRAD=int(absgrad), DISTORTION=int(distortion), NORMALS=int(normals))
    vk_out, cu_out = both(backends, "rasterize_bwd", groups, ins, outs, push=push, spec=spec, zero=tuple(outs))
    for name in outs:  # atomic sums: a looser, labelled channel
        assert_close(cu_out[name], vk_out[name], R_ATOMIC, name, ATOMIC_VIOLATIONS)
    assert np.abs(vk_out["grad_xy"]).max() > 0
    if absgrad:
        assert np.abs(cu_out["grad_xy_abs"]).max() > 0
    assert (np.abs(vk_out["grad_depth"]).max() > 0) == (distortion or normals)
    assert (np.abs(vk_out["grad_normals"]).max() > 0) == normals


CHUNKED_BWD_CASES = [(False, False, False), (False, True, False), (False, False, True), (True, True, True)]


@pytest.mark.parametrize("absgrad,distortion,normals", CHUNKED_BWD_CASES)
def test_rasterize_bwd_chunked_matches(backends, chunky_inputs, absgrad, distortion, normals):
    """rasterize_bwd with chunk = 256 from the same (Vulkan) forward and chunk state."""
    f = chunky_inputs
    vk, _ = backends
    fwd = chunked_forward(vk, f, distortion, normals)
    push, _ = raster_push(f, chunk=256)
    push["chunk_ids"] = chunk_ids(f, 256)
    C, H, W, rows = 2, f["height"], f["width"], f["rows"]
    rng = np.random.default_rng(12)
    ins = {k: f[k] for k in ("ranges", "isect_ids", "xyop", "conics", "rgb", "backgrounds", "normals")}
    ins.update({k: fwd[k] for k in ("out_alphas", "out_last", "out_depths", "chunk_state")})
    ins.update(
        grad_colors=rng.standard_normal((C, H, W, 3)).astype(np.float32),
        grad_alphas=rng.standard_normal((C, H, W)).astype(np.float32),
        grad_distort=rng.standard_normal((C, H, W)).astype(np.float32),
        grad_normal_image=rng.standard_normal((C, H, W, 3)).astype(np.float32),
        grad_depth_image=rng.standard_normal((C, H, W)).astype(np.float32),
        chunk_table=chunk_table(f, 256),
    )
    outs = dict(
        grad_xy=((rows, 2), np.float32),
        grad_conics=((rows, 3), np.float32),
        grad_rgb=((rows, 3), np.float32),
        grad_opacity=((rows,), np.float32),
        grad_xy_abs=((rows, 2), np.float32),
        grad_depth=((rows,), np.float32),
        grad_normals=((rows, 3), np.float32),
    )
    spec = dict(ABSGRAD=int(absgrad), DISTORTION=int(distortion), NORMALS=int(normals))
    groups = push["chunk_ids"]
    vk_out, cu_out = both(backends, "rasterize_bwd", groups, ins, outs, push=push, spec=spec, zero=tuple(outs))
    for name in outs:  # atomic sums: a looser, labelled channel
        assert_close(cu_out[name], vk_out[name], R_ATOMIC, name, ATOMIC_VIOLATIONS)
    assert np.abs(vk_out["grad_xy"]).max() > 0
    assert (np.abs(vk_out["grad_depth"]).max() > 0) == (distortion or normals)
