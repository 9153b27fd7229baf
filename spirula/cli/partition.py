"""``spirula partition DATASET OUT`` and ``spirula partition merge OUT_OR_RUN``
(docs/partition.md)."""

from __future__ import annotations

from pathlib import Path

import click

from spirula.cli.common import FiniteFloat, common_options, open_cli_device


def _log(msg):
    click.echo(msg, err=True)


class _SplitByDefault(click.Group):
    """A group whose arguments, when they do not name a subcommand, go to ``split``:
    ``spirula partition DATASET OUT ...`` and ``spirula partition merge RUN``."""

    def parse_args(self, ctx, args):
        args = list(args)
        i = 0  # past the group's own options (common_options: --backend X, --device N, --profile)
        while i < len(args) and args[i].startswith("-") and args[i] not in ("-h", "--help"):
            i += 1 if "=" in args[i] or args[i] == "--profile" else 2
        if i < len(args) and args[i] not in self.commands and args[i] not in ("-h", "--help"):
            args.insert(i, "split")
        return super().parse_args(ctx, args)


@click.group("partition", cls=_SplitByDefault)
@common_options
def partition():
    """Split a large scene into spatial blocks that train separately, and merge
    the trained blocks (docs/partition.md).

    \b
    spirula partition DATASET OUT --blocks N | --grid AxB [--margin F]
    spirula partition merge OUT_OR_RUN [--finetune-steps N]
    """


@partition.command("split")
@common_options
@click.argument("dataset", type=click.Path(exists=True, path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--blocks", "n_blocks", type=click.IntRange(1, 4096), default=None, help="Number of blocks (a grid).")
@click.option("--grid", default=None, metavar="AxB", help="Blocks along the two ground axes, e.g. 3x2.")
@click.option(
    "--margin",
    type=FiniteFloat(min=0),
    default=None,
    help="Each block's overlap, as a fraction of its core's size on every side [default: 0.2].",
)
@click.option(
    "--downscale", type=click.IntRange(1, 1000), default=None, help="Use images_N (computed and cached when missing)."
)
@click.option("--eval-split", default="interval:8", show_default=True, help="Views kept out of every block.")
def split(dataset, out, n_blocks, grid, margin, downscale, eval_split):
    """Write DATASET's training views and seed points as block datasets in OUT,
    plus OUT/manifest.json (the default subcommand: `spirula partition DATASET OUT`)."""
    from spirula.data import load_dataset
    from spirula.partition.blocks import DEFAULT_MARGIN
    from spirula.partition.pipeline import parse_grid, partition_scene

    n_blocks, grid = parse_grid(n_blocks, grid)
    scene = load_dataset(dataset, downscale=downscale, eval_split=eval_split)
    margin = DEFAULT_MARGIN if margin is None else margin
    loaded = dict(downscale=downscale, eval_split=eval_split)
    partition_scene(scene, out, n_blocks=n_blocks, grid=grid, margin=margin, loaded=loaded, log=_log)


@partition.command("merge")
@common_options
@click.argument("run", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--finetune-steps",
    "steps",
    type=click.IntRange(1, 1_000_000_000),
    default=None,
    help="Steps of the fine-tune on the whole dataset [default: 10%% of the blocks' steps].",
)
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="[default: OUT/merged, or RUN].")
def merge(run, steps, output):
    """Keep each trained block's splats in its core, merge them, fine-tune on
    the whole dataset; writes splat.ply and metrics.json. OUT_OR_RUN: a
    partition folder whose blocks were trained into OUT/runs/block-NN, or a
    `spirula train --partition` run."""
    import json

    from spirula.data import load_dataset
    from spirula.partition.blocks import PartitionError
    from spirula.partition.pipeline import RUNS, finetune_steps, merge_and_finetune, read_partition
    from spirula.train.config import TrainConfig

    folder, manifest = read_partition(run)
    first = folder / RUNS / manifest["blocks"][0]["name"] / "config.json"
    try:
        saved = json.loads(first.read_text())
    except (OSError, ValueError) as exc:
        raise PartitionError("%s: no readable block config (%s); train the blocks first" % (first, exc)) from None
    cfg = TrainConfig.from_dict(saved)
    settings = manifest.get("settings", {})
    scene = load_dataset(
        manifest["source"],
        downscale=settings.get("downscale"),
        eval_split=settings.get("eval_split", "interval:8"),
        background=cfg.background or "auto",
        seed=cfg.seed,
    )
    if output is None:
        output = folder.parent if folder.name == "partition" else folder / "merged"
    device = open_cli_device()
    merge_and_finetune(scene, cfg, manifest, folder / RUNS, output, finetune_steps(cfg, steps), device, log=_log)
