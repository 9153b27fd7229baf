"""Shared fixtures: the device, test kernels, and runs under the validation layer.

Every buffer the tests allocate starts as NaN (SPIRULA_POISON_BUFFERS=1), so a
kernel that relies on zeroed memory fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("SPIRULA_POISON_BUFFERS", "1")
os.environ.pop("SS_PROFILE", None)

ROOT = Path(__file__).resolve().parent.parent
TEST_SHADERS = Path(__file__).resolve().parent / "shaders"
LAYER_SETTINGS = Path(__file__).resolve().parent / "vulkan"


@pytest.fixture(scope="session")
def device():
    from spirula.backends import open_device, set_device

    dev = open_device("vulkan")
    set_device(dev)
    return dev


@pytest.fixture(scope="session")
def test_kernels():
    """Registry of the test-only kernels in tests/shaders (saxpy, increment, spin)."""
    from spirula.runtime.kernels import KernelRegistry, shader_dir

    return KernelRegistry(source_dir=TEST_SHADERS, include_dirs=[shader_dir() / "include"])


def validation_env(**extra) -> dict:
    """Environment that loads the Khronos validation layer with synchronization
    validation, logging every message to stdout (tests/vulkan/vk_layer_settings.txt)."""
    env = dict(os.environ)
    env.update(
        VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation",
        VK_LAYER_SETTINGS_PATH=str(LAYER_SETTINGS),
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    env.pop("SS_PROFILE", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_validated(script: str, timeout: int = 600, **env) -> subprocess.CompletedProcess:
    """Run a Python script in a fresh process under the validation layer."""
    return subprocess.run(
        [sys.executable, "-c", script],
        env=validation_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
    )


def validation_messages(proc: subprocess.CompletedProcess) -> list:
    """The validation layer's message lines in a run's output."""
    keys = ("Validation Error", "Validation Warning", "VUID-", "SYNC-HAZARD", "UNASSIGNED-")
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if any(k in ln for k in keys)]


@pytest.fixture(scope="session")
def validation_layer_available():
    probe = run_validated("import spirula.runtime.vkinfo as v; v.list_devices()")
    if probe.returncode != 0 and "VK_LAYER_KHRONOS_validation" in probe.stderr:
        pytest.fail("the Khronos validation layer is not installed (vulkan-validationlayers)")
    return True
