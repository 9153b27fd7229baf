"""``spirula export RUN_OR_FILE --format F``: the splats in a format to share
them in (docs/export.md); ``--export`` of ``spirula train`` uses the same writer."""

from __future__ import annotations

from pathlib import Path

import click

from spirula.cli.common import common_options
from spirula.errors import UsageError
from spirula.export import FORMATS, SUFFIX


def parse_formats(value: str | None) -> list:
    """``spz,sog``: a list of known formats (``--export``), one line naming a bad one."""
    if not value:
        return []
    out = []
    for f in (s.strip() for s in value.split(",")):
        if f not in FORMATS:
            raise UsageError("--export %s: %r is none of %s" % (value, f, ", ".join(FORMATS)))
        if f not in out:
            out.append(f)
    return out


def input_splats(source: Path) -> Path:
    """The splat file of a run folder (RUN/splat.ply) or the file itself."""
    from spirula.export import is_splat_file

    if source.is_dir():
        ply = source / "splat.ply"
        if not ply.is_file():
            raise UsageError("%s: no splat.ply in this folder (not a finished `spirula train` run?)" % source)
        return ply
    if not source.exists():
        raise UsageError("%s: no such run folder or splat file" % source)
    if not is_splat_file(source):
        raise UsageError("%s: not a run folder or a splat file (.ply, .spz, .sog, .splat, .glb)" % source)
    return source


def default_output(ply: Path, fmt: str) -> Path:
    """Beside the input, its name's splat suffix replaced by the format's."""
    name = ply.name
    for s in sorted(SUFFIX.values(), key=len, reverse=True):
        if name.lower().endswith(s):
            name = name[: -len(s)]
            break
    return ply.with_name(name + SUFFIX[fmt])


def ply_size(n: int, degree: int) -> int:
    """The bytes of a splat.ply of ``n`` splats of SH ``degree`` (spirula/data/ply.py's layout)."""
    from spirula.data.ply import splat_property_names

    names = splat_property_names((degree + 1) ** 2)
    header = 3 + 1 + sum(len("property float %s\n" % s) for s in names) + len("ply\nformat binary_little_endian 1.0\n")
    return header + len("element vertex %d\nend_header\n" % n) + 4 * len(names) * n


def export_file(src: Path, fmt: str, output: Path | None, sh_degree=None, log=None) -> Path:
    """Read ``src``, write it as ``fmt``; one line of what was written."""
    from spirula.export import read_splats, write_splats
    from spirula.files import fmt_size

    out = output if output is not None else default_output(src, fmt)
    if out.exists() and out.resolve() == src.resolve():
        raise UsageError("%s: the output would overwrite its input (give --output)" % out)
    if out.is_dir():
        raise UsageError("--output %s: is a folder, expected a file" % out)
    if not out.parent.is_dir():
        raise UsageError("--output %s: the folder %s does not exist" % (out, out.parent))
    p = read_splats(src, allow_empty=False)
    write_splats(out, p, fmt, sh_degree=sh_degree)
    size = out.stat().st_size
    degree = p["sh_degree"] if sh_degree is None else sh_degree
    if fmt == "splat":
        degree = 0
    ratio = ply_size(len(p["means"]), p["sh_degree"]) / max(size, 1)
    if log is not None:
        log(
            "export: %s splats, SH degree %d -> %s (%s, %.1fx smaller than the PLY)"
            % (f"{len(p['means']):,}", degree, out, fmt_size(size), ratio)
        )
    return out


@click.command("export")
@common_options
@click.argument("run_or_file", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="spz (Niantic), sog (PlayCanvas), ply-compressed (SuperSplat), splat (antimatter15, no SH),"
    " gltf (.glb, KHR_gaussian_splatting), gltf-spz (.spz.glb, the same SPZ-compressed:"
    " KHR_gaussian_splatting_compression_spz_2), ply, html (one page that shows them)"
    " [default: from --output's suffix].",
)
@click.option("--sh-degree", type=click.IntRange(0, 3), default=None, help="Keep SH up to this degree [default: all].")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="The file to write [default: beside the input, e.g. RUN/splat.spz].",
)
def export_command(run_or_file, fmt, sh_degree, output):
    """Write the splats of a run folder (its splat.ply) or of a splat file in a
    format to share them in: SPZ, SOG, compressed PLY, .splat, glTF (.glb),
    PLY, or one self-contained HTML page that shows them."""
    if fmt is None:
        if output is None:
            raise UsageError("spirula export: give --format (one of %s)" % ", ".join(FORMATS))
        name = output.name.lower()
        fmt = next((f for f, s in sorted(SUFFIX.items(), key=lambda i: -len(i[1])) if name.endswith(s)), None)
        if fmt is None:
            raise UsageError("--output %s: no format has this suffix; give --format" % output)
    src = input_splats(run_or_file)
    export_file(src, fmt, output, sh_degree, log=lambda m: click.echo(m, err=True))
