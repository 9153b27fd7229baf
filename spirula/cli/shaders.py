"""``spirula shaders``: compile every kernel (make install runs it)."""

from __future__ import annotations

import click

from spirula.backends.vulkan.kernels import KernelRegistry
from spirula.cli.common import chosen_backend, common_options
from spirula.errors import SpirulaError


@click.command(hidden=True)
@common_options
@click.option("--define", "-D", multiple=True, help="NAME=VALUE, as glslang -D (repeatable).")
def shaders(define):
    """Compile shaders/*.comp to SPIR-V into the cache; report any error.
    With --backend cuda, check that the built CUDA library has every kernel."""
    defines = dict(d.split("=", 1) if "=" in d else (d, "1") for d in define)
    reg = KernelRegistry()
    names = reg.names()
    if chosen_backend() == "cuda":
        from spirula.backends.cuda import cudart, device

        ported = device.ported_kernels(cudart.load_library())
        missing = [n for n in names if n not in ported]
        if missing:
            raise SpirulaError(
                "%s lacks the kernels %s: %s" % (cudart.library_path(), ", ".join(missing), cudart.BUILD_HINT)
            )
        click.echo("spirula: %d kernels in %s" % (len(names), cudart.library_path()))
        return
    from spirula.progress import track

    for name in track(names, "compiling shaders", unit="kernel"):
        reg.get(name, **defines)
    click.echo("spirula: %d kernels compiled (cache: %s)" % (len(names), reg.cache))
