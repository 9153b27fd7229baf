"""``spirula train``, ``spirula eval`` and ``spirula render`` as a user runs
them (a subprocess each) on the tiny COLMAP scene of train_cases.py: the
outputs of a run, and one line on stderr with a non-zero exit, never a
traceback, for each kind of bad input."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from PIL import Image
from train_cases import write_tiny_colmap

from spirula.train.config import TrainConfig

# small enough for lavapipe's 128 MiB storage-buffer limit (the default MCMC
# budget of 1M splats at SH degree 3 needs 183 MiB for the SH coefficients)
SMALL = ["--cap-max", "2000", "--sh-degree", "1"]


def spirula(*args, cwd=None, timeout=300, env=None):
    """Run the CLI in a subprocess (``env``: variables added to this process's)."""
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if k != "SS_PROFILE"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "spirula", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def assert_one_line_error(proc, *words):
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("spirula: error: "), proc.stderr
    for w in words:
        assert w in errors[0], (w, errors[0])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_tiny_colmap(tmp_path_factory.mktemp("cli") / "data")


@pytest.fixture(scope="module")
def run(dataset):
    out = dataset.parent / "run"
    proc = spirula("train", dataset, "--iterations", 20, "--eval-every", 10, "--output", out, *SMALL)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_train_writes_the_run_folder(run, dataset):
    from spirula.data import read_splat_ply

    out, proc = run
    assert "Traceback" not in proc.stderr
    assert "step 20/20" in proc.stderr
    # a COLMAP capture: PPISP by default, its parameters beside the splats
    names = ["appearance.npz", "ckpt", "config.json", "metrics.json", "splat.ply"]
    assert sorted(p.name for p in out.iterdir()) == names
    assert [p.name for p in (out / "ckpt").iterdir()] == ["step-0000020.npz"]
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["iterations"], cfg["cap_max"], cfg["sh_degree"], cfg["strategy"]) == (20, 2000, 1, "mcmc")
    assert cfg["dataset"] == str(dataset)
    m = json.loads((out / "metrics.json").read_text())
    assert m["step"] == 20 and len(m["per_image"]) == 2 and np.isfinite(m["psnr"])
    slow = m["slowest_steps"]  # [step, ms], slowest first: the steps of this run
    assert len(slow) == 10 and len({s for s, _ in slow}) == 10 and all(1 <= s <= 20 for s, _ in slow)
    assert [ms for _, ms in slow] == sorted((ms for _, ms in slow), reverse=True) and slow[0][1] > 0
    ply = read_splat_ply(out / "splat.ply")
    assert len(ply["means"]) == m["n_splats"] and ply["sh_degree"] == 1
    # the test curve (--eval-every 10): step 10's evaluation, then the final one
    curve = m["test_curve"]
    assert [c["step"] for c in curve] == [10, 20] and "step 10: test PSNR" in proc.stderr
    assert 0 < curve[0]["train_s"] < curve[1]["train_s"] and curve[1]["psnr"] == m["psnr"]
    assert curve[1]["n_splats"] == m["n_splats"] and np.isfinite(curve[0]["psnr"])


def test_eval_scores_the_run_like_training_did(run):
    out, _ = run
    proc = spirula("eval", out)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    saved = json.loads((out / "metrics-eval.json").read_text())
    trained = json.loads((out / "metrics.json").read_text())
    # PPISP (a COLMAP capture) without its controller (off by default): no controller line
    # (with it: tests/test_controller_training.py, evaluate_run as spirula eval runs it)
    assert "psnr_controller" not in trained and "psnr_controller" not in saved
    assert [ln.split()[0] for ln in lines] == ["0000.png", "0008.png", "mean"]
    # the trainer renders in training coordinates, eval from splat arrays in the
    # dataset's: the same images up to float32 rounding
    assert saved["psnr"] == pytest.approx(trained["psnr"], abs=1e-3)
    assert saved["n_splats"] == trained["n_splats"]


def test_render_writes_the_requested_view(run):
    out, _ = run
    proc = spirula("render", out, "--camera", "test:0", "--camera", "0003.png")
    assert proc.returncode == 0, proc.stderr
    paths = proc.stdout.split()
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["0000.png", "0003.png"]
    for p in paths:
        img = np.asarray(Image.open(p))
        assert img.shape == (48, 64, 3) and img.max() > 0


