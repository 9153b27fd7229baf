"""SAM 2 on Spirula's kernels against Meta's own code (issue 41 item 3): the `sam2` package's
modules on CPU torch (test-only, scripts/install_sam2_reference.sh), built with seeded
random weights in a tiny configuration, and Spirula's with the same weights. Skipped, with
the reason, where the reference is not installed."""

import numpy as np
import pytest
from test_sam_hiera import TINY

from spirula import nn
from spirula.sam.hiera import SAM21_TINY, Hiera, HieraConfig, block_specs, stage_ends
from spirula.sam.neck import FpnNeck

torch = pytest.importorskip("torch", reason="needs CPU torch: scripts/install_sam2_reference.sh (make test runs it)")
pytest.importorskip("sam2", reason="needs Meta's sam2 package: scripts/install_sam2_reference.sh (make test runs it)")


def _sam2_hiera(config: HieraConfig):
    from sam2.modeling.backbones.hieradet import Hiera as Sam2Hiera

    return Sam2Hiera(
        embed_dim=config.embed_dim, num_heads=config.num_heads, q_pool=config.q_pool,
        q_stride=(config.q_stride, config.q_stride), stages=config.stages, dim_mul=config.dim_mul,
        head_mul=config.head_mul, window_pos_embed_bkg_spatial_size=config.window_pos_embed_bkg_spatial_size,
        window_spec=config.window_spec, global_att_blocks=config.global_att_blocks,
    ).eval()  # fmt: skip


@pytest.mark.parametrize("config", [SAM21_TINY, TINY], ids=["sam2.1-tiny", "tiny"])
def test_block_layout_is_sam2s(config):
    """Each block's widths, heads, q stride and window as SAM 2's Hiera builds them."""
    theirs = [
        (b.dim, b.dim_out, b.attn.num_heads, b.q_stride[0] if b.q_stride else 0, b.window_size)
        for b in _sam2_hiera(config).blocks
    ]
    ours = [(b.dim, b.dim_out, b.heads, b.q_stride, b.window) for b in block_specs(config)]
    assert ours == theirs


def _randomize(module, seed: int):
    """Seeded weights with a trained net's scales (unit activations), the matrices rounded to
    fp16 as Spirula stores them, so only the arithmetic differs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("pos_embed") or name.endswith("pos_embed_window"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif p.ndim >= 2:  # linear and convolution weights
                fan_in = p[0].numel()
                p.copy_((torch.randn(p.shape, generator=g) * fan_in**-0.5).half().float())
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def test_hiera_and_fpn_neck_match_sam2(backend):
    """The tiny trunk and SAM 2.1's neck (nearest top-down at levels 2 and 3) with the same
    weights as sam2's Hiera and FpnNeck, in float32 on both sides: the features at each stage
    and level agree to 1e-4 of each one's largest value, the per-layer bounds' order (each
    kernel is held to its own in tests/test_nn.py). Measured on lavapipe: 4.3e-7 to 1.3e-6."""
    from sam2.modeling.backbones.image_encoder import FpnNeck as Sam2Neck
    from sam2.modeling.position_encoding import PositionEmbeddingSine

    d_model = 16
    trunk = _sam2_hiera(TINY)
    channels = [b.dim_out for b in trunk.blocks]
    channels = [channels[e] for e in stage_ends(TINY)][::-1]
    neck = Sam2Neck(
        PositionEmbeddingSine(d_model), d_model, channels, fpn_top_down_levels=[2, 3], fpn_interp_model="nearest"
    ).eval()
    _randomize(trunk, 3)
    _randomize(neck, 4)
    image = torch.randn((2, 3, 64, 64), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        feats = trunk(image)
        levels, _ = neck(feats)
    want = [f.permute(0, 2, 3, 1).numpy() for f in feats] + [f.numpy() for f in levels]

    weights = {k: v.numpy() for k, v in trunk.state_dict().items()}
    neck_weights = {k: v.numpy() for k, v in neck.state_dict().items()}
    model, ours_neck = Hiera(backend, TINY, weights), FpnNeck(backend, neck_weights)
    x = nn.Tensor.from_numpy(backend, image.numpy())
    try:
        rec = backend.recorder("test.sam2")
        outs = model.forward(rec, x)
        lv = ours_neck.forward(rec, outs)
        rec.finish().run()
        got = [o.numpy() for o in outs + lv]
        for o in outs + lv:
            o.free()
    finally:
        x.free()
        model.free()
        ours_neck.free()
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (k, g.shape, w.shape)
        err = float(np.abs(g - w).max() / np.abs(w).max())
        print("%s %d: largest difference %.2e of the largest value" % ("stage" if k < 4 else "level", k % 4, err))
        assert err < 1e-4, (k, err)


def test_pos_sine_matches_sam2(backend):
    """nn_pos_sine against SAM 2's PositionEmbeddingSine(256) (float32 torch) at SAM 2's four
    neck sizes for a 1024 image (256, 128, 64, 32 across; here a quarter of each): within
    the reference's bound (Vulkan's 2^-11 for sin and cos); measured on lavapipe ~1e-6."""
    from sam2.modeling.position_encoding import PositionEmbeddingSine

    from spirula.reference import nn as ref_nn

    enc = PositionEmbeddingSine(256)
    for side in (64, 32, 16, 8):
        with torch.no_grad():
            want = enc(torch.zeros(1, 256, side, side))[0].numpy()
        rec = backend.recorder("test.pos_sine")
        y = nn.pos_sine(rec, 256, (side, side))
        rec.finish().run()
        got = y.numpy()
        y.free()
        bound = ref_nn.pos_sine_bound(256, (side, side)) + 1e-6  # torch's own f32 (sinf, powf)
        assert (np.abs(got - want) <= bound).all(), side
        print("%d x %d: largest difference %.1e" % (side, side, np.abs(got - want).max()))
