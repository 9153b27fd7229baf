"""The backend seam (spirula/backends/): both devices implement the one
interface of spirula/runtime/device.py, the code they share (range checks, index resolution,
transfer timing) behaves the same on both, and open_device is the one way in.

The CUDA device runs here on a stand-in for libspirula_cuda.so that moves
host memory (:class:`FakeCudaLib`): everything above the library (the pool,
the shared transfers, the launch records, recorded sequences) is the real
code, without a GPU. The CUDA kernels themselves are tested on a GPU: each
kernel's test against the numpy reference on each backend, and the parity tests
of the hand-written twins (test_<kernel>_parity.py, test_cuda_parity.py).
"""

import ctypes as C
import inspect

import numpy as np
import pytest

from spirula.errors import NoVulkanError, SpirulaError
from spirula.runtime import device as base

# ---- a CUDA device without a GPU ------------------------------------------------------


class HostMemory:
    """Stands in for cudart.CudaMemory / CudaHostMemory: host memory with a ``ptr``."""

    def __init__(self, nbytes):
        self._words = np.zeros(max(int(nbytes), 4) // 4, np.uint32)
        self.ptr = self._words.ctypes.data
        self.nbytes = int(nbytes)

    def data(self):
        return self._words

    def free(self):
        self.ptr = 0


def _words(ptr, n):
    return np.ctypeslib.as_array((C.c_uint32 * n).from_address(ptr)) if n else np.zeros(0, np.uint32)


class FakeCudaLib:
    """The spirula_cuda_* calls CudaDevice makes, on host memory, plus the
    ``copy`` and ``fill`` kernels reading their SpirulaLaunch as launch.cuh does."""

    def __init__(self):
        from spirula.contract.preprocess import read_kernel

        self.calls = []
        self._push = {k: [c.name for c in read_kernel(k, {}).push] for k in ("copy", "fill")}
        self.copy = self._kernel("copy")
        self.fill = self._kernel("fill")

    def _memcpy(self, dst, src, n, stream):
        C.memmove(dst, src, n)
        return 0

    spirula_cuda_memcpy_htod = spirula_cuda_memcpy_dtoh = spirula_cuda_memcpy_dtod = _memcpy

    def spirula_cuda_memset32(self, ptr, word, count, stream):
        _words(ptr, count)[:] = word
        return 0

    def spirula_cuda_stream_sync(self, stream):
        self.calls.append("sync")
        return 0

    def spirula_cuda_stream_destroy(self, stream):
        return 0

    # events: the stream runs synchronously here, so each is complete when recorded
    def spirula_cuda_event_create(self, handle):
        handle._obj.value = 1
        return 0

    def spirula_cuda_event_record(self, event, stream):
        return 0

    def spirula_cuda_event_sync(self, event):
        self.calls.append("event sync")
        return 0

    def spirula_cuda_event_destroy(self, event):
        return 0

    def spirula_cuda_mem_get_info(self, free, total):
        free._obj.value, total._obj.value = 3 << 20, 8 << 20
        return 0

    def _kernel(self, name):
        from spirula.backends.cuda.cudart import SpirulaLaunch

        def launch(address):
            s = SpirulaLaunch.from_address(address)
            push = dict(zip(self._push[name], s.push[: s.n_push]))
            k = 4 if s.flags & 1 else 1  # VEC4
            n = push["count"] * k
            if name == "copy":
                src = _words(s.buffers[0] + 4 * k * push["src_offset"], n)
                _words(s.buffers[1] + 4 * k * push["dst_offset"], n)[:] = src
            else:
                _words(s.buffers[0] + 4 * k * push["offset"], n)[:] = push["value"]
            self.calls.append(name)
            return 0

        return launch


@pytest.fixture
def fake_cuda(monkeypatch):
    """A CudaDevice over FakeCudaLib (its __init__ needs a GPU: the fields are set as it sets them)."""
    from spirula.backends.cuda import device as cuda
    from spirula.backends.cuda.cudart import CudaDeviceInfo

    monkeypatch.setattr(cuda, "CudaMemory", HostMemory)
    monkeypatch.setattr(cuda, "CudaHostMemory", HostMemory)
    dev = cuda.CudaDevice.__new__(cuda.CudaDevice)
    dev.lib = FakeCudaLib()
    dev.info = CudaDeviceInfo(
        index=0,
        name="Fake GPU",
        device_type="discrete",
        driver="none",
        api_version="sm_90",
        subgroup_size=32,
        timestamps=True,
        timestamp_period_ns=1.0,
        timestamp_valid_bits=64,
        device_local_bytes=1 << 30,
        max_storage_buffer_range=1 << 30,
        max_shared_memory=49152,
        max_workgroup_count=(2**31 - 1, 65535, 65535),
        max_workgroup_invocations=1024,
        shader_int64=True,
        atomic_float_add=True,
        extensions=frozenset(),
    )
    dev.defines = {"ATOMIC_FLOAT": 1}
    dev._kernels = {}
    dev.stream = 1
    dev._events = None
    dev._init_device()
    return dev


@pytest.fixture(params=["vulkan", "cuda"])
def any_device(request):
    return request.getfixturevalue("device" if request.param == "vulkan" else "fake_cuda")


# ---- the interface ----------------------------------------------------------------------


def test_both_devices_implement_the_whole_interface():
    from spirula.backends.cuda.device import CudaDevice, CudaSequence
    from spirula.backends.vulkan import VulkanDevice
    from spirula.backends.vulkan.sequence import RecordedSequence
    from spirula.runtime.sequence import Sequence

    for cls in (VulkanDevice, CudaDevice):
        assert issubclass(cls, base.Device) and not inspect.isabstract(cls), cls
    assert (VulkanDevice.backend, CudaDevice.backend) == ("vulkan", "cuda")
    for cls in (RecordedSequence, CudaSequence):
        assert issubclass(cls, Sequence)
        for hook in ("_eval", "_eval_async", "_await", "_account"):
            assert getattr(cls, hook) is not getattr(Sequence, hook), (cls, hook)
    # what is shared is written once: neither backend redefines it
    shared = ("upload", "readback", "copy", "fill", "sync", "fold_groups", "recorder", "_transfer")
    for cls in (VulkanDevice, CudaDevice):
        for name in shared:
            assert name not in vars(cls), (cls, name)


def test_each_backend_package_has_the_module_functions_and_one_device_class():
    from spirula.backends import BACKENDS, backend_module, device_class

    for name in BACKENDS:
        module = backend_module(name)
        for fn in ("list_devices", "resolve_index", "unavailable_reason"):
            assert callable(getattr(module, fn)), (name, fn)
        cls = device_class(name)
        assert issubclass(cls, base.Device) and cls.backend == name and cls.__module__.startswith(module.__name__)


def test_device_info_has_one_shape():
    from spirula.backends.cuda.cudart import CudaDeviceInfo
    from spirula.backends.vulkan import vkinfo

    assert vkinfo.DeviceInfo is base.DeviceInfo and issubclass(CudaDeviceInfo, base.DeviceInfo)
    assert isinstance(vkinfo.list_devices()[0], base.DeviceInfo)


# ---- shared code, on both devices ------------------------------------------------------------


def test_transfers_round_trip(any_device):
    dev = any_device
    data = np.arange(37, dtype=np.float32)
    buf = dev.pool.alloc("seam.a", (40,), np.float32)
    dev.fill(buf, 0)
    dev.upload(buf, data, offset=12)
    got = dev.readback(buf)
    assert np.array_equal(got[3:40], data) and not got[:3].any()
    assert np.array_equal(
        dev.readback(buf, shape=(2, 2), dtype=np.uint32, offset=16), data[1:5].view(np.uint32).reshape(2, 2)
    )
    other = dev.pool.alloc("seam.b", (40,), np.float32)
    dev.fill(other, 1.5)
    dev.copy(buf, other, nbytes=8, src_offset=16, dst_offset=4)
    got = dev.readback(other)
    assert got[0] == 1.5 and np.array_equal(got[1:3], data[1:3]) and (got[3:] == 1.5).all()
    assert dev.readback(buf, shape=(0,)).shape == (0,)
    dev.pool.free(buf)
    dev.pool.free(other)


def test_pool_growth_keeps_the_contents(any_device):
    dev = any_device
    buf = dev.pool.alloc("seam.grow", (8,), np.uint32)
    dev.upload(buf, np.arange(8, dtype=np.uint32))
    assert dev.pool.resize(buf, (1000,))
    assert np.array_equal(dev.readback(buf)[:8], np.arange(8))
    dev.pool.free(buf)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda d, b: d.upload(b, np.zeros(3, np.uint8)), "multiples of 4"),
        (lambda d, b: d.upload(b, np.zeros(4, np.float32), offset=2), "multiples of 4"),
        (lambda d, b: d.readback(b, shape=(17,)), "outside the buffer's 64 bytes"),
        (lambda d, b: d.readback(b, offset=68), "outside"),
        (lambda d, b: d.fill(b, 0, nbytes=8, offset=60), "range [60, 68) outside"),
        (lambda d, b: d.copy(b, b, nbytes=8, src_offset=-4), "outside"),
    ],
)
def test_range_checks_are_the_same_on_both(any_device, call, message):
    buf = any_device.pool.alloc("seam.range", (16,), np.float32)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        call(any_device, buf)
    any_device.pool.free(buf)
    with pytest.raises(ValueError, match="was freed"):
        any_device.upload(buf, np.zeros(4, np.float32))


