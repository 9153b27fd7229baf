"""The validation tests (test_validation.py, test_validation_train.py) never
pass vacuously: they run only where the Khronos validation layer is listed by
the loader and reports a deliberate error (conftest.validation_layer_problem),
and skip with the reason where it is absent. Absence is simulated by pointing
VK_LAYER_PATH at an empty folder (the loader then finds no explicit layer)."""

import os
import re
import subprocess
import sys

from conftest import ROOT, validation_layer_problem

VALIDATION_TESTS = ["tests/test_validation.py", "tests/test_validation_train.py"]


def test_an_absent_layer_is_seen(tmp_path):
    kind, reason = validation_layer_problem(VK_LAYER_PATH=str(tmp_path))
    assert kind == "skip"
    assert "VK_LAYER_KHRONOS_validation" in reason and "not installed" in reason


def _pytest_without_the_layer(tmp_path, **env):
    e = dict(
        os.environ, VK_LAYER_PATH=str(tmp_path), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    e.pop("SPIRULA_REQUIRE_VALIDATION_LAYER", None)
    e.update(env)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *VALIDATION_TESTS]
    return subprocess.run(cmd, cwd=str(ROOT), env=e, capture_output=True, text=True, timeout=600)


def test_validation_tests_skip_with_the_reason_not_pass_without_the_layer(tmp_path):
    r = _pytest_without_the_layer(tmp_path)
    summary = r.stdout.strip().splitlines()[-1]
    assert r.returncode == 0, r.stdout[-3000:]
    assert re.search(r"\b\d+ skipped\b", summary) and "passed" not in summary, summary
    assert "not installed" in r.stdout


def test_ci_can_require_the_layer(tmp_path):
    """SPIRULA_REQUIRE_VALIDATION_LAYER=1 (CI): absence fails instead."""
    r = _pytest_without_the_layer(tmp_path, SPIRULA_REQUIRE_VALIDATION_LAYER="1")
    summary = r.stdout.strip().splitlines()[-1]
    assert r.returncode != 0 and "passed" not in summary and "not installed" in r.stdout, summary
