"""``spirula view MESH --port N``: a mesh (``spirula mesh``'s GLB, or an OBJ or
mesh PLY) in the web viewer, drawn by the browser itself.

Unlike splats (spirula/view/web.py streams Spirula's renders), a mesh is sent
once as GLB bytes to viser's ``scene.add_glb``, which the page parses with
three.js's ``GLTFLoader`` and draws with WebGL: what the browser shows is what
any glTF viewer built on three.js shows of the file (tests/test_mesh_viewers.py
loads it in headless chromium). OBJ and PLY meshes are converted to GLB with
trimesh (the library ``spirula mesh`` exports with). glTF is +Y up, so the
viewer's up is +Y and the first view frames the mesh's bounding box.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spirula.errors import DatasetError

MESH_SUFFIXES = (".glb", ".gltf", ".obj", ".ply")
GLB_MAGIC = b"glTF"
VIEW_DIRECTION = (1.0, 0.6, 1.0)  # from the front-right, a little above (+Y up): the first view
FOV_Y = np.radians(50.0)  # the first view's vertical field of view (set on viser's initial camera)


@dataclass
class MeshAsset:
    """A mesh ready for the browser: ``glb`` the GLB file's bytes, ``lo``/``hi``
    [3] float64 its axis-aligned bounds in the file's (glTF, +Y up) units,
    ``faces`` its triangle count (for the status line)."""

    name: str
    glb: bytes
    lo: np.ndarray
    hi: np.ndarray
    faces: int


def is_mesh_file(path) -> bool:
    """Whether ``spirula view`` should show ``path`` as a mesh: a .glb/.gltf/.obj,
    or a .ply whose header declares faces (a splat PLY has vertices only)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".glb", ".gltf", ".obj"):
        return True
    if suffix != ".ply" or not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    header = head[: head.find(b"end_header")] if b"end_header" in head else b""
    for line in header.decode("ascii", errors="replace").splitlines():
        tok = line.split()
        if len(tok) == 3 and tok[:2] == ["element", "face"] and tok[2].isdigit():
            return int(tok[2]) > 0
    return False


def load_mesh(path) -> MeshAsset:
    """The :class:`MeshAsset` of a mesh file. A GLB is sent as it is (after
    trimesh has read it, so a broken file is refused here, not in the
    browser); OBJ/PLY/glTF are exported to GLB by trimesh. Bad input raises a
    :class:`~spirula.errors.DatasetError` naming ``path`` (one line, exit 2)."""
    import trimesh

    path = Path(path)
    if not path.is_file():
        raise DatasetError("%s: no such mesh file" % path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError("%s: cannot read (%s)" % (path, exc.strerror or exc)) from None
    suffix = path.suffix.lower()
    if suffix == ".glb" and not data.startswith(GLB_MAGIC):
        raise DatasetError("%s: not a GLB file (no 'glTF' magic)" % path)
    try:
        scene = trimesh.load(path, force="scene")
    except Exception as exc:  # trimesh raises many kinds on a malformed file
        why = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise DatasetError("%s: not a readable mesh (%s)" % (path, why)) from None
    faces = sum(len(g.faces) for g in scene.geometry.values() if hasattr(g, "faces"))
    if faces == 0:
        raise DatasetError("%s: holds no triangles" % path)
    lo, hi = np.asarray(scene.bounds, dtype=np.float64)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise DatasetError("%s: non-finite vertex positions" % path)
    glb = data if suffix == ".glb" else scene.export(file_type="glb")
    return MeshAsset(path.name, glb, lo, hi, faces)


def start_view_from_bounds(lo, hi, fov_y: float = FOV_Y):
    """A :class:`~spirula.view.web.StartView` (+Y up) looking at the centre of
    the box ``lo``..``hi`` [3] from :data:`VIEW_DIRECTION`, far enough that the
    box's bounding sphere fits the vertical field of view ``fov_y`` (radians),
    with 10% to spare."""
    from spirula.view.web import StartView

    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    centre = 0.5 * (lo + hi)
    radius = max(0.5 * float(np.linalg.norm(hi - lo)), 1e-6)
    d = np.asarray(VIEW_DIRECTION, np.float64)
    distance = 1.1 * radius / np.sin(0.5 * fov_y)
    return StartView(tuple(centre + distance * d / np.linalg.norm(d)), tuple(centre), (0.0, 1.0, 0.0))


def serve_mesh(asset: MeshAsset, port: int, host: str = "127.0.0.1", *, stop=None, on_ready=None, log=print):
    """Serve ``asset`` in the web viewer until Ctrl-C or until ``stop`` (a
    :class:`threading.Event`) is set; ``on_ready(viewer)`` once it listens.
    The browser draws the mesh: nothing is rendered here."""
    from spirula.view.web import WebViewer

    viewer = WebViewer(port, host, start_view_from_bounds(asset.lo, asset.hi), title="Spirula mesh")
    try:
        viewer.server.initial_camera.fov = FOV_Y
        viewer.server.scene.add_glb("/mesh", asset.glb)
        viewer.set_status("**%s**  \n%s triangles" % (asset.name, f"{asset.faces:,}"))
        log("spirula: web viewer of %s (%s triangles) at %s" % (asset.name, f"{asset.faces:,}", viewer.where()))
        if on_ready is not None:
            on_ready(viewer)
        stop = stop or threading.Event()
        while not stop.wait(0.2):  # a timed wait: Ctrl-C reaches the main thread
            pass
    finally:
        viewer.close()
