"""``spirula``: the command-line entry point.

Every subcommand takes ``--backend {vulkan,cuda}`` (default vulkan),
``--device N`` (that backend's device N; same as ``SPIRULA_DEVICE=N``) and
``--profile`` (same as ``SS_PROFILE=1``); all three also work before the
subcommand (spirula/cli/common.py). A command opens its device with
:func:`spirula.cli.common.open_cli_device`. A
:class:`~spirula.errors.SpirulaError` ends the command with one line on
stderr (``spirula: error: ...``) and its exit code, never a traceback.
Ctrl-C, SIGTERM and SIGHUP exit with 128 + the signal's number (130, 143,
129); ``spirula train`` saves a checkpoint first (spirula/train/signals.py).
"""

from __future__ import annotations

import signal
import sys

import click

from spirula.cli.common import common_options
from spirula.errors import SpirulaError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
@click.version_option(package_name="spirula")
def cli():
    """Spirula: 3D Gaussian Splatting on any GPU, through Vulkan compute."""


def _register():
    """Attach every command to :func:`cli` (on first use: importing this module stays cheap)."""
    from spirula.cli import devices, export, frames, mesh, partition, render, selftest, sfm, shaders, train, view

    for command in (
        devices.devices,
        export.export_command,
        frames.frames,
        mesh.mesh,
        partition.partition,
        render.render_command,
        selftest.selftest,
        sfm.sfm,
        shaders.shaders,
        train.train,
        train.eval_command,
        view.view_command,
    ):
        cli.add_command(command)


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
        # one line, as a SpirulaError: a bad option value (click's UsageError) exits 2
        click.echo("spirula: error: %s" % _one_line(_click_message(exc)), err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        _interrupted(exc)
    except ImportError as exc:
        # a module of an extra that no command's check caught: the extra to install, in one line
        from spirula.extras import from_import_error

        err = from_import_error(exc, "spirula %s" % _command_name(argv))
        if err is None:
            raise
        click.echo("spirula: error: %s" % err, err=True)
        sys.exit(err.exit_code)
    except OSError as exc:
        # a file the system refused (permissions, a full disk, a name too long) that no
        # check caught: one line naming it, exit 2 (the environment is for the user to fix)
        click.echo("spirula: error: %s" % _os_message(exc), err=True)
        sys.exit(2)
    sys.exit(0)


def _command_name(argv) -> str:
    """The subcommand named in ``argv`` (else in sys.argv)."""
    words = [w for w in (sys.argv[1:] if argv is None else argv) if w in cli.commands]
    return words[0] if words else "this command"


def _click_message(exc) -> str:
    """A click error's text, with the command it concerns (``spirula train:``)."""
    ctx = getattr(exc, "ctx", None)
    msg = exc.format_message()
    if isinstance(exc, click.UsageError) and ctx is not None and ctx.command_path:
        return "%s: %s (see %s --help)" % (ctx.command_path, msg, ctx.command_path)
    return msg


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _os_message(exc: OSError) -> str:
    from spirula.files import no_space

    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
    what = "out of disk space" if no_space(exc) else exc.strerror or str(exc)
    return "%s: %s" % (where, what) if where else what


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
