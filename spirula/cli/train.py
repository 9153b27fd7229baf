"""``spirula train`` and ``spirula eval`` (``spirula render``: spirula/cli/render.py)."""

from __future__ import annotations

import collections
import json
import signal
import sys
from pathlib import Path

import click

from spirula.cli.common import (
    common_options,
    open_cli_device,
    open_run,
    saved_config,
    verbose,
    verbose_option,
    web_viewer_options,
)
from spirula.errors import SpirulaError
from spirula.train.config import TrainConfig, flatten
from spirula.train.faults import FaultInjection
from spirula.train.spec import SettingError
from spirula.view.live import LiveViewConfig


def _log(msg):
    click.echo(msg, err=True)


def _capture_to_dataset(dataset, fps, max_frames, matcher, camera_model, dry_run, single_camera=None):
    """DATASET as it is, or the dataset frames and SfM make from a video or a
    folder of photos (cached); None when --dry-run stops before SfM."""
    from spirula.sfm import pipeline

    if dataset is None or pipeline.capture_kind(dataset) is None:
        return dataset
    settings = pipeline.CaptureSettings(
        fps=fps, max_frames=max_frames, matcher=matcher, camera_model=camera_model, single_camera=single_camera
    )
    if dry_run:
        cached = pipeline.cached_dataset(dataset, settings)
        if cached is None:
            kind = pipeline.capture_kind(dataset)
            click.echo(
                "%s: %s; training would first run %s (nothing cached yet)"
                % (dataset, "a video" if kind == "video" else "a folder of photos", pipeline.stages(kind))
            )
            return None
        return cached
    return pipeline.prepare_capture(dataset, settings, log=_log, verbose=verbose())


def _default_text(name: str, s) -> str:
    """The help text's default of a training setting: the config's own, and
    the demo's where it differs (or the Spec's ``default_help``)."""
    if s.default_help is not None:
        return "[default: %s]" % s.default_help
    value, demo = TrainConfig().settings().get(name), TrainConfig.demo().settings().get(name)
    if value is None:
        return ""
    fmt = "{:,}".format if isinstance(value, int) and not isinstance(value, bool) else str
    return "[default: %s%s]" % (fmt(value), "; demo: %s" % fmt(demo) if demo != value else "")


def _kind(name: str):
    """The type of a training setting's values (its field's annotation)."""
    from spirula.train.config import STRATEGIES
    from spirula.train.spec import value_type

    owners = (TrainConfig, *STRATEGIES.values())
    return value_type(next(c for c in owners if name in c.__dataclass_fields__), name)[0]


def _click_type(name: str, s):
    """The click type of a training setting's option: its choices, a closed
    integer range, else the Python type of its values (the rest of a range is
    checked with the configuration, spirula/train/spec.py)."""
    kind = _kind(name)
    if s.choices is not None:
        return click.Choice(list(s.choices))
    if kind is int and s.ge is not None and s.le is not None:
        return click.IntRange(int(s.ge), int(s.le))
    return {int: int, float: float}.get(kind, str)


def config_options(fn):
    """The options of every training setting that has one (its Spec's
    ``flag``, spirula/train/config.py), generated from the settings' metadata
    in their order, as Brush derives its CLI from its config: help text and
    default from the configuration; a boolean is a flag (``--x/--no-x`` when
    negatable). Each defaults to None: only the options typed become settings
    (an untyped one leaves the configuration's default)."""
    from spirula.train.config import setting_names

    for name, (_, s) in reversed(list(setting_names().items())):
        if s.flag is None:
            continue
        help_text = " ".join(t for t in (s.help, _default_text(name, s)) if t) + "."
        if s.negatable:
            option = click.option("%s/--no-%s" % (s.flag, s.flag[2:]), name, default=None, help=help_text)
        elif _kind(name) is bool:
            option = click.option(s.flag, name, is_flag=True, default=None, help=s.help + ".")
        else:
            kind = _click_type(name, s)
            option = click.option(s.flag, name, type=kind, default=None, metavar=s.metavar, help=help_text)
        fn = option(fn)
    return fn