def test_recorded_copy_and_fill_run_through_the_sequence(any_device):
    dev = any_device
    src = dev.pool.alloc("seam.src", (64,), np.uint32)
    dst = dev.pool.alloc("seam.dst", (64,), np.uint32)
    dev.upload(src, np.arange(64, dtype=np.uint32))
    rec = dev.recorder("seam")
    rec.fill(dst, 7)
    rec.copy(src, dst, nbytes=4 * 10, src_offset=4 * 3, dst_offset=4 * 20)  # not VEC4
    rec.copy(src, dst, nbytes=4 * 8, src_offset=0, dst_offset=4 * 40)  # VEC4
    seq = rec.finish()
    assert (seq.dispatches, seq.barriers) == (3, 4)
    expect = np.full(64, 7, np.uint32)
    expect[20:30] = np.arange(3, 13)
    expect[40:48] = np.arange(8)
    seq.run()
    assert np.array_equal(dev.readback(dst), expect)
    dev.fill(dst, 0)
    seq.run_async()
    assert dev._pending is seq
    got = dev.readback(dst)  # waits for it first
    assert dev._pending is None and np.array_equal(got, expect)
    dev.pool.resize(src, (1000,))
    assert seq.stale
    with pytest.raises(RuntimeError, match="record it again"):
        seq.run()


