"""``spirula devices``: the Vulkan devices Spirula can use."""
from __future__ import annotations

import click

from spirula.cli.main import cli, common_options
from spirula.runtime import vkinfo
from spirula.runtime.device import resolve_index


def _gib(n: int) -> str:
    return "%.1f GiB" % (n / (1 << 30))


@cli.command()
@common_options
def devices():
    """List Vulkan devices: name, type, driver, subgroup size, memory, timestamps.

    The one marked * is used unless --device / SPIRULA_DEVICE picks another
    (default: a discrete GPU first, the CPU driver lavapipe last).
    """
    devs = vkinfo.list_devices()
    chosen = resolve_index(None, devs)
    rows = [("", "#", "name", "type", "driver", "subgroup", "memory", "timestamps", "float atomics")]
    for d in devs:
        ts = "yes (%.2f ns/tick)" % d.timestamp_period_ns if d.timestamps else "no"
        rows.append(("*" if d.index == chosen else "", str(d.index), d.name, d.device_type, d.driver,
                     str(d.subgroup_size), _gib(d.device_local_bytes), ts,
                     "yes" if d.atomic_float_add else "no (CAS fallback)"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
