"""``spirula mesh``'s GLB opens in a browser glTF viewer and in Blender (issue 14, "done when"):
a sphere of splats meshed through the real pipeline (GPU fusion on virtual
cameras, marching cubes, xatlas UVs, a baked texture, trimesh's GLB export),
checked structurally with pygltflib, then served by ``spirula view MESH.glb
--port`` (spirula/view/mesh.py: viser's ``add_glb``) and loaded in headless
chromium, whose three.js GLTFLoader must parse it without a console error and
draw it: pixels where the mesh projects differ from the empty background. A
truncated GLB is the negative control: the loader's error is logged and
nothing is drawn, so the test would fail on a broken file. Blender (its own
Python module, bpy, headless: scripts/install_blender.sh) imports the same file
with its glTF importer (tests/blender_import.py): one triangle mesh with every
vertex where trimesh reads it, a UV layer and the baked texture on the base
colour; the truncated GLB must fail there too. The browser part skips only when
chromium or chromedriver is missing, as tests/test_web_viewer.py, and the
Blender part when .venv-blender/ is (make test installs both)."""

from __future__ import annotations

import io
import json
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_cli_mesh import sphere_splats, write_ply
from test_web_viewer import _free_port, _wait

from spirula.cli.main import main
from spirula.view.mesh import MeshAsset, load_mesh, serve_mesh

ROOT = Path(__file__).resolve().parents[1]
BLENDER_PYTHON = ROOT / ".venv-blender" / "bin" / "python"  # scripts/install_blender.sh
TEXTURE = 64  # the fixture's --texture-size
LOAD_ERROR = "Error loading GLB"  # what viser's client logs when GLTFLoader.parse fails


@pytest.fixture(scope="module")
def glb(tmp_path_factory):
    """mesh.glb of 2000 splats on a sphere (radius 0.8, tests/mesh_cases.py), through `spirula mesh`."""
    root = tmp_path_factory.mktemp("glb")
    ply = write_ply(root / "sphere.ply", sphere_splats(2000))
    with pytest.raises(SystemExit) as e:
        main(["mesh", str(ply), "--resolution", "24", "--texture-size", str(TEXTURE), "-o", str(root / "mesh.glb")])
    assert e.value.code == 0
    return root / "mesh.glb"


# ---- the file: glTF 2.0's structural rules, read with pygltflib --------------------------

COMPONENT = {5120: "i1", 5121: "u1", 5122: "<i2", 5123: "<u2", 5125: "<u4", 5126: "<f4"}
WIDTH = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}
SIGNATURE = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