@click.command()
@common_options
@verbose_option
@click.argument("dataset", required=False, type=click.Path(path_type=Path))
@config_options
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    default=None,
    help="Run folder [default: outputs/<dataset>-<timestamp>].",
)
@click.option(
    "--resume", type=click.Path(path_type=Path), default=None, help="Continue a run (its folder or a ckpt/step-*.npz)."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Load and check the dataset as training would (every image decoded), print what was found, and stop:"
    " no GPU, no output folder.",
)
@click.option("--fps", type=float, default=None, help="A video: frames kept per second (see `spirula frames`).")
@click.option("--max-frames", type=int, default=None, help="A video: at most this many frames.")
@click.option(
    "--matcher",
    type=click.Choice(["auto", "sequential", "exhaustive"]),
    default=None,
    help="Photos or a video: feature matching for SfM (see `spirula sfm`) [default: auto].",
)
@click.option(
    "--camera-model", default=None, help="Photos or a video: the COLMAP camera model SfM estimates (see `spirula sfm`)."
)
@click.option(
    "--single-camera/--camera-per-image",
    default=None,
    help="Photos: one camera for all, or one per image (see `spirula sfm`) [default: one per size and camera].",
)
@web_viewer_options("--viewer-port", "Serve a web viewer of the training on this port (docs/viewer.md, 'Web viewer').")
@click.option(
    "--partition",
    "n_blocks",
    type=click.IntRange(min=1),
    default=None,
    help="Split the scene into N spatial blocks, train them as Ray tasks, merge and fine-tune (docs/partition.md).",
)
@click.option(
    "--ray-address",
    default="local",
    show_default=True,
    metavar="auto|local|HOST:PORT",
    help="With --partition: the Ray cluster (local: a head started on this machine, for this run).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any setting by its name (docs/training.md, 'Settings'; the live views' and testing aids' too),"
    " e.g. --set lr_opacities=0.05 (repeatable).",
)
@click.option(
    "--viewer",
    is_flag=True,
    help="Watch training in a window (docs/viewer.md); closing it keeps training. With --viewer-port: both.",
)
def train(
    dataset,
    output,
    resume,
    dry_run,
    fps,
    max_frames,
    matcher,
    camera_model,
    single_camera,
    viewer_port,
    viewer_host,
    n_blocks,
    ray_address,
    overrides,
    viewer,
    **settings,
):
    """Train 3D Gaussian splats on DATASET: a COLMAP folder (sparse/0 + images/),
    a Blender/NeRF-synthetic folder (transforms_train.json), a nerfstudio
    transforms.json, a video, or a folder of photos. Without DATASET, trains
    the built-in demo scene.

    A video goes through `spirula frames` and `spirula sfm` first, photos
    through `spirula sfm`; the camera poses are cached, so a second run
    starts training at once (docs/capture.md).

    Writes splat.ply, metrics.json, config.json and a checkpoint into the run
    folder. Ctrl-C, SIGTERM and SIGHUP save a checkpoint and exit with 128 +
    the signal's number (130, 143, 129); --resume continues from it.
    --dry-run only loads and checks DATASET (exit status 2 and one line
    naming the file when it cannot be read).
    """
    from spirula.data import load_dataset
    from spirula.train.run import default_output_dir, train_run
    from spirula.view.live import live_hook

    explicit = _explicit_options(settings)
    sets = _parse_overrides(overrides)
    explicit.update(sets["train"])
    if explicit.get("vram_budget") is not None:
        from spirula.runtime.buffers import parse_size

        parse_size(explicit["vram_budget"], "--vram-budget ")  # a bad SIZE: one line, exit status 2
    # a setting the configuration refuses (--set strategy=bad): one line naming it, exit status 2
    if resume is not None:
        # a resumed run keeps its own configuration; options given now override it
        saved = saved_config(resume)
        dataset = dataset or Path(saved["dataset"])
        cfg = TrainConfig.from_dict({**flatten(saved), **explicit})
    elif dataset is None:
        from spirula.data.demo import ensure_demo_scene

        cfg = TrainConfig.demo(**explicit)
        dataset = ensure_demo_scene(log=_log)
    else:
        cfg = TrainConfig.from_settings(**explicit)
    view_config = LiveViewConfig(**sets["view"])
    faults = FaultInjection(**sets["faults"]) if sets["faults"] else None
    dataset = _capture_to_dataset(dataset, fps, max_frames, matcher, camera_model, dry_run, single_camera)
    if dataset is None:
        return
    scene = load_dataset(
        dataset, downscale=cfg.downscale, eval_split=cfg.eval_split, background=cfg.background or "auto", seed=cfg.seed
    )
    sizes = collections.Counter("%dx%d" % (scene.frames[i].width, scene.frames[i].height) for i in scene.train)
    if dry_run:
        click.echo(
            "%s: %s, %d images (%d train / %d test, %s), %s %s points; every image decodes"
            % (
                dataset,
                scene.source,
                len(scene.frames),
                len(scene.train),
                len(scene.test),
                ", ".join(s for s, _ in sizes.most_common()),
                f"{len(scene.points):,}",
                "random" if scene.points_random else "seed",
            )
        )
        return
    if n_blocks is not None:
        from spirula.partition.pipeline import train_partitioned

        if resume is not None:
            raise SpirulaError("--partition and --resume: resume a block's run, then `spirula partition merge`")
        output = output or default_output_dir(Path(dataset))
        train_partitioned(scene, cfg, output, n_blocks, ray_address, open_cli_device, log=_log, verbose=verbose())
        return
    viewers = _live_viewers(scene) if viewer else []
    device = open_cli_device()
    if output is None:
        output = (
            _run_folder(resume)
            if resume is not None
            else default_output_dir(Path("demo") if dataset == _demo_path() else Path(dataset))
        )
    _log(
        "spirula: training %s (%s, %d train / %d test images, %s) on %s, %d steps, %s"
        % (
            dataset,
            scene.source,
            len(scene.train),
            len(scene.test),
            ", ".join(s for s, _ in sizes.most_common()),
            device.info.name,
            cfg.iterations,
            "MCMC, cap %s" % f"{cfg.strategy.cap_max:,}" if cfg.strategy.name == "mcmc" else "ADC",
        )
    )
    if viewer_port is not None:  # with --viewer too: both views, through the same hook and renderer
        from spirula.view.web import live_view

        viewers.append(live_view(scene, viewer_port, viewer_host, log=_log))
    try:
        train_run(
            scene,
            cfg,
            device,
            output,
            resume=resume,
            log=_log,
            live_hook=live_hook(viewers, view_config),
            faults=faults,
        )
    except KeyboardInterrupt as exc:
        if getattr(exc, "reported", False):
            # the run printed where its checkpoint is: exit now, with 128 + the
            # signal's number (past click, which would add a blank line)
            sys.exit(128 + getattr(exc, "signum", signal.SIGINT))
        raise


