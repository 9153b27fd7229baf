"""Partition, train the blocks on Ray, merge, fine-tune: the stages together.

A partitioned run's folder:

    RUN/
        partition/manifest.json, partition/block-NN/   the block datasets (write.py)
        partition/runs/block-NN/                       each block's run (splat.ply, metrics.json, device.json)
        merged.ply                                     the blocks' core splats, before the fine-tune
        splat.ply, metrics.json, config.json, ckpt/    the fine-tuned scene, as a normal run writes them

``spirula partition DATASET OUT`` writes only ``OUT/manifest.json`` and the
block datasets; train each block into ``OUT/runs/block-NN`` (``spirula train
OUT/block-NN -o OUT/runs/block-NN --eval-split none``), then ``spirula
partition merge OUT``.
"""

from __future__ import annotations

import json
from pathlib import Path

from spirula.partition import blocks as blk
from spirula.partition.blocks import PartitionError
from spirula.partition.merge import FINETUNE_FRACTION, finetune_config, merge_splats, read_blocks
from spirula.partition.write import MANIFEST, read_manifest, write_partition

RUNS = "runs"  # the block runs, inside the partition folder


def parse_grid(n_blocks: int | None, grid: str | None):
    """``--blocks N`` or ``--grid AxB`` -> (N, None) or (None, (A, B))."""
    if (n_blocks is None) == (grid is None):
        raise PartitionError("give one of --blocks N or --grid AxB")
    if grid is None:
        return n_blocks, None
    try:
        a, b = (int(x) for x in grid.lower().split("x"))
        if a < 1 or b < 1:
            raise ValueError
    except ValueError:
        raise PartitionError("--grid %s: expected AxB with A, B >= 1 (e.g. 2x2)" % grid) from None
    return None, (a, b)


def partition_scene(
    scene,
    out: Path,
    n_blocks: int | None = None,
    grid: tuple | None = None,
    margin: float = blk.DEFAULT_MARGIN,
    min_visible: float = blk.DEFAULT_MIN_VISIBLE,
    loaded: dict | None = None,
    log=print,
) -> dict:
    """Split ``scene``'s training views and seed points into blocks and write
    them under ``out``; returns the manifest. ``loaded``: how ``scene`` was
    loaded (downscale, eval_split), kept in the manifest for the merge."""
    import numpy as np

    viewmats, Ks, sizes = scene.cameras(scene.train)
    if not len(viewmats):
        raise PartitionError("%s: no training images to partition" % scene.path)
    centres = -np.einsum("nji,nj->ni", viewmats[:, :3, :3], viewmats[:, :3, 3])
    axes = blk.ground_axes(centres)
    if grid is None:
        spread = np.ptp(np.asarray(scene.points, np.float64)[:, list(axes)], axis=0)
        grid = blk.grid_shape(n_blocks, spread)
    axes, blocks = blk.split(scene.points, viewmats, Ks, sizes, grid, margin, min_visible, axes=axes)
    settings = dict(grid=list(grid), margin=margin, min_visible=min_visible, **(loaded or {}))
    manifest = write_partition(out, scene, axes, blocks, settings)
    for e in manifest["blocks"]:
        log("spirula: %s: %d cameras, %s seed points" % (e["name"], len(e["cameras"]), f"{e['n_points']:,}"))
    log("spirula: wrote %d blocks (%dx%d) and %s" % (len(blocks), grid[0], grid[1], Path(out) / MANIFEST))
    return manifest


def finetune_steps(cfg, steps: int | None) -> int:
    return int(steps) if steps is not None else max(1, int(round(FINETUNE_FRACTION * cfg.iterations)))


def merge_and_finetune(scene, cfg, manifest: dict, runs: Path, output: Path, steps: int, device, log=print) -> dict:
    """Merge the blocks' runs (``runs/block-NN/splat.ply``) into
    ``output/merged.ply``, fine-tune it ``steps`` steps on ``scene`` into
    ``output`` (splat.ply, metrics.json); returns the metrics."""
    from spirula.data import write_splat_ply
    from spirula.train.run import train_run

    parts = read_blocks(manifest, runs)
    merged = merge_splats(manifest, parts)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    write_splat_ply(
        output / "merged.ply", merged["means"], merged["quats"], merged["scales"], merged["opacities"], merged["sh"]
    )
    log(
        "spirula: merged %d blocks: %s of %s splats in their cores; fine-tuning %d steps"
        % (len(parts), f"{len(merged['means']):,}", f"{sum(len(p['means']) for p in parts):,}", steps)
    )
    ft = finetune_config(cfg, steps)
    metrics = train_run(scene, ft, device, output, log=log, init=merged)
    metrics["partition"] = dict(
        blocks=[e["name"] for e in manifest["blocks"]],
        block_splats=[int(len(p["means"])) for p in parts],
        merged_splats=int(len(merged["means"])),
        finetune_steps=steps,
        manifest=str(Path(runs).parent / MANIFEST),
    )
    (output / "metrics.json").write_text(json.dumps(metrics, indent=1))
    return metrics


def partition_folder(path: Path) -> Path:
    """The partition folder of a partitioned run, or ``path`` itself when it is one."""
    path = Path(path)
    for folder in (path / "partition", path):
        if (folder / MANIFEST).is_file():
            return folder
    raise PartitionError(
        "%s: neither a partition (manifest.json) nor a partitioned run (partition/manifest.json)" % path
    )


def train_partitioned(
    scene, cfg, output: Path, n_blocks: int, address: str, device_opener, steps=None, log=print, verbose=False
):
    """``spirula train --partition N``: partition ``scene`` into
    ``output/partition``, train the blocks on Ray, merge and fine-tune into
    ``output``. ``device_opener()``: the driver's device, opened only for the
    fine-tune (after the blocks, so that a one-GPU machine is free for them).
    Ray's and the blocks' output go to ``partition/ray.log`` and each block's
    ``train.log`` (on stderr too when ``verbose``)."""
    from spirula.partition.ray_run import RAY_LOG, import_ray, init_ray, train_blocks
    from spirula.progress import capture_output

    import_ray()  # without Ray: one line, before anything is written
    output = Path(output)
    import dataclasses

    part = output / "partition"
    loaded = dict(downscale=cfg.downscale, eval_split=cfg.eval_split)
    manifest = partition_scene(scene, part, n_blocks=n_blocks, loaded=loaded, log=log)
    # the blocks are COLMAP datasets: they composite and render on the source's background
    cfg = dataclasses.replace(cfg, background=cfg.background or ("white" if scene.background.mean() > 0.5 else "black"))
    ray = init_ray(address, log=log, verbose=verbose, log_file=part / RAY_LOG)
    try:
        results = train_blocks(ray, manifest, part, part / RUNS, cfg, log=log, verbose=verbose)
    finally:
        if address == "local":
            with capture_output(part / RAY_LOG, echo=verbose):
                ray.shutdown()  # the head this run started
    device = device_opener()
    metrics = merge_and_finetune(scene, cfg, manifest, part / RUNS, output, finetune_steps(cfg, steps), device, log)
    metrics["partition"]["block_results"] = results
    (output / "metrics.json").write_text(json.dumps(metrics, indent=1))
    return metrics


def read_partition(path: Path) -> tuple:
    """(partition folder, manifest) of a partition or partitioned run."""
    folder = partition_folder(path)
    return folder, read_manifest(folder)
