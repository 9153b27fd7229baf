"""A run folder changes only by a run that owns it (issue #45, item 1;
spirula/train/run_folder.py): the lock, ``--output`` on an existing run,
``--overwrite``, what ``--resume`` may change, config.json rewritten only when
a resumed run commits, and derived files (metrics-eval.json, renders/,
mesh.glb) that say when they no longer match the run's splats.

Every refusal is one line on stderr starting with ``spirula: ``, exit status
2, no traceback, and leaves every file of the run as it was (contents and
mtimes)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys

import pytest
from test_cli_train import SMALL, spirula
from train_cases import write_tiny_colmap, write_tiny_mixed_sizes

from spirula.train.run_folder import LOCK, RunFolderError, RunLock, splat_behind_note, stale_notes


def run_files(run) -> list:
    """What a finished run holds, sorted (appearance.npz: a COLMAP dataset trains with PPISP)."""
    isp = json.loads((run / "config.json").read_text())["appearance"] != "none"
    return sorted(["ckpt", "config.json", "metrics.json", "splat.ply"] + ["appearance.npz"] * isp)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("runfolder")
    return write_tiny_colmap(root / "data"), write_tiny_mixed_sizes(root / "other")


@pytest.fixture(scope="module")
def trained(data):
    """A finished run of 20 steps at SH degree 1 (copied by each test that changes it)."""
    out = data[0].parent / "run"
    proc = spirula("train", data[0], "--iterations", 20, "--output", out, *SMALL)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def run(trained, tmp_path):
    """A copy of the finished run this test may change."""
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    return out


def snapshot(folder) -> dict:
    """{path: (bytes, mtime_ns)} of every file under ``folder``."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = (f.read(), os.stat(p).st_mtime_ns)
    return out


def refused(proc, *words):
    """Exit status 2, exactly one line on stderr, starting with ``spirula: ``, holding ``words``."""
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert lines[0].startswith("spirula: error: "), proc.stderr
    for w in words:
        assert str(w) in lines[0], (w, lines[0])
    return lines[0]


# ---- --resume: what it may change -------------------------------------------------------


def test_resume_on_another_dataset_is_refused_and_changes_nothing(run, data):
    """Before: config.json named the other dataset, then a traceback (or a
    run trained on the wrong images); `spirula eval RUN` scored against them."""
    before = snapshot(run)
    line = refused(spirula("train", data[1], "--resume", run, "--iterations", 30), run, data[0], data[1])
    assert "--resume" in line or "resume" in line
    assert snapshot(run) == before
    proc = spirula("train", data[0], "--resume", run, "--iterations", 22)  # its own dataset, given: fine
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--sh-degree", "3"], ["--sh-degree 3", "sh_degree=1"]),
        (["--strategy", "adc"], ["--strategy", 'strategy="mcmc"']),
        (["--eval-split", "none"], ["--eval-split", "eval_split="]),
        (["--downscale", "2"], ["--downscale 2", "downscale=null"]),
        (["--set", "world_center=focus"], ["world_center"]),
    ],
    ids=["sh-degree", "strategy", "eval-split", "downscale", "world-center"],
)
def test_resume_refuses_a_setting_it_cannot_change(run, args, words):
    """The settings whose Spec says resumable=False (spirula/train/spec.py).
    Before: --sh-degree 3 on an SH 1 run was a traceback (cannot reshape)."""
    before = snapshot(run)
    refused(spirula("train", "--resume", run, "--iterations", 30, *args), run, "cannot change on --resume", *words)
    assert snapshot(run) == before


def test_resume_of_a_path_that_does_not_exist_names_it(tmp_path):
    """Before: "/: no readable config.json" for --resume /nonexistent."""
    missing = tmp_path / "nonexistent"
    refused(spirula("train", "--resume", missing), "%s: no such run folder or checkpoint" % missing)


def test_resume_of_a_finished_run(run):
    """As many or fewer iterations than it ran: one line; more: it continues,
    and config.json then holds the new count."""
    before = snapshot(run)
    refused(spirula("train", "--resume", run), "finished at step 20 of 20", "--iterations")
    refused(spirula("train", "--resume", run, "--iterations", 10), "--iterations 10", "step 20")
    assert snapshot(run) == before
    proc = spirula("train", "--resume", run, "--iterations", 24)
    assert proc.returncode == 0, proc.stderr
    assert "(resumed: from step 20 to 24)" in proc.stderr
    assert json.loads((run / "config.json").read_text())["iterations"] == 24
    assert sorted(p.name for p in run.iterdir()) == run_files(run)


