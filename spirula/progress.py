"""Progress of long work on stderr: a tqdm bar on a terminal, plain lines
otherwise (CI, logs, pipes), where a bar's carriage returns would pile up.

- :class:`TrainProgress`: training steps with ETA, steps/s, splats, loss and
  PSNR. It only formats what each step already read back (train_step's
  loss and MSE): it adds no GPU work and no synchronization.
- :func:`track`: any loop over many items (test views, renders, images to
  undistort or downscale, kernels to compile).
- :class:`Bar`: work that is not a loop over items, updated as it goes
  (COLMAP's stages as its log reports them, texels coloured in batches, Ray
  tasks finishing).
- :func:`write`: a line on stdout or stderr that does not break a bar.
- :func:`capture_output`: what libraries print (COLMAP's glog, Ray) into a
  log file instead of between Spirula's own lines; on stderr too with
  ``--verbose``. :func:`strip_ansi`: no terminal codes in files.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import re
import sys
import threading
import time

from tqdm import tqdm

# seconds between two plain lines of track() (none for a shorter loop)
TRACK_INTERVAL = 10.0


def is_terminal(stream) -> bool:
    """True if ``stream`` is an interactive terminal."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def write(msg: str, file=None):
    """``msg`` and a newline on ``file`` (default stdout), flushed, clearing
    any bar first and drawing it again after."""
    file = sys.stdout if file is None else file
    with tqdm.external_write_mode(file=file):
        file.write(msg + "\n")
        file.flush()


def train_psnr(mse: float) -> float:
    """PSNR (dB) of the step's rendered image from its MSE (colours in [0, 1])."""
    return -10 * math.log10(max(mse, 1e-12))


class TrainProgress:
    """Progress of ``total`` training steps, starting at ``start`` (a resumed
    run). On a terminal (``isatty``, default: ``stream.isatty()``) a tqdm
    bar, its figures refreshed a few times a second; otherwise one line
    every ``every`` steps and after the last::

        step  50/400 |    12.3 steps/s |    30,000 splats | loss 0.0812 | PSNR 21.37

    (steps/s since the line before).
    """

    def __init__(self, total: int, start: int = 0, every: int = 100, stream=None, isatty: bool | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.tty = is_terminal(self.stream) if isatty is None else isatty
        self.total, self.every = total, max(int(every), 1)
        self.last_step, self.last_t = start, time.perf_counter()
        self.test_psnr = None
        self.bar = None
        if self.tty:
            self.bar = tqdm(total=total, initial=start, desc="train", unit="step", file=self.stream, dynamic_ncols=True)
            self._postfix_due = 0.0

    def update(self, step: int, out: dict):
        """After ``step`` steps; ``out``: that step's train_step dict (loss,
        mse, n_splats)."""
        final = step >= self.total
        if self.bar is not None:
            # formatting every step would cost more than tqdm's own update
            now = time.perf_counter()
            if now >= self._postfix_due or final:
                self._postfix_due = now + self.bar.mininterval
                self.bar.set_postfix_str(self._postfix(out), refresh=False)
            self.bar.update(step - self.bar.n)
        elif step % self.every == 0 or final:
            now = time.perf_counter()
            rate = (step - self.last_step) / max(now - self.last_t, 1e-9)
            self.last_step, self.last_t = step, now
            self.stream.write(
                "step %*d/%d | %7.1f steps/s | %9s splats | loss %.4f | PSNR %.2f\n"
                % (
                    len(str(self.total)),
                    step,
                    self.total,
                    rate,
                    "{:,}".format(out["n_splats"]),
                    out["loss"],
                    train_psnr(out["mse"]),
                )
            )
            self.stream.flush()

    def _postfix(self, out: dict) -> str:
        s = "%s splats, loss %.4f, PSNR %.2f" % ("{:,}".format(out["n_splats"]), out["loss"], train_psnr(out["mse"]))
        if self.test_psnr is not None:
            s += ", test PSNR %.2f" % self.test_psnr
        return s

    def message(self, log, msg: str):
        """``log(msg)`` without breaking the bar."""
        if self.bar is None:
            log(msg)
        else:
            with tqdm.external_write_mode(file=self.stream):
                log(msg)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def track(items, desc: str, total: int | None = None, unit: str = "it", stream=None, isatty: bool | None = None):
    """Iterate over ``items`` showing progress: on a terminal a tqdm bar that
    goes away at the end; otherwise ``spirula: <desc> k/total`` every
    TRACK_INTERVAL seconds (nothing for a short loop)."""
    stream = sys.stderr if stream is None else stream
    if total is None and hasattr(items, "__len__"):
        total = len(items)
    if is_terminal(stream) if isatty is None else isatty:
        yield from tqdm(items, desc=desc, total=total, unit=unit, file=stream, leave=False, dynamic_ncols=True)
        return
    due = time.perf_counter() + TRACK_INTERVAL
    for k, item in enumerate(items):
        now = time.perf_counter()
        if now >= due:
            stream.write("spirula: %s %d/%s\n" % (desc, k, "?" if total is None else total))
            stream.flush()
            due = now + TRACK_INTERVAL
        yield item


class Bar:
    """Progress of ``total`` units of work, reported as it goes (:meth:`update_to`
    with the count done, or :meth:`update` with an increment), from any one
    thread. On a terminal a tqdm bar that goes away at :meth:`close`;
    otherwise ``spirula: <desc> k/total`` every TRACK_INTERVAL seconds (nothing
    for short work), as :func:`track` prints. ``total`` may be None (unknown)
    until an update gives it."""

    def __init__(self, total, desc: str, unit: str = "it", stream=None, isatty: bool | None = None):
        self.stream = sys.stderr if stream is None else stream
        self.total, self.desc, self.n = total, desc, 0
        tty = is_terminal(self.stream) if isatty is None else isatty
        self.bar = None
        if tty:
            self.bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, leave=False, dynamic_ncols=True)
        self.due = time.perf_counter() + TRACK_INTERVAL

    def update_to(self, n, total=None):
        """``n`` units done (of ``total``, when it is known only now); never goes back."""
        if total is not None and total != self.total:
            self.total = total
            if self.bar is not None:
                self.bar.total = total
                self.bar.refresh()
        if n <= self.n:
            return
        if self.bar is not None:
            self.bar.update(n - self.n)
        else:
            now = time.perf_counter()
            if now >= self.due:
                self.stream.write(
                    "spirula: %s %s/%s\n" % (self.desc, _count(n), "?" if self.total is None else _count(self.total))
                )
                self.stream.flush()
                self.due = now + TRACK_INTERVAL
        self.n = n

    def update(self, k=1):
        self.update_to(self.n + k)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _count(n) -> str:
    return f"{n:,}" if isinstance(n, int) else "%g" % n


