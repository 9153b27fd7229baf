"""A CI-sized guard against training that fits the training views harder and the test
views worse (issue #46: at 30,000 steps the default MCMC run lost 1 dB of test PSNR
while its training PSNR climbed past 40 dB).

The object-centric demo world (benchmarks/make_scene.py --object) at 32x32 from 16
views, every other one held out: 8 training views (8,192 pixels) for 13,391 seed
points and a budget of 100,000 splats, so the model can fit the training views far
better than the test views allow. 1,500 MCMC steps with the defaults (float32
storage, SH degree 3) on lavapipe, one seed. What is held:

- the test PSNR stays above TEST_FLOOR, and
- the gap between the training views' PSNR and the test views' stays below GAP_CEILING.

The bounds come from the float32 path's own runs on lavapipe, seeds 0-2 (below):
each is the worst seed's figure moved by three times the seeds' standard deviation,
and at least 0.3 dB (the seeds' spread is 0.06-0.07 dB), so a run of the same code
fails with a chance far under 1%. Its reach, measured: training without MCMC's
opacity and scale regularizers (--set opacity_reg=0 --set scale_reg=0) ends at
23.68 dB test PSNR, 0.37 dB under the floor (its gap, 7.66 dB, stays under the
ceiling: it fits the training views worse too).
"""

import statistics
from pathlib import Path

import pytest
from conftest import load_benchmark

# float32 defaults on lavapipe, 1,500 steps, 20,771 splats at the end: (test PSNR, PSNR of the
# training views) for seeds 0, 1, 2 (2026-12-07): test 24.41 +- 0.06 dB, gap 7.50 +- 0.07 dB
MEASURED = {0: (24.344, 31.928), 1: (24.432, 31.873), 2: (24.459, 31.940)}
STEPS = 1500


def _bound(values, worst, sign):
    spread = max(3 * statistics.stdev(values), 0.3)
    return worst + sign * spread


@pytest.mark.slow
def test_a_long_small_run_does_not_overfit_harder_than_measured(device, tmp_path):
    from spirula.data import load_dataset
    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run

    load_benchmark("make_scene").write_scene(
        tmp_path / "scene",
        width=32,
        height=32,
        views=16,
        test_every=2,
        density=4,
        supersample=3,
        format="png",
        object_world=True,
        log=None,
    )
    scene = load_dataset(tmp_path / "scene", background="black")
    cfg = TrainConfig.from_settings(iterations=STEPS, cap_max=100_000, save_every=0, background="black")
    assert not cfg.compact  # the float32 path the bounds were measured on
    m = train_run(scene, cfg, device, Path(tmp_path / "run"), log=lambda *a: None)
    tests = [t for t, _ in MEASURED.values()]
    gaps = [f - t for t, f in MEASURED.values()]
    test_floor = _bound(tests, min(tests), -1)
    gap_ceiling = _bound(gaps, max(gaps), +1)
    gap = m["train_psnr"] - m["psnr"]
    assert m["psnr"] >= test_floor, "test PSNR %.3f under %.3f (measured %s)" % (m["psnr"], test_floor, MEASURED)
    assert gap <= gap_ceiling, "train-test gap %.3f over %.3f (measured %s)" % (gap, gap_ceiling, MEASURED)
