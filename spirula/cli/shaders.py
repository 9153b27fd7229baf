"""``spirula shaders``: compile every kernel (make install runs it)."""
from __future__ import annotations

import click

from spirula.cli.main import cli
from spirula.runtime.kernels import KernelRegistry


@cli.command(hidden=True)
@click.option("--define", "-D", multiple=True, help="NAME=VALUE, as glslang -D (repeatable).")
def shaders(define):
    """Compile shaders/*.comp to SPIR-V into the cache; report any error."""
    defines = dict(d.split("=", 1) if "=" in d else (d, "1") for d in define)
    reg = KernelRegistry()
    names = reg.names()
    from spirula.progress import track
    for name in track(names, "compiling shaders", unit="kernel"):
        reg.get(name, **defines)
    click.echo("spirula: %d kernels compiled (cache: %s)" % (len(names), reg.cache))
