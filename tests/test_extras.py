"""Each extra's commands, with the extra's modules missing (``sys.modules[name] = None``,
as an install without it): one line naming the extra to install, exit status 2,
before any device opens or file is read. And the extras as pyproject.toml declares them."""

import sys
from pathlib import Path

import pytest
import tomllib

from spirula.cli.main import main
from spirula.extras import EXTRAS, MissingExtraError, from_import_error, need

ROOT = Path(__file__).resolve().parent.parent


def _without(monkeypatch, *modules):
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


def _run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return exc.value.code, lines


@pytest.fixture
def files(tmp_path):
    """A video, a folder of photos and a splat file as far as the checks look (they read none)."""
    (tmp_path / "clip.mp4").write_bytes(b"")
    (tmp_path / "splat.ply").write_bytes(b"")
    (tmp_path / "photos").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    "extra, missing, args, command",
    [
        ("sfm", "pycolmap", ["sfm", "{photos}", "{out}"], "spirula sfm"),
        ("sfm", "av", ["frames", "{clip.mp4}", "{out}"], "spirula frames"),
        ("sfm", "av", ["train", "{clip.mp4}"], "spirula train VIDEO"),
        ("sfm", "av", ["render", "{splat.ply}", "--video", "{out.mp4}"], "spirula render --video"),
        ("mesh", "skimage", ["mesh", "{splat.ply}"], "spirula mesh"),
        ("view", "glfw", ["view", "{splat.ply}"], "spirula view"),
        ("view", "viser", ["view", "{splat.ply}", "--port", "8123"], "spirula view --port"),
        ("view", "moderngl", ["train", "--viewer"], "spirula train --viewer"),
        ("view", "viser", ["train", "--viewer-port", "8123"], "spirula train --viewer-port"),
        ("ray", "ray", ["train", "--partition", "2"], "spirula train --partition"),
    ],
)
def test_a_command_without_its_extra_names_the_extra_in_one_line(
    monkeypatch, capsys, files, extra, missing, args, command
):
    _without(monkeypatch, missing)
    args = [str(files / a[1:-1]) if a.startswith("{") else a for a in args]
    code, lines = _run(capsys, *args)
    assert code == 2
    assert lines == ["spirula: error: %s needs the %s extra: pip install 'spirula[%s]'" % (command, extra, extra)]


def test_several_missing_extras_are_named_together(monkeypatch):
    _without(monkeypatch, "viser", "trimesh")
    with pytest.raises(MissingExtraError, match=r"needs the mesh and view extras: pip install 'spirula\[mesh,view\]'"):
        need("spirula view of a mesh", "viser", "trimesh")


def test_an_import_of_an_extra_no_check_caught_is_one_line_too(monkeypatch, capsys):
    from spirula.cli import devices

    def fails(*a, **k):
        raise ModuleNotFoundError("No module named 'trimesh'", name="trimesh")

    monkeypatch.setattr(devices, "list_all", fails, raising=False)
    monkeypatch.setattr(devices.devices, "callback", fails)
    code, lines = _run(capsys, "devices")
    assert code == 2
    assert lines == ["spirula: error: spirula devices needs the mesh extra: pip install 'spirula[mesh]'"]
    assert from_import_error(ModuleNotFoundError("x", name="numpy")) is None  # not an extra's: a bug, raised


def test_the_extras_are_pyproject_tomls():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(EXTRAS) | {"all", "test", "dev"} == set(extras)
    assert extras["all"] == ["spirula[%s]" % ",".join(sorted(EXTRAS, key=list(EXTRAS).index))]
    assert "spirula[all]" in extras["dev"]
    base = " ".join(project["dependencies"])
    for pkg in ("pycolmap", "av", "viser", "glfw", "moderngl", "trimesh", "scikit-image", "xatlas", "ray"):
        assert pkg + ">" not in base, pkg  # each comes with its extra only
