"""spirula/settings.py: every environment variable the product reads, read
there and nowhere else, each when its function is called; the tables of
docs/development.md are the module's; the tests, benchmarks, scripts and docs
name no variable that neither table lists (so none is left over from a
deleted experiment)."""

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from spirula import settings
from spirula.errors import UsageError

# finished experiments, deleted with their code (issue #36): no file may name them again
DELETED = (
    "SPIRULA_SPIN_WAIT",
    "SPIRULA_HOST_BARRIERS",
    "SPIRULA_SHUFFLE_SUMS",
    "SPIRULA_NO_FLOAT_CONTROLS",
    "SPIRULA_PARTITION_FAIL_ONCE",
)
NAME = r"(?:SPIRULA|SS)_[A-Z0-9_]*[A-Z0-9]"
# a variable in use: NAME=..., $NAME / ${NAME}, or NAME alone in quotes or backticks
# (not -DNAME=1 or a #define: kernel macros share the prefix)
IN_USE = re.compile(r"(?<![-\w])(%s)=|\$\{?(%s)\b|[\"'`](%s)[\"'`]" % (NAME, NAME, NAME))
HISTORY = ("CHANGELOG.md", "notes/")  # what was, in its words


def test_no_module_but_settings_touches_the_environment():
    bad = []
    for path in sorted((ROOT / "spirula").rglob("*.py")):
        if path == ROOT / "spirula" / "settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv"):
                bad.append("%s:%d os.%s" % (path.relative_to(ROOT), node.lineno, node.attr))
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                names = {a.name for a in node.names} & {"environ", "getenv", "putenv", "unsetenv"}
                bad += ["%s:%d from os import %s" % (path.relative_to(ROOT), node.lineno, n) for n in names]
    assert bad == [], "read the environment through spirula/settings.py:\n" + "\n".join(bad)


def test_the_development_page_holds_the_settings_tables():
    page = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    assert settings.BEGIN in page and settings.END in page
    assert page == settings.with_tables(page), (
        "docs/development.md's tables differ from spirula/settings.py's: "
        "run python -m spirula.settings docs/development.md"
    )


def _tracked_text_files():
    out = subprocess.run(
        ["git", "ls-files", "spirula", "tests", "benchmarks", "scripts", ".ci", "Makefile", "docs", "README.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in out:
        path = ROOT / name
        if name.startswith(HISTORY) or path.name == "test_settings.py" or not path.is_file():
            continue
        try:
            yield name, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def test_every_variable_named_in_code_and_docs_is_in_a_table():
    known = settings.names()
    unknown = {}
    for name, text in _tracked_text_files():
        for m in IN_USE.finditer(text):
            var = next(g for g in m.groups() if g)
            if var not in known:
                unknown.setdefault(var, []).append(name)
    assert unknown == {}, "variables in neither table of spirula/settings.py: %r" % unknown


def test_the_deleted_experiments_are_named_nowhere():
    assert not set(DELETED) & settings.names()
    left = [(n, var) for n, text in _tracked_text_files() for var in DELETED if var in text]
    assert left == []
    # SPIRULA_NO_BUFFER_ROBUSTNESS=1 (no kernel with the driver's checks) went with them
    assert [n for n, text in _tracked_text_files() if "NO_BUFFER_ROBUSTNESS=1" in text] == []


@pytest.fixture
def clean(monkeypatch):
    """Every setting unset, and restored afterwards (also where a function under test sets one)."""
    for s in settings.SETTINGS:
        for name in (s.name, *s.aliases):
            monkeypatch.setenv(name, "")  # so that monkeypatch restores it, set or not before
            monkeypatch.delenv(name)
    return monkeypatch


def test_switches_are_on_for_anything_but_nothing_or_zero(clean):
    assert not settings.profile() and not settings.barrier_all() and not settings.poison_buffers()
    assert settings.float_atomics()
    for value, on in (("", False), ("0", False), ("1", True), ("yes", True)):
        clean.setenv("SPIRULA_BARRIER_ALL", value)
        clean.setenv("SPIRULA_POISON_BUFFERS", value)
        clean.setenv("SPIRULA_NO_FLOAT_ATOMICS", value)
        assert settings.barrier_all() is on and settings.poison_buffers() is on
        assert settings.float_atomics() is not on


def test_the_profiler_is_on_under_either_name(clean):
    assert not settings.profile()
    clean.setenv("SPIRULA_PROFILE", "1")
    assert settings.profile()
    clean.setenv("SS_PROFILE", "0")
    assert settings.profile()  # either on turns it on
    clean.delenv("SPIRULA_PROFILE")
    assert not settings.profile()
    settings.set_profile()  # --profile
    assert settings.profile()


def test_the_pipeline_cache_is_on_unless_set_to_nothing_or_zero(clean):
    assert settings.pipeline_cache()
    for value, on in (("1", True), ("0", False), ("", False)):
        clean.setenv("SPIRULA_PIPELINE_CACHE", value)
        assert settings.pipeline_cache() is on


def test_folders_and_texts(clean, tmp_path):
    for fn, var in (
        (settings.cache_dir, "SPIRULA_CACHE_DIR"),
        (settings.capture_cache, "SPIRULA_CAPTURE_CACHE"),
        (settings.cuda_lib, "SPIRULA_CUDA_LIB"),
        (settings.shader_dir, "SPIRULA_SHADER_DIR"),
    ):
        assert fn() is None
        clean.setenv(var, "")
        assert fn() is None
        clean.setenv(var, str(tmp_path))
        assert fn() == tmp_path
    assert settings.xdg_cache_home() == Path.home() / ".cache"
    clean.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert settings.xdg_cache_home() == tmp_path
    assert settings.device() is None
    clean.setenv("SPIRULA_DEVICE", "")
    assert settings.device() is None
    settings.set_device(2)  # --device
    assert settings.device() == "2"
    assert settings.memory_limit() == "" and settings.raster_chunk() == ""
    clean.setenv("SPIRULA_MEMORY_LIMIT", " 2GiB ")
    clean.setenv("SPIRULA_RASTER_CHUNK", " 512\n")
    assert settings.memory_limit() == "2GiB" and settings.raster_chunk() == "512"
    assert not settings.display()
    clean.setenv("WAYLAND_DISPLAY", "wayland-0")
    assert settings.display()


def test_buffer_robustness_takes_zero_or_kernels(clean):
    assert settings.buffer_robustness() is None
    for value, want in (("", None), ("0", True), ("kernels", "kernels")):
        clean.setenv("SPIRULA_NO_BUFFER_ROBUSTNESS", value)
        assert settings.buffer_robustness() == want
    clean.setenv("SPIRULA_NO_BUFFER_ROBUSTNESS", "1")
    with pytest.raises(UsageError, match="expected 0 or kernels") as info:
        settings.buffer_robustness()
    assert info.value.exit_code == 2


def test_ray_stays_quiet_unless_told(clean):
    settings.quiet_ray()
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    clean.setenv("RAY_USAGE_STATS_ENABLED", "1")
    settings.quiet_ray()
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "1"


def test_every_setting_is_documented_once():
    names = [n for s in settings.SETTINGS for n in (s.name, *s.aliases)] + [e.name for e in settings.ELSEWHERE]
    assert len(names) == len(set(names))
    for s in settings.SETTINGS:
        assert s.doc.endswith(".") and s.use and s.values and s.default, s.name
