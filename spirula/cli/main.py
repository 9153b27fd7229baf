"""``spirula``: the command-line entry point.

Every subcommand takes ``--backend {vulkan,cuda}`` (default vulkan),
``--device N`` (that backend's device N; same as ``SPIRULA_DEVICE=N``) and
``--profile`` (same as ``SS_PROFILE=1``); all three also work before the
subcommand. A command opens its device with :func:`open_cli_device`. A
:class:`~spirula.errors.SpirulaError` ends the command with one line on
stderr (``spirula: error: ...``) and its exit code, never a traceback.
Ctrl-C, SIGTERM and SIGHUP exit with 128 + the signal's number (130, 143,
129); ``spirula train`` saves a checkpoint first (spirula/train/signals.py).
"""

from __future__ import annotations

import os
import signal
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


_BACKEND = "spirula.backend"  # ctx.meta key: shared by the group's context and the command's


def _set_backend(ctx, param, value):
    if value is not None:
        from spirula.backends import check_backend

        ctx.meta[_BACKEND] = check_backend(value)


def chosen_backend(default: str | None = "vulkan"):
    """The --backend given (after the subcommand wins over before it), else ``default``."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_BACKEND, default) if ctx is not None else default


def open_cli_device():
    """The device of the chosen backend (--device / SPIRULA_DEVICE index that
    backend's devices), made the process default for the command."""
    from spirula.backends import open_device, set_device

    device = open_device(chosen_backend())
    set_device(device)
    return device


def web_viewer_options(port_name: str, port_help: str):
    """The web viewer's port (``port_name``: ``--port`` or ``--viewer-port``,
    default: none, no web viewer) and ``--viewer-host`` on a command."""

    def add(fn):
        fn = click.option(
            "--viewer-host",
            default="127.0.0.1",
            show_default=True,
            help="Address the web viewer listens on (0.0.0.0: every interface; prefer an ssh -L tunnel).",
        )(fn)
        return click.option(port_name, type=click.IntRange(0, 65535), default=None, help=port_help)(fn)

    return add


def common_options(fn):
    """--backend, --device and --profile on a command (they act as soon as they are parsed)."""
    fn = click.option(
        "--profile",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_profile,
        help="Print the [spirula-profile] reports on stderr at exit (SS_PROFILE=1).",
    )(fn)
    fn = click.option(
        "--device",
        "device",
        type=int,
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_set_device,
        help="Device index within the backend (see `spirula devices`).",
    )(fn)
    fn = click.option(
        "--backend",
        metavar="[vulkan|cuda]",
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_set_backend,
        help="GPU backend: vulkan (the default) or cuda (NVIDIA, `make cuda`).",
    )(fn)
    return fn


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
@click.version_option(package_name="spirula")
def cli():
    """Spirula: 3D Gaussian Splatting on any GPU, through Vulkan compute."""


def _register():
    from spirula.cli import devices, frames, mesh, partition, render, selftest, sfm, shaders, train, view  # noqa: F401  (commands attach to cli)


def main(argv=None):
    _register()
    try:
        cli.main(args=argv, prog_name="spirula", standalone_mode=False)
    except SpirulaError as exc:
        click.echo("spirula: error: %s" % exc, err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        _interrupted(exc.__cause__)  # click turns a KeyboardInterrupt into Abort
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        _interrupted(exc)
    sys.exit(0)


def _interrupted(exc):
    """Exit after Ctrl-C, SIGTERM or SIGHUP (spirula/train/signals.py.Stopped):
    128 + the signal's number, as shells report it."""
    signum = getattr(exc, "signum", signal.SIGINT)
    if not getattr(exc, "reported", False):
        _say("spirula: interrupted" if signum == signal.SIGINT else "spirula: stopped by %s" % exc)
    sys.exit(128 + signum)


def _say(msg: str):
    """One line on stderr, unless the terminal is gone (SIGHUP)."""
    try:
        click.echo(msg, err=True)
    except OSError:
        pass


if __name__ == "__main__":
    main()
