"""A training run as a user sees it: output folder, progress (spirula/progress.py),
checkpoints (atomic, resumable), Ctrl-C / SIGTERM / SIGHUP (spirula/train/signals.py),
evaluation, splat.ply, metrics.json.

    outputs/<dataset>-<YYYYmmdd-HHMMSS>/
        config.json     the TrainConfig (and the dataset path)
        ckpt/step-NNNNNNN.npz   the latest full state (--resume takes it)
        splat.ply       the standard 3DGS layout (the radiance, without appearance correction)
        appearance.npz  the appearance models' parameters (with --appearance other than none)
        metrics.json    PSNR/SSIM (and colour-corrected PSNR) per test image and mean, time,
                        peak VRAM, peak host memory, splats, whether the images were streamed
"""

from __future__ import annotations

import datetime
import json
import signal
import sys
import time
from pathlib import Path
from typing import Protocol

import numpy as np

from spirula.data.world import WorldTransform
from spirula.errors import DiskFullError, SpirulaError
from spirula.files import atomic_write, check_space, shortfall
from spirula.progress import TrainProgress
from spirula.render.rasterizer import MAX_ALPHA, Rasterizer, Splats
from spirula.train.config import TrainConfig
from spirula.train.run_folder import RunFolderError, resume_conflict
from spirula.train.schedule import sh_degree_at
from spirula.train.signals import Stopped, StopSignals, signal_name
from spirula.train.trainer import Trainer


