"""scripts/shaders_as_glsl.sh lays the shaders out as .glsl beside native_cuda/
(a copy of each, not a link), so that a duplicate-code finder that skips .comp
files compares every kernel with its CUDA twin (issue #36, item 7)."""

import shutil
import subprocess

import pytest
from conftest import ROOT

SCRIPT = ROOT / "scripts" / "shaders_as_glsl.sh"


def _lay_out(out):
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out.resolve())
    return out


def test_every_shader_lies_as_glsl_beside_its_cuda_twin(tmp_path):
    out = _lay_out(tmp_path / "twins")
    shaders = sorted(p.stem for p in (ROOT / "shaders").glob("*.comp"))
    assert sorted(p.stem for p in (out / "shaders").glob("*.glsl")) == shaders
    assert not list(out.rglob("*.comp")) and not [p for p in out.rglob("*") if p.is_symlink()]
    for name in shaders:
        assert (out / "shaders" / (name + ".glsl")).read_bytes() == (ROOT / "shaders" / (name + ".comp")).read_bytes()
    for src in list((ROOT / "native_cuda").rglob("*.cu*")) + list((ROOT / "shaders" / "include").glob("*.glsl")):
        rel = src.relative_to(ROOT)
        assert (out / rel).read_bytes() == src.read_bytes(), rel


def test_laying_out_again_leaves_no_stale_kernel(tmp_path):
    out = _lay_out(tmp_path / "twins")
    (out / "shaders" / "gone.glsl").write_text("// a kernel since deleted\n")
    _lay_out(out)
    assert not (out / "shaders" / "gone.glsl").exists()


@pytest.mark.skipif(shutil.which("duplicates") is None, reason="no `duplicates` command on this machine")
def test_the_duplicate_finder_reads_the_shaders_and_the_twins(tmp_path):
    out = _lay_out(tmp_path / "twins")
    proc = subprocess.run(
        ["duplicates", "--repo", str(out), "--most", "200"], capture_output=True, text=True, timeout=120
    )
    assert ".glsl:" in proc.stdout and ".cu:" in proc.stdout, proc.stdout[-2000:]
