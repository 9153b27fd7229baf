"""``spirula mesh`` on a real trained run (issue 14, "done when"): the tiny COLMAP scene of
tests/train_cases.py trained for a few steps, then meshed from the cameras of the dataset the
run recorded, through real GPU fusion, to a textured GLB (trimesh and pygltflib read it), an
OBJ with its material and texture, and a PLY of vertex colours."""

import json

import numpy as np
import pytest
import trimesh
from test_cli_train import SMALL, spirula
from train_cases import write_tiny_colmap

MESH = ["--resolution", "32", "--texture-size", "64"]  # small: lavapipe


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run trained from a folder, on a dataset given by a relative path (as users do)."""
    root = tmp_path_factory.mktemp("meshrun")
    write_tiny_colmap(root / "data")
    proc = spirula("train", "data", "--iterations", 5, "--output", "outputs/run", *SMALL, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((root / "outputs/run/config.json").read_text())["dataset"] == "data"
    return root / "outputs/run"


def splat_box(run):
    from spirula.data.ply import read_splat_ply
    from spirula.mesh.cameras import scene_bounds, splat_support

    s = read_splat_ply(run / "splat.ply")
    support = splat_support(np.exp(s["log_scales"]), 1 / (1 + np.exp(-s["opacity_logits"])))
    return scene_bounds(s["means"], support=support)


def test_a_trained_run_meshes_to_a_textured_glb(run, tmp_path):
    # from another folder: the run's relative dataset path is found beside outputs/
    proc = spirula("mesh", run, *MESH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "from %s" % (run.parent.parent / "data") in proc.stderr  # the run's dataset's cameras
    mesh = trimesh.load(run / "mesh.glb", force="mesh")
    assert mesh.visual.kind == "texture" and len(mesh.faces) > 0
    assert mesh.visual.material.baseColorTexture.size == (64, 64)
    # the surface is where the splats are drawn (the fusion volume adds its margin around it)
    lo, hi = splat_box(run)
    slack = 6 * (hi - lo).max() / 32  # the volume's margin: the truncation band and one voxel
    assert (mesh.bounds[0] >= lo - slack).all() and (mesh.bounds[1] <= hi + slack).all()
    import pygltflib

    gltf = pygltflib.GLTF2().load(str(run / "mesh.glb"))
    assert len(gltf.meshes) == 1 and len(gltf.images) == 1 and len(gltf.textures) == 1
    prim = gltf.meshes[0].primitives[0]
    assert prim.attributes.TEXCOORD_0 is not None and prim.material is not None
    assert gltf.accessors[prim.indices].count == 3 * len(mesh.faces)


def test_a_trained_run_meshes_to_obj_and_vertex_coloured_ply(run, tmp_path):
    proc = spirula("mesh", run, *MESH, "--format", "obj", "--output", tmp_path / "m.obj")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mtl", "m.obj", "m.png"]
    obj = trimesh.load(tmp_path / "m.obj", force="mesh")
    assert obj.visual.kind == "texture" and len(obj.faces) > 0
    proc = spirula("mesh", run, *MESH, "--color", "vertex", "--format", "ply", "--dataset", run.parent.parent / "data")
    assert proc.returncode == 0, proc.stderr
    ply = trimesh.load(run / "mesh.ply", force="mesh")
    assert ply.visual.kind == "vertex" and len(ply.faces) > 0
    # vertex colours are the splats' base colours: not the black of an unset colour
    assert ply.visual.vertex_colors[:, :3].max() > 0


def test_the_mesh_benchmark_prints_a_line_per_stage():
    """benchmarks/mesh_timing.py (docs/performance.md) at a tiny size: every stage timed."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    args = ["--splats", "3000", "--resolution", "24", "--color", "vertex", "--views", "4", "--size", "32"]
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks/mesh_timing.py"), *args, "--simplify", "500"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(__import__("os").environ, PYTHONPATH=str(root)),
    )
    assert proc.returncode == 0, proc.stderr
    lines = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("mesh_timing ")]
    assert [ln[6] for ln in lines] == ["fuse", "surface", "clean", "simplify", "colour", "export"]
    for ln in lines:
        assert float(ln[7]) >= 0 and "pool" in ln and "rss" in ln
