"""``spirula selftest``: check that the GPU runs Spirula's kernels correctly."""

from __future__ import annotations

import time

import click

from spirula.cli.common import common_options, open_cli_device
from spirula.errors import InternalError


@click.command()
@common_options
@click.option("--size", default=1 << 16, show_default=True, help="Values in the transfer and prefix-sum check.")
def selftest(size):
    """Run every kernel on small seeded cases on the device and check it
    against the float64 numpy reference (spirula/reference): transfers, prefix
    sum, radix sort, projection, intersections, tile ranges, rasterization
    forward and backward, the loss, fpbo and densification (MCMC and ADC).
    Prints a table (kernel, max error, tolerance, pass); exits 1 on any
    failure. With --backend cuda, the same checks on the CUDA device."""
    from spirula import selftest as checks

    dev = open_cli_device()
    click.echo("device %d: %s (%s), %s backend" % (dev.info.index, dev.info.name, dev.info.driver, dev.backend))
    t0 = time.perf_counter()
    rows = checks.run(dev, [lambda d: checks.check_runtime(d, size)] + list(checks.CHECKS[1:]))
    click.echo(checks.table(rows))
    failed = [r.kernel for r in rows if not r.ok]
    if failed:
        raise InternalError(
            "selftest FAILED on %s (%s): %s differ from the reference" % (dev.info.name, dev.backend, ", ".join(failed))
        )
    click.echo("selftest passed: %d checks in %.1f s" % (len(rows), time.perf_counter() - t0))