def test_cuda_launch_record_and_memory_hooks(fake_cuda):
    dev = fake_cuda
    a = dev.pool.alloc("seam.a", (16,), np.uint32)
    b = dev.pool.alloc("seam.b", (16,), np.uint32)
    rec = dev.recorder()
    rec.copy(a, b)
    launch = rec._ops[0].algorithm
    s = launch.struct
    assert (s.n_buffers, list(s.buffers[:2]), s.flags & 1) == (2, [a.tensor.ptr, b.tensor.ptr], 1)
    assert s.stream == dev.stream and dev.kernel_names() == ["copy", "fill"]
    assert dev.fold_groups(2**31 + 5) == (1073741827, 2, 1)
    assert dev.process_memory_used() == 5 << 20
    host = dev.pool.alloc("seam.host", (4,), np.float32, host=True)
    host.host_view()[:] = 2.0
    assert np.array_equal(host.tensor.data().view(np.float32)[:4], [2.0] * 4)
    dev.close()
    assert dev.stream is None and dev.process_memory_used() is None and not dev.pool.buffers


def test_transfers_are_timed_once_each(monkeypatch, fake_cuda):
    """With the profiler on, each transfer is one row of its kind (shared code)."""
    from spirula.runtime.profiler import Profiler

    buf = fake_cuda.pool.alloc("seam.t", (8,), np.float32)
    prof = Profiler()
    monkeypatch.setattr(fake_cuda, "profiler", prof)
    monkeypatch.setattr(fake_cuda, "_timed_now", lambda row, run: run())  # no CUDA events here
    fake_cuda.upload(buf, np.ones(8, np.float32))
    fake_cuda.readback(buf)
    fake_cuda.copy(buf, buf, nbytes=16, dst_offset=16)
    fake_cuda.fill(buf, 0)
    rows = {k: (r.count, r.bytes) for k, r in prof.transfers.items()}
    assert rows == {"H2D": (1, 32), "D2H": (1, 32), "D2D": (1, 16), "memset": (1, 32)}
    prof.devices.append(fake_cuda)
    assert "process (driver)" in prof.vram_report()


# ---- index resolution and open_device -------------------------------------------------------