def glb_problems(data: bytes) -> list:
    """What breaks the glTF 2.0 spec's structural rules in a GLB's bytes
    (empty: none): every accessor inside its buffer view, every view inside the
    binary chunk, triangle indices within the vertices, POSITION's min/max
    those of its data, and a base-colour texture embedded as PNG/JPEG with its
    true mimeType and a TEXCOORD_0 per vertex."""
    from PIL import Image
    from pygltflib import GLTF2

    g = GLTF2.load_from_bytes(data)
    blob = g.binary_blob() or b""
    bad = []
    if g.asset.version != "2.0":
        bad.append("asset.version %r" % g.asset.version)
    if len(g.buffers) != 1 or g.buffers[0].uri is not None or g.buffers[0].byteLength > len(blob):
        bad.append("the buffer is not the whole binary chunk")
    for i, v in enumerate(g.bufferViews):
        if (v.byteOffset or 0) + v.byteLength > len(blob):
            bad.append("bufferView %d ends past the binary chunk" % i)

    def read(index):
        a = g.accessors[index]
        v = g.bufferViews[a.bufferView]
        dt = np.dtype(COMPONENT[a.componentType])
        size = dt.itemsize * WIDTH[a.type]
        stride = v.byteStride or size
        if (a.byteOffset or 0) + stride * (a.count - 1) + size > v.byteLength:
            bad.append("accessor %d ends past its bufferView" % index)
            return None
        if stride != size:
            bad.append("accessor %d is interleaved (not what trimesh writes)" % index)
            return None
        start = (v.byteOffset or 0) + (a.byteOffset or 0)
        return np.frombuffer(blob, dt, a.count * WIDTH[a.type], start).reshape(a.count, -1)

    for i in range(len(g.accessors)):
        read(i)
    for m in g.meshes:
        for p in m.primitives:
            if p.mode not in (None, 4):
                bad.append("primitive mode %s is not triangles" % p.mode)
            pos = read(p.attributes.POSITION)
            idx = read(p.indices) if p.indices is not None else None
            if pos is None or idx is None:
                bad.append("a primitive without POSITION or indices")
                continue
            a = g.accessors[p.attributes.POSITION]
            if not (np.allclose(a.min, pos.min(0)) and np.allclose(a.max, pos.max(0))):
                bad.append("POSITION min/max are not its data's")
            if len(idx) % 3 or g.accessors[p.indices].componentType not in (5121, 5123, 5125):
                bad.append("indices are not unsigned triangles")
            if idx.size and int(idx.max()) >= len(pos):
                bad.append("index %d >= %d vertices" % (int(idx.max()), len(pos)))
            mat = g.materials[p.material] if p.material is not None else None
            info = mat and mat.pbrMetallicRoughness and mat.pbrMetallicRoughness.baseColorTexture
            if not info:
                continue
            uv = read(p.attributes.TEXCOORD_0) if p.attributes.TEXCOORD_0 is not None else None
            if uv is None or uv.shape != (len(pos), 2) or not np.isfinite(uv).all():
                bad.append("a texture without a finite TEXCOORD_0 per vertex")
            image = g.images[g.textures[info.index].source]
            if image.uri is not None or image.bufferView is None:
                bad.append("the texture image is not embedded")
                continue
            v = g.bufferViews[image.bufferView]
            raw = blob[(v.byteOffset or 0) : (v.byteOffset or 0) + v.byteLength]
            if not raw.startswith(SIGNATURE.get(image.mimeType, b"?")):
                bad.append("texture bytes are not the %s its mimeType says" % image.mimeType)
                continue
            Image.open(io.BytesIO(raw)).load()  # decodes
    return bad


def test_the_meshed_glb_keeps_the_gltf_rules(glb):
    data = glb.read_bytes()
    assert glb_problems(data) == []
    from pygltflib import GLTF2

    g = GLTF2.load_from_bytes(data)
    (prim,) = g.meshes[0].primitives
    assert prim.attributes.TEXCOORD_0 is not None and g.images[0].mimeType == "image/png"


def test_the_glb_check_finds_an_index_past_the_vertices(glb):
    """The check above is not vacuous: the last index set to the vertex count is caught."""
    from pygltflib import GLTF2

    g = GLTF2.load_from_bytes(glb.read_bytes())
    (prim,) = g.meshes[0].primitives
    a, n = g.accessors[prim.indices], g.accessors[prim.attributes.POSITION].count
    v = g.bufferViews[a.bufferView]
    blob = bytearray(g.binary_blob())
    dt = np.dtype(COMPONENT[a.componentType])
    end = (v.byteOffset or 0) + (a.byteOffset or 0) + a.count * dt.itemsize
    blob[end - dt.itemsize : end] = np.array([n], dt).tobytes()
    g.set_binary_blob(bytes(blob))
    assert glb_problems(b"".join(g.save_to_bytes())) == ["index %d >= %d vertices" % (n, n)]


# ---- the browser: three.js's GLTFLoader parses and draws it --------------------------------


