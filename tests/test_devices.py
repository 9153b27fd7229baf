"""Device listing and selection, and the one-line errors when Vulkan is missing."""

import dataclasses
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from spirula.backends.vulkan import resolve_index, vkinfo
from spirula.errors import NoVulkanError


def _cli(*args, **env):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    e.update(env)
    return subprocess.run(
        [sys.executable, "-m", "spirula", *args], env=e, capture_output=True, text=True, cwd=str(ROOT), timeout=120
    )


def test_devices_lists_name_driver_subgroup_memory_timestamps():
    proc = _cli("devices")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["#", "name", "type"]
    for word in ("driver", "subgroup", "memory", "timestamps"):
        assert word in lines[0]
    dev = vkinfo.list_devices()[0]
    assert dev.name in proc.stdout and dev.driver in proc.stdout
    assert sum(ln.startswith("*") for ln in lines[1:]) == 1


def test_device_info_is_plausible():
    for d in vkinfo.list_devices():
        assert d.subgroup_size in (1, 4, 8, 16, 32, 64, 128)
        assert d.timestamp_period_ns > 0 and d.max_storage_buffer_range >= 1 << 27
        assert d.max_workgroup_count[0] >= 65535 and d.device_type in (
            "discrete",
            "integrated",
            "virtual",
            "cpu",
            "other",
        )


def _fake(index, kind):
    return dataclasses.replace(vkinfo.list_devices()[0], index=index, device_type=kind)


def test_default_prefers_a_discrete_gpu_over_lavapipe():
    devs = (_fake(0, "cpu"), _fake(1, "integrated"), _fake(2, "discrete"))
    assert vkinfo.default_index(devs) == 2
    assert vkinfo.default_index(devs[:2]) == 1
    assert vkinfo.default_index(devs[:1]) == 0


def test_device_index_from_argument_then_environment(monkeypatch):
    devs = (_fake(0, "cpu"), _fake(1, "discrete"))
    monkeypatch.setenv("SPIRULA_DEVICE", "0")
    assert resolve_index(None, devs) == 0
    assert resolve_index(1, devs) == 1
    monkeypatch.delenv("SPIRULA_DEVICE")
    assert resolve_index(None, devs) == 1


def test_bad_device_index_is_one_clear_line():
    proc = _cli("--device", "7", "selftest", "--size", "16")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "device" in proc.stderr and "7" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_vulkan_driver_is_one_clear_line_with_exit_code_2():
    proc = _cli("devices", VK_DRIVER_FILES="/nonexistent/icd.json", VK_ICD_FILENAMES="/nonexistent/icd.json")
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.startswith("spirula: error: the Vulkan loader found no usable driver") and "\n" not in err
    # the driver's package on each common distribution
    for words in ("apt install mesa-vulkan-drivers", "dnf install mesa-vulkan-drivers", "pacman -S vulkan-swrast"):
        assert words in err, words


def _no_loader(monkeypatch):
    import ctypes

    def no_lib(name, *a, **k):
        raise OSError("%s: cannot open shared object file" % name)

    vkinfo.list_devices.cache_clear()
    monkeypatch.setattr(ctypes, "CDLL", no_lib)


NO_LOADER_PACKAGES = (
    "apt install libvulkan1 mesa-vulkan-drivers",
    "dnf install vulkan-loader mesa-vulkan-drivers",
    "pacman -S vulkan-icd-loader vulkan-swrast",
)


def test_no_vulkan_loader_is_a_clear_error(monkeypatch):
    _no_loader(monkeypatch)
    try:
        with pytest.raises(NoVulkanError, match="libvulkan.so.1.*apt install libvulkan1") as err:
            vkinfo.list_devices()
        assert all(words in str(err.value) for words in NO_LOADER_PACKAGES)
    finally:
        monkeypatch.undo()
        vkinfo.list_devices.cache_clear()


def test_spirula_devices_without_a_loader_is_one_line_and_exit_2(monkeypatch, capsys):
    from spirula.cli.main import main

    _no_loader(monkeypatch)
    try:
        with pytest.raises(SystemExit) as exc:
            main(["devices"])
    finally:
        monkeypatch.undo()
        vkinfo.list_devices.cache_clear()
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "\n" not in err and err.startswith("spirula: error: no Vulkan loader")


def test_kp_without_the_loader_is_the_same_line(monkeypatch):
    """The wheel's kp links libvulkan.so.1: importing it where the loader is missing fails
    with the dynamic linker's message, which VulkanDevice turns into the install line."""
    import builtins

    from spirula.backends.vulkan import device

    real_import = builtins.__import__

    def fake_import(name, *a, **k):
        if name == "kp":
            raise ImportError("libvulkan.so.1: cannot open shared object file: No such file or directory")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(NoVulkanError, match="no Vulkan loader") as err:
        device._import_kp()
    assert all(words in str(err.value) for words in NO_LOADER_PACKAGES) and "\n" not in str(err.value)


def test_selftest_passes_on_this_device():
    proc = _cli("selftest", "--size", "100000")
    assert proc.returncode == 0, proc.stderr
    assert "selftest passed" in proc.stdout