def _live_viewers(scene) -> list:
    """--viewer: the native window on the training views (no display: one line, exit 2)."""
    from spirula.view.camera import CameraPath
    from spirula.view.window import WindowLiveView, check_display

    check_display()
    return [WindowLiveView(CameraPath.from_frames([scene.frames[i] for i in scene.train]))]


def _explicit_options(values: dict) -> dict:
    """The options the user typed (not click's defaults)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    return {k: v for k, v in values.items() if ctx.get_parameter_source(k) == ParameterSource.COMMANDLINE}


def _demo_path():
    from spirula.data.demo import demo_path

    return demo_path()


def _run_folder(resume) -> Path:
    resume = Path(resume)
    return resume if resume.is_dir() else resume.parent.parent


def _set_groups() -> dict:
    """Where ``--set NAME=VALUE`` puts NAME: ``train`` (TrainConfig and its
    strategies, spirula/train/config.py), ``view`` (the live views',
    spirula/view/live.py) or ``faults`` (testing aids, spirula/train/faults.py)."""
    import dataclasses

    from spirula.train.config import setting_names

    return {
        "train": set(setting_names()),
        "view": {f.name for f in dataclasses.fields(LiveViewConfig)},
        "faults": {f.name for f in dataclasses.fields(FaultInjection)},
    }


def _parse_overrides(items) -> dict:
    """``--set`` items by group (:func:`_set_groups`): ``{group: {name: value}}``,
    each value read as JSON, else as a string."""
    groups = _set_groups()
    names = set().union(*groups.values())
    out = {group: {} for group in groups}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in names:
            raise SettingError("--set %s: expected KEY=VALUE with KEY one of %s" % (item, ", ".join(sorted(names))))
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        out[next(g for g, keys in groups.items() if key in keys)][key] = parsed
    return out


@click.command("eval")
@common_options
@click.argument("run", type=click.Path(exists=True, path_type=Path))
def eval_command(run):
    """Evaluate a run's latest checkpoint on its test images: PSNR and SSIM per
    image and mean, and the colour-corrected PSNR (each render's least-squares affine
    colour fit to its image first, as BilaRF and PPISP report), written to
    RUN/metrics-eval.json. A run trained with appearance correction is rendered through
    its ISP as a novel view (the captures' mean exposure and colour, the camera's
    vignetting and response)."""
    from spirula.train.run import appearance_of_state, evaluate_run, load_run

    cfg, params, ckpt, scene = open_run(run)
    if not scene.test:
        raise SpirulaError("%s: the dataset has no test images (eval split %s)" % (run, cfg.eval_split))
    device = open_cli_device()
    isp = appearance_of_state(load_run(ckpt)[3], scene, cfg)
    metrics = evaluate_run(scene, device, params, max_alpha=cfg.max_alpha, isp=isp)
    metrics.update(checkpoint=str(ckpt), n_splats=len(params["means"]), appearance=cfg.appearance or "none")
    for p in metrics["per_image"]:
        click.echo("%-32s PSNR %7.3f  SSIM %.4f  PSNR-cc %7.3f" % (p["image"], p["psnr"], p["ssim"], p["psnr_cc"]))
    click.echo(
        "mean %-27s PSNR %7.3f  SSIM %.4f  PSNR-cc %7.3f"
        % ("(%d images)" % len(metrics["per_image"]), metrics["psnr"], metrics["ssim"], metrics["psnr_cc"])
    )
    folder = Path(run) if Path(run).is_dir() else ckpt.parent.parent
    (folder / "metrics-eval.json").write_text(json.dumps(metrics, indent=1))
