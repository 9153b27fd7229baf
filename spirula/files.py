"""Files Spirula writes: whole or not at all (:func:`atomic_write`: a
temporary file in the same folder, then a rename), with the mode a plain
``open()`` gives (0666 & ~umask), and free disk space checked before the
large ones (:func:`check_space`). Too little space, before or while writing,
is a one-line :class:`~spirula.errors.DiskFullError` (exit status 2) that
says how much is needed; the temporary file is removed."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
from pathlib import Path

from spirula.errors import DiskFullError

# headroom over a file's own size: the filesystem's blocks and metadata
MARGIN = 1 << 20
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_umask_lock = threading.Lock()


def fmt_size(n: float) -> str:
    """``12.3 MiB``: bytes in binary units."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return "%d B" % n if unit == "B" else "%.1f %s" % (n, unit)
        n /= 1024.0
    return "%d B" % n


def umask() -> int:
    """The process's umask (read without changing it for good)."""
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def existing_folder(path) -> Path:
    """``path`` itself if it is a folder, else its nearest existing parent."""
    path = Path(path).absolute()
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path) -> int | None:
    """Bytes a user may still write on the filesystem of ``path`` (or of its
    nearest existing parent); None where the system does not say."""
    try:
        return shutil.disk_usage(existing_folder(path)).free
    except OSError:
        return None


def shortfall(exc: DiskFullError) -> str:
    """How much more space ``exc`` needs, in words: ``1.2 MiB more``, else ``some space``."""
    if exc.needed is None or exc.free is None:
        return "some space"
    return "%s more" % fmt_size(max(exc.needed - exc.free, 1))


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed for lack of disk space (or quota)."""
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE


def check_space(path, needed: int, what: str | None = None):
    """A :class:`DiskFullError` unless the filesystem of ``path`` has
    ``needed`` bytes (plus :data:`MARGIN`) free; ``what``: what needs them,
    for the message (default: ``path``)."""
    free = free_bytes(path)
    if free is not None and free < needed + MARGIN:
        raise DiskFullError(
            "not enough disk space for %s: %s needed, %s free on %s"
            % (what or path, fmt_size(needed + MARGIN), fmt_size(free), existing_folder(path)),
            path=path,
            needed=needed + MARGIN,
            free=free,
        )


def atomic_write(path, data=None, *, write=None, size: int | None = None) -> Path:
    """Write ``path`` whole or not at all: ``data`` (bytes, str or a sequence
    of bytes chunks) or what ``write(f)`` writes to a binary file, through a
    temporary file beside it, fsynced and renamed over ``path``. The file gets
    mode 0666 & ~umask, as ``open()`` gives. ``size``: the bytes it will take,
    checked against the free space first (:func:`check_space`). On any
    failure the temporary file is removed and ``path`` is as it was; lack of
    space is a :class:`DiskFullError` naming ``path``."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode()
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    if size is None and chunks is not None:
        size = sum(len(c) for c in chunks)
    if size is not None:
        check_space(path.parent, size, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    except OSError as exc:
        raise _as_disk_full(exc, path, size) from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~umask())
            if write is not None:
                write(f)
            else:
                for c in chunks:
                    f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if no_space(exc):
            raise _as_disk_full(exc, path, size) from None
        raise
    _fsync_dir(path.parent)
    return path


def _as_disk_full(exc: OSError, path: Path, size: int | None):
    if not no_space(exc):
        return exc
    free = free_bytes(path.parent)
    need = " (%s needed, %s free)" % (fmt_size(size + MARGIN), fmt_size(free or 0)) if size is not None else ""
    return DiskFullError(
        "out of disk space writing %s%s" % (path, need),
        path=path,
        needed=None if size is None else size + MARGIN,
        free=free,
    )


def _fsync_dir(folder: Path):
    """Make a rename in ``folder`` durable (POSIX; elsewhere a no-op)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_output_folder(path, what: str = "--output"):
    """A :class:`~spirula.errors.UsageError` unless ``path`` is a folder, or
    can be made one, that this process can write in; creates nothing."""
    from spirula.errors import UsageError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError("%s %s: is a file, expected a folder" % (what, path))
    parent = path.absolute()
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError("%s %s: %s is a file, not a folder" % (what, path, parent))
    if not os.access(parent, os.W_OK | os.X_OK) or _read_only(parent):
        raise UsageError("%s %s: cannot write in %s (permission denied or read-only)" % (what, path, parent))
    return path


def _read_only(folder: Path) -> bool:
    """Whether ``folder``'s filesystem is mounted read-only (root passes os.access there)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False
