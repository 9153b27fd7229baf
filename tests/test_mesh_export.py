"""spirula/mesh/export.py: GLB, OBJ (+MTL+PNG) and PLY of a textured or
vertex-coloured mesh load again in trimesh with the same geometry and
colours; the GLB also loads in a second reader (pygltflib); writes are atomic."""

import numpy as np
import pytest
import trimesh
from mesh_cases import Sphere, colour_field, tsdf_volume

from spirula.errors import SpirulaError
from spirula.mesh.colour import bake_texture, colour_vertices
from spirula.mesh.export import FORMATS, export_mesh
from spirula.mesh.surface import clean_mesh, extract_surface

SIZE = 64


@pytest.fixture(scope="module")
def meshes():
    mesh = clean_mesh(extract_surface(tsdf_volume(Sphere(), n=24)))
    field = lambda p, n: colour_field(p)  # noqa: E731
    return {"texture": bake_texture(mesh, field, size=SIZE), "vertex": colour_vertices(mesh, field)}


def same_surface(a, b):
    # float32 in every format: positions of magnitude <= 1 keep ~6e-8 relative
    assert len(a.faces) == len(b.faces)
    assert abs(a.area - b.area) <= 1e-5 * a.area
    assert abs(a.volume - b.volume) <= 1e-5 * abs(a.volume)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["texture", "vertex"])
def test_every_format_loads_again_in_trimesh(meshes, tmp_path, fmt, kind):
    mesh = meshes[kind]
    path = tmp_path / ("mesh." + fmt)
    written = export_mesh(mesh, path)
    assert written[-1] == path and all(p.is_file() for p in written)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    back = trimesh.load(path, force="mesh")
    same_surface(mesh, back)
    if kind == "texture" and fmt != "ply":
        assert back.visual.kind == "texture"
        image = back.visual.material.baseColorTexture if fmt == "glb" else back.visual.material.image
        assert np.array_equal(np.asarray(image.convert("RGB")), np.asarray(mesh.visual.material.baseColorTexture))
        # every corner keeps its position and UV (float32): the texture lands where it was baked
        from scipy.spatial import cKDTree

        def corners(m):
            return np.hstack([m.vertices[m.faces].reshape(-1, 3), m.visual.uv[m.faces].reshape(-1, 2)])

        dist, _ = cKDTree(corners(mesh)).query(corners(back))
        assert dist.max() <= 1e-6
    else:
        # vertex colours (a texture sampled at the vertices for PLY): the colour field to
        # 8-bit rounding, plus for the sampled texture the field's change over a texel
        # (|grad| 0.4 * ~1 texel of ~0.1 world units at 64^2 on this sphere)
        got = back.visual.vertex_colors[:, :3] / 255.0
        tol = 0.5 / 255 + 1e-6 if kind == "vertex" else 0.05
        assert np.abs(got - colour_field(back.vertices)).max() <= tol


def test_obj_writes_its_material_and_texture_beside_it(meshes, tmp_path):
    written = export_mesh(meshes["texture"], tmp_path / "scan.obj")
    assert sorted(p.name for p in written) == ["scan.mtl", "scan.obj", "scan.png"]
    assert "mtllib scan.mtl" in (tmp_path / "scan.obj").read_text()
    mtl = (tmp_path / "scan.mtl").read_text()
    assert "map_Kd scan.png" in mtl
    assert "Kd 1.00000000 1.00000000 1.00000000" in mtl  # the texture is not darkened


def test_glb_loads_in_pygltflib(meshes, tmp_path):
    from pygltflib import GLTF2

    for kind in ("texture", "vertex"):
        path = tmp_path / (kind + ".glb")
        export_mesh(meshes[kind], path)
        g = GLTF2().load(str(path))
        assert g.asset.version == "2.0"
        (prim,) = g.meshes[0].primitives
        assert prim.indices is not None and prim.attributes.POSITION is not None
        count = g.accessors[prim.indices].count
        assert count == 3 * len(meshes[kind].faces)
        pos = g.accessors[prim.attributes.POSITION]
        assert np.allclose(pos.min, meshes[kind].vertices.min(axis=0), atol=1e-6)
        if kind == "texture":
            assert prim.attributes.TEXCOORD_0 is not None
            mat = g.materials[prim.material]
            tex = g.textures[mat.pbrMetallicRoughness.baseColorTexture.index]
            assert g.images[tex.source].mimeType == "image/png"
        else:
            assert prim.attributes.COLOR_0 is not None
        # the binary chunk holds every buffer view
        blob = g.binary_blob()
        assert all(v.byteOffset + v.byteLength <= len(blob) for v in g.bufferViews)


def test_a_failed_export_leaves_the_old_file(meshes, tmp_path, monkeypatch):
    path = tmp_path / "mesh.glb"
    path.write_bytes(b"old")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("os.fsync", boom)
    with pytest.raises(OSError):
        export_mesh(meshes["vertex"], path)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["mesh.glb"]


def test_unknown_format_and_missing_folder_fail_with_one_line(meshes, tmp_path):
    for bad in (tmp_path / "mesh.stl", tmp_path / "nowhere" / "mesh.glb"):
        with pytest.raises(SpirulaError) as e:
            export_mesh(meshes["vertex"], bad)
        assert str(bad) in str(e.value) and "\n" not in str(e.value)
