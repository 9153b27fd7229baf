"""``spirula mesh RUN_OR_PLY``: a textured mesh of trained splats (docs/mesh.md)."""

from __future__ import annotations

from pathlib import Path

import click

from spirula.cli.common import common_options, open_cli_device
from spirula.mesh.pipeline import COLOUR_SOURCES, COLOURS, FORMATS, MeshConfig

_D = MeshConfig()


@click.command()
@common_options
@click.argument("run_or_ply", type=click.Path(path_type=Path))
@click.option(
    "--dataset",
    type=click.Path(path_type=Path),
    default=None,
    help="Fuse depth from this dataset's cameras [default: the run's dataset (config.json), else a sphere"
    " of virtual cameras around the splats].",
)
@click.option(
    "--resolution",
    type=int,
    default=None,
    help="Voxels along the longest axis of the fused volume [default: 256]; the surface's detail is about one voxel.",
)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help="Mesh file format [default: glb].")
@click.option(
    "--color",
    "colour",
    type=click.Choice(COLOURS),
    default=_D.colour,
    show_default=True,
    help="A baked texture (UV atlas) or per-vertex colours.",
)
@click.option(
    "--color-from",
    "colour_source",
    type=click.Choice(COLOUR_SOURCES),
    default=_D.colour_source,
    show_default=True,
    help="Colour from the nearby splats (base colour) or from the fused volume's colour grid.",
)
@click.option("--texture-size", type=int, default=_D.texture_size, show_default=True, help="Texels per side.")
@click.option("--simplify", type=int, default=None, metavar="FACES", help="Decimate to about this many faces.")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="Mesh file [default: RUN/mesh.glb, or beside the PLY with the format's suffix].",
)
def mesh(run_or_ply, dataset, resolution, fmt, colour, colour_source, texture_size, simplify, output):
    """Mesh the splats of a run folder (its splat.ply) or of a splat PLY.

    Renders depth from the dataset's cameras (or virtual ones), fuses it into a
    signed distance volume on the GPU, extracts the surface (marching cubes),
    drops floaters, optionally decimates, colours it (texture or per vertex)
    and writes GLB (default), OBJ+MTL+PNG or PLY.
    """
    from spirula.extras import EXTRAS, need

    need("spirula mesh", *EXTRAS["mesh"])
    from spirula.mesh.pipeline import MeshOptionError, load_input, output_path, run_mesh

    if fmt is None:
        fmt = output.suffix.lstrip(".").lower() if output is not None and output.suffix else _D.format
        if fmt not in FORMATS:
            raise MeshOptionError(
                "--output %s: unknown mesh format .%s (one of %s)" % (output, fmt, ", ".join(FORMATS))
            )
    cfg = MeshConfig(
        resolution=resolution,
        format=fmt,
        colour=colour,
        colour_source=colour_source,
        texture_size=texture_size,
        simplify=simplify,
    )
    cfg.check()

    def log(msg):
        click.echo(msg, err=True)

    inp = load_input(run_or_ply, dataset, log=log)
    out = output_path(inp, cfg, output)
    if not out.parent.is_dir():
        raise MeshOptionError("--output %s: the folder %s does not exist" % (out, out.parent))
    log("mesh: %s: %s splats" % (inp.ply, f"{len(inp.splats['means']):,}"))
    run = _run_of(run_or_ply)
    source = None
    if run is not None:
        from spirula.train.run_folder import splat_behind_note, splat_source

        note = splat_behind_note(run)
        if note:
            log(note)
        source = splat_source(run, inp.ply)  # as read, before the mesh takes minutes
    result = run_mesh(open_cli_device(), inp, cfg, out, log=log)
    if source is not None and out.parent.resolve() == run.resolve():
        from spirula.train.run_folder import SOURCE_SUFFIX, write_source

        # RUN/mesh.glb.source.json: the splat.ply it came from (spirula view and eval say when stale)
        write_source(out.with_name(out.name + SOURCE_SUFFIX), source)
    log("mesh: total     %6.1f s  %d faces -> %s" % (sum(result["times"].values()), result["faces"], out))


def _run_of(run_or_ply: Path):
    """The run folder of RUN or RUN/splat.ply, else None (a splat PLY elsewhere)."""
    from spirula.train.run_folder import is_run_folder

    if run_or_ply.is_dir():
        return run_or_ply
    if run_or_ply.name == "splat.ply" and is_run_folder(run_or_ply.parent):
        return run_or_ply.parent
    return None
