"""The CUDA backend library builds and exports every ported kernel (no GPU needed).

Skipped only where nvcc is absent. A kernel is ported when
native_cuda/<name>.cu exists beside shaders/<name>.comp; PORTED lists the
ones that must stay ported, so losing one fails here.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

PORTED = ("copy", "fill", "prefix_sum", "radix_sort_count", "radix_sort_scatter", "projection_fwd",
          "intersect_tile_count", "intersect_tile_write", "tile_ranges", "rasterize_fwd", "rasterize_bwd",
          "projection_bwd", "loss_fwd", "loss_bwd", "fpbo", "densify_mcmc_weights", "densify_mcmc_sample",
          "densify_mcmc_relocate", "densify_mcmc_copy", "densify_adc_classify", "densify_adc_write",
          "densify_adc_reset")
NATIVE = ROOT / "native_cuda"
LIB = ROOT / "build" / "libspirula_cuda.so"


def _nvcc():
    return os.environ.get("NVCC") or shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)


@pytest.fixture(scope="module")
def built_library():
    if _nvcc() is None:
        pytest.skip("nvcc not found: the CUDA backend is not built on this machine")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "build_cuda.sh")], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    log = ROOT / "build" / "cuda_build.log"
    assert LIB.is_file(), "%s\n%s" % (proc.stdout, log.read_text() if log.is_file() else "")
    return LIB


def _exported(lib: Path) -> set:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not found")
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_every_ported_kernel_has_its_shader_and_no_cu_file_drifts_from_its_name():
    ported = {p.stem for p in NATIVE.glob("*.cu")} - {"runtime"}
    shaders = {p.stem for p in (ROOT / "shaders").glob("*.comp")}
    assert ported - shaders == set(), "native_cuda/*.cu without a shaders/<name>.comp twin"
    assert set(PORTED) <= ported, "ports removed: %s" % sorted(set(PORTED) - ported)
    assert shaders - set(PORTED) == set(), "shaders without a CUDA port: %s" % sorted(shaders - set(PORTED))


def test_library_exports_every_ported_kernel_and_the_runtime_helpers(built_library):
    from spirula.backends.cuda import RUNTIME_SYMBOLS
    names = _exported(built_library)
    ported = {p.stem for p in NATIVE.glob("*.cu")} - {"runtime"}
    assert ported - names == set(), "kernels not exported"
    assert set(RUNTIME_SYMBOLS) - names == set(), "runtime helpers not exported"


def test_library_exports_nothing_else(built_library):
    """cudart is linked statically with its symbols hidden: a kernel named
    like a libc function could not be shadowed, and nothing leaks."""
    from spirula.backends.cuda import RUNTIME_SYMBOLS
    names = _exported(built_library)
    ported = {p.stem for p in NATIVE.glob("*.cu")} - {"runtime"}
    extra = {n for n in names - ported - set(RUNTIME_SYMBOLS) if not n.startswith("_")}
    assert extra == set()


def test_library_holds_machine_code_for_every_target(built_library):
    data = built_library.read_bytes()
    for arch in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90"):
        assert arch.encode() in data, arch


def test_rebuild_is_skipped_when_nothing_changed(built_library):
    before = built_library.stat().st_mtime_ns
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "build_cuda.sh")], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout == ""
    assert built_library.stat().st_mtime_ns == before


def test_missing_nvcc_is_one_line_and_success():
    env = dict(os.environ, NVCC="/nonexistent/nvcc")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "build_cuda.sh")], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.count("\n") == 1 and "the Vulkan backend is unaffected" in proc.stdout


def test_opening_cuda_without_a_gpu_or_library_is_one_line_with_exit_code_2(monkeypatch, tmp_path):
    from spirula.backends import cudart, open_device, unavailable_reason
    from spirula.errors import SpirulaError
    monkeypatch.setattr(cudart, "_lib", None)
    monkeypatch.setenv("SPIRULA_CUDA_LIB", str(tmp_path / "libspirula_cuda.so"))
    with pytest.raises(SpirulaError) as err:
        open_device("cuda")
    assert err.value.exit_code == 2 and "make cuda" in str(err.value) and "\n" not in str(err.value)
    assert unavailable_reason("cuda") == str(err.value)
    monkeypatch.setenv("SPIRULA_CUDA_LIB", str(LIB))
    monkeypatch.setattr(cudart, "_lib", None)
    if LIB.is_file() and unavailable_reason("cuda") is not None:   # built, but no GPU or driver
        with pytest.raises(SpirulaError) as err:
            open_device("cuda")
        assert err.value.exit_code == 2 and "\n" not in str(err.value)


def _devices_output(monkeypatch, cuda_devices):
    from click.testing import CliRunner

    from spirula.backends import cudart
    from spirula.cli import devices as devices_cli
    monkeypatch.setattr(cudart, "list_devices", lambda: list(cuda_devices))
    result = CliRunner().invoke(devices_cli.devices, [])
    assert result.exit_code == 0, result.output
    return result.output


def test_devices_lists_cuda_gpus_in_a_second_table(monkeypatch):
    from spirula.backends.cudart import CudaDeviceInfo
    fake = CudaDeviceInfo(index=0, name="NVIDIA Fake 9000", device_type="discrete",
                          driver="CUDA driver 12.8, runtime 13.0", api_version="sm_90", subgroup_size=32,
                          timestamps=True, timestamp_period_ns=1.0, timestamp_valid_bits=64,
                          device_local_bytes=80 << 30, max_storage_buffer_range=2 ** 62, max_shared_memory=49152,
                          max_workgroup_count=(2 ** 31 - 1, 65535, 65535), max_workgroup_invocations=1024,
                          shader_int64=True, atomic_float_add=True, extensions=frozenset(), sm_count=132,
                          compute_capability=(9, 0))
    lines = _devices_output(monkeypatch, [fake]).splitlines()
    at = lines.index("CUDA GPUs (--backend cuda):")
    assert lines[at - 1] == "" and lines[at + 1].split() == ["#", "name", "compute", "SMs", "memory", "driver"]
    assert lines[at + 2].split()[:6] == ["0", "NVIDIA", "Fake", "9000", "sm_90", "132"]
    assert "80.0 GiB" in lines[at + 2] and "CUDA driver 12.8, runtime 13.0" in lines[at + 2]
    assert sum(ln.startswith("*") for ln in lines) == 1          # the Vulkan choice only


def test_devices_is_silent_about_cuda_without_it(monkeypatch, tmp_path):
    out = _devices_output(monkeypatch, [])
    assert "CUDA" not in out and out.strip()
    from spirula.backends import cudart
    monkeypatch.undo()
    monkeypatch.setattr(cudart, "_lib", None)
    monkeypatch.setenv("SPIRULA_CUDA_LIB", str(tmp_path / "libspirula_cuda.so"))   # no library
    assert cudart.list_devices() == []