def test_a_run_of_before_the_strategies_had_their_own_settings_still_works(run, tmp_path):
    """A run folder whose config.json and checkpoint hold the flat
    configuration every run wrote before (both strategies' fields, the
    testing aid, the live views' budget) evaluates and renders as before and
    resumes with its own settings."""
    out, _ = run
    old = tmp_path / "old"
    shutil.copytree(out, old)
    flat = json.loads((out / "config.json").read_text())
    assert flat["strategy"] == "mcmc" and "grow_grad2d" not in flat  # written now: MCMC's settings only
    adc = dict(grow_grad2d=0.0002, grow_scale3d=0.01, prune_scale3d=0.1, reset_every=3000, opacity_reset=True)
    flat.update(adc, absgrad=False, inject_nan_every=0, live_view_budget=0.1)
    (old / "config.json").write_text(json.dumps(flat, indent=1, sort_keys=True))
    (ckpt,) = (old / "ckpt").iterdir()
    with np.load(ckpt) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    meta["config"] = json.dumps({k: v for k, v in flat.items() if k != "dataset"}, indent=1, sort_keys=True)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(ckpt, **arrays)
    for folder in (out, old):
        proc = spirula("eval", folder)
        assert proc.returncode == 0, proc.stderr
    scores = [json.loads((f / "metrics-eval.json").read_text())["psnr"] for f in (out, old)]
    assert scores[0] == scores[1]
    proc = spirula("render", old, "--camera", "test:0", "--out", tmp_path / "shots")
    assert proc.returncode == 0, proc.stderr
    proc = spirula("train", "--resume", old, "--iterations", 22)
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads((old / "config.json").read_text())
    assert (cfg["strategy"], cfg["cap_max"], cfg["sh_degree"], cfg["iterations"]) == ("mcmc", 2000, 1, 22)
    assert "grow_grad2d" not in cfg and "inject_nan_every" not in cfg


def test_missing_dataset_is_one_line(tmp_path):
    assert_one_line_error(spirula("train", tmp_path / "nowhere", *SMALL), "nowhere")


def test_folder_that_is_not_a_dataset_is_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("not a dataset")
    assert_one_line_error(spirula("train", tmp_path, *SMALL), "not a dataset")


def test_colmap_model_without_its_images_is_one_line(tmp_path):
    data = write_tiny_colmap(tmp_path / "data")
    shutil.rmtree(data / "images")
    assert_one_line_error(spirula("train", data, *SMALL), "0000.png")


def test_resume_without_checkpoint_is_one_line(dataset, tmp_path):
    assert_one_line_error(spirula("train", dataset, "--resume", tmp_path, *SMALL), "checkpoint")
    assert_one_line_error(spirula("train", "--resume", tmp_path, *SMALL))


@pytest.mark.parametrize("setting", ["strategy=bad", "flatten_weight=-1"])
def test_a_setting_the_configuration_refuses_is_one_line(dataset, tmp_path, setting):
    proc = spirula("train", dataset, "--set", setting, "-o", tmp_path / "run", *SMALL)
    assert_one_line_error(proc, setting.split("=")[0])


def test_unknown_camera_is_one_line(run):
    out, _ = run
    assert_one_line_error(spirula("render", out, "--camera", "test:99"), "test:99")
    assert_one_line_error(spirula("render", out, "--camera", "nosuch.png"), "nosuch.png")


def test_eval_of_a_folder_that_is_not_a_run_is_one_line(dataset):
    assert_one_line_error(spirula("eval", dataset), "checkpoint")


@pytest.mark.parametrize("command", ["train", "eval", "render"])
def test_backend_cuda_runs_there_or_says_why_not(run, dataset, tmp_path, command):
    """--backend cuda (a common option, after the command or before it): the
    command runs on CUDA where it can, else one line and exit code 2, as
    `spirula devices --backend cuda` says."""
    from spirula.backends import unavailable_reason

    out, _ = run
    args = {
        "train": ["train", dataset, "--iterations", 2, "--output", tmp_path / "cuda", *SMALL],
        "eval": ["eval", out],
        "render": ["render", out, "--camera", "0", "--out", tmp_path / "r"],
    }[command]
    reason = unavailable_reason("cuda")
    if reason is None:
        proc = spirula(*args, "--backend", "cuda")
        assert proc.returncode == 0, proc.stderr
        return
    for proc in (spirula(*args, "--backend", "cuda"), spirula("--backend", "cuda", *args)):
        assert proc.returncode == 2
        assert_one_line_error(proc, reason)


