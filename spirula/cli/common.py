"""What every ``spirula`` command shares: ``--backend``, ``--device`` and
``--profile`` (:func:`common_options`), the device a command opens
(:func:`open_cli_device`), ``--verbose`` where a command runs a library with
output of its own (:func:`verbose_option`), the web viewer's options and a
trained run opened with its dataset (:func:`open_run`). Imports no command module: the commands
import it, and spirula/cli/main.py attaches them to the ``spirula`` group.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from spirula import settings
from spirula.errors import UsageError


def _set_profile(ctx, param, value):
    # Before any GPU object exists: the profiler is chosen when a Device opens.
    if value:
        settings.set_profile()


def _set_device(ctx, param, value):
    if value is not None:
        settings.set_device(value)


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


_VERBOSE = "spirula.verbose"  # ctx.meta key, as _BACKEND


def _set_verbose(ctx, param, value):
    if value:
        ctx.meta[_VERBOSE] = True


def verbose_option(fn):
    """``--verbose`` on a command that runs COLMAP or Ray: their own lines, which
    go to the run's log file, on stderr as well (:func:`verbose`)."""
    return click.option(
        "--verbose",
        "-v",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_verbose,
        help="Show what COLMAP and Ray print as well (it always goes to the run's log file).",
    )(fn)


def verbose() -> bool:
    """True when ``--verbose`` was given."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_VERBOSE))


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


def saved_config(run) -> dict:
    """The ``config.json`` of a run folder (or of a checkpoint's run folder) as
    saved; a path that is no run is one line naming it (exit status 2)."""
    from spirula.train.run_folder import run_folder_of

    folder = run_folder_of(run)
    try:
        saved = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise UsageError("%s: no readable config.json (%s)" % (folder, exc)) from None
    if not isinstance(saved, dict) or not isinstance(saved.get("dataset"), str):
        raise UsageError(
            "%s: config.json names no dataset (not written by `spirula train`?)" % (folder / "config.json")
        )
    return saved


def open_run(run: Path):
    """(config, raw splat arrays, checkpoint path, dataset) of a run folder or
    checkpoint, its dataset loaded as it was trained (``spirula eval``, ``spirula render``)."""
    from spirula.data import load_dataset
    from spirula.train.run import load_run

    cfg, params, ckpt, state = load_run(run)
    saved = saved_config(run if Path(run).is_dir() else ckpt)
    scene = load_dataset(
        saved["dataset"],
        downscale=cfg.downscale,
        eval_split=cfg.eval_split,
        background=cfg.background or "auto",
        seed=cfg.seed,
    )
    return cfg, params, ckpt, scene


class FiniteFloat(click.FloatRange):
    """A float option within bounds (click.FloatRange's), and never NaN or
    infinite (FloatRange lets both through): one line naming the option."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail("%s is not a finite number" % (value,), param, ctx)
        return rv


def positive_float() -> FiniteFloat:
    """A finite float > 0 (a frame rate)."""
    return FiniteFloat(min=0, min_open=True)


def appearance_of_option(fn):
    """``--appearance-of VIEW`` (spirula render, spirula view): a training image's fitted look."""
    return click.option(
        "--appearance-of",
        "appearance_of",
        default=None,
        metavar="VIEW",
        help="Apply a training image's fitted exposure and colour (train:K, its image name or dataset index) and"
        " its camera's vignetting and response, or for a test image (test:K) what PPISP's controller predicts"
        " from each render (a run trained with --controller); a run trained with --appearance [default: the"
        " radiance, as splat.ply].",
    )(fn)
