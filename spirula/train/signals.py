"""Stopping a training run by signal: Ctrl-C (SIGINT), SIGTERM (job
schedulers, ``docker stop``) and SIGHUP (a closed terminal) all end it the
same way: a checkpoint, one line saying how to resume, and exit status
128 + the signal's number (130, 143, 129), as shells report a process a
signal ended.

:class:`StopSignals` holds the three handlers for the duration of a run
(:func:`spirula.train.run.train_run`) and puts the previous ones back after:

- the first signal only asks the loop to stop; the loop asks
  (:meth:`StopSignals.check`) between steps, so the checkpoint holds a whole
  step, never half of one (a densification cut short, parameters updated but
  the step not counted);
- a second signal before the loop got there (a step that hangs) stops at
  once, with a checkpoint of the state as it is, like Ctrl-C always did;
- a signal while a checkpoint is being written (:meth:`StopSignals.saving`)
  waits for the write to finish; the write is atomic anyway (a temporary
  file renamed over the old one, spirula/train/run.py), so even a SIGKILL
  leaves the previous checkpoint whole.

Only the main thread can hold signal handlers: elsewhere (a run started from
a worker thread through the API) the handlers are left alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)  # no SIGHUP on Windows


class Stopped(KeyboardInterrupt):
    """Training stopped by signal ``signum`` (a KeyboardInterrupt, so code
    that handles Ctrl-C handles every stop signal). ``exit_status``: 128 +
    ``signum``. ``reported``: the run already printed where its checkpoint is."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = int(signum)
        self.reported = False

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "signal %d" % signum


class StopSignals:
    """``with StopSignals() as stop:`` SIGINT, SIGTERM and SIGHUP ask the run
    to stop (:attr:`requested`); :meth:`check` raises :class:`Stopped` once
    one came. The previous handlers are restored on exit."""

    def __init__(self):
        self.requested = None  # the first signal's number
        self._saving = 0
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        return False

    def _handle(self, signum, frame):
        if self.requested is None:
            self.requested = signum  # stop between steps
        elif not self._saving:
            raise Stopped(self.requested)  # a second one: stop now

    def check(self):
        """Raise :class:`Stopped` if a stop signal came."""
        if self.requested is not None:
            raise Stopped(self.requested)

    @contextlib.contextmanager
    def saving(self):
        """Signals in this block wait until it ends (a checkpoint being written)."""
        self._saving += 1
        try:
            yield
        finally:
            self._saving -= 1
