"""A CI-sized guard against training that fits the training views harder and the test
views worse (issue #46: at 30,000 steps the default MCMC run lost 1 dB of test PSNR
while its training PSNR climbed past 40 dB).

The object-centric demo world (benchmarks/make_scene.py --object) at 16x16 from 16
views, every other one held out: 8 training views (2,048 pixels) for 3,357 seed
points (density 1) and a budget of 100,000 splats, so the model can fit the training
views far better than the test views allow. 1,500 MCMC steps with the defaults
(float32 storage, SH degree 3) on lavapipe, one seed; 5,203 splats at the end. What
is held:

- the test PSNR stays above TEST_FLOOR, and
- the gap between the training views' PSNR and the test views' stays below GAP_CEILING.

A step on lavapipe costs about the splats it holds, hardly the pixels: the guard ran
the 32x32 scene with 13,391 seed points (density 4) before, 379 s on 2 cores; this one
keeps its 1.6 seed points a training pixel at under a third of the cost (1,500 steps
in 109-122 s, the test 117 s). The 32x32 scene with 3,357 seed points overfits about
as hard (gap 6.06 dB, seed 0) but barely needs the regularizers: without them it lost
0.14 dB, which no bound of 0.3 dB would catch.

The bounds come from the float32 path's own runs on lavapipe, seeds 0-2 (below):
each is the worst seed's figure moved by three times the seeds' standard deviation,
and at least 0.3 dB (the seeds' spread is 0.09-0.10 dB), so a run of the same code
fails with a chance far under 1%. Its reach, measured: training without MCMC's
opacity and scale regularizers (--set opacity_reg=0 --set scale_reg=0) ends at
22.14 dB test PSNR, 0.75 dB under the floor (its gap, 6.40 dB, stays under the
ceiling, 6.43 dB: it fits the training views worse too, 28.55 dB against 29.38).
"""

import statistics
from pathlib import Path

import pytest
from conftest import load_benchmark

# float32 defaults on lavapipe, 1,500 steps, 5,203 splats at the end: (test PSNR, PSNR of the
# training views) for seeds 0, 1, 2 (2026-12-07): test 23.27 +- 0.10 dB, gap 6.04 +- 0.09 dB
MEASURED = {0: (23.244, 29.378), 1: (23.189, 29.215), 2: (23.375, 29.324)}
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
        width=16,
        height=16,
        views=16,
        test_every=2,
        density=1,
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
