"""Out of disk space is a clean stop (issue #45, item 2): spirula/files.py
writes every output whole or not at all (a temporary file renamed over the
target, removed on failure) with the mode ``open()`` gives (0666 & ~umask),
and checks the free space first; ``spirula train`` checks it before training
and before each checkpoint, keeps its last good checkpoint when a write
fails for lack of space and says in one line what failed, how much space it
needs and how to ``--resume`` (exit status 2).

The writes fail through a monkeypatched ENOSPC in this process; one
subprocess runs on a real full disk, a small tmpfs (root only: skipped
where ``mount -t tmpfs`` fails)."""

import errno
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_cli_train import SMALL, spirula
from train_cases import tiny_scene, write_tiny_colmap

from spirula import files
from spirula.errors import DiskFullError


def _enospc(*a, **kw):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _leftovers(folder: Path) -> list:
    return sorted(p.name for p in Path(folder).rglob("*.tmp"))


def test_a_write_that_runs_out_of_space_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "splat.ply"
    path.write_bytes(b"the last good one")

    def write(f):
        f.write(b"half")
        _enospc()

    with pytest.raises(DiskFullError) as err:
        files.atomic_write(path, write=write, size=1000)
    assert str(err.value).startswith("out of disk space writing %s (" % path), err.value
    assert err.value.exit_code == 2 and err.value.needed == 1000 + files.MARGIN
    assert path.read_bytes() == b"the last good one" and _leftovers(tmp_path) == []


def test_too_little_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "free_bytes", lambda path: 3 << 20)
    with pytest.raises(DiskFullError) as err:
        files.atomic_write(tmp_path / "ckpt" / "step-1.npz", b"x" * 10, size=5 << 20)
    assert "6.0 MiB needed, 3.0 MiB free" in str(err.value), err.value
    assert not (tmp_path / "ckpt").exists()
    assert files.shortfall(err.value) == "3.0 MiB more"


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_written_files_get_the_mode_open_gives(tmp_path, mask):
    old = os.umask(mask)
    try:
        files.atomic_write(tmp_path / "a.bin", b"data")
        (tmp_path / "b.txt").write_text("plain open()")
    finally:
        os.umask(old)
    mode = (tmp_path / "a.bin").stat().st_mode & 0o777
    assert mode == 0o666 & ~mask == (tmp_path / "b.txt").stat().st_mode & 0o777


def test_splat_ply_and_mesh_files_respect_the_umask(tmp_path):
    """They were 0600 (mkstemp's mode survived the rename)."""
    import trimesh

    from spirula.data import write_splat_ply
    from spirula.mesh.export import export_mesh

    old = os.umask(0o022)
    try:
        n = 3
        write_splat_ply(
            tmp_path / "splat.ply", np.zeros((n, 3)), np.eye(4)[:n], np.zeros((n, 3)), np.zeros(n), np.zeros((n, 1, 3))
        )
        export_mesh(trimesh.creation.box(), tmp_path / "mesh.glb")
    finally:
        os.umask(old)
    for name in ("splat.ply", "mesh.glb"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name


def test_the_output_folder_check_creates_nothing(tmp_path):
    from spirula.errors import UsageError

    (tmp_path / "file").write_text("x")
    for bad, words in ((tmp_path / "file", "is a file"), (tmp_path / "file" / "run", "is a file, not a folder")):
        with pytest.raises(UsageError, match=words):
            files.check_output_folder(bad)
    assert files.check_output_folder(tmp_path / "new" / "run") == tmp_path / "new" / "run"
    assert not (tmp_path / "new").exists()


# -- a training run ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return tiny_scene(tmp_path_factory.mktemp("disk") / "data")


def _cfg(**kw):
    from spirula.train.config import TrainConfig

    return TrainConfig.from_settings(**{"cap_max": 2000, "sh_degree": 1, "iterations": 12, "save_every": 4, **kw})


def test_a_checkpoint_that_runs_out_of_space_keeps_the_last_one(scene, device, tmp_path, monkeypatch):
    import spirula.train.run as run

    calls = []
    savez = np.savez

    def failing_savez(f, **arrays):
        calls.append(1)
        if len(calls) == 2:  # the checkpoint of step 8: the disk filled up meanwhile
            f.write(b"partial")
            _enospc()
        savez(f, **arrays)

    monkeypatch.setattr(run.np, "savez", failing_savez)
    out = tmp_path / "run"
    with pytest.raises(DiskFullError) as err:
        run.train_run(scene, _cfg(), device, out, log=lambda *a: None)
    msg = str(err.value)
    assert msg.startswith("out of disk space writing %s (" % (out / "ckpt" / "step-0000008.npz")), msg
    assert msg.endswith("then continue with --resume %s (its checkpoint of step 4 is kept)" % out), msg
    assert "\n" not in msg and err.value.exit_code == 2
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == ["step-0000004.npz"]
    assert _leftovers(out) == [] and not (out / "splat.ply").exists()
    run.load_checkpoint(out / "ckpt" / "step-0000004.npz")  # whole

    monkeypatch.setattr(run.np, "savez", savez)  # space freed: --resume finishes the run
    m = run.train_run(scene, _cfg(), device, out, resume=out, log=lambda *a: None)
    assert m["step"] == 12 and (out / "splat.ply").is_file()
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == ["step-0000012.npz"]


def test_too_little_space_for_the_outputs_stops_before_training(scene, device, tmp_path, monkeypatch):
    import spirula.train.run as run

    monkeypatch.setattr(files, "free_bytes", lambda path: 100 << 10)
    out = tmp_path / "run"
    with pytest.raises(DiskFullError) as err:
        run.train_run(scene, _cfg(), device, out, log=lambda *a: None)
    msg = str(err.value)
    assert msg.startswith("not enough disk space for the outputs of %s: " % out), msg
    assert "100.0 KiB free" in msg and msg.endswith("or choose another --output"), msg
    assert not out.exists()


def test_the_space_expected_covers_the_files_written(scene, device, tmp_path):
    """The estimate is an upper bound of what a run writes (else the check is no check)."""
    import spirula.train.run as run

    out = tmp_path / "run"
    cfg = _cfg(cap_max=500, save_every=0)  # the 500 seed points: MCMC's cap reached at once
    run.train_run(scene, cfg, device, out, log=lambda *a: None)
    (ckpt,) = (out / "ckpt").iterdir()
    k = (cfg.sh_degree + 1) ** 2
    # a COLMAP capture: PPISP (its controller off by default), one camera, the training images' frames
    app = run.appearance_bytes("ppisp", len(scene.train), 1, False)
    assert ckpt.stat().st_size <= run.checkpoint_bytes(500, k) + app <= 2 * ckpt.stat().st_size
    assert (out / "splat.ply").stat().st_size <= run.ply_bytes(500, k)
    for p in (ckpt, out / "splat.ply", out / "config.json", out / "metrics.json"):
        assert p.stat().st_mode & 0o777 == 0o666 & ~files.umask(), p


# -- a full disk, for real ------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root only), unmounted after the test."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root): %s" % proc.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.slow
def test_train_onto_a_full_disk_is_one_line(tmp_path, small_disk):
    data = write_tiny_colmap(tmp_path / "data")
    proc = spirula("train", data, "--iterations", 5, "-o", small_disk / "run", *SMALL)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("spirula: error: not enough disk space for the outputs of %s: " % (small_disk / "run"))
    assert "free on %s" % small_disk in line and line.endswith("or choose another --output"), line
    assert list(small_disk.iterdir()) == []
