"""``spirula devices``: the Vulkan devices Spirula can use, and the CUDA GPUs
of the optional CUDA backend (``--backend cuda``) where it is usable."""

from __future__ import annotations

import click

from spirula.cli.common import chosen_backend, common_options


def _gib(n: int) -> str:
    return "%.1f GiB" % (n / (1 << 30))


def _table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _cuda_devices() -> list:
    """The CUDA backend's GPUs; empty (and silent) without its library, a
    driver or a GPU, or when the backend is not installed at all."""
    try:
        from spirula.backends.cuda import cudart
    except Exception:
        return []
    try:
        return cudart.list_devices()
    except Exception:
        return []


def _vulkan_table():
    from spirula.backends import vulkan

    devs = vulkan.list_devices()
    chosen = vulkan.resolve_index(None, devs)
    rows = [("", "#", "name", "type", "driver", "subgroup", "memory", "timestamps", "float atomics")]
    for d in devs:
        ts = "yes (%.2f ns/tick)" % d.timestamp_period_ns if d.timestamps else "no"
        rows.append(
            (
                "*" if d.index == chosen else "",
                str(d.index),
                d.name,
                d.device_type,
                d.driver,
                str(d.subgroup_size),
                _gib(d.device_local_bytes),
                ts,
                "yes" if d.atomic_float_add else "no (CAS fallback)",
            )
        )
    _table(rows)


def _cuda_table(devs, chosen=None):
    rows = [("#", "name", "compute", "SMs", "memory", "driver")]
    for d in devs:
        rows.append(
            (
                str(d.index),
                d.name,
                "sm_%d%d" % d.compute_capability,
                str(d.sm_count),
                _gib(d.device_local_bytes),
                d.driver,
            )
        )
    if chosen is not None:
        rows = [("",) + rows[0]] + [("*" if d.index == chosen else "",) + r for d, r in zip(devs, rows[1:])]
    _table(rows)


@click.command()
@common_options
def devices():
    """List the GPUs: name, type, driver, subgroup size, memory, timestamps.

    The one marked * is used unless --device / SPIRULA_DEVICE picks another
    (default: a discrete GPU first, the CPU driver lavapipe last). Where the
    CUDA backend is built and an NVIDIA driver is present, a second table
    lists the CUDA GPUs that `--backend cuda` can use. With --backend, only
    that backend's devices (--backend cuda: an error line where CUDA cannot run).
    """
    backend = chosen_backend(None)
    if backend == "cuda":
        from spirula.backends import cuda

        devs = cuda.list_devices()
        _cuda_table(devs, cuda.resolve_index(None))
        return
    _vulkan_table()
    if backend is None:
        devs = _cuda_devices()
        if devs:
            click.echo("")
            click.echo("CUDA GPUs (--backend cuda):")
            _cuda_table(devs)