def test_resolve_index_argument_environment_default(monkeypatch):
    monkeypatch.delenv("SPIRULA_DEVICE", raising=False)
    assert base.resolve_index(None, 3, 2, NoVulkanError, "Vulkan") == 2
    assert base.resolve_index(1, 3, 2, NoVulkanError, "Vulkan") == 1
    monkeypatch.setenv("SPIRULA_DEVICE", "0")
    assert base.resolve_index(None, 3, 2, NoVulkanError, "Vulkan") == 0
    monkeypatch.setenv("SPIRULA_DEVICE", "x")
    with pytest.raises(NoVulkanError, match=r"device \(--device / SPIRULA_DEVICE\) 'x' is not a device index"):
        base.resolve_index(None, 3, 2, NoVulkanError, "Vulkan")
    monkeypatch.setenv("SPIRULA_DEVICE", "5")
    from spirula.backends.cuda.cudart import NoCudaError

    with pytest.raises(NoCudaError) as err:
        base.resolve_index(None, 1, 0, NoCudaError, "CUDA", "spirula devices --backend cuda")
    assert str(err.value) == (
        "device (--device / SPIRULA_DEVICE) 5 does not exist: this machine has 1 CUDA "
        "device (0..0; see `spirula devices --backend cuda`)"
    )


def test_open_device_is_the_one_way_in(device):
    from spirula.backends import UnknownBackendError, get_device, open_device
    from spirula.backends.vulkan import VulkanDevice

    assert isinstance(get_device(), VulkanDevice)
    with pytest.raises(UnknownBackendError) as err:
        open_device("metal")
    assert err.value.exit_code == 2 and isinstance(err.value, ValueError)
    assert str(err.value) == "unknown backend 'metal' (one of vulkan, cuda)"
    with pytest.raises(NoVulkanError, match="device 9 does not exist"):
        open_device("vulkan", 9)
    dev = open_device("vulkan", 0, float_atomics=False)
    assert isinstance(dev, VulkanDevice) and dev.float_atomics is False


def test_open_device_cuda_without_the_library_is_one_line(monkeypatch, tmp_path):
    from spirula.backends import list_devices, open_device, unavailable_reason
    from spirula.backends.cuda import cudart

    monkeypatch.setattr(cudart, "_lib", None)
    monkeypatch.setenv("SPIRULA_CUDA_LIB", str(tmp_path / "none.so"))
    for call in (lambda: open_device("cuda"), lambda: list_devices("cuda")):
        with pytest.raises(SpirulaError) as err:
            call()
        assert err.value.exit_code == 2 and "make cuda" in str(err.value) and "\n" not in str(err.value)
    assert "make cuda" in unavailable_reason("cuda")
    assert unavailable_reason("vulkan") is None


# ---- the CLI option ----------------------------------------------------------------------


def _main(capsys, *argv):
    from spirula.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_every_subcommand_takes_backend_device_and_profile():
    from spirula.cli.main import _register, cli

    _register()
    assert {"train", "eval", "render", "selftest", "devices", "shaders"} <= set(cli.commands)
    for group_or_command in [cli] + list(cli.commands.values()):
        names = {p.name for p in group_or_command.params}
        assert {"backend", "device", "profile"} <= names, group_or_command.name


@pytest.mark.parametrize(
    "argv", [["devices"], ["selftest"], ["shaders"], ["train"], ["eval", "nowhere"], ["render", "nowhere"]]
)
def test_a_bad_backend_is_one_line_with_exit_code_2(capsys, argv):
    for args in ([*argv, "--backend", "metal"], ["--backend", "metal", *argv]):
        code, out, err = _main(capsys, *args)
        assert code == 2 and out == ""
        assert err == "spirula: error: unknown backend 'metal' (one of vulkan, cuda)\n", err


@pytest.mark.parametrize("argv", [["devices"], ["selftest", "--size", "4096"]])
def test_cuda_commands_run_on_cuda_or_say_why_not(capsys, monkeypatch, argv):
    from spirula import backends

    monkeypatch.setattr(backends, "_default", backends._default)  # a CUDA selftest sets it
    reason = backends.unavailable_reason("cuda")
    code, out, err = _main(capsys, *argv, "--backend", "cuda")
    if reason is not None:
        assert (code, out, err) == (2, "", "spirula: error: %s\n" % reason)
    else:
        assert code == 0 and "NVIDIA" in out, err


def test_devices_with_backend_vulkan_lists_vulkan_only(capsys, monkeypatch):
    from spirula.backends.cuda import cudart

    monkeypatch.setattr(cudart, "list_devices", lambda: ["a CUDA GPU"])  # never asked
    code, out, _ = _main(capsys, "devices", "--backend", "vulkan")
    assert code == 0 and "CUDA" not in out and out.splitlines()[0].split()[:2] == ["#", "name"]
