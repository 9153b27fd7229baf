"""``spirula mesh`` as a user runs it: every kind of bad input ends with one
line naming the file or option and exit status 2, before any GPU work; and the
pipeline after fusion (surface, cleanup, colour, export), with fusion replaced
by an analytic TSDF of the sphere the splats lie on, writes a GLB of that
sphere in the splats' colours."""

import json
import sys
import types

import numpy as np
import pytest
import trimesh
from mesh_cases import COLOUR_GRADIENT, Sphere, colour_field, tsdf_volume
from test_cli_train import assert_one_line_error, spirula

from spirula.cli.main import main
from spirula.data.ply import read_splat_ply, write_splat_ply
from spirula.reference.projection import SH_C0

SHAPE = Sphere()


def sphere_splats(n=3000, seed=0):
    """Splats on SHAPE coloured by colour_field: raw arrays as read_splat_ply returns them."""
    means = SHAPE.sample(n, np.random.default_rng(seed))
    spacing = np.sqrt(SHAPE.area / n)
    return dict(
        means=means,
        quats=np.tile([1.0, 0, 0, 0], (n, 1)),
        log_scales=np.full((n, 3), np.log(spacing)),
        opacity_logits=np.full(n, 3.0),
        sh_coeffs=((colour_field(means) - 0.5) / SH_C0)[:, None, :],
    )


def write_ply(path, s):
    write_splat_ply(path, s["means"], s["quats"], s["log_scales"], s["opacity_logits"], s["sh_coeffs"])
    return path


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_ply(run / "splat.ply", sphere_splats())
    return run


def cli(capsys, *args):
    """The CLI in this process: (exit status, stderr)."""
    with pytest.raises(SystemExit) as e:
        main(["mesh", *map(str, args)])
    return e.value.code, capsys.readouterr().err


def assert_one_line(code, err, *words):
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("spirula: error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture
def no_gpu(monkeypatch):
    """Fail if a command gets as far as opening a device: input checks come first."""

    def refuse():
        raise AssertionError("opened a device before checking the input")

    monkeypatch.setattr("spirula.cli.mesh.open_cli_device", refuse)


def test_a_missing_path_fails_with_one_line(capsys, tmp_path, no_gpu):
    assert_one_line(*cli(capsys, tmp_path / "nothing"), "nothing", "no such run folder or splat PLY")


def test_a_folder_without_splat_ply_fails_with_one_line(capsys, tmp_path, no_gpu):
    assert_one_line(*cli(capsys, tmp_path), str(tmp_path), "no splat.ply")


def test_a_file_that_is_not_a_ply_fails_with_one_line(capsys, tmp_path, no_gpu):
    bad = tmp_path / "mesh.ply"
    bad.write_text("solid nothing\n")
    assert_one_line(*cli(capsys, bad), str(bad), "not a PLY file")


def test_a_point_cloud_is_not_a_splat_ply(capsys, tmp_path, no_gpu):
    pts = tmp_path / "points.ply"
    header = ["ply", "format ascii 1.0", "element vertex 1"] + ["property float %s" % c for c in "xyz"]
    pts.write_text("\n".join(header + ["end_header", "0 0 0", ""]))
    assert_one_line(*cli(capsys, pts), str(pts), "missing propert")


def test_an_empty_splat_set_fails_with_one_line(capsys, tmp_path, no_gpu):
    s = {k: v[:0] for k, v in sphere_splats(10).items()}
    path = write_ply(tmp_path / "empty.ply", s)
    assert_one_line(*cli(capsys, path), str(path), "no splats")


@pytest.mark.parametrize("key", ["means", "log_scales", "sh_coeffs"])
def test_non_finite_splats_fail_with_one_line(capsys, tmp_path, no_gpu, key):
    s = sphere_splats(10)
    s[key][7].flat[0] = np.nan if key != "log_scales" else np.inf
    path = write_ply(tmp_path / "nan.ply", s)
    assert_one_line(*cli(capsys, path), str(path), "1 of 10 splats have non-finite parameters", "vertex 7")


def test_a_zero_quaternion_fails_with_one_line(capsys, tmp_path, no_gpu):
    s = sphere_splats(10)
    s["quats"][3] = 0
    path = write_ply(tmp_path / "q.ply", s)
    assert_one_line(*cli(capsys, path), str(path), "zero quaternion", "vertex 3")


def test_transparent_splats_fail_with_one_line(capsys, tmp_path, no_gpu):
    s = sphere_splats(10)
    s["opacity_logits"][:] = -8.0  # opacity 3e-4 < 1/255: the rasterizer draws none
    path = write_ply(tmp_path / "clear.ply", s)
    assert_one_line(*cli(capsys, path), str(path), "every splat is transparent")


def test_splats_that_fuse_to_no_surface_fail_with_one_line(capsys, tmp_path, monkeypatch):
    """A fused volume that is free space wherever observed (nothing drawn in front of any
    camera): one line naming the file, exit status 2, not a surface-stage error."""
    empty = tsdf_volume(SHAPE)
    empty.tsdf[:] = 0.1
    monkeypatch.setitem(sys.modules, "spirula.mesh.fuse", types.SimpleNamespace(fuse_splats=lambda *a: empty))
    monkeypatch.setattr("spirula.mesh.pipeline.fusion_cameras", lambda splats, dataset: None)
    monkeypatch.setattr("spirula.cli.mesh.open_cli_device", lambda: None)
    path = write_ply(tmp_path / "far.ply", sphere_splats(50))
    code, err = cli(capsys, path, "--color", "vertex")
    err = "\n".join(ln for ln in err.splitlines() if not ln.startswith("mesh: "))  # the stage lines
    assert_one_line(code, err, str(path), "fuse to no surface", "never changes sign")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--resolution", "8"], ["--resolution 8", "16 to 4096"]),
        (["--resolution", "100000"], ["--resolution 100000"]),
        (["--texture-size", "0"], ["--texture-size 0", "64 to 16384"]),
        (["--simplify", "2"], ["--simplify 2"]),
        (["--output", "x.stl"], ["x.stl", "unknown mesh format .stl"]),
        (["--format", "obj", "--output", "x.glb"], ["x.glb", "should be .obj"]),
        (["--output", "nowhere/x.glb"], ["nowhere", "does not exist"]),
        (["--dataset", "no-such-dataset"], ["no-such-dataset", "not a folder"]),
    ],
)
def test_bad_options_fail_with_one_line(capsys, run_dir, no_gpu, monkeypatch, args, words):
    monkeypatch.chdir(run_dir.parent)
    assert_one_line(*cli(capsys, run_dir, *args), *words)


