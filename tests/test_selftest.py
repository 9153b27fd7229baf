"""``spirula selftest``: every kernel on the chosen device against the numpy
reference, a table, and a non-zero exit when a kernel is wrong."""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from spirula import selftest
from spirula.contract.kernel import shader_dir


def _cli(*args, **env):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    e.update(env)
    return subprocess.run(
        [sys.executable, "-m", "spirula", "selftest", *args],
        env=e,
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=300,
    )


def test_selftest_passes_with_a_table_of_every_check():
    proc = _cli()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("kernel"))
    assert lines[header].split() == ["kernel", "max", "error", "tolerance", "pass"]
    rows = lines[header + 1 : -1]
    assert len(rows) >= 15 and all(r.endswith("  ok") for r in rows), rows
    for name in ("radix_sort_scatter", "intersect_tile_write", "tile_ranges", "rasterize_bwd", "projection_bwd"):
        assert any(name in r for r in rows), name
    assert lines[-1].startswith("selftest passed")
    assert "Traceback" not in proc.stderr


def test_selftest_runs_every_kernel(device, monkeypatch):
    """Every shader in shaders/ is dispatched by some check."""
    used = set()
    kernel = device.kernel

    def recording(name, **defines):
        used.add(name)
        return kernel(name, **defines)

    monkeypatch.setattr(device, "kernel", recording)
    rows = selftest.run(device)
    assert all(r.ok for r in rows), selftest.table(rows)
    assert used == {p.stem for p in shader_dir().glob("*.comp")}


@pytest.mark.parametrize(
    "shader,line,broken,row",
    [
        (
            "rasterize_fwd",
            "out_colors[3u * p + 1u] = color.g + T * backgrounds[3u * c + 1u];",
            "out_colors[3u * p + 1u] = 1.05 * color.g + T * backgrounds[3u * c + 1u];",
            "rasterize_fwd",
        ),
        (
            "densify_adc_reset",
            "opacities[i] = min(opacities[i], pc.ceiling_logit);",
            "opacities[i] = min(opacities[i], pc.ceiling_logit + 1e-3);",
            "densify_adc_reset",
        ),
    ],
)
def test_a_broken_kernel_fails_with_its_row_and_exit_status_1(tmp_path, shader, line, broken, row):
    shaders = tmp_path / "shaders"
    shutil.copytree(shader_dir(), shaders)
    path = shaders / (shader + ".comp")
    text = path.read_text()
    assert line in text
    path.write_text(text.replace(line, broken))
    proc = _cli(SPIRULA_SHADER_DIR=str(shaders))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = [ln for ln in proc.stdout.splitlines() if ln.endswith("FAIL")]
    assert [ln.split()[0] for ln in failed] == [row], proc.stdout
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "selftest FAILED" in err[0] and row in err[0]
