"""Merge trained blocks into one scene: each block keeps the splats whose means
lie in its core (the margins were only there to train the core's edges
against their surroundings), the kept splats are concatenated, and the
merged scene is fine-tuned briefly on the whole dataset to blend the seams.

Splat arrays are raw, in dataset coordinates (spirula/data/ply.py):
means [N,3], quats [N,4], scales [N,3] (log), opacities [N] (logits), sh [N,K,3].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spirula.partition.blocks import PartitionError
from spirula.partition.write import manifest_blocks

# the fine-tune: the end of the blocks' schedule on the whole scene
FINETUNE_FRACTION = 0.1  # of the blocks' steps, when not given


def core_filter(splats: dict, block, axes) -> dict:
    """The splats of ``block`` whose means lie in its core."""
    keep = block.in_core(np.asarray(splats["means"], np.float64)[:, list(axes)])
    return {k: np.asarray(v)[keep] for k, v in splats.items()}


def merge_splats(manifest: dict, block_splats: list) -> dict:
    """One scene from the blocks' splats (one dict per manifest block, in order)."""
    blocks = manifest_blocks(manifest)
    if len(blocks) != len(block_splats):
        raise PartitionError("%d blocks in the manifest but %d block results" % (len(blocks), len(block_splats)))
    kept = [core_filter(s, b, manifest["axes"]) for s, b in zip(block_splats, blocks)]
    ks = {s["sh"].shape[1] for s in kept}
    if len(ks) != 1:
        raise PartitionError("the blocks' splats have different SH degrees (%s coefficients)" % sorted(ks))
    return {k: np.concatenate([s[k] for s in kept]) for k in kept[0]}


def ply_params(ply: dict) -> dict:
    """:func:`spirula.data.read_splat_ply`'s dict as the trainer's raw parameters
    (means, quats, scales, opacities, sh: spirula/train/storage.py PARAM_NAMES)."""
    return dict(
        means=ply["means"],
        quats=ply["quats"],
        scales=ply["log_scales"],
        opacities=ply["opacity_logits"],
        sh=ply["sh_coeffs"],
    )


def read_blocks(manifest: dict, folder: Path) -> list:
    """The blocks' splats: ``folder/<block>/splat.ply`` for every block."""
    from spirula.data import read_splat_ply

    out = []
    for e in manifest["blocks"]:
        ply = Path(folder) / e["name"] / "splat.ply"
        if not ply.is_file():
            raise PartitionError("%s: missing; train block %s first" % (ply, e["name"]))
        out.append(ply_params(read_splat_ply(ply)))
    return out


def finetune_config(cfg, steps: int):
    """The fine-tune's TrainConfig: the last ``steps`` steps of one run of
    ``cfg.iterations + steps`` steps, as a fresh run of ``steps`` (the blocks
    trained its first ``cfg.iterations``): the means' learning rate starts
    where that run's exponential decay is after the blocks' steps and ends at
    its final value (exactly that schedule), and the densification window and
    the next SH band's step are shifted by the blocks' steps (the bands after
    it then come every ``sh_every``). Adam's moments start at zero: the
    blocks' are not merged."""
    done = cfg.iterations
    total = done + steps
    lr_means = cfg.lr_means * (cfg.lr_means_final / cfg.lr_means) ** (done / total)
    band = min(done // cfg.sh_every, cfg.sh_degree)
    # a fresh run starts at SH degree 0: where the blocks had reached a band, all
    # their bands (they are trained) come on after one step
    sh_every = 1 if band > 0 else max(1, cfg.sh_every - done)
    return cfg.replace(
        iterations=steps,
        lr_means=lr_means,
        sh_every=sh_every,
        refine_start=max(0, cfg.strategy.refine_start - done),
        refine_stop=max(0, cfg.strategy.refine_stop - done),
        eval_every=0,
        save_every=0,
    )
