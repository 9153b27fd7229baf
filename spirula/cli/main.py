"""``spirula``: the command-line entry point.

Every subcommand takes ``--profile`` (same as ``SS_PROFILE=1``) and
``--device N`` (same as ``SPIRULA_DEVICE=N``); both also work before the
subcommand. A :class:`~spirula.errors.SpirulaError` ends the command with one
line on stderr (``spirula: error: ...``) and its exit code, never a traceback.
"""
from __future__ import annotations

import os
import sys

import click

from spirula.errors import SpirulaError


def _set_profile(ctx, param, value):
    # Before any GPU object exists: the profiler is chosen when a Device opens.
    if value:
        os.environ["SS_PROFILE"] = "1"


def _set_device(ctx, param, value):
    if value is not None:
        os.environ["SPIRULA_DEVICE"] = str(value)


def common_options(fn):
    """--profile and --device on a command (they act as soon as they are parsed)."""
    fn = click.option("--device", "device", type=int, default=None, expose_value=False, is_eager=True,
                      callback=_set_device, help="Vulkan device index (see `spirula devices`).")(fn)
    fn = click.option("--profile", is_flag=True, expose_value=False, is_eager=True, callback=_set_profile,
                      help="Print the [spirula-profile] reports on stderr at exit (SS_PROFILE=1).")(fn)
    return fn


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
@click.version_option(package_name="spirula")
def cli():
    """Spirula: 3D Gaussian Splatting on any GPU, through Vulkan compute."""


def _register():
    from spirula.cli import devices, selftest, shaders, train  # noqa: F401  (commands attach to cli)


def main(argv=None):
    _register()
    try:
        cli.main(args=argv, prog_name="spirula", standalone_mode=False)
    except SpirulaError as exc:
        click.echo("spirula: error: %s" % exc, err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("spirula: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("spirula: interrupted", err=True)
        sys.exit(130)
    sys.exit(0)


if __name__ == "__main__":
    main()