def test_config_json_changes_only_when_the_resumed_run_commits(device, run):
    """A resumed run that fails before its first checkpoint leaves config.json
    as it was; and train_run itself refuses a checkpoint's fixed setting."""
    from spirula.data import load_dataset
    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run

    saved = json.loads((run / "config.json").read_text())
    scene = load_dataset(saved["dataset"])
    before = snapshot(run)

    class Failing:
        def on_step(self, *a):
            raise RuntimeError("a bug mid-run")

        def close(self):
            pass

    cfg = TrainConfig.from_dict(saved).replace(iterations=40)
    with pytest.raises(RuntimeError, match="a bug mid-run"):
        train_run(scene, cfg, device, run, resume=run, log=lambda *a: None, live_hook=lambda *a: Failing())
    assert snapshot(run) == before
    with pytest.raises(RunFolderError, match="sh_degree"):
        train_run(scene, cfg.replace(sh_degree=3), device, run, resume=run, log=lambda *a: None)
    assert snapshot(run) == before
    train_run(scene, cfg.replace(iterations=21), device, run, resume=run, log=lambda *a: None)
    assert json.loads((run / "config.json").read_text())["iterations"] == 21


# ---- --output on an existing run, --overwrite ------------------------------------------


def test_output_on_an_existing_run_is_refused(run, data):
    """Before: the new run silently replaced the old one's result."""
    before = snapshot(run)
    line = refused(spirula("train", data[0], "--output", run, "--iterations", 5, *SMALL), run)
    assert "--resume %s" % run in line and "--overwrite" in line
    assert snapshot(run) == before


def test_overwrite_replaces_the_run_whole(run, data):
    """--overwrite: the new run alone, no mesh, renders or evaluation of the old one left."""
    (run / "mesh.glb").write_bytes(b"old mesh")
    (run / "mesh.glb.source.json").write_text("{}")
    (run / "renders").mkdir()
    (run / "renders" / "0000.png").write_bytes(b"old render")
    (run / "metrics-eval.json").write_text("{}")
    proc = spirula("train", data[0], "--output", run, "--iterations", 3, "--overwrite", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in run.iterdir()) == run_files(run)
    assert [p.name for p in (run / "ckpt").iterdir()] == ["step-0000003.npz"]
    assert json.loads((run / "config.json").read_text())["iterations"] == 3


def test_overwrite_never_deletes_the_dataset_or_the_working_folder(tmp_path, data):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    refused(spirula("train", data[0], "--output", ".", "--overwrite", cwd=run), "would delete the working folder")
    assert (run / "config.json").exists()


# ---- the lock ---------------------------------------------------------------------------


def test_a_second_writer_is_refused(run, data):
    """While a run holds RUN/.lock (here: this process), another
    `spirula train` into RUN, to resume it or to replace it, is one line."""
    with RunLock(run):
        before = snapshot(run)
        for args in (["--resume", run, "--iterations", 30], [data[0], "-o", run, "--overwrite", *SMALL]):
            refused(spirula("train", *args), "%s: in use by spirula train (pid %d on" % (run, os.getpid()))
        assert snapshot(run) == before
    assert not (run / LOCK).exists()


def test_two_trainings_into_one_output(data, tmp_path):
    """Before: the second run wrote its config over the first's while the
    first went on writing splats, metrics and checkpoint: a mix."""
    from test_signals import _train_until_progress

    out = tmp_path / "run"
    first, lines = _train_until_progress(data[0], "--iterations", 100000, "-o", out, "--set", "log_every=1", *SMALL)
    try:
        config = (out / "config.json").read_bytes()
        refused(spirula("train", data[0], "--iterations", 5, "-o", out, *SMALL), out, "in use by spirula train")
        refused(spirula("train", data[0], "--iterations", 5, "-o", out, "--overwrite", *SMALL), "in use")
        assert (out / "config.json").read_bytes() == config
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    assert first.returncode == 128 + signal.SIGTERM, "".join(lines)
    assert json.loads((out / "config.json").read_text())["iterations"] == 100000
    assert not (out / LOCK).exists()


