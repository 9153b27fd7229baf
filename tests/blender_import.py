"""Run by Blender's own Python (.venv-blender/bin/python, scripts/install_blender.sh), not by
pytest: import a glTF file with Blender's glTF importer, as File > Import > glTF 2.0 does, and
print one JSON line describing what Blender made of it (tests/test_mesh_viewers.py reads it).

    .venv-blender/bin/python tests/blender_import.py MESH.glb
"""

import json
import sys

import bpy


def describe(path: str) -> dict:
    bpy.ops.wm.read_factory_settings(use_empty=True)
    try:
        result = bpy.ops.import_scene.gltf(filepath=path)
    except RuntimeError as e:  # the importer reports a broken file as an operator error
        return {"imported": False, "error": str(e).strip().splitlines()[-1]}
    out = {"imported": "FINISHED" in result, "meshes": []}
    for obj in bpy.data.objects:
        if obj.type != "MESH":
            continue
        me = obj.data
        world = obj.matrix_world
        verts = [list(world @ v.co) for v in me.vertices]
        textures = []
        for mat in me.materials:
            nodes = mat.node_tree.nodes if mat and mat.use_nodes else []
            for node in nodes:
                if node.type != "BSDF_PRINCIPLED":
                    continue
                for link in node.inputs["Base Color"].links:
                    src = link.from_node
                    if src.type == "TEX_IMAGE" and src.image is not None:
                        textures.append({"size": list(src.image.size), "has_data": bool(src.image.has_data)})
        out["meshes"].append(
            {
                "vertices": verts,
                "faces": len(me.polygons),
                "triangles": all(len(p.vertices) == 3 for p in me.polygons),
                "uv_layers": len(me.uv_layers),
                "base_color_textures": textures,
            }
        )
    return out


if __name__ == "__main__":
    argv = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else sys.argv[1:]
    print("BLENDER-JSON " + json.dumps(describe(argv[0])))
