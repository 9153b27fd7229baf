"""A run folder changes only by a run that owns it (issue #45, item 1).

- :class:`RunLock`: ``RUN/.lock`` holds the owner's pid and host while
  ``spirula train`` writes into RUN (an exclusive ``flock`` on it as well,
  which the kernel drops when the process dies). A second writer is refused
  with one line; a lock whose process is gone (a dead pid on this host) is
  taken over with a note.
- :func:`check_new_output`: ``--output`` on a folder that already holds a run
  is refused (``--resume`` continues it, ``--overwrite`` replaces it whole:
  :func:`clear_run_folder`).
- :func:`check_resume`: ``--resume`` keeps the run's dataset and every
  setting whose Spec says ``resumable=False`` (spirula/train/spec.py); a
  difference is one line, before anything is touched.
- Derived files (``metrics-eval.json``, ``renders/``, ``mesh.*``) record the
  splats they came from (:func:`checkpoint_source`, :func:`splat_source`);
  :func:`stale_notes` says which no longer match the run.

Every refusal is a :class:`RunFolderError`: one line naming the folder, exit
status 2 (the CLI prints it, spirula/cli/main.py).
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
import os
import re
import shutil
import socket
from pathlib import Path

from spirula.errors import UsageError
from spirula.train.config import TrainConfig, flatten, setting_names
from spirula.train.spec import label

LOCK = ".lock"
# what makes a folder a run folder: any of these (a partitioned run has its partition/ too)
RUN_FILES = ("config.json", "ckpt", "splat.ply", "metrics.json")
RENDERS_SOURCE = "source.json"  # renders/source.json: the checkpoint renders/ came from
SOURCE_SUFFIX = ".source.json"  # mesh.glb.source.json: the splat.ply mesh.glb came from
_STEP = re.compile(r"step-(\d+)\.npz$")


class RunFolderError(UsageError):
    """A run folder that this command must not write into, as asked: one line
    naming it and what to do instead (exit status 2)."""


# -- where a run is ---------------------------------------------------------------------


def run_folder_of(path) -> Path:
    """The run folder of ``--resume PATH`` (a run folder or one of its
    ``ckpt/step-*.npz``); a path that does not exist is one line naming it."""
    path = Path(path)
    if not path.exists():
        raise RunFolderError("%s: no such run folder or checkpoint" % path)
    if path.is_file() and path.parent.name != "ckpt":
        raise RunFolderError("%s: not a run folder or a checkpoint (RUN/ckpt/step-*.npz)" % path)
    return path if path.is_dir() else path.parent.parent


def is_run_folder(folder) -> bool:
    folder = Path(folder)
    return folder.is_dir() and any((folder / name).exists() for name in RUN_FILES)


def latest_checkpoint(folder) -> Path | None:
    """The newest ``ckpt/step-*.npz`` of a run folder (or one directly in it), else None."""
    for sub in (Path(folder) / "ckpt", Path(folder)):
        found = sorted(sub.glob("step-*.npz")) if sub.is_dir() else []
        if found:
            return found[-1]
    return None


def checkpoint_step(path) -> int | None:
    m = _STEP.search(Path(path).name)
    return int(m.group(1)) if m else None


# -- the lock ---------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _flock(fd) -> bool:
    """An exclusive, non-blocking flock on ``fd``: True when taken, False when
    the system has none (then the pid in the file decides); raises
    BlockingIOError when another process holds it."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise BlockingIOError(*exc.args) from None
        return False  # ENOLCK, EOPNOTSUPP: a file system without flock
    return True


def _read_owner(fd_or_path) -> dict | None:
    try:
        if isinstance(fd_or_path, int):
            data = os.pread(fd_or_path, 4096, 0)
        else:
            data = Path(fd_or_path).read_bytes()
        owner = json.loads(data.decode())
        return owner if isinstance(owner, dict) and isinstance(owner.get("pid"), int) else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _owner_text(owner: dict | None) -> str:
    if owner is None:
        return "another process"
    since = (" since %s" % owner["started"]) if owner.get("started") else ""
    return "pid %d on %s%s" % (owner["pid"], owner.get("host", "?"), since)


