"""The pipeline cache a manager's algorithms share, and its copy on disk
(spirula/backends/vulkan/pipeline_cache.py, third_party/kompute/'s patch).

lavapipe's cache holds its header only, so what a driver that keeps compiled
pipelines does with the saved data is checked on the GPU machine (the last
test here, and notes/performance-history.md, "The pipeline cache"); the file handling
is checked against a stand-in manager whose cache is plain bytes.
"""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from spirula.backends.vulkan import pipeline_cache as pc

HEADER = struct.pack("<IIII", 32, 1, 0x10DE, 0x2335) + bytes(range(16))


class FakeManager:
    """A manager whose pipeline cache is bytes: a header, then entries."""

    def __init__(self, header=HEADER, body=b""):
        self.header = header
        self.body = body
        self.merged = []

    def pipeline_cache_data(self):
        return self.header + self.body

    def merge_pipeline_cache_data(self, data):
        self.merged.append(data)
        self.body += data[len(self.header) :]


@pytest.fixture()
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPIRULA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_save_then_load_round_trips_the_bytes(tmp_path):
    path = tmp_path / "pipelines" / "x.bin"
    assert pc.save(FakeManager(body=b"compiled"), path)
    assert path.read_bytes() == HEADER + b"compiled"
    assert [p.name for p in path.parent.iterdir()] == ["x.bin"]  # no temporary file left
    fresh = FakeManager()
    assert pc.load(fresh, path) == len(HEADER) + 8
    assert fresh.merged == [HEADER + b"compiled"]


def test_a_header_only_cache_is_not_written(tmp_path):
    path = tmp_path / "x.bin"
    assert not pc.save(FakeManager(), path)
    assert not path.exists()


def test_save_writes_only_when_the_cache_grew(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(HEADER + b"old")
    assert not pc.save(FakeManager(body=b"old"), path, known=len(HEADER) + 3)
    assert pc.save(FakeManager(body=b"old+new"), path, known=len(HEADER) + 3)
    assert path.read_bytes() == HEADER + b"old+new"


@pytest.mark.parametrize(
    "data",
    [
        b"",  # empty file
        HEADER[:20],  # truncated header
        HEADER,  # a header and nothing to merge
        struct.pack("<IIII", 32, 1, 0x10DE, 0x2336) + bytes(range(16)) + b"x",  # another device
        struct.pack("<IIII", 32, 1, 0x10DE, 0x2335) + bytes(16) + b"x",  # another driver (cache UUID)
    ],
)
def test_load_leaves_data_of_another_driver_unread(tmp_path, data):
    path = tmp_path / "x.bin"
    path.write_bytes(data)
    mgr = FakeManager()
    assert pc.load(mgr, path) == 0
    assert mgr.merged == []


def test_load_of_a_missing_file_is_nothing(tmp_path):
    assert pc.load(FakeManager(), tmp_path / "none.bin") == 0


def test_save_never_raises(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the folder should be
    assert not pc.save(FakeManager(body=b"x"), blocker / "pipelines" / "x.bin")

    class Broken(FakeManager):
        def pipeline_cache_data(self):
            raise RuntimeError("device lost")

    assert not pc.save(Broken(), tmp_path / "x.bin")


def test_attach_saves_when_the_owner_goes(cache_home):
    class Owner:
        pass

    class Info:
        name, driver, device_uuid = "GPU", "driver 1.0", "ab" * 16

    owner, mgr = Owner(), FakeManager(body=b"one")
    pc.attach(owner, mgr, Info)
    path = pc.cache_path(Info)
    assert path.parent == cache_home / "pipelines"
    assert not path.exists()
    del owner  # the finalizer runs with the owner
    assert path.read_bytes() == HEADER + b"one"
    again = FakeManager()
    pc.attach(Owner(), again, Info)
    assert again.merged == [HEADER + b"one"]


def test_attach_is_off_with_the_variable_or_an_unpatched_kp(cache_home, monkeypatch):
    class Owner:
        pass

    class Info:
        name, driver, device_uuid = "GPU", "d", ""

    class Unpatched:
        pass

    owner = Owner()
    pc.attach(owner, Unpatched(), Info)
    assert not hasattr(owner, "_pipeline_cache_saver")
    monkeypatch.setenv("SPIRULA_PIPELINE_CACHE", "0")
    pc.attach(owner, FakeManager(body=b"x"), Info)
    assert not hasattr(owner, "_pipeline_cache_saver")


def test_the_device_cache_starts_with_its_drivers_header(device):
    """The patched kp exports the manager's cache: VkPipelineCacheHeaderVersionOne first."""
    data = device.mgr.pipeline_cache_data()
    assert isinstance(data, bytes) and len(data) >= 32
    size, version = struct.unpack_from("<II", data)
    assert (size, version) == (32, 1)


KERNEL_RUN = """
import numpy as np
from spirula.backends import open_device
dev = open_device("vulkan")
x = np.arange(1000, dtype=np.float32)
buf = dev.pool.alloc("x", (1000,))
dev.upload(buf, x)
for n in (1000, 4000):  # the second size reallocates: algorithms rebuilt through the shared cache
    dev.pool.resize(buf, (n,), keep=False)
    dev.upload(buf, np.arange(n, dtype=np.float32))
    out = dev.pool.alloc("y%d" % n, (n,))
    dev.copy(buf, out)
    assert np.array_equal(dev.readback(out), np.arange(n, dtype=np.float32))
dev.close()
print("ok")
"""


def test_a_run_with_a_stale_or_foreign_cache_file_works(cache_home, device):
    """Whatever file is there (another driver's, garbage), kernels run and give the same results."""
    path = pc.cache_path(device.info)
    path.parent.mkdir(parents=True)
    for data in (b"garbage", HEADER + b"entries of another GPU"):
        path.write_bytes(data)
        r = subprocess.run([sys.executable, "-c", KERNEL_RUN], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_a_second_process_reuses_the_saved_pipelines(cache_home, device):
    """On a driver that keeps compiled pipelines (not lavapipe): the first run
    saves them, a second merges them and adds nothing."""
    if len(device.mgr.pipeline_cache_data()) <= 32 and device.info.device_type == "cpu":
        pytest.skip("lavapipe's pipeline cache holds no pipelines")
    r = subprocess.run([sys.executable, "-c", KERNEL_RUN], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    path = pc.cache_path(device.info)
    first = path.read_bytes()
    assert len(first) > 32
    r = subprocess.run([sys.executable, "-c", KERNEL_RUN], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert path.read_bytes()[:32] == first[:32]