def test_a_stale_lock_is_taken_over_with_a_note(run):
    """A run killed outright (SIGKILL, power cut) leaves RUN/.lock: a pid on
    this host that no longer exists. The next run takes it over, saying so."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner = dict(pid=gone.pid, host=socket.gethostname(), command="spirula train", started="2024-01-01T00:00:00")
    (run / LOCK).write_text(json.dumps(owner))
    proc = spirula("train", "--resume", run, "--iterations", 22)
    assert proc.returncode == 0, proc.stderr
    notes = [ln for ln in proc.stderr.splitlines() if "taking over the lock" in ln]
    assert len(notes) == 1 and notes[0].startswith("spirula: note: ") and "pid %d" % gone.pid in notes[0]
    assert not (run / LOCK).exists()


def test_the_lock_itself(tmp_path):
    """In one process: a second holder is refused; a lock of another host is
    left to its owner; the folder a lock made is gone again when nothing was written."""
    folder = tmp_path / "new"
    with RunLock(folder) as lock:
        owner = json.loads((folder / LOCK).read_text())
        assert (owner["pid"], owner["host"]) == (os.getpid(), socket.gethostname())
        with pytest.raises(RunFolderError, match="in use by spirula train"):
            RunLock(folder).acquire()
        assert lock.fd is not None
    assert not folder.exists()
    folder.mkdir()
    (folder / LOCK).write_text(json.dumps(dict(pid=1, host="elsewhere.example", command="spirula train")))
    with pytest.raises(RunFolderError, match="if that run is gone, remove .*%s" % LOCK):
        RunLock(folder).acquire()


# ---- derived files ----------------------------------------------------------------------


def test_derived_files_say_when_they_are_stale(run, monkeypatch, capsys):
    """eval, render and mesh record the splats they came from; once the run
    moves on, `spirula eval` and `spirula view` say so, one line each."""
    for args in (["eval", run], ["render", run, "--camera", "test:0"], ["mesh", run, "--resolution", 32]):
        proc = spirula(*args, "--texture-size", 64) if args[0] == "mesh" else spirula(*args)
        assert proc.returncode == 0, proc.stderr
        assert "stale" not in proc.stderr, proc.stderr
    assert json.loads((run / "metrics-eval.json").read_text())["source"]["step"] == 20
    assert json.loads((run / "renders" / "source.json").read_text())["source"]["checkpoint"] == "ckpt/step-0000020.npz"
    assert json.loads((run / "mesh.glb.source.json").read_text())["source"]["step"] == 20
    assert stale_notes(run) == []

    # 30, not fewer: PPISP's controller (this COLMAP capture's default) freezes the splats from
    # int(0.8 x iterations) on, and the splats must move for the mesh to go stale
    proc = spirula("train", "--resume", run, "--iterations", 30)
    assert proc.returncode == 0, proc.stderr
    notes = stale_notes(run)
    assert len(notes) == 3 and all(n.startswith("spirula: note: ") for n in notes), notes
    proc = spirula("eval", run)  # replaces metrics-eval.json; the mesh and renders stay stale
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "stale" in ln]
    assert len(said) == 2, proc.stderr
    assert any(
        "%s is stale: made from splat.ply of step 20, the run now has splat.ply of step 30" % (run / "mesh.glb") in ln
        and "spirula mesh" in ln
        for ln in said
    ), said
    assert any(str(run / "renders") in ln and "checkpoint step 20" in ln for ln in said), said

    # `spirula view RUN/mesh.glb --port`: that mesh's line, before serving it
    from spirula.cli.main import _register, cli
    from spirula.view import mesh as view_mesh

    monkeypatch.setattr(view_mesh, "serve_mesh", lambda *a, **kw: None)
    _register()
    cli.main(args=["view", str(run / "mesh.glb"), "--port", "0"], standalone_mode=False)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "mesh.glb is stale" in err[0], err


def test_mesh_says_when_splat_ply_is_behind_the_checkpoint(tmp_path):
    """A run stopped mid-way keeps the splat.ply of its last end: `spirula
    mesh RUN` reads that one, and says so."""
    run = tmp_path / "run"
    (run / "ckpt").mkdir(parents=True)
    (run / "splat.ply").write_bytes(b"")
    (run / "metrics.json").write_text(json.dumps(dict(step=20)))
    (run / "ckpt" / "step-0000035.npz").write_bytes(b"")
    note = splat_behind_note(run)
    assert note.startswith("spirula: note: ") and "step 20" in note and "step 35" in note
    (run / "metrics.json").write_text(json.dumps(dict(step=35)))
    assert splat_behind_note(run) is None


def test_default_output_folders_are_never_shared(tmp_path, monkeypatch):
    """Two runs started in the same second without --output get a folder each."""
    from spirula.train.run import default_output_dir

    monkeypatch.chdir(tmp_path)
    first = default_output_dir(tmp_path / "data")
    first.mkdir(parents=True)
    second = default_output_dir(tmp_path / "data")
    assert second != first and not second.exists() and second.name.startswith("data-")