class RunLock:
    """``RUN/.lock`` while a run writes into RUN (a context manager).

    ``acquire()`` makes the folder if needed, takes the lock or raises a
    :class:`RunFolderError` naming its owner; a lock left by a process that is
    gone (this host, no such pid) is taken over, with one note through ``log``.
    ``release()`` removes the file."""

    def __init__(self, folder, log=print, command: str = "spirula train"):
        self.folder = Path(folder)
        self.path = self.folder / LOCK
        self.log = log
        self.command = command
        self.fd = None
        self.made_folder = False  # acquire() made the folder (release() removes it when empty)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    def _busy(self, owner):
        command = owner.get("command", "a run") if owner else "a run"
        text = "%s: in use by %s (%s)" % (self.folder, command, _owner_text(owner))
        if owner is not None and owner.get("host") != socket.gethostname():
            text += "; if that run is gone, remove %s" % self.path
        else:
            text += "; wait for it to end, or train into another --output"
        return RunFolderError(text)

    def acquire(self):
        self.made_folder = self.made_folder or not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        host = socket.gethostname()
        for _ in range(20):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    _flock(fd)
                except BlockingIOError:
                    raise self._busy(_read_owner(fd)) from None
                try:  # the owner may have removed the file between our open and flock: try again
                    if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
                        os.close(fd)
                        continue
                except FileNotFoundError:
                    os.close(fd)
                    continue
                owner = _read_owner(fd)
                if owner is not None:
                    if owner.get("host") != host or (owner["pid"] != os.getpid() and _alive(owner["pid"])):
                        raise self._busy(owner)
                    self.log(
                        "spirula: note: %s: taking over the lock of %s (%s): that process is gone"
                        % (self.folder, owner.get("command", "a run"), _owner_text(owner))
                    )
                mine = dict(
                    pid=os.getpid(),
                    host=host,
                    command=self.command,
                    started=datetime.datetime.now().isoformat(timespec="seconds"),
                )
                os.ftruncate(fd, 0)
                os.pwrite(fd, (json.dumps(mine) + "\n").encode(), 0)
                os.fsync(fd)
            except BaseException:
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                raise
            self.fd = fd
            return self
        raise self._busy(_read_owner(self.path))

    def release(self):
        """Remove the lock; a folder that acquire() made and nothing else was
        written into goes too (a run that failed before writing leaves nothing)."""
        if self.fd is None:
            return
        try:
            if os.fstat(self.fd).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(self.fd)
            self.fd = None
        if self.made_folder:
            try:
                self.folder.rmdir()  # only when empty
            except OSError:
                pass


def check_not_locked(folder):
    """A one-line :class:`RunFolderError` when ``folder``'s lock names a
    process that is still there (or one on another host); reads only."""
    path = Path(folder) / LOCK
    owner = _read_owner(path) if path.is_file() else None
    if owner is None:
        return
    if owner.get("host") != socket.gethostname() or (owner["pid"] != os.getpid() and _alive(owner["pid"])):
        raise RunLock(folder)._busy(owner)


# -- a new run into --output ------------------------------------------------------------


def check_new_output(output, overwrite: bool, dataset=None):
    """``--output`` for a new run: a folder that holds a run already is refused
    unless ``overwrite`` (one line naming it); one that holds the dataset or
    the working folder is never replaced. Reads only."""
    output = Path(output)
    check_not_locked(output)
    if not is_run_folder(output):
        return
    if not overwrite:
        found = ", ".join(n for n in RUN_FILES if (output / n).exists())
        raise RunFolderError(
            "%s: already holds a run (%s); continue it with --resume %s, or replace it with --overwrite"
            % (output, found, output)
        )
    here = output.resolve()
    for inside, what in ((Path.cwd(), "the working folder"), (dataset, "the dataset")):
        if inside is None:
            continue
        inside = Path(inside).resolve()
        if inside == here or here in inside.parents:
            raise RunFolderError("%s: --overwrite would delete %s (%s)" % (output, what, inside))


def clear_run_folder(output, log=print):
    """``--overwrite``: everything in ``output`` but the lock (held by the
    caller) removed: the run and what was made from it (mesh, renders, evaluation)."""
    output = Path(output)
    if not is_run_folder(output):
        return
    for entry in sorted(output.iterdir()):
        if entry.name == LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    log("spirula: --overwrite: emptied %s" % output)


# -- --resume ---------------------------------------------------------------------------


def _norm(path) -> Path:
    return Path(os.path.abspath(os.path.expanduser(str(path))))


def recorded_dataset(run, saved: dict) -> Path | None:
    """The dataset a run's config.json names, as found from here: as it
    stands, else relative to a folder above the run (where it was trained)."""
    value = saved.get("dataset")
    if not isinstance(value, str) or not value:
        return None
    path = Path(value)
    if path.is_absolute() or path.exists():
        return path
    for folder in _norm(run).parents:
        if (folder / path).exists():
            return folder / path
    return path


