"""Write a mesh as GLB, OBJ (+MTL+PNG) or PLY with trimesh (docs/mesh.md, "Export").

Every file is written to a temporary name in the destination folder and
renamed into place, so a reader never sees a half-written file and an
interrupted export leaves the old file (if any) as it was.

- ``glb`` (default): one binary glTF 2.0 file, texture embedded (PNG) as the
  PBR base colour, or vertex colours as ``COLOR_0``.
- ``obj``: ``NAME.obj`` + ``NAME.mtl`` + ``NAME.png`` (a textured mesh), or
  vertex colours as the ``v x y z r g b`` extension.
- ``ply``: binary PLY with per-vertex colours; a texture is sampled at the
  vertices (PLY has no standard texture reference).
"""

from __future__ import annotations

from pathlib import Path

from spirula.errors import SpirulaError
from spirula.files import atomic_write

FORMATS = ("glb", "obj", "ply")


def format_of(path, fmt: str | None = None) -> str:
    """``fmt`` if given, else the format named by ``path``'s suffix; checked against FORMATS."""
    fmt = (fmt or Path(path).suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise SpirulaError("%s: unknown mesh format %r (one of %s)" % (path, fmt, ", ".join(FORMATS)))
    return fmt


def export_mesh(mesh, path, fmt: str | None = None) -> list:
    """Write ``mesh`` (a ``trimesh.Trimesh`` with texture or vertex colours)
    to ``path`` in ``fmt`` (default: from the suffix). Returns the paths
    written (the OBJ's MTL and PNG beside it)."""
    path = Path(path)
    fmt = format_of(path, fmt)
    if path.parent and not path.parent.is_dir():
        raise SpirulaError("%s: the folder %s does not exist" % (path, path.parent))
    if fmt == "glb":
        files = {path.name: mesh.export(file_type="glb")}
    elif fmt == "ply":
        m = mesh
        if getattr(mesh.visual, "kind", None) == "texture":
            m = mesh.copy()
            m.visual = mesh.visual.to_color()
        files = {path.name: m.export(file_type="ply", encoding="binary")}
    else:
        from trimesh.exchange.obj import export_obj

        textured = getattr(mesh.visual, "kind", None) == "texture"
        text, extra = export_obj(
            mesh, include_texture=textured, include_color=not textured, return_texture=True, mtl_name=path.stem + ".mtl"
        )
        files = _rename_texture(dict(extra), path.stem)
        files[path.name] = text.encode() if isinstance(text, str) else text
    written = []
    for name in sorted(files, key=lambda n: n == path.name):  # the main file last: complete once it appears
        target = path.parent / name
        atomic_write(target, files[name])
        written.append(target)
    return written


def _rename_texture(files: dict, stem: str) -> dict:
    """trimesh names the OBJ texture after the material (``material_0.png``):
    name it after the mesh instead (``NAME.png``), in the MTL too."""
    mtl = stem + ".mtl"
    images = [n for n in files if n != mtl]
    if mtl not in files or len(images) != 1:
        return files
    old = images[0]
    new = stem + Path(old).suffix
    text = files[mtl].decode() if isinstance(files[mtl], bytes) else files[mtl]
    return {mtl: text.replace(old, new).encode(), new: files[old]}
