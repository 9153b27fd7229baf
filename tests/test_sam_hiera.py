"""SAM 2's Hiera trunk on the nn runtime (spirula/sam/hiera.py, issue 41): its block layout
against SAM 2.1 tiny's worked out by hand from SAM 2's hieradet.py, and a tiny trunk with
seeded random weights against the float64 reference (spirula/reference/sam.py) on each
backend."""

import numpy as np
import pytest
from conftest import load_benchmark

from spirula import nn
from spirula.reference import nn as ref_nn
from spirula.reference import sam as ref
from spirula.sam.hiera import SAM21_TINY, BlockSpec, Hiera, HieraConfig, block_specs, stage_ends
from spirula.sam.neck import FpnNeck


def test_sam21_tiny_blocks_are_hieradets():
    """SAM 2.1 tiny (stages 1, 2, 7, 2; global attention in blocks 5, 7, 9): each stage's first
    block doubles the width and the heads and pools q, keeping the previous stage's window
    (Hiera's "lags by a block"); windows 8, 4, 14, 7 by stage."""
    want = [
        BlockSpec(96, 96, 1, 0, 8),
        BlockSpec(96, 192, 2, 2, 8),
        BlockSpec(192, 192, 2, 0, 4),
        BlockSpec(192, 384, 4, 2, 4),
        BlockSpec(384, 384, 4, 0, 14),
        BlockSpec(384, 384, 4, 0, 0),
        BlockSpec(384, 384, 4, 0, 14),
        BlockSpec(384, 384, 4, 0, 0),
        BlockSpec(384, 384, 4, 0, 14),
        BlockSpec(384, 384, 4, 0, 0),
        BlockSpec(384, 768, 8, 2, 14),
        BlockSpec(768, 768, 8, 0, 7),
    ]
    assert block_specs(SAM21_TINY) == want
    assert stage_ends(SAM21_TINY) == [0, 2, 9, 11]


# 64 x 64 images: 16 x 16 tokens of 8 channels; stages of 1, 2, 2, 1 blocks down to 2 x 2 x 64;
# windows 4, 2, 2, 1 (each divides its grid), block 4 global
TINY = HieraConfig(
    embed_dim=8, num_heads=1, stages=(1, 2, 2, 1), window_pos_embed_bkg_spatial_size=(4, 4),
    window_spec=(4, 2, 2, 1), global_att_blocks=(4,),
)  # fmt: skip


def tiny_weights(config: HieraConfig) -> tuple:
    """(trunk, neck) weights for ``config`` by checkpoint name, seeded, at a trained net's
    scales (benchmarks/sam_encoder_speed.py's, with a 16-channel neck)."""
    return load_benchmark("sam_encoder_speed").random_weights(config, d_model=16)


def _fp16(weights: dict) -> dict:
    """The weights as the runtime holds them: linear and convolution weights rounded to fp16."""
    return {k: ref_nn.half(v) if k.endswith("weight") and v.ndim >= 2 else v for k, v in weights.items()}


def test_tiny_hiera_and_neck_match_their_reference(backend):
    """The whole trunk and the FPN neck in one recorded sequence against the float64 reference
    on the same fp16-rounded weights, at each stage's end and each neck level. Each layer's
    kernel is held to its own float bound in tests/test_nn.py (below 2e-4 of the layer's
    largest output); this checks how they are put together: measured 4.9e-7 to 8.6e-7 of each
    output's largest value on lavapipe, held to 1e-4, the per-layer bounds' order, while a
    layout mistake moves the outputs by more than 1e-2 (the next test)."""
    w, wn = tiny_weights(TINY)
    image = np.random.default_rng(1).normal(size=(2, 3, 64, 64)).astype(np.float32)
    model, neck = Hiera(backend, TINY, w), FpnNeck(backend, wn)
    x = nn.Tensor.from_numpy(backend, image)
    try:
        rec = backend.recorder("test.hiera")
        outs = model.forward(rec, x)
        levels = neck.forward(rec, outs)
        rec.finish().run()
        got = [o.numpy().astype(np.float64) for o in outs + levels]
        for o in outs + levels:
            o.free()
    finally:
        x.free()
        model.free()
        neck.free()
    blocks = [(b.dim, b.dim_out, b.heads, b.q_stride, b.window) for b in block_specs(TINY)]
    want = ref.hiera(image.astype(np.float64), _fp16(w), blocks, set(stage_ends(TINY)))
    want += ref.fpn_neck(want, _fp16(wn))
    assert [g.shape for g in got] == [(2, 16, 16, 8), (2, 8, 8, 16), (2, 4, 4, 32), (2, 2, 2, 64)] + [
        (2, 16, 16, 16), (2, 16, 8, 8), (2, 16, 4, 4), (2, 16, 2, 2)
    ]  # fmt: skip
    for k, (g, r) in enumerate(zip(got, want)):
        err = np.abs(g - r).max() / np.abs(r).max()
        print("%s %d: largest error %.2e of the largest output" % ("stage" if k < 4 else "level", k % 4, err))
        assert err < 1e-4, (k, err)


@pytest.mark.parametrize("block,change", [(0, {"window": 8}), (1, {"window": 8}), (2, {"heads": 1})])
def test_the_reference_tells_a_wrong_layout(block, change):
    """The comparison above would see a layout mistake: the reference with one block's window
    or heads changed differs from the right one by far more than the 1e-4 held there."""
    w = _fp16(tiny_weights(TINY)[0])
    image = np.random.default_rng(1).normal(size=(1, 3, 64, 64))
    specs = block_specs(TINY)
    ends = set(stage_ends(TINY))

    def run(specs):
        return ref.hiera(image, w, [(b.dim, b.dim_out, b.heads, b.q_stride, b.window) for b in specs], ends)

    right = run(specs)
    wrong = list(specs)
    wrong[block] = BlockSpec(**{**specs[block].__dict__, **change})
    stage = next(k for k, e in enumerate(stage_ends(TINY)) if e >= block)
    out = run(wrong)[stage]
    assert np.abs(out - right[stage]).max() > 1e-2 * np.abs(right[stage]).max()