def same_dataset(a, b) -> bool:
    a, b = Path(a), Path(b)
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return _norm(a) == _norm(b)


def resume_conflict(saved: dict, cfg: TrainConfig) -> str | None:
    """The first setting that may not change on ``--resume`` (its Spec's
    ``resumable`` False) whose value in ``cfg`` differs from the run's
    ``saved`` flat settings, said as ``--sh-degree 3: the run has
    sh_degree 1, ...``; None when they agree."""
    old = TrainConfig.from_dict(flatten(saved)).settings()
    new = cfg.settings()
    for name, (_, spec) in setting_names().items():
        if spec.resumable or name not in new:
            continue
        if old.get(name) != new.get(name):
            return "%s: the run has %s=%s, which cannot change on --resume (start a new run with --output)" % (
                label(name, spec, new.get(name)),
                name,
                json.dumps(old.get(name)),
            )
    return None


def check_resume(run, saved: dict, cfg: TrainConfig, dataset=None, step: int | None = None):
    """Refuse (one :class:`RunFolderError` line naming the run) a resume that
    would not continue the run as it was: another dataset, a changed setting
    that is not resumable, fewer iterations than the checkpoint's step, or a
    finished run given no more steps. Reads only."""
    run = Path(run)
    if dataset is not None:
        recorded = recorded_dataset(run, saved)
        if recorded is not None and not same_dataset(dataset, recorded):
            raise RunFolderError(
                "%s: the run was trained on %s, not %s (resume without DATASET, or train a new run with --output)"
                % (run, recorded, dataset)
            )
    conflict = resume_conflict(saved, cfg)
    if conflict:
        raise RunFolderError("%s: %s" % (run, conflict))
    if step is None:
        return
    if cfg.iterations < step:
        raise RunFolderError(
            "%s: --iterations %d: the run is at step %d already (give more iterations to continue it)"
            % (run, cfg.iterations, step)
        )
    if cfg.iterations == step and _finished_at(run) == step:
        raise RunFolderError(
            "%s: finished at step %d of %d; continue it with --iterations N (N > %d)"
            % (run, step, cfg.iterations, step)
        )


def _finished_at(run) -> int | None:
    """The step of the run's splat.ply and metrics.json, when both exist."""
    run = Path(run)
    if not (run / "splat.ply").is_file():
        return None
    try:
        step = json.loads((run / "metrics.json").read_text()).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


# -- derived files: where they came from ------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_source(run, ckpt) -> dict:
    """What ``spirula eval`` and ``spirula render`` record of the checkpoint
    they read: its path in the run, step and size."""
    ckpt = Path(ckpt)
    try:
        rel = str(ckpt.resolve().relative_to(Path(run).resolve()))
    except ValueError:
        rel = str(ckpt)
    return dict(checkpoint=rel, step=checkpoint_step(ckpt), size=ckpt.stat().st_size)


def splat_source(run, ply=None) -> dict:
    """What ``spirula mesh`` records of the run's splat.ply it read: its
    step (metrics.json's), size, mtime and sha256."""
    run = Path(run)
    ply = Path(ply) if ply is not None else run / "splat.ply"
    st = ply.stat()
    return dict(splat=ply.name, step=_finished_at(run), size=st.st_size, mtime_ns=st.st_mtime_ns, sha256=_sha256(ply))


def write_source(path, source: dict):
    Path(path).write_text(json.dumps(dict(source=source), indent=1))


def _stale(run: Path, source: dict) -> tuple | None:
    """(what it came from, what the run has now) when ``source`` no longer
    matches the run, else None."""
    if "checkpoint" in source:
        now = latest_checkpoint(run)
        was = "checkpoint step %s" % source.get("step")
        if now is None:
            return was, "no checkpoint"
        if str(now.relative_to(run)) == source["checkpoint"] and now.stat().st_size == source.get("size"):
            return None
        return was, "checkpoint step %s" % checkpoint_step(now)
    if "splat" in source:
        ply = run / source["splat"]
        was = "splat.ply of step %s" % source.get("step") if source.get("step") is not None else "another splat.ply"
        if not ply.is_file():
            return was, "no splat.ply"
        st = ply.stat()
        if st.st_size == source.get("size") and st.st_mtime_ns == source.get("mtime_ns"):
            return None
        if st.st_size == source.get("size") and source.get("sha256") == _sha256(ply):
            return None
        step = _finished_at(run)
        return was, "splat.ply of step %s" % step if step is not None else "another splat.ply"
    return None


