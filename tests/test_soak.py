"""The soak test on lavapipe (benchmarks/soak.py, short): `spirula train` with
NaNs injected into the splats and a tight memory budget ends with a finished
run, or with a checkpoint and one clear line that --resume continues from;
never a crash or a hang. The GPU version (30,000 steps of the 1080p
benchmark scene) is in docs/testing.md."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT, load_benchmark
from train_cases import tiny_scene

from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer

pytestmark = pytest.mark.slow

soak = load_benchmark("soak")

# every 10 steps NaN into 1% of the splats; MCMC relocates dead splats every 20
# steps from step 20, and grows 500 -> ~1,200 splats over 400 steps
# no appearance correction (a COLMAP scene's default): the budget is the splats'
CFG = dict(cap_max=2000, sh_degree=1, refine_start=20, refine_every=20, appearance="none")
OVERRIDES = ["sh_degree=1", "refine_start=20", "refine_every=20", "appearance=none"]


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return tiny_scene(tmp_path_factory.mktemp("soak"))


@pytest.fixture(scope="module")
def footprint(device, scene):
    """Bytes the trainer of the soak's configuration holds before its first
    step (its run grows past this as splats and intersections grow)."""
    before = device.pool.total_capacity()
    trainer = Trainer(scene, TrainConfig.from_settings(**CFG), device)
    held = device.pool.total_capacity() - before
    trainer.free()
    return held


def _env():
    env = {k: v for k, v in os.environ.items() if k != "SS_PROFILE"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _soak(scene, out, steps, limit, stall=60):
    return soak.soak(
        scene.path, steps, "%dB" % limit, 10, CFG["cap_max"], out, stall=stall, overrides=OVERRIDES, env=_env()
    )


def test_soak_with_nans_and_a_tight_budget_finishes(scene, footprint, tmp_path):
    """300 steps with 30 NaN injections within 512 KiB more than the trainer
    starts with (its buffers grow with the splats, ~890 here: ~260 KiB more): a finished run whose
    non-finite splats are counted, and are few (relocated, not spreading)."""
    r = _soak(scene, tmp_path / "run", 300, footprint + (512 << 10))
    assert r["outcome"] == "finished", "\n".join(r["stderr"] + [r["line"]])
    assert r["line"].startswith("soak: finished | 300/300 steps")
    m = r["metrics"]
    # relocation revives splats with a non-finite mean, scale, rotation or
    # opacity; NaN SH coefficients are not checked yet (issue #11 item 3) and
    # spread through the loss to the splats sharing their pixels: ~5% here.
    # A run where NaN took over would leave most splats non-finite.
    assert m["nonfinite_splats"] < m["n_splats"] // 2, r["line"]
    assert m["psnr"] is not None and m["psnr"] == m["psnr"], r["line"]  # finite test PSNR


def test_soak_past_the_memory_budget_ends_with_a_checkpoint_and_one_line(scene, footprint, tmp_path):
    """8 KiB of room: the first growth (MCMC adds splats, the intersections
    grow) is out of memory. The run writes a checkpoint, says so in one line
    (exit 2, no traceback), and --resume without the budget finishes it."""
    out = tmp_path / "run"
    r = _soak(scene, out, 300, footprint + (8 << 10))
    assert r["outcome"] == "checkpoint", "\n".join(r["stderr"] + [r["line"]])
    assert r["rc"] == 2  # the user can fix it (--vram-budget): docs/training.md "Exit status"
    (err,) = r["errors"]
    assert "SPIRULA_MEMORY_LIMIT" in err and "checkpoint of step %d" % r["checkpoint_step"] in err, err
    assert 0 < r["checkpoint_step"] < 300

    step = r["checkpoint_step"]
    env = _env()
    env.pop("SPIRULA_MEMORY_LIMIT", None)
    resumed = subprocess.run(
        [sys.executable, "-m", "spirula", "train", "--resume", str(out), "--iterations", str(step + 20)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from step %d" % step in resumed.stderr
    assert [p.name for p in (out / "ckpt").iterdir()] == ["step-%07d.npz" % (step + 20)]


def test_a_memory_limit_that_is_not_a_size_is_one_line(scene):
    env = dict(_env(), SPIRULA_MEMORY_LIMIT="lots")
    proc = subprocess.run(
        [sys.executable, "-m", "spirula", "train", str(scene.path), "--iterations", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "spirula: error: SPIRULA_MEMORY_LIMIT=lots: expected a size such as 512MiB, 2GiB or a number of bytes"
    )
