"""Whole training steps with density control run clean under the Khronos
validation layer with synchronization validation, profiler off and on: the
recorded step (projection to fpbo), its re-recording after intersection
overflow, MCMC relocation and growth, ADC clone/split/prune and opacity
reset (workload: tests/workloads.py train())."""

import pytest
from conftest import run_validated, validation_messages


@pytest.mark.parametrize("profile", ["0", "1"], ids=["profiler-off", "profiler-on"])
@pytest.mark.parametrize("strategy", ["mcmc", "adc"])
def test_training_with_densification_is_clean_under_sync_validation(validation_layer_available, strategy, profile):
    proc = run_validated("import tests.workloads as w; w.train(%r)" % strategy, SS_PROFILE=profile)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_messages(proc) == []
    kernels = ["fpbo", "loss_fwd", "loss_bwd", "rasterize_bwd"]
    kernels += (
        ["densify_mcmc_weights", "densify_mcmc_sample", "densify_mcmc_relocate", "densify_mcmc_copy"]
        if strategy == "mcmc"
        else ["densify_adc_classify", "densify_adc_write", "densify_adc_reset"]
    )
    if profile == "1":
        report = proc.stderr.split("[spirula-profile] ---- GPU time by kernel ----")[1]
        report = report.split("[spirula-profile] ----")[0]
        rows = {line.split()[0] for line in report.splitlines() if line.strip()}
        assert set(kernels) <= rows, sorted(rows)
    else:
        assert "[spirula-profile]" not in proc.stderr


def test_validation_reports_a_hazard_in_a_training_step_without_barriers(validation_layer_available):
    """The canary: the same workload with its barriers removed is reported, so
    a clean run above means something."""
    script = (
        "from spirula.runtime import sequence as s\n"
        "plan = s.Recorder.plan\n"
        "s.Recorder.plan = lambda self: [op for op in plan(self) if op != 'barrier']\n"
        "import tests.workloads as w\n"
        "try:\n    w.train('mcmc')\nexcept AssertionError:\n    pass\n"
    )
    proc = run_validated(script)
    assert any("SYNC-HAZARD" in m for m in validation_messages(proc)), proc.stdout[-2000:]


def test_training_without_buffer_robustness_is_clean_under_validation(validation_layer_available):
    """SPIRULA_NO_BUFFER_ROBUSTNESS=1 asks for VK_EXT_pipeline_robustness and kp's
    patch compiles every pipeline with buffer robustness disabled: the training
    steps still run clean and finite (the device must list the extension; Debian
    12's lavapipe does not)."""
    from spirula.runtime import vkinfo

    devices = vkinfo.list_devices()
    if vkinfo.PIPELINE_ROBUSTNESS_EXTENSION not in devices[vkinfo.default_index(devices)].extensions:
        pytest.skip("the device has no VK_EXT_pipeline_robustness")
    script = (
        "import tests.workloads as w\n"
        "w.train('mcmc')\n"
        "from spirula.backends import open_device\n"
        "print('buffer_robustness', open_device('vulkan').buffer_robustness)\n"
    )
    proc = run_validated(script, SPIRULA_NO_BUFFER_ROBUSTNESS="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_messages(proc) == []
    assert "buffer_robustness False" in proc.stdout
