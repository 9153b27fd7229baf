"""Whole training steps with density control run clean under the Khronos
validation layer with synchronization validation, profiler off and on: the
recorded step (projection to fpbo), its re-recording after intersection
overflow, MCMC relocation and growth, ADC clone/split/prune and opacity
reset (workload: tests/workloads.py train()); and in bounds under its
GPU-assisted buffer checks."""

import pytest
from conftest import LAYER_SETTINGS, run_validated, validation_messages


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


def test_streamed_training_is_clean_under_sync_validation(validation_layer_available):
    """Issue #43's streamed images: each step's view written into its host-visible
    staging slot while the step before runs, and copied to the GPU slot the step's
    loss reads at the start of its sequence, clean under synchronization validation."""
    proc = run_validated("import tests.workloads as w; w.train('mcmc', stream_images=True)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_messages(proc) == []


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


@pytest.mark.parametrize("variant", ["robustness-per-kernel", "shuffle-sums"])
def test_training_with_nvidias_variants_is_clean_under_sync_validation(validation_layer_available, variant):
    """NVIDIA's defaults, on any device that offers what they need (Debian
    12's lavapipe lists no pipeline robustness): SPIRULA_NO_BUFFER_ROBUSTNESS=kernels
    (kp's patch compiles rasterize_bwd with VK_EXT_pipeline_robustness's
    buffer robustness disabled) and the subgroup sums as subgroupShuffleXor
    butterflies leave the training steps clean and finite."""
    from spirula.backends.vulkan import vkinfo
    from spirula.backends.vulkan.device import shuffle_sums_defines

    devices = vkinfo.list_devices()
    info = devices[vkinfo.default_index(devices)]
    if variant == "shuffle-sums":
        if not shuffle_sums_defines(info):
            pytest.skip("%s has no subgroup shuffles in one subgroup size" % info.name)
        proc = run_validated("import tests.workloads as w; w.train('mcmc', shuffle_sums=True)")
    else:
        if vkinfo.PIPELINE_ROBUSTNESS_EXTENSION not in info.extensions:
            pytest.skip("%s offers no pipeline robustness" % info.name)
        script = (
            "import tests.workloads as w\n"
            "w.train('mcmc')\n"
            "from spirula.backends import open_device\n"
            "print('buffer_robustness', open_device('vulkan').buffer_robustness)\n"
        )
        proc = run_validated(script, SPIRULA_NO_BUFFER_ROBUSTNESS="kernels")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_messages(proc) == []
    if variant != "shuffle-sums":
        assert "buffer_robustness kernels" in proc.stdout


@pytest.mark.slow
def test_training_kernels_stay_in_bounds_under_gpu_assisted_validation(validation_layer_available):
    """GPU-assisted validation (tests/vulkan/gpuav: gpuav_buffer_oob) compiles
    bounds checks into every kernel and reports any access past a buffer's
    range. A deliberate out-of-range write is reported (the checks are on),
    and MCMC training steps with relocation, growth and the overflowed first
    step report nothing: every kernel of the default training path reads and
    writes only inside its buffers, where robustness would otherwise mask a
    stray access (rasterize_bwd goes without the driver's masking on NVIDIA:
    SPIRULA_NO_BUFFER_ROBUSTNESS=kernels)."""
    settings = dict(VK_LAYER_SETTINGS_PATH=str(LAYER_SETTINGS / "gpuav"))
    canary = run_validated("import tests.workloads as w; w.out_of_bounds()", **settings)
    assert any("out of bounds" in m for m in validation_messages(canary)), canary.stdout[-2000:]
    proc = run_validated("import tests.workloads as w; w.train('mcmc')", timeout=900, **settings)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_messages(proc) == []