def _derived(run: Path):
    """(path, source dict, the command that remakes it) of every derived file of a run that records one."""
    out = []
    metrics = run / "metrics-eval.json"
    renders = run / "renders" / RENDERS_SOURCE
    for path, shown, redo in ((metrics, metrics, "spirula eval"), (renders, run / "renders", "spirula render")):
        source = _read_source(path)
        if source is not None:
            out.append((shown, source, redo))
    for side in sorted(run.glob("*" + SOURCE_SUFFIX)):
        made = side.with_name(side.name[: -len(SOURCE_SUFFIX)])
        source = _read_source(side)
        if source is not None and made.exists():
            out.append((made, source, "spirula mesh"))
    return out


def _read_source(path: Path) -> dict | None:
    try:
        source = json.loads(path.read_text()).get("source")
    except (OSError, ValueError, AttributeError):
        return None
    return source if isinstance(source, dict) else None


def stale_note(run, path, source: dict, redo: str) -> str | None:
    """One line when ``path`` (made from ``source``) no longer matches the run."""
    run = Path(run)
    stale = _stale(run, source)
    if stale is None:
        return None
    return "spirula: note: %s is stale: made from %s, the run now has %s (run `%s %s` again)" % (
        path,
        stale[0],
        stale[1],
        redo,
        run,
    )


def stale_notes(run, only=None) -> list:
    """A line for each derived file of run folder ``run`` that no longer
    matches it (``only``: that file alone, e.g. the mesh being viewed)."""
    run = Path(run)
    if not run.is_dir():
        return []
    notes = []
    for path, source, redo in _derived(run):
        if only is not None and _norm(path) != _norm(only):
            continue
        note = stale_note(run, path, source, redo)
        if note:
            notes.append(note)
    return notes


def splat_behind_note(run) -> str | None:
    """One line when a run's splat.ply is older than its latest checkpoint (a
    run stopped, or still training): what ``spirula mesh RUN`` reads."""
    run = Path(run)
    ckpt = latest_checkpoint(run)
    done = _finished_at(run)
    step = checkpoint_step(ckpt) if ckpt is not None else None
    if step is None or done is None or done >= step:
        return None
    return (
        "spirula: note: %s/splat.ply is of step %d, the run's latest checkpoint of step %d"
        " (a run stopped or still training; `spirula train --resume %s` finishes it)" % (run, done, step, run)
    )


# -- spirula train: the checks before anything is written, the claim ---------------------


def resume_step(resume) -> int:
    """The step of the checkpoint ``--resume PATH`` continues from (one line when there is none)."""
    path = Path(resume)
    ckpt = path if path.is_file() else latest_checkpoint(run_folder_of(path))
    step = checkpoint_step(ckpt) if ckpt is not None else None
    if step is None:
        raise RunFolderError("%s: no checkpoint (ckpt/step-*.npz) found" % path)
    return step


def check_train_target(output, resume, overwrite: bool, saved: dict | None, cfg: TrainConfig, dataset=None):
    """Before ``spirula train`` loads anything: where it will write is
    free for it (:func:`check_new_output`, :func:`check_not_locked`) and a
    resume continues its run as it was (:func:`check_resume`; ``dataset``:
    the DATASET argument, None when not given). Reads only."""
    if resume is None:
        if output is not None:
            check_new_output(output, overwrite, dataset)
        return
    folder = run_folder_of(resume)
    step = resume_step(resume)
    check_resume(folder, saved or {}, cfg, dataset, step)
    if output is None or same_dataset(output, folder):
        if overwrite:
            raise RunFolderError("%s: --resume continues this run and --overwrite would delete it: give one" % folder)
        check_not_locked(folder)
    else:
        check_new_output(output, overwrite, dataset)


def claim(output, resume=None, overwrite: bool = False, dataset=None, log=print) -> RunLock:
    """Lock ``output`` for this run (:class:`RunLock`; the caller releases it),
    check again under the lock what :func:`check_train_target` checked, and
    empty the folder for ``--overwrite`` (:func:`clear_run_folder`)."""
    output = Path(output)
    lock = RunLock(output, log).acquire()
    try:
        if resume is None or not same_dataset(output, run_folder_of(resume)):
            check_new_output(output, overwrite, dataset)
            clear_run_folder(output, log)
    except BaseException:
        lock.release()
        raise
    return lock
