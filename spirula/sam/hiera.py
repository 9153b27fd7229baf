"""Hiera, SAM 2's image encoder trunk, on the nn runtime.

The layout follows SAM 2's ``sam2/modeling/backbones/hieradet.py`` (read at
facebookresearch/sam2 0c5f8c5): a 7x7 stride-4 patch embedding, a windowed position
embedding, then stages of MultiScaleBlocks: LayerNorm (eps 1e-6), attention over windows
(or the whole grid for the global blocks) whose queries are max-pooled 2x2 at the first
block of each new stage (q_pool of them), where the width and the heads double
(dim_mul, head_mul) and the shortcut is projected and pooled too; then a residual MLP.
The first block of a stage keeps the previous stage's window ("lags by a block"). The
outputs are the features at every stage's end, channels-last [B, H, W, C].

Weights are numpy arrays under the checkpoint's names with ``image_encoder.trunk.``
removed (``patch_embed.proj.weight``, ``pos_embed``, ``pos_embed_window``,
``blocks.N.norm1.weight``, ``blocks.N.attn.qkv.weight``, ``blocks.N.mlp.layers.0.weight``,
``blocks.N.proj.weight``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from spirula import nn


@dataclass(frozen=True)
class HieraConfig:
    """Hiera's constructor arguments (SAM 2's names and defaults; SAM 2.1 tiny: stages
    (1, 2, 7, 2), global_att_blocks (5, 7, 9), window_pos_embed_bkg_spatial_size (7, 7))."""

    embed_dim: int = 96
    num_heads: int = 1
    q_pool: int = 3
    q_stride: int = 2
    stages: tuple = (2, 3, 16, 3)
    dim_mul: float = 2.0
    head_mul: float = 2.0
    window_pos_embed_bkg_spatial_size: tuple = (14, 14)
    window_spec: tuple = (8, 4, 14, 7)
    global_att_blocks: tuple = (12, 16, 20)


SAM21_TINY = HieraConfig(stages=(1, 2, 7, 2), global_att_blocks=(5, 7, 9), window_pos_embed_bkg_spatial_size=(7, 7))


@dataclass(frozen=True)
class BlockSpec:
    """One MultiScaleBlock: widths in and out, heads, q pooling stride (0: none), window
    (0: global attention)."""

    dim: int
    dim_out: int
    heads: int
    q_stride: int
    window: int


def stage_ends(config: HieraConfig) -> list:
    return [sum(config.stages[:i]) - 1 for i in range(1, len(config.stages) + 1)]


def block_specs(config: HieraConfig) -> list:
    """The blocks as Hiera.__init__ makes them (module docstring)."""
    ends = stage_ends(config)
    q_pool_blocks = [x + 1 for x in ends[:-1]][: config.q_pool]
    dim, heads, stage = config.embed_dim, config.num_heads, 1
    out = []
    for i in range(sum(config.stages)):
        dim_out = dim
        window = config.window_spec[stage - 1]
        if i in config.global_att_blocks:
            window = 0
        if i - 1 in ends:
            dim_out = int(dim * config.dim_mul)
            heads = int(heads * config.head_mul)
            stage += 1
        out.append(BlockSpec(dim, dim_out, heads, config.q_stride if i in q_pool_blocks else 0, window))
        dim = dim_out
    return out


@dataclass
class Hiera:
    """The trunk's weights on ``device`` (linear and convolution weights fp16, the rest f32)
    and its forward pass. ``weights``: name -> numpy array (module docstring)."""

    device: object
    config: HieraConfig
    weights: dict
    _held: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.blocks = block_specs(self.config)
        w = self.weights
        self._held = {}
        for name, a in w.items():
            a = np.asarray(a, np.float32)
            if name.endswith("weight") and a.ndim >= 2:  # linear and convolution weights: fp16 rows
                self._held[name] = nn.HalfWeight(self.device, a.reshape(a.shape[0], -1), "sam.hiera.w")
            elif name in ("pos_embed", "pos_embed_window"):
                self._held[name] = nn.Tensor.from_numpy(self.device, a[0], "sam.hiera.pos")
            else:
                self._held[name] = nn.Tensor.from_numpy(self.device, a, "sam.hiera.p")

    def __getitem__(self, name: str):
        return self._held[name]

    def free(self):
        for t in self._held.values():
            t.free()
        self._held = {}

    def forward(self, rec, image: nn.Tensor) -> list:
        """Record the trunk on ``image`` [B, 3, H, W] (normalized as SAM 2 normalizes it);
        returns the features at each stage's end, [B, H_s, W_s, C_s] channels-last. The
        intermediates hang on the last output's ``scratch``."""
        made = []
        x = nn.conv2d(rec, image, self["patch_embed.proj.weight"], 7, self["patch_embed.proj.bias"], 4, 3)
        B, C, H, W = x.shape
        tokens = nn.transpose(rec, nn.Tensor(rec.device, x.buffer, (B, C, H * W)))
        tokens.shape = (B, H, W, C)
        pos = nn.hiera_pos_embed(rec, self["pos_embed"], self["pos_embed_window"], (H, W))
        x_next = nn.add(rec, tokens, pos)
        made += [x, tokens, pos]
        x = x_next
        outs, ends = [], set(stage_ends(self.config))
        for i, spec in enumerate(self.blocks):
            y, scratch = self._block(rec, x, i, spec)
            made += scratch + [x]
            x = y
            if i in ends:
                outs.append(x)
        keep = {id(o) for o in outs}
        outs[-1].scratch += [t for t in made if id(t) not in keep]
        return outs

    def _block(self, rec, x: nn.Tensor, i: int, spec: BlockSpec) -> tuple:
        """One MultiScaleBlock (module docstring); (its output, the intermediates)."""
        p = "blocks.%d." % i
        made = []
        B, H, W, _ = x.shape
        h = nn.layer_norm(rec, x, self[p + "norm1.weight"], self[p + "norm1.bias"], 1e-6)
        made.append(h)
        shortcut = x
        if spec.dim != spec.dim_out:
            projected = nn.linear(rec, h, self[p + "proj.weight"], self[p + "proj.bias"])
            made.append(projected)
            shortcut = projected
            if spec.q_stride:
                shortcut = nn.max_pool2d(rec, projected, spec.q_stride)
                made.append(shortcut)
        attn_in = h
        if spec.window:
            attn_in = nn.window_partition(rec, h, spec.window)
            made.append(attn_in)
        a = nn.multiscale_attention(
            rec, attn_in, self[p + "attn.qkv.weight"], self[p + "attn.qkv.bias"], self[p + "attn.proj.weight"],
            self[p + "attn.proj.bias"], spec.heads, spec.q_stride,
        )  # fmt: skip
        made.append(a)
        if spec.window:
            window = spec.window // spec.q_stride if spec.q_stride else spec.window
            grid = nn.window_unpartition(rec, a, window, shortcut.shape[1:3])
            made.append(grid)
            a = grid
        x1 = nn.add(rec, shortcut, a)
        h2 = nn.layer_norm(rec, x1, self[p + "norm2.weight"], self[p + "norm2.bias"], 1e-6)
        m1 = nn.linear(rec, h2, self[p + "mlp.layers.0.weight"], self[p + "mlp.layers.0.bias"])
        g = nn.gelu(rec, m1)
        m2 = nn.linear(rec, g, self[p + "mlp.layers.1.weight"], self[p + "mlp.layers.1.bias"])
        y = nn.add(rec, x1, m2)
        made += [x1, h2, m1, g, m2]
        return y, made