# CSI sequences (colours, cursor moves: ESC [ ... final byte), OSC sequences
# (ESC ] ... BEL or ESC \) and the two-byte escapes
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (Ray's coloured prefixes,
    glog's colours): what a log file gets."""
    return _ANSI.sub("", text)


class Captured:
    """What :func:`capture_output` yields: ``stream``, this process's stderr
    as it was before the capture (the terminal, most often), for progress bars
    and lines meant for the user; ``on_line``, called (in the reader thread)
    with every captured line, ANSI codes removed, may be set at any time."""

    def __init__(self, stream, on_line=None):
        self.stream = stream
        self.on_line = on_line


@contextlib.contextmanager
def capture_output(path, echo: bool = False, on_line=None):
    """Everything this process writes to its stdout and stderr while the
    block runs, at the file-descriptor level (what C++ libraries print, such
    as COLMAP's glog lines; a Ray worker's or driver's own lines; Python's
    ``print`` too) goes, line by line, without ANSI codes, to the file
    ``path`` (appended), and to the real stderr as well when ``echo``
    (``--verbose``: codes kept there only if it is a terminal). Yields a
    :class:`Captured`, whose ``stream`` is the real stderr.

    A reader thread drains a pipe, so a library that prints a lot never
    blocks. A child process that inherited the pipe and outlives the block
    keeps the reader alive (a daemon thread) rather than seeing it closed."""
    log = open(path, "a", encoding="utf-8", errors="replace")  # the reader thread closes it
    for f in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            f.flush()
    _fflush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    real = os.fdopen(os.dup(saved_err), "w", buffering=1, encoding="utf-8", errors="replace")
    tty = is_terminal(real)
    captured = Captured(real, on_line)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)

    def emit(raw: str):
        line = strip_ansi(raw).rstrip()
        log.write(line + "\n")
        log.flush()
        if captured.on_line is not None:
            with contextlib.suppress(Exception):  # a parser's error must never stop the draining
                captured.on_line(line)
        if echo:
            with contextlib.suppress(Exception), tqdm.external_write_mode(file=real):
                real.write((raw.rstrip() if tty else line) + "\n")
                real.flush()

    def reader():
        pending = b""
        try:
            while True:
                chunk = os.read(read_fd, 1 << 16)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = re.split(rb"\r\n|\n|\r", pending)
                for ln in lines:
                    if ln.strip():
                        emit(ln.decode("utf-8", "replace"))
            if pending.strip():
                emit(pending.decode("utf-8", "replace"))
        finally:
            os.close(read_fd)
            log.close()

    thread = threading.Thread(target=reader, name="spirula-capture", daemon=True)
    thread.start()
    try:
        yield captured
    finally:
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
        _fflush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        thread.join(timeout=5.0)
        if not thread.is_alive():
            real.close()


def _fflush():
    """Flush C's stdio buffers (a library's printf), so they land on the side of the capture they were written on."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)