def test_bad_input_in_a_subprocess_is_one_line_with_status_2(tmp_path):
    s = {k: v[:0] for k, v in sphere_splats(10).items()}
    proc = spirula("mesh", write_ply(tmp_path / "empty.ply", s))
    assert_one_line_error(proc, "empty.ply", "no splats")
    assert proc.returncode == 2


@pytest.fixture
def fake_fusion(monkeypatch):
    """spirula.mesh.fuse replaced by the analytic TSDF of SHAPE (40^3, h = 0.06);
    records what the pipeline passed to it."""
    calls = {}

    def fuse_splats(device, splats, cameras, resolution=None):
        calls.update(n=len(splats["means"]), cameras=cameras, resolution=resolution)
        return tsdf_volume(SHAPE, colour=colour_field)

    monkeypatch.setitem(sys.modules, "spirula.mesh.fuse", types.SimpleNamespace(fuse_splats=fuse_splats))
    monkeypatch.setattr("spirula.mesh.pipeline.fusion_cameras", lambda splats, dataset: ("cameras of", dataset))
    monkeypatch.setattr("spirula.cli.mesh.open_cli_device", lambda: None)
    return calls


def test_a_run_meshes_to_a_textured_glb_of_its_sphere(capsys, run_dir, fake_fusion, tmp_path):
    dataset = tmp_path / "data"
    dataset.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"dataset": str(dataset)}))
    code, err = cli(capsys, run_dir, "--resolution", 40, "--texture-size", 128)
    assert code == 0, err
    assert fake_fusion == dict(n=3000, cameras=("cameras of", dataset), resolution=40)
    for stage in ("fuse", "surface", "colour", "export", "total"):
        assert "mesh: %s" % stage in err
    mesh = trimesh.load(run_dir / "mesh.glb", force="mesh")
    assert mesh.visual.kind == "texture"
    # geometry: the sphere (h^2 / (2 R) from marching cubes, test_mesh_surface.py; float32 file)
    h = 2.4 / 40
    assert np.abs(SHAPE.sdf(mesh.vertices)).max() <= h * h / (2 * SHAPE.r) + 1e-6
    # closed once the vertices split along UV seams are merged again
    assert trimesh.Trimesh(mesh.vertices, mesh.faces).is_watertight
    # colour: the splats' (the field) at the vertices, sampled from the texture by trimesh
    # (nearest texel): within the splat blending of the field (2 spacings, as in
    # test_mesh_surface.py) plus a texel of ~0.03 world units at 128^2
    got = mesh.visual.to_color().vertex_colors[:, :3] / 255.0
    spacing = np.sqrt(SHAPE.area / 3000)
    assert np.median(np.abs(got - colour_field(mesh.vertices))) <= COLOUR_GRADIENT * spacing
    assert np.abs(got - colour_field(mesh.vertices)).max() <= COLOUR_GRADIENT * (2 * spacing + 2 * 0.03) + 1 / 255


@pytest.mark.parametrize("fmt", ["obj", "ply"])
def test_a_splat_ply_meshes_to_vertex_colours_beside_it(capsys, run_dir, fake_fusion, fmt):
    ply = run_dir / "splat.ply"
    code, err = cli(capsys, ply, "--color", "vertex", "--color-from", "volume", "--format", fmt, "--simplify", 800)
    assert code == 0, err
    assert fake_fusion["cameras"] == ("cameras of", None) and fake_fusion["resolution"] is None
    # a .ply mesh goes beside splat.ply as splat.mesh.ply, never over the splats
    mesh = trimesh.load(run_dir / ("splat.mesh.ply" if fmt == "ply" else "splat." + fmt), force="mesh")
    assert read_splat_ply(ply)["means"].shape[0] > 0
    assert abs(len(mesh.faces) - 800) <= 16  # simplify: within 2% (test_mesh_surface.py)
    # the volume's colour grid is the field at voxel centres: trilinear is exact; 8-bit rounding
    got = mesh.visual.vertex_colors[:, :3] / 255.0
    assert np.abs(got - colour_field(mesh.vertices)).max() <= 0.5 / 255 + 1e-5


def test_profile_has_a_row_per_host_stage(capsys, run_dir, fake_fusion, monkeypatch):
    from spirula.runtime import profiler

    monkeypatch.setenv("SS_PROFILE", "1")
    profiler.reset()
    try:
        code, err = cli(capsys, run_dir, "--color", "vertex", "--simplify", 1000, "--profile")
        assert code == 0, err
        rows = set(profiler.active().stages)
    finally:
        profiler.reset()
    # fuse is GPU work: the kernel and device-wait rows count it, a stage row would count it twice
    assert rows == {"mesh surface", "mesh clean", "mesh simplify", "mesh colour", "mesh export"}
