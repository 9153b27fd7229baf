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
    positive_float,
    saved_config,
    verbose,
    verbose_option,
    web_viewer_options,
)
from spirula.errors import SpirulaError, UsageError
from spirula.files import atomic_write, check_output_folder
from spirula.sfm.colmap import CAMERA_MODELS
from spirula.sfm.front import FEATURES
from spirula.train.config import TrainConfig, flatten
from spirula.train.faults import FaultInjection
from spirula.train.run_folder import check_train_target, recorded_dataset, run_folder_of
from spirula.train.spec import SettingError
from spirula.view.live import LiveViewConfig


def _log(msg):
    click.echo(msg, err=True)


def _capture_to_dataset(dataset, fps, max_frames, matcher, camera_model, dry_run, single_camera=None, features=None):
    """DATASET as it is, or the dataset frames and SfM make from a video or a
    folder of photos (cached); None when --dry-run stops before SfM."""
    from spirula.sfm import pipeline

    if dataset is None or pipeline.capture_kind(dataset) is None:
        return dataset
    settings = pipeline.CaptureSettings(
        fps=fps,
        max_frames=max_frames,
        matcher=matcher,
        camera_model=camera_model,
        single_camera=single_camera,
        features=features,
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
    return pipeline.prepare_capture(dataset, settings, log=_log, verbose=verbose(), device=open_cli_device)


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


class _SettingValue(click.ParamType):
    """An option's text as its setting's value, checked against the setting's
    Spec as it is parsed (spirula/train/spec.py): a value outside it is one
    line naming the option and what it accepts (``--iterations -5: expected
    an integer from 1 to 1000000000``), exit status 2."""

    def __init__(self, name: str):
        from spirula.train.config import setting_names

        self.setting = name
        self.owner = setting_names()[name][0][0]
        self.kind = _kind(name)
        self.name = {int: "integer", float: "float"}.get(self.kind, "text")

    def convert(self, value, param, ctx):
        from spirula.train.spec import check

        if isinstance(value, str):
            value = _number(value, self.kind)
        return check(self.owner, self.setting, value)


def _number(text: str, kind):
    """``text`` as an int or a float where ``kind`` is one and it reads as one, else the text."""
    if kind not in (int, float):
        return text
    try:
        return int(text) if kind is int else float(text)
    except ValueError:
        pass
    try:
        return float(text)  # 1e3 for an integer: check() takes an integral float
    except ValueError:
        return text


def _click_type(name: str, s):
    """The click type of a training setting's option: its choices, else
    :class:`_SettingValue` (the value checked against the setting's Spec)."""
    if s.choices is not None:
        return click.Choice(list(s.choices))
    return _SettingValue(name)


def _range_text(name: str, s) -> str:
    """``[>= 1]``, ``[0 to 3]``: the bounds of a numeric setting, for its help."""
    from spirula.train.spec import accepted

    if s.choices is not None or _kind(name) not in (int, float) or (s.ge, s.gt, s.le, s.lt) == (None,) * 4:
        return ""
    return "[%s]" % accepted(_kind(name), s, False).split(" ", 2)[2]


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
        help_text = " ".join(t for t in (s.help, _default_text(name, s), _range_text(name, s)) if t) + "."
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
    "--overwrite",
    is_flag=True,
    help="Replace the run in --output if there is one (its splats, checkpoint and everything made from them).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Load and check the dataset as training would (every image decoded), print what was found, and stop:"
    " no GPU, no output folder.",
)
@click.option(
    "--fps",
    type=positive_float(),
    default=None,
    help="A video: frames kept per second [default: automatic, by the view's motion; see `spirula frames`].",
)
@click.option(
    "--max-frames", type=click.IntRange(1, 10_000_000), default=None, help="A video: at most this many frames."
)
@click.option(
    "--matcher",
    type=click.Choice(["auto", "sequential", "exhaustive", "retrieval"]),
    default=None,
    help="Photos or a video: feature matching for SfM (see `spirula sfm`) [default: auto].",
)
@click.option(
    "--camera-model",
    type=click.Choice(CAMERA_MODELS),
    default=None,
    help="Photos or a video: the COLMAP camera model SfM estimates (see `spirula sfm`).",
)
@click.option(
    "--features",
    type=click.Choice(FEATURES),
    default=None,
    help="Photos or a video: where SfM's SIFT and matching run, gpu or cpu (see `spirula sfm`) [default: auto].",
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
    type=click.IntRange(1, 4096),
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
@click.option(
    "--export",
    "export_formats",
    metavar="FORMAT,...",
    default=None,
    help="At the end, also write the splats as these formats beside splat.ply (spz, sog, ply-compressed,"
    " splat, gltf, gltf-spz, html; docs/export.md), e.g. --export spz,sog.",
)
def train(
    dataset,
    output,
    resume,
    overwrite,
    dry_run,
    fps,
    max_frames,
    matcher,
    camera_model,
    features,
    single_camera,
    viewer_port,
    viewer_host,
    n_blocks,
    ray_address,
    overrides,
    viewer,
    export_formats,
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
    from spirula.cli.export import export_file, parse_formats
    from spirula.data import load_dataset
    from spirula.train.memory import memory_budget
    from spirula.train.run import check_output_space, default_output_dir, train_run
    from spirula.view.live import live_hook

    exports = parse_formats(export_formats)  # a bad format: one line before anything runs
    _need_extras(dataset, viewer, viewer_port, n_blocks)
    explicit = _explicit_options(settings)
    sets = _parse_overrides(overrides)
    explicit.update(sets["train"])
    if explicit.get("vram_budget") is not None:
        from spirula.runtime.buffers import parse_size

        parse_size(explicit["vram_budget"], "--vram-budget ")  # a bad SIZE: one line, exit status 2
    if output is not None:
        check_output_folder(output)  # a file, or a folder that cannot be written: one line, exit status 2
    # a setting the configuration refuses (--set strategy=bad): one line naming it, exit status 2
    saved = None
    given = dataset  # DATASET as typed: a resumed run's must be its own (spirula/train/run_folder.py)
    if resume is not None:
        # a resumed run keeps its own configuration; options given now override it
        saved = saved_config(resume)
        dataset = dataset or recorded_dataset(run_folder_of(resume), saved)
        cfg = TrainConfig.from_dict({**flatten(saved), **explicit})
    elif dataset is None:
        from spirula.data.demo import ensure_demo_scene

        cfg = TrainConfig.demo(**explicit)
        dataset = ensure_demo_scene(log=_log)
    else:
        cfg = TrainConfig.from_settings(**explicit)
    # before anything is loaded or written: a run folder changes only by a run that owns it
    # (a video or photos are compared as the dataset SfM makes of them, below)
    check_train_target(output, resume, overwrite, saved, cfg, None if _is_capture(given) else given)
    view_config = LiveViewConfig(**sets["view"])
    faults = FaultInjection(**sets["faults"]) if sets["faults"] else None
    dataset = _capture_to_dataset(dataset, fps, max_frames, matcher, camera_model, dry_run, single_camera, features)
    if dataset is None:
        return
    if resume is not None and _is_capture(given):  # a video or photos: the dataset SfM made of them
        check_train_target(output, resume, overwrite, saved, cfg, dataset)
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
    if output is None:
        output = (
            run_folder_of(resume)
            if resume is not None
            else default_output_dir(Path("demo") if dataset == _demo_path() else Path(dataset))
        )
    if n_blocks is not None:
        from spirula.partition.pipeline import train_partitioned

        if resume is not None:
            raise SpirulaError("--partition and --resume: resume a block's run, then `spirula partition merge`")
        _claim(output, resume, overwrite, dataset)
        train_partitioned(scene, cfg, output, n_blocks, ray_address, open_cli_device, log=_log, verbose=verbose())
        return
    check_output_space(output, scene, cfg)  # before the device: a full disk is one line
    viewers = _live_viewers(scene) if viewer else []
    device = open_cli_device()
    memory_budget(cfg.vram_budget, device)  # more than the device has: one line, exit status 2
    _claim(output, resume, overwrite, dataset)
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
        for fmt in exports:
            export_file(output / "splat.ply", fmt, None, log=_log)
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


def _need_extras(dataset, viewer, viewer_port, n_blocks):
    """The extras this run needs are installed, else one line naming the missing one (spirula/extras.py)."""
    from spirula.extras import need
    from spirula.sfm.pipeline import capture_kind

    if viewer:
        need("spirula train --viewer", "glfw", "moderngl")
    if viewer_port is not None:
        need("spirula train --viewer-port", "viser")
    if n_blocks is not None:
        need("spirula train --partition", "ray")
    kind = capture_kind(dataset) if dataset is not None else None
    if kind == "video":
        need("spirula train VIDEO", "pycolmap", "av")
    elif kind is not None:
        need("spirula train PHOTOS", "pycolmap")


def _is_capture(dataset) -> bool:
    """DATASET is a video or a folder of photos (spirula/sfm/pipeline.py)."""
    from spirula.sfm.pipeline import capture_kind

    return dataset is not None and capture_kind(dataset) is not None


def _claim(output, resume, overwrite, dataset):
    """Lock the run folder ``output`` until the command ends (and empty it for
    --overwrite): a second writer is refused (spirula/train/run_folder.py)."""
    from spirula.train.run_folder import claim

    lock = claim(output, resume, overwrite, dataset, log=_log)
    click.get_current_context().call_on_close(lock.release)


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
@click.option(
    "--dataset",
    type=click.Path(path_type=Path),
    default=None,
    help="The dataset of a splat file [default: the run's, when the file is in a run folder].",
)
def eval_command(run, dataset):
    """Evaluate a run's latest checkpoint on its test images: PSNR and SSIM per
    image and mean, and the colour-corrected PSNR (each render's least-squares affine
    colour fit to its image first, as BilaRF and PPISP report), written to
    RUN/metrics-eval.json. A splat file (PLY, SPZ, SOG, compressed PLY, .splat, glTF)
    is scored on the test images of its run (the folder it is in) or of --dataset, and
    only printed. A run trained with appearance correction is rendered through
    its ISP as a novel view (the captures' mean exposure and colour, the camera's
    vignetting and response); one whose PPISP controller trained also with the exposure
    and colour it predicts (psnr_controller)."""
    from spirula.export import is_splat_file
    from spirula.train.run import appearance_of_state, evaluate_run, load_run
    from spirula.train.run_folder import checkpoint_source, stale_notes

    if is_splat_file(run):
        return _eval_file(run, dataset)
    if dataset is not None:
        raise UsageError("--dataset: only for a splat file (a run is scored on its own dataset)")
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
    if metrics.get("psnr_controller") is not None:
        click.echo("controller (PPISP's predicted exposure, colour)  PSNR %7.3f" % metrics["psnr_controller"])
    folder = Path(run) if Path(run).is_dir() else ckpt.parent.parent
    metrics.update(source=checkpoint_source(folder, ckpt))  # what it scored: stale once the run moves on
    atomic_write(folder / "metrics-eval.json", json.dumps(metrics, indent=1))
    for note in stale_notes(folder):  # the mesh and renders made from older splats
        click.echo(note, err=True)


def _eval_file(path: Path, dataset):
    """``spirula eval FILE``: the splats of a shared file on the test images of
    its run's dataset (or --dataset), printed, nothing written."""
    from spirula.data import load_dataset
    from spirula.export import read_splats
    from spirula.train.config import TrainConfig
    from spirula.train.run import evaluate_run
    from spirula.train.run_folder import is_run_folder

    folder = path.parent
    cfg = TrainConfig()
    if is_run_folder(folder):
        saved = saved_config(folder)
        cfg = TrainConfig.from_dict(saved)
        dataset = dataset if dataset is not None else recorded_dataset(folder, saved)
    if dataset is None:
        raise UsageError("%s: not in a run folder; give the splats' dataset (--dataset DIR)" % path)
    p = read_splats(path, allow_empty=False)
    scene = load_dataset(
        dataset, downscale=cfg.downscale, eval_split=cfg.eval_split, background=cfg.background or "auto", seed=cfg.seed
    )
    if not scene.test:
        raise SpirulaError("%s: the dataset has no test images (eval split %s)" % (dataset, cfg.eval_split))
    params = dict(
        means=p["means"], quats=p["quats"], scales=p["log_scales"], opacities=p["opacity_logits"], sh=p["sh_coeffs"]
    )
    metrics = evaluate_run(scene, open_cli_device(), params, max_alpha=cfg.max_alpha)
    for q in metrics["per_image"]:
        click.echo("%-32s PSNR %7.3f  SSIM %.4f" % (q["image"], q["psnr"], q["ssim"]))
    click.echo(
        "mean %-27s PSNR %7.3f  SSIM %.4f  (%s, %d splats)"
        % ("(%d images)" % len(metrics["per_image"]), metrics["psnr"], metrics["ssim"], path.name, len(p["means"]))
    )
    return metrics