def test_resume_continues_the_run_with_its_own_configuration(dataset, tmp_path):
    """`spirula train --resume RUN` (what the Ctrl-C message tells the user to
    type) continues the run as it was configured: same strategy, SH degree
    and strategy settings, not the command line's defaults. (ADC has no
    budget: SMALL's --cap-max is MCMC's, and config.json holds only ADC's.)
    Its summary counts the steps it ran, not the step it reached."""
    out = tmp_path / "adc"
    first = spirula(
        "train", dataset, "--iterations", 4, "--strategy", "adc", "--set", "reset_every=50", "--output", out, *SMALL
    )
    assert first.returncode == 0, first.stderr
    assert "spirula: 4 steps in " in first.stderr and "resumed" not in first.stderr, first.stderr
    proc = spirula("train", "--resume", out, "--iterations", 6)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"spirula: 2 steps in [\d.]+ s \(resumed: from step 4 to 6\);", proc.stderr), proc.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["strategy"], cfg["sh_degree"], cfg["reset_every"], cfg["iterations"]) == ("adc", 1, 50, 6)
    assert "cap_max" not in cfg
    assert [p.name for p in (out / "ckpt").iterdir()] == ["step-0000006.npz"]


def test_train_on_images_of_two_sizes(tmp_path):
    """A nerfstudio dataset whose odd views are half size trains from the CLI
    (before, such datasets were refused) and says which sizes it found."""
    from train_cases import write_tiny_mixed_sizes

    data = write_tiny_mixed_sizes(tmp_path / "mixed")
    proc = spirula("train", data, "--iterations", 10, "--output", tmp_path / "run", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "32x24, 64x48" in proc.stderr + proc.stdout  # by count: 6 small, 4 full
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert np.isfinite(metrics["psnr"]) and (tmp_path / "run" / "splat.ply").is_file()


# ---- the options map onto TrainConfig (in process) ----------------------------------


class _Stop(Exception):
    pass


@pytest.mark.parametrize(
    "args,want",
    [
        ([], lambda: TrainConfig.demo()),
        (["DATA"], lambda: TrainConfig()),
        (
            ["--iterations", "7", "--seed", "3", "--strategy", "adc"],
            lambda: TrainConfig.demo(iterations=7, seed=3, strategy="adc"),
        ),
        (
            ["DATA", "--sh-degree", "1", "--set", "log_every=5", "--eval-split", "none"],
            lambda: TrainConfig(sh_degree=1, log_every=5, eval_split="none"),
        ),
    ],
    ids=["demo", "dataset", "demo-options", "dataset-options"],
)
def test_untyped_options_leave_the_configuration_defaults(monkeypatch, tmp_path, args, want):
    """The CLI holds no defaults of its own: without options, `spirula train`
    is TrainConfig.demo() and `spirula train DATASET` TrainConfig(); an option
    sets its field and nothing else."""
    import dataclasses

    import spirula.cli.train as cli_train
    import spirula.data
    import spirula.data.demo
    from spirula.cli.main import _register, cli

    made = []

    class Recorded(TrainConfig):
        def __post_init__(self):
            super().__post_init__()
            made.append(dataclasses.asdict(self))

    def load_dataset(*a, **kw):
        raise _Stop

    monkeypatch.setattr(cli_train, "TrainConfig", Recorded)
    monkeypatch.setattr(spirula.data, "load_dataset", load_dataset)
    monkeypatch.setattr(spirula.data.demo, "ensure_demo_scene", lambda log=None: tmp_path / "demo")
    _register()
    with pytest.raises(_Stop):
        cli.main(args=["train"] + [str(tmp_path) if a == "DATA" else a for a in args], standalone_mode=False)
    assert made[-1] == dataclasses.asdict(want())


def test_the_train_options_come_from_the_settings_metadata():
    """Brush-style: every setting whose metadata names a flag is an option of
    `spirula train`, with the setting's help text and the configuration's
    default; booleans are flags (--compact/--no-compact where negatable)."""
    from spirula.cli.train import train
    from spirula.train.config import setting_names

    options = {opt: p for p in train.params for opt in p.opts + p.secondary_opts}
    flagged = {name: s for name, (_, s) in setting_names().items() if s.flag}
    assert set(flagged) >= {"iterations", "strategy", "cap_max", "vram_budget", "sh_degree", "compact", "geometry"}
    assert set(flagged) >= {"downscale", "eval_split", "background", "eval_every", "save_every", "seed"}
    for name, s in flagged.items():
        param = options[s.flag]
        assert param.name == name and param.default is None, name
        assert param.help.startswith(s.help), name
    assert options["--no-compact"] is options["--compact"] and options["--geometry"].is_flag
    assert "[default: 30,000; demo: 400]" in options["--iterations"].help
    assert list(options["--strategy"].type.choices) == ["mcmc", "adc"]


def _train_in_process(monkeypatch, tmp_path, args):
    """Run `spirula train DATA ARGS` in this process up to train_run; returns
    what train_run was called with (cfg, live_hook, faults)."""
    import spirula.cli.train as cli_train
    import spirula.data
    import spirula.train.run
    import spirula.view.live
    from spirula.cli.main import _register, cli

    got = {}

    class Scene:
        source, frames, train, test, points, points_random = "test", [], [], [], [], False

    monkeypatch.setattr(spirula.data, "load_dataset", lambda *a, **kw: Scene())
    monkeypatch.setattr(cli_train, "open_cli_device", lambda: type("D", (), {"info": type("I", (), {"name": "x"})}))
    monkeypatch.setattr(spirula.view.live, "live_hook", lambda viewers, config=None: got.setdefault("view", config))
    monkeypatch.setattr(spirula.train.run, "train_run", lambda scene, cfg, *a, **kw: got.update(cfg=cfg, **kw))
    _register()
    cli.main(args=["train", str(tmp_path), "-o", str(tmp_path / "run")] + args, standalone_mode=False)
    return got


def test_set_reaches_every_setting_by_its_flat_name(monkeypatch, tmp_path):
    """--set NAME=VALUE for every field, strategies' included, under the name
    config.json uses; --strategy adc switches the strategy's settings; the
    live views' budget and the testing aid go to their own objects."""
    from spirula.train.config import ADC
    from spirula.train.faults import FaultInjection
    from spirula.view.live import LiveViewConfig

    got = _train_in_process(
        monkeypatch,
        tmp_path,
        ["--strategy", "adc", "--set", "opacity_reset=false", "--set", "refine_every=7", "--set", "lr_means=1e-3"]
        + ["--set", "live_view_budget=0.5", "--set", "inject_nan_every=3", "--set", "cap_max=9"],
    )
    cfg = got["cfg"]
    assert cfg.strategy == ADC(opacity_reset=False, refine_every=7) and cfg.lr_means == 1e-3
    assert got["faults"] == FaultInjection(inject_nan_every=3)
    assert got["view"] == LiveViewConfig(live_view_budget=0.5)  # the live views' hook gets it
    got = _train_in_process(monkeypatch, tmp_path, ["--cap-max", "123", "--set", "noise_lr=7"])
    assert (got["cfg"].strategy.cap_max, got["cfg"].strategy.noise_lr, got["faults"]) == (123, 7.0, None)
    assert got["view"] == LiveViewConfig() and LiveViewConfig().live_view_budget == 0.1


@pytest.mark.parametrize(
    "args,words",
    [
        (["--set", "live_view_budget=0"], "live_view_budget=0: expected a number > 0 and <= 1"),
        (["--set", "inject_nan_every=-1"], "inject_nan_every=-1: expected an integer >= 0"),
        (["--iterations", "-5"], "--iterations -5: expected an integer from 1 to 1000000000"),
        (["--set", "no_such=1"], "--set no_such=1: expected KEY=VALUE with KEY one of"),
    ],
)
def test_a_setting_out_of_its_range_is_one_line(monkeypatch, tmp_path, args, words):
    from spirula.errors import SpirulaError

    with pytest.raises(SpirulaError) as err:
        _train_in_process(monkeypatch, tmp_path, args)
    assert words in str(err.value) and err.value.exit_code == 2
