"""Progress of long work on stderr: a tqdm bar on a terminal, plain lines
otherwise (CI, logs, pipes), where a bar's carriage returns would pile up.

- :class:`TrainProgress`: training steps with ETA, steps/s, splats, loss and
  PSNR. It only formats what each step already read back (train_step's
  loss and MSE): it adds no GPU work and no synchronization.
- :func:`track`: any loop over many items (test views, renders, images to
  undistort or downscale, kernels to compile).
- :func:`write`: a line on stdout or stderr that does not break a bar.
"""

from __future__ import annotations

import math
import sys
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