class Page:
    """``asset`` served by serve_mesh (as `spirula view MESH --port`) and open in ``browser``."""

    def __init__(self, browser, asset):
        self.browser, self.console = browser, []
        ready, self.stop = [], threading.Event()
        kwargs = dict(stop=self.stop, on_ready=ready.append, log=lambda msg: None)
        self.server = threading.Thread(target=serve_mesh, args=(asset, _free_port()), kwargs=kwargs, daemon=True)
        self.server.start()
        _wait(lambda: ready or not self.server.is_alive(), 30, "the server to listen")
        assert ready, "serve_mesh ended before listening"
        browser.get_log("browser")  # drop an earlier page's messages
        browser.get(ready[0].url)

    def logs(self) -> list:
        self.console += [e["message"] for e in self.browser.get_log("browser")]  # get_log drains
        return self.console

    def canvas(self) -> np.ndarray:
        """[H,W,3] int16 screenshot of the page's three.js canvas (its largest)."""
        from PIL import Image
        from selenium.webdriver.common.by import By

        canvases = self.browser.find_elements(By.TAG_NAME, "canvas")
        if not canvases:
            return None
        c = max(canvases, key=lambda c: c.size["width"] * c.size["height"])
        return np.asarray(Image.open(io.BytesIO(c.screenshot_as_png)).convert("RGB"), np.int16)

    def settled(self, quiet=0.5, timeout=20) -> np.ndarray:
        """The canvas once it has not changed for ``quiet`` seconds."""
        end, last, since = time.monotonic() + timeout, None, time.monotonic()
        while time.monotonic() < end:
            img = self.canvas()
            if img is None or last is None or img.shape != last.shape or (img != last).any():
                last, since = img, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return img
            time.sleep(0.2)
        pytest.fail("the canvas never settled")

    def close(self):
        self.browser.get("about:blank")  # leave before the server stops: no connection errors
        self.stop.set()
        self.server.join(timeout=10)


def centre(img, frac=0.2):
    """The middle ``frac`` x ``frac`` of an image: inside the projected mesh
    (the first view frames the sphere's bounding sphere at 1.1x: the sphere
    covers the middle 1/(1.1 sqrt 3) = 52% of the view's height)."""
    h, w = img.shape[:2]
    rows = slice(int(h * (0.5 - frac / 2)), int(h * (0.5 + frac / 2)))
    return img[rows, int(w * (0.5 - frac / 2)) : int(w * (0.5 + frac / 2))]


