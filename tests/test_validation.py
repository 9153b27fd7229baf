"""The Khronos validation layer, with synchronization validation, finds nothing
wrong in what the runtime records: transfers, dependent dispatches, copies,
fills, scans, growth, async runs, with the profiler off and on.

The canary proves the check can fail: the same workload with its barriers
removed is reported as a hazard.
"""

import pytest
from conftest import run_validated, validation_messages

WORKLOAD = "import tests.workloads as w; w.runtime(steps=2)"


@pytest.mark.parametrize("profile", ["0", "1"], ids=["profiler-off", "profiler-on"])
def test_runtime_sequences_are_clean_under_sync_validation(validation_layer_available, profile):
    proc = run_validated(WORKLOAD, SS_PROFILE=profile)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_messages(proc) == []
    if profile == "1":
        assert "[spirula-profile] ---- GPU time by kernel ----" in proc.stderr


def test_validation_canary_reports_a_missing_barrier(validation_layer_available):
    script = (
        "from spirula.runtime import sequence as s\n"
        "plan = s.Recorder.plan\n"
        "s.Recorder.plan = lambda self: [op for op in plan(self) if op != 'barrier']\n"
        "import tests.workloads as w\n"
        "try:\n    w.runtime(steps=1)\nexcept AssertionError:\n    pass\n"
    )
    proc = run_validated(script)
    assert any("SYNC-HAZARD" in m for m in validation_messages(proc)), proc.stdout[-2000:]


@pytest.mark.parametrize("profile", ["0", "1"], ids=["profiler-off", "profiler-on"])
@pytest.mark.parametrize("atomics", ["native", "cas"])
def test_render_forward_and_backward_are_clean_under_sync_validation(validation_layer_available, profile, atomics):
    proc = run_validated(
        "import tests.workloads as w; w.render()",
        SS_PROFILE=profile,
        SPIRULA_NO_FLOAT_ATOMICS="1" if atomics == "cas" else "0",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_messages(proc) == []


def test_network_layers_sam_and_lens_normals_are_clean_under_sync_validation(validation_layer_available):
    """Every nn_* kernel in one sequence (and dependent chains of them: attention, the SAM 2
    trunk and neck), and the normal consistency through a fisheye."""
    proc = run_validated("import tests.workloads as w; w.network_and_lenses()")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_messages(proc) == []
