"""``make install``'s editable install must leave PYTHONPATH in charge: benchmarks run an
older tree with ``+tree=DIR`` (PYTHONPATH=DIR, benchmarks/quality_sweep.py) and a git
worktree's tests import their own tree the same way. scikit-build-core's editable
install adds an import hook ahead of sys.path that would shadow both (the Makefile
keeps only its path line)."""

from __future__ import annotations

import subprocess
import sys


def test_pythonpath_wins_over_the_editable_install(tmp_path):
    other = tmp_path / "spirula"
    other.mkdir()
    (other / "__init__.py").write_text("WHERE = 'other tree'\n")
    out = subprocess.run(
        [sys.executable, "-c", "import spirula; print(getattr(spirula, 'WHERE', spirula.__file__))"],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "other tree", out.stdout