def test_a_browser_glTF_viewer_draws_the_meshed_glb(glb, browser, tmp_path):
    asset = load_mesh(glb)
    assert asset.glb == glb.read_bytes()  # sent as written
    # negative control first: the same file cut short (its bounds, so the same view)
    broken = MeshAsset("broken.glb", asset.glb[: len(asset.glb) // 2], asset.lo, asset.hi, asset.faces)
    page = Page(browser, broken)
    try:
        _wait(lambda: any(LOAD_ERROR in m for m in page.logs()), 20, "the loader's error on a truncated GLB")
        empty = page.settled()
    finally:
        page.close()
    from PIL import Image

    Image.fromarray(empty.astype(np.uint8)).save(tmp_path / "empty.png")
    # nothing drawn: the middle is the viewer's background (its commonest colour) but for
    # viser's faint grid lines (within 30 levels of it)
    background = np.median(empty.reshape(-1, 3), axis=0)
    assert (np.abs(centre(empty) - background).max(-1) > 30).mean() == 0

    page = Page(browser, asset)
    try:

        def drawn():  # most of the middle far from the background
            img = page.canvas()
            if img is None or img.shape != empty.shape:
                return False
            return (np.abs(centre(img) - centre(empty)).max(-1) > 30).mean() > 0.5

        _wait(drawn, 20, "the mesh to be drawn")
        shown = page.settled()
        logs = page.logs()
    finally:
        page.close()
    Image.fromarray(shown.astype(np.uint8)).save(tmp_path / "shown.png")  # for a human looking at a failure
    assert not [m for m in logs if LOAD_ERROR in m or "error" in m.lower()], logs
    # the middle is the mesh's: most pixels differ from the background by far more than viser's
    # grid lines (30 levels); not all, as faces lit head-on reach near-white; and the middle is
    # not flat: lit and textured (the test sees the sphere's colour gradient, shown.png)
    assert (np.abs(centre(shown) - centre(empty)).max(-1) > 30).mean() > 0.75
    assert np.ptp(centre(shown), axis=(0, 1)).max() > 30


# ---- spirula view MESH: what it accepts ---------------------------------------------------


def test_obj_and_ply_meshes_become_glb_and_frame_their_bounds(glb, tmp_path):
    import trimesh

    mesh = trimesh.load(glb, force="mesh")
    for name in ("m.obj", "m.ply"):
        mesh.export(tmp_path / name)
        asset = load_mesh(tmp_path / name)
        assert asset.glb.startswith(b"glTF") and asset.faces == len(mesh.faces)
        # float32 positions in every format
        np.testing.assert_allclose(np.stack([asset.lo, asset.hi]), mesh.bounds, atol=1e-6)
    from spirula.view.mesh import FOV_Y, is_mesh_file, start_view_from_bounds

    assert is_mesh_file(tmp_path / "m.ply") and not is_mesh_file(glb.parent / "sphere.ply")  # a splat PLY
    s = start_view_from_bounds(asset.lo, asset.hi)
    radius = np.linalg.norm(asset.hi - asset.lo) / 2
    d = np.linalg.norm(np.subtract(s.position, s.look_at))
    assert np.arcsin(radius / d) < FOV_Y / 2 and s.up == (0.0, 1.0, 0.0)


def test_a_bad_mesh_is_one_line_and_exit_status_2(glb, tmp_path, capsys):
    cut = tmp_path / "cut.glb"
    cut.write_bytes(glb.read_bytes()[:1000])
    text = tmp_path / "text.glb"
    text.write_text("hello")
    cases = (
        (tmp_path / "missing.glb", ["--port", "0"], "no such mesh file"),
        (cut, ["--port", "0"], "not a readable mesh"),
        (text, ["--port", "0"], "not a GLB file"),
        (glb, [], "add --port"),  # no window for meshes
    )
    for source, args, says in cases:
        with pytest.raises(SystemExit) as exc:
            main(["view", str(source), *args])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0] and str(source) in err[0], err


# ---- Blender: its own glTF importer, headless ------------------------------------------


def blender_import(path: Path) -> dict:
    """What Blender's glTF importer makes of ``path`` (tests/blender_import.py's JSON)."""
    if not BLENDER_PYTHON.exists():
        pytest.skip("needs Blender's Python module (scripts/install_blender.sh, run by make test)")
    cmd = [str(BLENDER_PYTHON), str(ROOT / "tests" / "blender_import.py"), str(path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stdout.splitlines() if line.startswith("BLENDER-JSON ")]
    assert r.returncode == 0 and lines, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(lines[-1].split(" ", 1)[1])


def test_blender_imports_the_meshed_glb(glb):
    """One triangle mesh, its vertices trimesh's (Blender turns glTF's +Y up into its +Z up:
    (x, y, z) -> (x, -z, y); both read the same float32 positions, so they agree exactly),
    a UV layer, and the baked texture, decoded, on the Principled BSDF's base colour."""
    import trimesh

    got = blender_import(glb)
    assert got["imported"] and len(got["meshes"]) == 1, got.get("error")
    mesh = got["meshes"][0]
    want = trimesh.load(glb, force="mesh")
    v = np.asarray(mesh["vertices"], np.float64)
    gltf = np.stack([v[:, 0], v[:, 2], -v[:, 1]], axis=1)
    assert gltf.shape == want.vertices.shape and mesh["faces"] == len(want.faces) and mesh["triangles"]
    order = lambda a: a[np.lexsort(a.T)]  # noqa: E731  the importer may reorder vertices
    np.testing.assert_array_equal(order(gltf.astype(np.float32)), order(np.asarray(want.vertices, np.float32)))
    assert mesh["uv_layers"] == 1
    assert mesh["base_color_textures"] == [{"size": [TEXTURE, TEXTURE], "has_data": True}]


def test_blender_refuses_a_truncated_glb(glb, tmp_path):
    """The negative control: the same file cut in half does not import."""
    cut = tmp_path / "cut.glb"
    data = glb.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    got = blender_import(cut)
    assert not got["imported"] and "GLB" in got["error"]