def default_output_dir(dataset: Path) -> Path:
    """``outputs/<dataset>-<timestamp>``, with ``-2``, ``-3``... when a run of
    the same second has it (a run folder is never shared: spirula/train/run_folder.py)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("outputs") / ("%s-%s" % (dataset.name or "dataset", stamp))
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name("%s-%d" % (base.name, n))
    return out


def checkpoint_bytes(n: int, sh_coeffs: int) -> int:
    """About the bytes of a checkpoint of ``n`` splats with ``sh_coeffs`` SH
    coefficients per colour: the float32 parameters and their two Adam
    moments, plus the strategy's per-splat state and the archive's headers."""
    floats = 3 + 4 + 3 + 1 + 3 * sh_coeffs
    return n * (12 * floats + 16) + (64 << 10)


def appearance_bytes(mode: str, n_frames: int, n_cameras: int, controller: bool) -> int:
    """About the bytes a checkpoint holds of the appearance models (``mode``; PPISP's
    ``controller``): their float32 parameters and two Adam moments each."""
    from spirula.train.appearance import GRID_SHAPE, ppisp_size
    from spirula.train.controller import CTRL_SIZE

    floats = 0
    if mode in ("ppisp", "both"):
        floats += ppisp_size(n_frames, n_cameras) + (n_cameras * CTRL_SIZE if controller else 0)
    if mode in ("bilagrid", "both"):
        floats += n_frames * int(np.prod(GRID_SHAPE)) * 12
    return 12 * floats + (4 << 10)


def ply_bytes(n: int, sh_coeffs: int) -> int:
    """The bytes of a ``splat.ply`` of ``n`` splats (spirula/data/ply.py's layout)."""
    return n * 4 * (14 + 3 * sh_coeffs) + 4096


def expected_bytes(trainer: Trainer, cfg: TrainConfig) -> int:
    """The free space a run needs for its outputs at the most splats it may
    reach (MCMC: its cap; ADC: the splats it has now, its growth unknown):
    a checkpoint, and either a second one (while a checkpoint replaces the
    last) or splat.ply, whichever is larger."""
    n = trainer.model.n
    if cfg.strategy.name == "mcmc":
        n = max(n, min(cfg.strategy.cap_max, getattr(trainer, "splat_limit", n)))
    ckpt, ply = checkpoint_bytes(n, trainer.sh_coeffs), ply_bytes(n, trainer.sh_coeffs)
    app = getattr(trainer, "appearance", None)
    if app is not None:  # its parameters and moments in each checkpoint; appearance.npz fewer
        extra = appearance_bytes(app.mode, app.n_frames, app.n_cameras, app.controller is not None)
        ckpt, ply = ckpt + extra, ply + extra
    again = cfg.save_every and cfg.save_every < cfg.iterations
    return ckpt + max(ply, ckpt if again else 0) + (64 << 10)


def check_output_space(output: Path, scene, cfg: TrainConfig):
    """Before the device opens: room for a checkpoint and splat.ply of the
    seed points (a lower bound: :func:`train_run` checks again at the splat
    budget); else a one-line DiskFullError."""
    n, k = len(scene.points), (cfg.sh_degree + 1) ** 2
    try:
        check_space(output, checkpoint_bytes(n, k) + ply_bytes(n, k), "the outputs of %s" % output)
    except DiskFullError as exc:
        raise _disk_full(exc, output, {}) from None


def _curve_point(step: int, step_ms: list, m: dict, n_splats: int) -> dict:
    """One point of metrics.json's ``test_curve``: ``train_s`` sums the steps' wall-clock
    times (this process's steps: a resumed run counts from its checkpoint)."""
    return dict(step=step, train_s=round(sum(step_ms) / 1e3, 3), psnr=m["psnr"], ssim=m["ssim"], n_splats=n_splats)


def _say(write, *args):
    """``write(*args)``, except that a terminal closed under us (SIGHUP) is not an error."""
    try:
        write(*args)
    except OSError:
        pass


def finite_splats(arrays: dict) -> np.ndarray:
    """[N] bool: the splats whose every parameter is finite."""
    ok = None
    for a in arrays.values():
        row = np.isfinite(a.reshape(len(a), -1)).all(axis=1)
        ok = row if ok is None else ok & row
    return ok


def save_checkpoint(trainer: Trainer, path: Path):
    state = trainer.state_dict()
    arrays = {}
    for group, values in state["model"].items():
        for name, arr in values.items():
            arrays["model/%s/%s" % (group, name)] = arr
    for name, arr in state["strategy"].items():
        arrays["strategy/%s" % name] = arr
    for name, arr in state["appearance"].items():
        arrays["appearance/%s" % name] = arr
    meta = dict(
        step=state["step"],
        config=state["config"],
        rng=state["rng"],
        order=state["order"],
        isect_capacity=state["isect_capacity"],
        world=state["world"],
        format=1,
    )
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    size = sum(a.nbytes + 256 for a in arrays.values())  # each entry's zip and .npy headers
    atomic_write(path, write=lambda f: np.savez(f, **arrays), size=size)


def load_checkpoint(path: Path) -> dict:
    try:
        z = np.load(path)
        meta = json.loads(bytes(z["meta"]).decode())
    except Exception as exc:
        raise SpirulaError("%s: not a Spirula checkpoint (%s)" % (path, exc)) from None
    state = dict(meta, model={}, strategy={}, appearance={})
    for key in z.files:
        parts = key.split("/")
        if parts[0] == "model":
            state["model"].setdefault(parts[1], {})[parts[2]] = z[key]
        elif parts[0] in ("strategy", "appearance"):
            state[parts[0]][parts[1]] = z[key]
    return state


def find_checkpoint(path: Path) -> Path:
    """A checkpoint file, or the latest one in a run folder or its ckpt/."""
    path = Path(path)
    if path.is_file():
        return path
    for folder in (path / "ckpt", path):
        found = sorted(folder.glob("step-*.npz")) if folder.is_dir() else []
        if found:
            return found[-1]
    raise SpirulaError("%s: no checkpoint (ckpt/step-*.npz) found" % path)


class StepHook(Protocol):
    """What :func:`train_run` calls between steps: the live views
    (spirula/view/live.py's ``LiveHook``), handed in by its caller."""

    def on_step(self, step: int, iterations: int, loss: float, splats, sh_degree: int) -> None:
        """After step ``step``: its loss, the trainer's
        :class:`~spirula.render.rasterizer.Splats` and the SH degree it trained."""

    def close(self) -> None:
        """Training ended (normally, on Ctrl-C or on an error)."""


def peak_host_mib() -> float | None:
    """The process's peak resident host memory so far, MiB (getrusage's ru_maxrss;
    None where the platform has no ``resource`` module)."""
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


def train_run(
    scene,
    cfg: TrainConfig,
    device,
    output: Path,
    resume: Path | None = None,
    log=print,
    live_hook=None,
    init: dict | None = None,
    faults=None,
) -> dict:
    """Train, write the outputs, return the metrics dict.

    ``live_hook``: None, or ``live_hook(device, world, background, max_alpha)``
    -> a :class:`StepHook`, called once the trainer exists (``world`` its
    WorldTransform; ``background`` and ``max_alpha``, the run's; the views'
    own settings, such as their share of wall time, are the hook's); the hook gets ``on_step`` after
    every step and ``close()`` when training ends. The live views (the native
    window, the web viewer) come as ``spirula.view.live.live_hook(viewers)``:
    training never imports the viewers. ``init``: raw splat parameters in dataset
    coordinates to start from (PARAM_NAMES arrays, as
    :meth:`Trainer.splat_arrays` gives; the merged blocks of spirula/partition/)
    instead of the seed points. ``faults``: a testing aid's hook for the trainer
    (:class:`~spirula.train.faults.FaultInjection`; the soak test)."""
    made = []  # the trainer, once it exists: freed on any exit (a library caller's device lives on)
    try:
        return _train_run(made, scene, cfg, device, output, resume, log, live_hook, init, faults)
    finally:
        for trainer in made:
            trainer.free()


def _train_run(made: list, scene, cfg: TrainConfig, device, output, resume, log, live_hook, init, faults) -> dict:
    """:func:`train_run`'s body; the trainer it makes goes into ``made``."""
    output = Path(output)
    state = None
    world = None
    if resume is not None:
        state = load_checkpoint(find_checkpoint(resume))
        ran = json.loads(state["config"])
        # a checkpoint of before appearance correction ran without it; left to the
        # dataset (None), a resumed run keeps what it had
        ran["appearance"] = ran.get("appearance") or "none"
        if cfg.appearance is None:
            cfg = cfg.replace(appearance=ran["appearance"])
        if cfg.controller is None:  # likewise PPISP's controller (None: on with PPISP)
            cfg = cfg.replace(controller=ran.get("controller"))
        # a setting the checkpoint depends on (its Spec's resumable=False) stays as it was
        conflict = resume_conflict(ran, cfg)
        if conflict:
            raise RunFolderError("%s: %s" % (resume, conflict))
        world = WorldTransform(tuple(state["world"]["center"]), state["world"]["scale"])
        init = world.to_dataset(state["model"]["params"])
    if cfg.appearance is None:  # the dataset decides (TrainConfig.appearance_for); config.json says which
        cfg = cfg.replace(appearance=cfg.appearance_for(scene.source))
    trainer = Trainer(scene, cfg, device, init=init, world=world, log=log, faults=faults)
    made.append(trainer)
    if state is not None:
        trainer.load_state_dict(state)
        log("spirula: resumed from step %d (%s)" % (trainer.step, resume))
    saved = {}  # the last checkpoint: step, path
    if resume is not None:
        saved.update(step=trainer.step, path=find_checkpoint(resume), kept=True, resume=resume)
    # the outputs' space before any is written (and before the run folder exists)
    try:
        check_space(output, expected_bytes(trainer, cfg), "the outputs of %s" % output)
    except DiskFullError as exc:
        raise _disk_full(exc, output, saved) from None
    output.mkdir(parents=True, exist_ok=True)
    config = json.dumps(dict(cfg.settings(), dataset=str(scene.path)), indent=1, sort_keys=True)
    # a new run says what it is at once; a resumed one keeps the run's config.json until
    # it commits (its first checkpoint, or its end): a run that fails before leaves it as it was
    config_due = [state is not None]
    if state is None:
        atomic_write(output / "config.json", config)
    ckpt_dir = output / "ckpt"

    def checkpoint():
        trainer.settle()  # a step in flight completes first: the checkpoint holds whole steps
        if saved.get("step") == trainer.step and not saved.get("kept"):
            return saved["path"]
        path = ckpt_dir / ("step-%07d.npz" % trainer.step)
        with stop.saving():
            save_checkpoint(trainer, path)  # the space checked first; nothing half-written on failure
            if config_due[0]:
                atomic_write(output / "config.json", config)
                config_due[0] = False
            for old in ckpt_dir.glob("step-*.npz"):
                if old != path:
                    old.unlink()
        saved.update(step=trainer.step, path=path, kept=False)
        return path

    progress = TrainProgress(cfg.iterations, start=trainer.step, every=cfg.log_every)
    live = None
    if live_hook is not None:
        live = live_hook(device, trainer.world, scene.background, cfg.max_alpha)
    t_start = time.perf_counter()
    step_ms = []
    # the test curve: each evaluation's step, training seconds so far (evaluations excluded), test
    # PSNR/SSIM and splats (benchmarks/time_to_quality.py)
    curve = []
    start_step = trainer.step  # a resumed run's checkpoint step, else 0
    first_step = start_step + 1  # step_ms[i] times step first_step + i
    # SIGINT, SIGTERM and SIGHUP stop the loop between steps (spirula/train/signals.py)
    with StopSignals() as stop:
        try:
            while trainer.step < cfg.iterations:
                stop.check()
                t0 = time.perf_counter()
                # the next step may go to the GPU before this one is read back, unless the
                # host needs this step's state: evaluation, a checkpoint, the last step
                s = trainer.step + 1
                ahead = s < cfg.iterations and not (
                    (cfg.eval_every and s % cfg.eval_every == 0 and scene.test)
                    or (cfg.save_every and s % cfg.save_every == 0)
                )
                out = trainer.train_step(ahead=ahead)
                step_ms.append(1e3 * (time.perf_counter() - t0))
                s = trainer.step
                progress.update(s, out)
                if live is not None:
                    live.on_step(s, cfg.iterations, out["loss"], trainer.model.params, sh_degree_at(cfg, s))
                if cfg.eval_every and s % cfg.eval_every == 0 and s < cfg.iterations and scene.test:
                    m = trainer.evaluate()
                    curve.append(_curve_point(s, step_ms, m, trainer.model.n))
                    progress.test_psnr = m["psnr"]
                    progress.message(log, "spirula: step %d: test PSNR %.3f SSIM %.4f" % (s, m["psnr"], m["ssim"]))
                if cfg.save_every and s % cfg.save_every == 0 and s < cfg.iterations:
                    checkpoint()
            path = checkpoint()
        except KeyboardInterrupt as exc:
            # the checkpoint first: after SIGHUP the terminal may be gone, and writing to it fails
            try:
                path = checkpoint()
            except DiskFullError as full:
                raise _disk_full(full, output, saved) from None
            by_signal = isinstance(exc, Stopped) and exc.signum != signal.SIGINT
            what = "stopped by %s" % signal_name(exc.signum) if by_signal else "interrupted"
            _say(progress.close)
            msg = "spirula: %s at step %d; checkpoint %s (continue with --resume %s)"
            _say(log, msg % (what, trainer.step, path, output))
            exc.reported = True
            raise
        except DiskFullError as exc:
            _say(progress.close)
            raise _disk_full(exc, output, saved) from None
        except SpirulaError as exc:
            # out of memory mid-run (splats or intersections grew past the budget): keep the steps done
            _say(progress.close)
            try:
                path = checkpoint()
            except Exception:
                raise exc from None
            raise type(exc)(
                "%s; checkpoint of step %d: %s (continue with --resume %s)" % (exc, trainer.step, path, output)
            ) from None
        finally:
            progress.close()
            if live is not None:
                live.close()
    train_time = time.perf_counter() - t_start

    from spirula.data import write_splat_ply

    arrays = trainer.splat_arrays()
    finite = finite_splats(arrays)
    nonfinite = int(len(finite) - finite.sum())
    if nonfinite:
        # a viewer would choke on NaN rows; the checkpoint keeps them as they are
        log(
            "spirula: warning: %d of %d splats have non-finite parameters; splat.ply leaves them out"
            % (nonfinite, len(finite))
        )
        arrays = {k: v[finite] for k, v in arrays.items()}
    try:
        write_splat_ply(
            output / "splat.ply", arrays["means"], arrays["quats"], arrays["scales"], arrays["opacities"], arrays["sh"]
        )
        isp = trainer.appearance_isp()
        if isp is not None:
            atomic_write(output / "appearance.npz", write=lambda f: np.savez(f, **isp))
    except DiskFullError as exc:
        raise _disk_full(exc, output, saved) from None
    metrics = trainer.evaluate() if scene.test else dict(per_image=[], psnr=None, ssim=None, psnr_cc=None)
    if scene.test:
        curve.append(_curve_point(trainer.step, step_ms, metrics, trainer.model.n))
    if scene.test and trainer.controller_trained():
        # the test views with the exposure and colour PPISP's controller predicts from each render
        metrics["psnr_controller"] = trainer.evaluate(controller=True)["psnr"]
    # the fit to the training views beside it: the train-test gap says how hard the model
    # overfits (issue #46); up to 12 training views, evenly spread, keep it cheap
    train_views = list(scene.train)[:: max(1, -(-len(scene.train) // 12))]
    fit = trainer.evaluate(train_views) if train_views else dict(psnr=None, ssim=None)
    pool = device.pool
    process = device.process_memory_used()
    metrics.update(
        step=trainer.step,
        training_time_s=train_time,
        n_splats=trainer.model.n,
        ms_per_step_mean=float(np.mean(step_ms)) if step_ms else None,
        ms_per_step_median=float(np.median(step_ms)) if step_ms else None,
        # where a mean above the median comes from: the ten slowest steps, [step, ms], slowest first
        slowest_steps=[[first_step + int(i), round(step_ms[i], 3)] for i in np.argsort(step_ms)[::-1][:10]],
        peak_vram_mib=pool.peak_bytes / (1 << 20),
        # the worst pool capacity / live need over the run (docs/design.md, memory)
        pool_worst_ratio=pool.worst_ratio,
        vram_budget_mib=trainer.budget / (1 << 20) if trainer.budget is not None else None,
        process_vram_mib=process / (1 << 20) if process is not None else None,
        peak_host_mib=peak_host_mib(),
        streamed_images=trainer.streamed,
        device=device.info.name,
        lpips=None,
        appearance=cfg.appearance,
        **trainer.strategy.metrics(),
        nonfinite_splats=nonfinite,
        train_psnr=fit["psnr"],
        train_ssim=fit["ssim"],
        train_views=len(train_views),
        test_curve=curve,
    )
    try:
        atomic_write(output / "metrics.json", json.dumps(metrics, indent=1))
    except DiskFullError as exc:
        raise _disk_full(exc, output, saved) from None
    log(
        "spirula: %d steps in %.1f s%s; %s splats; test PSNR %s SSIM %s"
        % (
            trainer.step - start_step,  # the steps this run made, not the step it reached
            train_time,
            " (resumed: from step %d to %d)" % (start_step, trainer.step) if start_step else "",
            f"{trainer.model.n:,}",
            "%.3f" % metrics["psnr"] if metrics["psnr"] is not None else "-",
            "%.4f" % metrics["ssim"] if metrics["ssim"] is not None else "-",
        )
    )
    log("spirula: wrote %s, %s, %s" % (output / "splat.ply", output / "metrics.json", path))
    return metrics


def _disk_full(exc: DiskFullError, output: Path, saved: dict) -> DiskFullError:
    """``exc`` with what to do next: continue from the last checkpoint, or run again."""
    if saved.get("path") is not None:
        hint = "free %s, then continue with --resume %s (its checkpoint of step %d is kept)" % (
            shortfall(exc),
            saved.get("resume", output) if saved.get("kept") else output,
            saved["step"],
        )
    else:
        hint = "free %s or choose another --output" % shortfall(exc)
    return DiskFullError("%s; %s" % (exc, hint), path=exc.path, needed=exc.needed, free=exc.free)


# ---- existing runs: evaluate and render ------------------------------------------------


def appearance_of_state(state: dict, scene, cfg) -> dict | None:
    """The appearance models of a checkpoint ``state`` as :meth:`Trainer.appearance_isp`
    gives them (None without), with the cameras and image sizes of ``scene``'s training
    images (the run's split)."""
    from spirula.train.appearance import camera_of_frames

    mode = cfg.appearance or "none"
    app = state.get("appearance") or {}
    if mode == "none" or not app:
        return None
    frames = [scene.frames[i] for i in scene.train]
    cams = camera_of_frames(frames)
    sizes = {}
    for k, f in zip(cams, frames):
        sizes.setdefault(k, (f.width, f.height))
    isp = dict(mode=mode, n_frames=len(frames), n_cameras=len(sizes), cameras=np.asarray(cams, np.int32),
               names=np.asarray([f.name for f in frames]),
               camera_sizes=np.asarray([sizes[k] for k in range(len(sizes))], np.int32))  # fmt: skip
    if "ppisp" in app:
        isp["ppisp"] = app["ppisp"]
    if "grids" in app:
        isp["grids"] = app["grids"]
    if "ctrl" in app:  # PPISP's controller, once it has trained
        from spirula.train.appearance import controller_start

        if int(state.get("step", 0)) > controller_start(cfg.iterations, cfg.controller_activation_ratio):
            isp["controller"] = app["ctrl"]
    return isp


def view_index(scene, spec: str, option: str = "--camera") -> int:
    """The dataset index of view ``spec``: an image name, a dataset index, or test:K /
    train:K (the split's K-th); else a one-line UsageError naming ``option``."""
    from spirula.errors import UsageError

    names = [f.name for f in scene.frames]
    if spec in names:
        return names.index(spec)
    try:
        if ":" in spec:
            split, k = spec.split(":", 1)
            return {"test": scene.test, "train": scene.train}[split][int(k)]
        i = int(spec)
        if 0 <= i < len(names):
            return i
    except (KeyError, ValueError, IndexError):
        pass
    raise UsageError(
        "%s %s: no such view (an index 0..%d, test:K, train:K or an image name)" % (option, spec, len(names) - 1)
    )


def appearance_of_view(source, scene, spec: str):
    """``--appearance-of SPEC`` of ``spirula render`` and ``spirula view``: (isp, frame,
    camera, controller) for :class:`~spirula.train.appearance.AppearanceLook` from the run
    ``source`` (a folder or checkpoint) and its dataset ``scene``: a training image's fitted
    exposure and colour with its camera's vignetting and response; a test image (a view
    nothing was fitted to) through PPISP's controller, which predicts its exposure and
    colour from each render, when the run trained one. A one-line UsageError for a splat
    file, a run without appearance correction, a missing dataset, or a test image of a run
    without a trained controller."""
    from spirula.errors import UsageError
    from spirula.train.trainer import camera_for_size

    if scene is None:
        raise UsageError("--appearance-of %s: %s: the run's dataset is not where it was trained" % (spec, source))
    cfg, _, _, state = load_run(source)
    isp = appearance_of_state(state, scene, cfg)
    if isp is None:
        raise UsageError("%s: trained without appearance correction (--appearance none)" % source)
    i = view_index(scene, spec, "--appearance-of")
    if i not in scene.train:
        if "controller" not in isp:
            raise UsageError(
                "--appearance-of %s: a test image has no fitted appearance and %s has no trained controller"
                " (train with --controller); pick a training image (train:K)" % (spec, source)
            )
        f = scene.frames[i]
        return isp, None, camera_for_size(isp, f.width, f.height), True
    frame = list(scene.train).index(i)
    return isp, frame, int(isp["cameras"][frame]), False


def load_run(run: Path):
    """(config, raw splat arrays in dataset coordinates, checkpoint path, state)
    of a run folder or checkpoint."""
    ckpt = find_checkpoint(run)
    state = load_checkpoint(ckpt)
    cfg = TrainConfig.from_dict(json.loads(state["config"]))
    world = WorldTransform(tuple(state["world"]["center"]), state["world"]["scale"])
    return cfg, world.to_dataset(state["model"]["params"]), ckpt, state


class SplatRenderer:
    """Renders raw splat arrays (log-scales, logits) from any camera, with the
    alpha cap they were trained with."""

    def __init__(self, device, params: dict, background=None, max_alpha: float = MAX_ALPHA):
        self.device = device
        self.max_alpha = max_alpha
        self.splats = Splats.from_numpy(
            device,
            params["means"],
            params["quats"],
            params["scales"],
            params["opacities"],
            params["sh"],
            activated=False,
            prefix="render",
        )
        self.sh_degree = int(round(np.sqrt(params["sh"].shape[1]))) - 1
        self.background = background
        self._raster = {}

    def render(self, viewmat, K, width: int, height: int, model="PINHOLE", dist=None) -> np.ndarray:
        """[H,W,3] float32 (background composited, not clamped), through the lens ``model``, ``dist``."""
        key = (int(width), int(height))
        raster = self._raster.get(key)
        if raster is None:
            raster = self._raster[key] = Rasterizer(
                self.device, width, height, 1, capacity=self.splats.n, name="render.raster", max_alpha=self.max_alpha
            )
        raster.set_backgrounds(None if self.background is None else np.asarray(self.background)[None])
        raster.set_cameras(
            np.asarray(viewmat)[None], np.asarray(K)[None], [model], None if dist is None else dist[None]
        )
        raster.forward(self.splats, self.sh_degree)
        return self.device.readback(raster.out_colors)[0]

    def free(self):
        for r in self._raster.values():
            r.free()
        self.splats.free(self.device)


def evaluate_run(scene, device, params: dict, indices=None, max_alpha: float = MAX_ALPHA, isp=None) -> dict:
    """PSNR/SSIM and colour-corrected PSNR of the splats on the given (default: test) views,
    through the appearance models ``isp`` (:func:`appearance_of_state`) as for a novel view
    (Trainer.evaluate), if given; with PPISP's controller in ``isp``, also
    ``psnr_controller``: the views with the exposure and colour it predicts."""
    from spirula.train.appearance import apply_appearance
    from spirula.train.metrics import evaluate_views
    from spirula.train.trainer import camera_for_size

    renderer = SplatRenderer(device, params, scene.background, max_alpha)

    def render(i, controller=False):
        f = scene.frames[i]
        img = renderer.render(f.viewmat, f.K, f.width, f.height, f.model, f.dist)
        if isp is not None:
            cam = camera_for_size(isp, f.width, f.height)
            img = apply_appearance(device, img, isp, None, cam, controller=controller)
        return img

    views = scene.test if indices is None else indices
    try:
        out = evaluate_views(scene, views, render)
        if isp is not None and "controller" in isp and out["per_image"]:
            out["psnr_controller"] = evaluate_views(scene, views, lambda i: render(i, True))["psnr"]
    finally:
        renderer.free()
    if not out["per_image"]:
        out.update(psnr=None, ssim=None, psnr_cc=None)
    return out
