"""Shared fixtures: the device, test kernels, and runs under the validation layer.

Every buffer the tests allocate starts as NaN (SPIRULA_POISON_BUFFERS=1), so a
kernel that relies on zeroed memory fails.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("SPIRULA_POISON_BUFFERS", "1")
os.environ.pop("SS_PROFILE", None)
os.environ.pop("SPIRULA_PROFILE", None)  # its other name (spirula/settings.py)

ROOT = Path(__file__).resolve().parent.parent
TEST_SHADERS = Path(__file__).resolve().parent / "shaders"
LAYER_SETTINGS = Path(__file__).resolve().parent / "vulkan"


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / (name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def device():
    from spirula.backends import open_device, set_device

    dev = open_device("vulkan")
    set_device(dev)
    return dev


@pytest.fixture(scope="session")
def cuda():
    """The CUDA device; skipped where the CUDA backend cannot run here (no library, driver or GPU)."""
    from spirula.backends import open_device, unavailable_reason

    reason = unavailable_reason("cuda")
    if reason is not None:
        pytest.skip("CUDA backend unavailable: %s" % reason)
    return open_device("cuda")


@pytest.fixture(scope="session", params=["vulkan", pytest.param("cuda", marks=pytest.mark.cuda)])
def backend(request):
    """The device of each backend in turn: the kernels' tests against the numpy
    reference run on both (CUDA skipped where it cannot run)."""
    return request.getfixturevalue("device" if request.param == "vulkan" else "cuda")


@pytest.fixture(scope="session")
def backends(cuda, device):
    """(Vulkan device, CUDA device): the CUDA parity tests of the hand-written twins."""
    return device, cuda


@pytest.fixture(scope="session")
def forward_inputs(backends):
    """A scene rendered on Vulkan: the inputs rasterize_fwd/bwd read (parity_cases.py)."""
    from parity_cases import rendered_inputs

    return rendered_inputs(backends[0])


@pytest.fixture(scope="session")
def chunky_inputs(backends):
    """tests/test_rasterize_chunks.py's scene rendered on Vulkan (parity_cases.py)."""
    from parity_cases import chunky_rendered_inputs

    return chunky_rendered_inputs(backends[0])


@pytest.fixture(scope="session")
def test_kernels():
    """Registry of the test-only kernels in tests/shaders (saxpy, increment, spin)."""
    from spirula.backends.vulkan.kernels import KernelRegistry
    from spirula.contract.kernel import shader_dir

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


VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
CANARY_VUID = "VUID-VkApplicationInfo-sType-sType"
# Lists the layers the loader finds, then makes an instance whose
# VkApplicationInfo has the wrong sType: the validation layer, when loaded,
# reports CANARY_VUID (the loader and the driver ignore it).
_LAYER_PROBE = """
import ctypes as C
import spirula.backends.vulkan.vkinfo as v
print("\\n".join("layer: " + name for name in sorted(v.instance_layers())))
vk = v._load_loader()
app = v._AppInfo(sType=1, pApplicationName=b"canary", pEngineName=b"spirula", apiVersion=v._VK_API_1_1)
ci = v._InstanceInfo(sType=1, pApplicationInfo=C.pointer(app))
instance = C.c_void_p()
if vk.vkCreateInstance(C.byref(ci), None, C.byref(instance)) == 0:
    vk.vkDestroyInstance(instance, None)
"""


def validation_layer_problem(**env):
    """None where runs under :func:`validation_env` (with ``env``) are really
    validated; else ("skip", reason) where the layer is not installed, or
    ("fail", reason) where it is listed but reports nothing for a deliberate
    error (the loader would load it, yet a clean run would prove nothing)."""
    probe = run_validated(_LAYER_PROBE, timeout=120, **env)
    out = probe.stdout + probe.stderr
    if probe.returncode != 0:
        return "fail", "the validation-layer probe failed: %s" % out[-2000:]
    layers = {ln[len("layer: ") :] for ln in probe.stdout.splitlines() if ln.startswith("layer: ")}
    if VALIDATION_LAYER not in layers:
        return "skip", (
            "the Khronos validation layer (%s) is not installed: the Vulkan loader does not list it, so "
            "nothing would be validated (apt-get install vulkan-validationlayers)" % VALIDATION_LAYER
        )
    if CANARY_VUID not in out:
        return "fail", (
            "%s is listed but reported nothing for a deliberate error (%s): check tests/vulkan/vk_layer_settings.txt"
            % (VALIDATION_LAYER, CANARY_VUID)
        )
    return None


@pytest.fixture(scope="session")
def validation_layer_available():
    """Skips (with the reason) where the Khronos validation layer is absent, so
    that no validation test passes without anything checked; fails where it is
    present but silent. SPIRULA_REQUIRE_VALIDATION_LAYER=1 (CI) makes its
    absence a failure too."""
    problem = validation_layer_problem()
    if problem is not None:
        kind, reason = problem
        if kind == "skip" and os.environ.get("SPIRULA_REQUIRE_VALIDATION_LAYER", "") in ("", "0"):
            pytest.skip(reason)
        pytest.fail(reason)
    return True


CHROMIUM = "/usr/bin/chromium"  # Debian's, installed by scripts/install_system_deps.sh --browser-tests
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def browser():
    """Headless chromium (Debian's, through selenium, nothing downloaded) with WebGL on the
    CPU (swiftshader: viser's three.js canvas) and the page's console kept (goog:loggingPrefs)."""
    yield from _chromium()


# WebGPU on the CPU: Dawn on SwiftShader's Vulkan (a secure context: file:// or 127.0.0.1)
WEBGPU_ARGS = (
    "--enable-unsafe-webgpu",
    "--enable-features=Vulkan",
    "--use-vulkan=swiftshader",
    "--use-webgpu-adapter=swiftshader",
    "--disable-vulkan-surface",
)


@pytest.fixture
def webgpu_browser():
    """:func:`browser` with WebGPU too (three.js's WebGPURenderer)."""
    yield from _chromium(WEBGPU_ARGS)


def _chromium(extra=()):
    import shutil

    chromium = shutil.which("chromium") or CHROMIUM
    chromedriver = shutil.which("chromedriver") or CHROMEDRIVER
    if not (os.path.exists(chromium) and os.path.exists(chromedriver)):
        pytest.skip("needs Debian's chromium and chromium-driver (scripts/install_system_deps.sh --browser-tests)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e .[dev])")
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a browser or driver
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--window-size=640,480",
        "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader",
        *extra,
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=chromedriver))
    yield driver
    driver.quit()
