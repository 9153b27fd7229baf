"""``spirula selftest``: check that the GPU runs Spirula's kernels correctly."""

from __future__ import annotations

import time

import click
import numpy as np

from spirula.cli.main import cli, common_options, open_cli_device
from spirula.errors import SpirulaError


@cli.command()
@common_options
@click.option("--size", default=1 << 22, show_default=True, help="Values in the prefix-sum check.")
def selftest(size):
    """Run the runtime's kernels on the device and check them against numpy:
    upload/readback, fill, copy and a multi-pass prefix sum (dependent dispatches).
    With --backend cuda, on the CUDA device."""
    from spirula.render.scan import PrefixSum

    dev = open_cli_device()
    click.echo("device %d: %s (%s)" % (dev.info.index, dev.info.name, dev.info.driver))
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1000, size, dtype=np.uint32)
    buf = dev.pool.alloc("selftest.values", (size,), np.uint32)
    t0 = time.perf_counter()
    dev.upload(buf, x)
    ok = np.array_equal(dev.readback(buf), x)
    other = dev.pool.alloc("selftest.copy", (size,), np.uint32)
    dev.fill(other, 7)
    ok &= bool(np.all(dev.readback(other) == 7))
    dev.copy(buf, other)
    ok &= np.array_equal(dev.readback(other), x)
    scan = PrefixSum(dev, size)
    rec = dev.recorder("selftest")
    scan.record(rec, buf, size)
    seq = rec.finish()
    seq.run()
    expect = np.zeros_like(x)
    np.cumsum(x[:-1], dtype=np.uint32, out=expect[1:])
    ok &= np.array_equal(dev.readback(buf), expect)
    dt = time.perf_counter() - t0
    if not ok:
        raise SpirulaError("selftest FAILED on %s: GPU results differ from numpy" % dev.info.name)
    click.echo(
        "selftest passed: transfers, fill, copy, prefix sum of %d values (%d dependent "
        "dispatches) in %.3f s" % (size, seq.dispatches, dt)
    )
