"""The Vulkan backend's :class:`~spirula.runtime.sequence.Sequence`: a recorded Kompute sequence.

The plan a :class:`~spirula.runtime.sequence.Recorder` made (its dispatches,
with a barrier where one is needed) becomes ``kp.OpBarrier`` and
``kp.OpAlgoDispatch`` operations of one ``kp.Sequence``; with the profiler on,
a timestamp follows every operation.
"""

from __future__ import annotations

from spirula.runtime.sequence import Sequence


class RecordedSequence(Sequence):
    """A recorded Kompute sequence (the Vulkan backend's :class:`Sequence`)."""

    def __init__(self, device, plan: list, buffers: list, label: str = ""):
        super().__init__(device, plan, buffers, label)
        kp = device.kp
        prof = device.profiler
        timed = prof is not None and device.info.timestamps
        self._seq = device.mgr.sequence(0, len(plan) if timed else 0)
        self._timed = []  # (op index, _Dispatch)
        self._ops = []  # keep the kp ops alive with the sequence
        for i, op in enumerate(plan):
            if op == "barrier":
                # the host reads after the fence, so only the last barrier names it
                kop = kp.OpBarrier(i == len(plan) - 1)
            else:
                kop = kp.OpAlgoDispatch(op.algorithm, op.push)
                if timed:
                    self._timed.append((i, op))
            self._ops.append(kop)
            self._seq.record(kop)

    def _eval(self):
        self._seq.eval()

    def _eval_async(self):
        self._seq.eval_async()

    def _await(self):
        self._seq.eval_await()

    def _account(self, prof, wall_ns: int, waited: bool = True):
        if not self._timed:
            prof.device_wait(wall_ns, 0, 0, waited)
            return
        ts = self._seq.get_timestamps()
        period = self.device.info.timestamp_period_ns
        mask = self.device.timestamp_mask
        prof.sequence(wall_ns, ((op, int(((ts[i + 1] - ts[i]) & mask) * period)) for i, op in self._timed), waited)

    def gpu_span_ns(self):
        if not self._timed:
            return None
        ts = self._seq.get_timestamps()  # one at the start, then one after each operation
        return int(((ts[-1] - ts[0]) & self.device.timestamp_mask) * self.device.info.timestamp_period_ns)
