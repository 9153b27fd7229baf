"""Stopping training by signal (spirula/train/signals.py): SIGTERM (job
schedulers, ``docker stop``) and SIGHUP (a closed terminal) save a
checkpoint and exit like Ctrl-C, with status 128 + the signal's number;
a signal during the checkpoint write waits for it; the handlers are the
run's only."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import ROOT
from train_cases import tiny_scene, write_tiny_colmap

from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

SMALL = ["--cap-max", "2000", "--sh-degree", "1"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_tiny_colmap(tmp_path_factory.mktemp("signals") / "data")


def _env():
    env = {k: v for k, v in os.environ.items() if k != "SS_PROFILE"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _train_until_progress(*args, timeout=120):
    """A ``spirula train`` subprocess that has printed its first progress line;
    its stderr lines keep arriving in the returned list."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "spirula", "train", *map(str, args)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    lines, started = [], threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("step "):
                started.set()
        started.set()

    threading.Thread(target=read, daemon=True).start()
    if not started.wait(timeout) or proc.poll() is not None:
        proc.kill()
        pytest.fail("no progress line within %d s:\n%s" % (timeout, "".join(lines)))
    return proc, lines


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_stop_signal_saves_a_checkpoint_and_resume_continues(dataset, tmp_path, signum):
    """SIGTERM / SIGHUP mid-run: exit 128 + signum within seconds, one line
    naming the checkpoint, no traceback; --resume continues from that step."""
    out = tmp_path / "run"
    args = (dataset, "--iterations", 100000, "--output", out, "--set", "log_every=1", *SMALL)
    proc, lines = _train_until_progress(*args)
    proc.send_signal(signum)
    t0 = time.monotonic()
    try:
        # a step of the tiny scene is ~25 ms on lavapipe, the checkpoint ~10 ms;
        # 20 s leaves room for a loaded CI machine
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("still running 20 s after %s" % signal.Signals(signum).name)
    time.sleep(0.2)  # the reader thread drains the pipe
    stderr = "".join(lines)
    assert proc.returncode == 128 + signum, stderr
    assert time.monotonic() - t0 < 20
    assert "Traceback" not in stderr, stderr
    ckpts = sorted((out / "ckpt").glob("step-*.npz"))
    assert len(ckpts) == 1, stderr
    step = int(ckpts[0].stem.split("-")[1])
    assert step >= 1
    said = [ln for ln in lines if not ln.startswith("step ")][-1]
    assert said.startswith("spirula: stopped by %s at step %d;" % (signal.Signals(signum).name, step)), stderr
    assert "--resume %s" % out in said

    resumed = subprocess.run(
        [sys.executable, "-m", "spirula", "train", "--resume", str(out), "--iterations", str(step + 2)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from step %d" % step in resumed.stderr
    assert [p.name for p in (out / "ckpt").iterdir()] == ["step-%07d.npz" % (step + 2)]


# ---- in this process, on the Trainer ---------------------------------------------------


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return tiny_scene(tmp_path_factory.mktemp("tiny"))


class SignalEscaped(Exception):
    pass


@pytest.fixture
def guarded():
    """SIGTERM and SIGHUP raise SignalEscaped in this process outside a run
    (without a handler of its own the run would kill pytest), and SIGINT has
    Python's default handler (a shell that starts pytest in the background
    leaves SIGINT ignored); all three restored after."""

    def escaped(signum, frame):
        raise SignalEscaped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, escaped) for s in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield escaped
    for s, h in previous.items():
        signal.signal(s, h)


def _run(scene, device, out, monkeypatch, at_step, send, during_save=()):
    """train_run that sends ``send`` signals to itself as step ``at_step`` + 1
    starts, and ``during_save`` ones in the middle of each checkpoint write."""
    from spirula.train import run

    cfg = TrainConfig.from_settings(iterations=8, cap_max=600, sh_degree=1, save_every=0, log_every=100)
    real_step, real_save = Trainer.train_step, run.save_checkpoint

    def step(self, **kw):
        if self.step == at_step:
            for s in send:
                os.kill(os.getpid(), s)
        return real_step(self, **kw)

    def save(trainer, path):
        real_save(trainer, path.with_name("scratch.npz"))  # half the work done...
        for s in during_save:
            os.kill(os.getpid(), s)
        path.with_name("scratch.npz").unlink()
        real_save(trainer, path)

    monkeypatch.setattr(Trainer, "train_step", step)
    monkeypatch.setattr(run, "save_checkpoint", save)
    logs = []
    with pytest.raises(KeyboardInterrupt) as info:
        run.train_run(scene, cfg, device, out, log=logs.append)
    monkeypatch.undo()
    return info.value, logs


def test_a_signal_during_the_checkpoint_write_waits_for_it(device, scene, tmp_path, monkeypatch, guarded):
    """SIGTERM during step 4 (the step finishes, and step 5, already submitted
    by the pipelined loop, completes before the checkpoint), then SIGTERM,
    SIGHUP and SIGINT while the checkpoint is written: the write finishes (the
    file loads, step 5), the run ends with the first signal, and the handlers
    are the test's again."""
    from spirula.train.run import load_checkpoint
    from spirula.train.signals import Stopped

    exc, logs = _run(
        scene,
        device,
        tmp_path / "run",
        monkeypatch,
        at_step=3,
        send=[signal.SIGTERM],
        during_save=[signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
    )
    assert isinstance(exc, Stopped) and exc.signum == signal.SIGTERM and exc.exit_status == 143
    assert exc.reported
    ckpts = list((tmp_path / "run" / "ckpt").iterdir())
    assert [p.name for p in ckpts] == ["step-0000005.npz"]
    state = load_checkpoint(ckpts[0])
    assert state["step"] == 5 and np.isfinite(state["model"]["params"]["means"]).all()
    assert logs[-1].startswith("spirula: stopped by SIGTERM at step 5;")
    assert signal.getsignal(signal.SIGTERM) is guarded
    assert signal.getsignal(signal.SIGHUP) is guarded
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_signal_stops_a_step_that_hangs(device, scene, tmp_path, monkeypatch, guarded):
    """The first signal waits for the step to end; a second one before that
    (a step that hangs) stops at once, with a checkpoint still."""
    from spirula.train.signals import Stopped

    exc, logs = _run(scene, device, tmp_path / "run", monkeypatch, at_step=2, send=[signal.SIGHUP, signal.SIGTERM])
    assert isinstance(exc, Stopped) and exc.signum == signal.SIGHUP and exc.exit_status == 129
    # stopped inside the call for step 3, before it read step 3 back: step 3 (submitted
    # by the call before, pipelined) completes before the checkpoint
    assert [p.name for p in (tmp_path / "run" / "ckpt").iterdir()] == ["step-0000003.npz"]
    assert signal.getsignal(signal.SIGTERM) is guarded


def test_handlers_are_the_runs_only(device, scene, tmp_path, guarded):
    """A run that ends normally leaves the process's handlers as it found them."""
    from spirula.train.run import train_run

    cfg = TrainConfig.from_settings(iterations=2, cap_max=600, sh_degree=1, save_every=0, log_every=100)
    train_run(scene, cfg, device, tmp_path / "run", log=lambda msg: None)
    assert signal.getsignal(signal.SIGTERM) is guarded
    assert signal.getsignal(signal.SIGHUP) is guarded
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
