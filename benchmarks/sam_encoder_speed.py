"""sam_encoder_speed: images a second through SAM 2.1's image encoder trunk and FPN neck
(issue #41 item 5), Spirula's kernels against Meta's sam2 on torch, same GPU, same call.

    python benchmarks/sam_encoder_speed.py [--size 1024] [--frames 20] [--config tiny|small]
                                           [--backend vulkan cuda] [--torch]

Random weights (SAM 2.1 tiny's or small's layout; speed does not depend on their values),
one image of ``--size`` squared, batch 1. Spirula records the trunk and the neck once and
runs the sequence ``--frames`` times (each run waited for: wall clock per image, after
``--warmup`` runs). With ``--torch`` the `sam2` package's Hiera and FpnNeck on CUDA torch,
float32 and fp16 autocast (the target: within 2x of torch's fp16), each step synchronized.
Printed: median and mean ms per image and images per second of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = {"tiny": ((1, 2, 7, 2), (5, 7, 9), (7, 7)), "small": ((1, 2, 11, 2), (7, 10, 13), (7, 7))}
D_MODEL = 256


def config(name):
    from spirula.sam.hiera import HieraConfig

    stages, global_att, bkg = CONFIGS[name]
    return HieraConfig(stages=stages, global_att_blocks=global_att, window_pos_embed_bkg_spatial_size=bkg)


def random_weights(cfg, d_model: int = D_MODEL, seed: int = 0) -> tuple:
    """(trunk weights, neck weights) of HieraConfig ``cfg`` and a ``d_model``-channel FPN neck,
    by checkpoint name, float32, seeded, at a trained net's scales (unit activations);
    tests/test_sam_hiera.py builds its tiny model from them too."""
    from spirula.sam.hiera import block_specs, stage_ends

    rng = np.random.default_rng(seed)

    def f32(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    C = cfg.embed_dim
    h, w = cfg.window_pos_embed_bkg_spatial_size
    k = cfg.window_spec[0]
    trunk = {
        "patch_embed.proj.weight": f32(C, 3, 7, 7, scale=147**-0.5),
        "patch_embed.proj.bias": f32(C, scale=0.1),
        "pos_embed": f32(1, C, h, w, scale=0.1),
        "pos_embed_window": f32(1, C, k, k, scale=0.1),
    }
    specs = block_specs(cfg)
    for i, b in enumerate(specs):
        p, hid = "blocks.%d." % i, 4 * b.dim_out
        trunk.update({
            p + "norm1.weight": 1 + f32(b.dim, scale=0.1), p + "norm1.bias": f32(b.dim, scale=0.1),
            p + "attn.qkv.weight": f32(3 * b.dim_out, b.dim, scale=b.dim**-0.5),
            p + "attn.qkv.bias": f32(3 * b.dim_out, scale=0.1),
            p + "attn.proj.weight": f32(b.dim_out, b.dim_out, scale=b.dim_out**-0.5),
            p + "attn.proj.bias": f32(b.dim_out, scale=0.1),
            p + "norm2.weight": 1 + f32(b.dim_out, scale=0.1), p + "norm2.bias": f32(b.dim_out, scale=0.1),
            p + "mlp.layers.0.weight": f32(hid, b.dim_out, scale=b.dim_out**-0.5),
            p + "mlp.layers.0.bias": f32(hid, scale=0.1),
            p + "mlp.layers.1.weight": f32(b.dim_out, hid, scale=hid**-0.5),
            p + "mlp.layers.1.bias": f32(b.dim_out, scale=0.1),
        })  # fmt: skip
        if b.dim != b.dim_out:
            trunk[p + "proj.weight"] = f32(b.dim_out, b.dim, scale=b.dim**-0.5)
            trunk[p + "proj.bias"] = f32(b.dim_out, scale=0.1)
    channels = [specs[e].dim_out for e in stage_ends(cfg)][::-1]
    neck = {}
    for i, c in enumerate(channels):
        neck["convs.%d.conv.weight" % i] = f32(d_model, c, 1, 1, scale=c**-0.5)
        neck["convs.%d.conv.bias" % i] = f32(d_model, scale=0.1)
    return trunk, neck


def time_runs(run, frames: int, warmup: int) -> list:
    for _ in range(warmup):
        run()
    out = []
    for _ in range(frames):
        t0 = time.perf_counter()
        run()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def spirula_times(backend, cfg, trunk_w, neck_w, size, frames, warmup) -> list:
    from spirula import nn
    from spirula.backends import open_device
    from spirula.sam.hiera import Hiera
    from spirula.sam.neck import FpnNeck

    dev = open_device(backend)
    model, neck = Hiera(dev, cfg, trunk_w), FpnNeck(dev, neck_w)
    image = nn.Tensor.from_numpy(dev, np.random.default_rng(1).standard_normal((1, 3, size, size)))
    rec = dev.recorder("bench.sam_encoder")
    outs = model.forward(rec, image)
    levels = neck.forward(rec, outs)
    seq = rec.finish()
    try:
        return time_runs(seq.run, frames, warmup)
    finally:
        for t in outs + levels + [image]:
            t.free()
        model.free()
        neck.free()


def torch_times(cfg, trunk_w, neck_w, size, frames, warmup, half: bool) -> list:
    import torch
    from sam2.modeling.backbones.hieradet import Hiera as Sam2Hiera
    from sam2.modeling.backbones.image_encoder import FpnNeck
    from sam2.modeling.position_encoding import PositionEmbeddingSine

    trunk = Sam2Hiera(stages=cfg.stages, global_att_blocks=cfg.global_att_blocks,
                      window_pos_embed_bkg_spatial_size=cfg.window_pos_embed_bkg_spatial_size)  # fmt: skip
    trunk.load_state_dict({k: torch.from_numpy(v) for k, v in trunk_w.items()})
    channels = [neck_w["convs.%d.conv.weight" % i].shape[1] for i in range(4)]
    neck = FpnNeck(PositionEmbeddingSine(D_MODEL), D_MODEL, channels, fpn_top_down_levels=[2, 3],
                   fpn_interp_model="nearest")  # fmt: skip
    neck.load_state_dict({k: torch.from_numpy(v) for k, v in neck_w.items()})
    trunk, neck = trunk.cuda().eval(), neck.cuda().eval()
    image = torch.randn(1, 3, size, size, device="cuda")

    def run():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=half):
            neck(trunk(image))
        torch.cuda.synchronize()

    return time_runs(run, frames, warmup)


def report(name, ms):
    med, mean = statistics.median(ms), statistics.fmean(ms)
    print("[sam_encoder] %-22s %8.2f / %8.2f ms an image (median / mean), %6.1f / %6.1f images/s"
          % (name, med, mean, 1e3 / med, 1e3 / mean), flush=True)  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    ap.add_argument("--backend", nargs="+", default=["vulkan"])
    ap.add_argument("--torch", action="store_true", help="also sam2 on CUDA torch (fp32 and fp16 autocast)")
    args = ap.parse_args(argv)
    cfg = config(args.config)
    trunk_w, neck_w = random_weights(cfg)
    print("[sam_encoder] SAM 2.1 %s trunk + FPN neck, %dx%d, batch 1" % (args.config, args.size, args.size))
    for backend in args.backend:
        report("spirula " + backend, spirula_times(backend, cfg, trunk_w, neck_w, args.size, args.frames, args.warmup))
    if args.torch:
        for half in (False, True):
            ms = torch_times(cfg, trunk_w, neck_w, args.size, args.frames, args.warmup, half)
            report("sam2 torch " + ("fp16" if half else "fp32"), ms)


if __name__ == "__main__":
    main()
