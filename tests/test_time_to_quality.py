"""benchmarks/time_to_quality.py (issue #44 item 1): where a test curve first reaches the
target, and a run of it on lavapipe with a given target (no gsplat here)."""

import json

import pytest
from conftest import load_benchmark
from train_cases import write_tiny_colmap

ttq = load_benchmark("time_to_quality")


def test_time_to_target_interpolates_between_evaluations():
    curve = [(10.0, 20.0), (20.0, 24.0), (30.0, 23.0), (40.0, 26.0)]
    assert ttq.time_to_target(curve, 22.0) == pytest.approx(15.0)
    assert ttq.time_to_target(curve, 24.0) == 20.0
    assert ttq.time_to_target(curve, 25.0) == pytest.approx(30.0 + 10.0 * 2.0 / 3.0)  # after the dip
    assert ttq.time_to_target(curve, 19.0) == 10.0  # already there at the first evaluation
    assert ttq.time_to_target(curve, 27.0) is None


def test_a_run_reports_its_curve_and_time_to_the_target(tmp_path, capsys):
    data = write_tiny_colmap(tmp_path / "data")
    out = tmp_path / "ttq.json"
    argv = [str(data), "--iterations", "20", "--eval-every", "10", "--cap-max", "2000", "--target", "1"]
    ttq.main(argv + ["--set", "sh_degree=1", "--workdir", str(tmp_path / "work"), "--json", str(out)])
    row = json.loads(out.read_text())[str(data.resolve())]["vulkan"]
    curve = row["curves"][0]
    assert len(curve) == 2 and 0 < curve[0][0] < curve[1][0]
    assert row["time_to_target"] == [curve[0][0]]  # 1 dB: reached at the first evaluation
    assert "spirula vulkan" in capsys.readouterr().out
