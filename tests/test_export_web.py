"""The share formats read by others: PlayCanvas's ``@playcanvas/splat-transform``
(npm, pinned in tests/web/package.json, installed by ``make test``: ``npm ci``
in tests/web) converts each file Spirula wrote back to a PLY, and the splats
must be what Spirula's own reader decodes (the same quantised values: what the
round trips of tests/test_export.py bound against the original); and it writes
a glTF that Spirula's reader must read as the original. Spark
(``@sparkjsdev/spark`` on three.js, pinned there too) draws each file served
from 127.0.0.1 in headless Chromium from one of Spirula's cameras, as Spirula
renders it. The self-contained HTML page is opened from disk in headless
Chromium and compared with Spirula's own render of the same camera. Skipped,
with the reason, without node or the packages (tests/web/node_modules) or the
browser."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

from spirula.data import write_splat_ply
from spirula.export import common, read_splats, write_splats

WEB = Path(__file__).resolve().parent / "web"
SPLAT_TRANSFORM = WEB / "node_modules" / ".bin" / "splat-transform"

pytestmark = pytest.mark.slow


def _splat_transform(*args):
    if shutil.which("node") is None:
        pytest.skip("needs node (scripts/install_system_deps.sh --browser-tests)")
    if not SPLAT_TRANSFORM.exists():
        pytest.skip("needs @playcanvas/splat-transform: npm ci in tests/web (make test does)")
    res = subprocess.run([str(SPLAT_TRANSFORM), "-w", *map(str, args)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr + res.stdout


def _scene(n=700, degree=3, seed=2):
    rng = np.random.default_rng(seed)
    K = (degree + 1) ** 2
    return dict(
        means=rng.normal(size=(n, 3)).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        log_scales=rng.uniform(-6, -1, (n, 3)).astype(np.float32),
        opacity_logits=rng.normal(size=n).astype(np.float32),
        sh_coeffs=np.concatenate([rng.normal(size=(n, 1, 3)), rng.uniform(-0.9, 0.9, (n, K - 1, 3))], axis=1).astype(
            np.float32
        ),
        sh_degree=degree,
    )


def _same_quats(a, b, atol):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    s = np.sign(np.sum(a * b, axis=1, keepdims=True))
    np.testing.assert_allclose(a, s * b, atol=atol)


@pytest.mark.parametrize(
    "fmt,suffix,quat_atol",
    [
        ("sog", ".sog", 1e-6),
        ("ply-compressed", ".compressed.ply", 1e-6),
        ("splat", ".splat", 1e-2),
        ("spz", ".spz", 1e-6),
    ],
)
def test_splat_transform_reads_what_spirula_wrote(tmp_path, fmt, suffix, quat_atol):
    p = _scene()
    path = tmp_path / ("s" + suffix)
    write_splats(path, p, fmt)
    _splat_transform(path, tmp_path / "back.ply")
    theirs, ours = read_splats(tmp_path / "back.ply"), read_splats(path)
    if fmt == "spz":
        # splat-transform 3.10 reads SPZ's bytes with no axis change (its comment: "no coordinate
        # conversion"); Niantic's library, and so Spirula, store right-up-back: y and z negated
        theirs = common.flip_axes(theirs, common.RDF_TO_RUB)
    assert theirs["sh_degree"] == ours["sh_degree"]
    np.testing.assert_allclose(theirs["means"], ours["means"], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(theirs["log_scales"], ours["log_scales"], atol=1e-5)
    np.testing.assert_allclose(
        common.sigmoid(theirs["opacity_logits"]), common.sigmoid(ours["opacity_logits"]), atol=1e-5
    )
    np.testing.assert_allclose(theirs["sh_coeffs"], ours["sh_coeffs"], atol=1e-5)
    # .splat: splat-transform maps a byte b to b/255*2-1, antimatter15's viewer (and Spirula) to (b-128)/128
    _same_quats(theirs["quats"], ours["quats"], quat_atol)


def test_spirula_reads_the_glb_splat_transform_writes(tmp_path):
    p = _scene(300, 2)
    write_splat_ply(tmp_path / "s.ply", p["means"], p["quats"], p["log_scales"], p["opacity_logits"], p["sh_coeffs"])
    _splat_transform(tmp_path / "s.ply", tmp_path / "s.glb")
    r = read_splats(tmp_path / "s.glb")
    np.testing.assert_allclose(r["means"], p["means"], atol=1e-6)  # the same axes: glTF's from the PLY's
    np.testing.assert_allclose(r["log_scales"], p["log_scales"], atol=1e-5)
    np.testing.assert_allclose(r["sh_coeffs"], p["sh_coeffs"], atol=1e-6)
    # its rotations turn the splats' own axes differently (R F where Spirula has F R F), the same covariance
    np.testing.assert_allclose(_covariance(r), _covariance(p), atol=1e-6)


def _three_reads(path) -> dict:
    """three.js's own KHR_gaussian_splatting reader (tests/web/read_gltf_three.mjs: GLTFLoader
    with GLTFGaussianSplatLoaderExtension, three 0.187.0 under node) on ``path``: what it
    builds the splats' GPU buffers from, as numpy arrays."""
    if shutil.which("node") is None:
        pytest.skip("needs node (scripts/install_system_deps.sh --browser-tests)")
    if not (
        WEB / "node_modules" / "three" / "examples" / "jsm" / "loaders" / "GLTFGaussianSplatLoaderExtension.js"
    ).exists():
        pytest.skip("needs three: npm ci in tests/web (make test does)")
    res = subprocess.run(
        ["node", "read_gltf_three.mjs", str(path)], cwd=WEB, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    out = {"type": got["type"], "matrix": np.array(got["matrix"])}
    for name, value in got.items():
        if isinstance(value, dict):
            out[name] = np.array(value["array"]).reshape(-1, value["itemSize"])
    return out


def test_three_reads_the_gltf_spirula_wrote(tmp_path):
    """three.js's GLTFLoader with its KHR_gaussian_splatting extension, an implementation
    written against the specification by others, reads Spirula's `.glb` into the splats it
    draws: centres and covariances in glTF's axes (Spirula's world with x and y negated, a
    half turn about z), RGBA bytes from SH degree 0 and the sigmoid opacity, and each SH
    band's coefficients as its bytes (v 128 + 128), each multiplied by (-1)^|m| (the half
    turn, on a real SH basis function of order m: (x, y) appear |m| times). Bytes within one
    level (float32 rounding at .5), the rest to float32 rounding."""
    from spirula.export import common as c

    p = _scene(300, 3)
    path = tmp_path / "s.glb"
    write_splats(path, p, "gltf")
    got = _three_reads(path)
    assert got["type"] == "GaussianSplat"
    np.testing.assert_array_equal(got["matrix"], np.eye(4).ravel())  # no node transform
    half_turn = np.array([-1.0, -1.0, 1.0])
    np.testing.assert_allclose(got["position"], p["means"] * half_turn, rtol=1e-6, atol=1e-6)
    cov = _covariance(p) * np.outer(half_turn, half_turn)
    want = cov[:, [0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]]
    np.testing.assert_allclose(got["covariance"], want, rtol=1e-5, atol=1e-7 * np.abs(want).max())
    dc = p["sh_coeffs"][:, 0].astype(np.float64)
    rgba = np.concatenate(
        [(dc * c.SH_C0 + 0.5) * 255, c.sigmoid(p["opacity_logits"].astype(np.float64))[:, None] * 255], 1
    )
    assert np.abs(got["color"] - np.clip(rgba, 0, 255)).max() <= 1.0
    words = {1: 3, 2: 4, 3: 6}  # three's SH_BAND_WORDS: a band's bytes, four a word
    for degree in (1, 2, 3):
        band = got["sphericalHarmonics%d" % degree].astype(np.uint32)
        raw = band.astype("<u4").view(np.uint8).reshape(len(band), 4 * words[degree])[:, : 3 * (2 * degree + 1)]
        m = np.arange(-degree, degree + 1)
        coefs = p["sh_coeffs"][:, degree * degree : (degree + 1) ** 2].astype(np.float64)  # [N, 2l+1, 3]
        want = np.clip((coefs * ((-1.0) ** np.abs(m))[None, :, None]).reshape(len(band), -1) * 128 + 128, 0, 255)
        assert np.abs(raw - want).max() <= 1.0, degree


def _covariance(p):
    from spirula.reference.projection import quat_to_rotmat

    q = p["quats"] / np.linalg.norm(p["quats"], axis=1, keepdims=True)
    M = quat_to_rotmat(q) * np.exp(p["log_scales"].astype(np.float64))[:, None, :]
    return M @ M.transpose(0, 2, 1)


# -- the HTML page in a browser ------------------------------------------------------------
def test_html_page_opens_from_disk_and_draws_what_spirula_renders(tmp_path, browser, device):
    """The page's first frame of a camera given in its URL, against Spirula's render of the
    same camera and the same splats (base colour only, as the page has them): the mean
    absolute difference under 4% of full scale (per-splat against per-pixel depth order,
    8-bit quaternions in the page)."""
    import base64
    import io

    from PIL import Image

    from spirula.render.api import rasterization
    from spirula.render.renderer import activate_splats

    rng = np.random.default_rng(4)
    n = 400
    p = dict(
        means=(rng.uniform(-1, 1, (n, 3)) * [1, 1, 0.3]).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        log_scales=np.log(rng.uniform(0.03, 0.12, (n, 3))).astype(np.float32),
        opacity_logits=rng.normal(1.0, 1.0, n).astype(np.float32),
        sh_coeffs=rng.normal(0, 1, (n, 1, 3)).astype(np.float32),
        sh_degree=0,
    )
    page = tmp_path / "s.html"
    write_splats(page, p, "html")
    W, H = 160, 120
    V = np.eye(4)
    V[2, 3] = 3.0
    K = np.array([[150.0, 0, W / 2], [0, 150.0, H / 2], [0, 0, 1]])
    cam = list(V.ravel()) + [K[0, 0], K[1, 1], K[0, 2], K[1, 2], W, H]
    browser.get(page.as_uri() + "#camera=" + json.dumps(cam))
    import time

    for _ in range(100):
        if browser.execute_script("return window.spirulaReady === true"):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the page drew nothing: %s" % browser.get_log("browser"))
    url = browser.execute_script("return document.getElementById('c').toDataURL('image/png')")
    shot = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",")[1]))).convert("RGB")) / 255.0
    a = activate_splats(p)
    colors, _, _, _ = rasterization(
        a["means"], a["quats"], a["scales"], a["opacities"], a["sh_coeffs"], V[None], K[None], W, H, sh_degree=0
    )
    ours = np.clip(np.asarray(colors)[0][..., :3], 0, 1)
    diff = np.abs(shot - ours).mean()
    assert shot.max() > 0.1 and diff < 0.04, diff


# -- Spark, a maintained three.js splat renderer, in a browser ------------------------------
def _spark_scene(n=400, degree=3, seed=4):
    """Splats in front of the camera, no mirror symmetry; base colours inside (0, 1) and
    view-dependent terms a trained scene's size (Spark keeps a splat's base colour in 8 bits
    over [0, 1], where Spirula, as 3DGS, clamps only below 0)."""
    rng = np.random.default_rng(seed)
    K = (degree + 1) ** 2
    return dict(
        means=(rng.uniform(-1, 1, (n, 3)) * [1, 1, 0.3]).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        log_scales=np.log(rng.uniform(0.03, 0.12, (n, 3))).astype(np.float32),
        opacity_logits=rng.normal(1.0, 1.0, n).astype(np.float32),
        sh_coeffs=np.concatenate(
            [rng.uniform(-1.2, 1.2, (n, 1, 3)), rng.uniform(-0.15, 0.15, (n, K - 1, 3))], axis=1
        ).astype(np.float32),
        sh_degree=degree,
    )


def _spark_camera(W=160, H=120):
    """A world-to-camera matrix turned about two axes and intrinsics with fx != fy and the
    principal point off centre: what a wrong aspect or offset sign would move."""
    a, b = 0.3, -0.2
    Ry = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    Rx = np.array([[1, 0, 0], [0, np.cos(b), -np.sin(b)], [0, np.sin(b), np.cos(b)]])
    V = np.eye(4)
    V[:3, :3] = Rx @ Ry
    V[:3, 3] = [0.1, -0.05, 3.0]
    K = np.array([[150.0, 0, W / 2 + 7], [0, 140.0, H / 2 - 5], [0, 0, 1]])
    return V, K, W, H


@contextlib.contextmanager
def _served(folder):
    """``folder`` over HTTP on 127.0.0.1 (a free port), quietly: the base URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d/" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _wait_for(browser, url, name, timeout):
    """Load ``url`` and wait for the page's ``window.<name>Ready`` (its ``<name>Error``, or
    the timeout: the test fails with the page's console)."""
    import time

    browser.get(url)
    end = time.time() + timeout
    script = "return [window.%sReady === true, window.%sError || null]" % (name, name)
    while True:
        done, error = browser.execute_script(script)
        if done:
            return
        if error or time.time() > end:
            pytest.fail("the page drew nothing: %s %s" % (error, browser.get_log("browser")))
        time.sleep(0.1)


def _spark_frame(browser, url, timeout=60.0):
    """tests/web/spark.html's canvas as [H,W,3] floats in [0, 1], once it says it is drawn."""
    import base64
    import io

    from PIL import Image

    _wait_for(browser, url, "spark", timeout)
    data = browser.execute_script("return document.querySelector('canvas').toDataURL('image/png')")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data.split(",")[1]))).convert("RGB")) / 255.0


def _draw(tmp_path, modules, page, query, frame):
    """tests/web/``page`` served from 127.0.0.1 with tmp_path's files and ``modules`` (as
    node_modules), opened with the JSON ``query`` (its ``camera`` given as (V, K, W, H), sent
    as the pages read it); returns ``frame(url)``."""
    for name in (page, "camera.mjs"):  # the page, and the camera both pages place
        shutil.copy(WEB / name, tmp_path / name)
    (tmp_path / "node_modules").symlink_to(modules, target_is_directory=True)
    V, K, W, H = query["camera"]
    query = dict(query, camera=list(V.ravel()) + [K[0, 0], K[1, 1], K[0, 2], K[1, 2], W, H])
    with _served(tmp_path) as base:
        return frame(base + page + "?" + urllib.parse.quote(json.dumps(query)))


def _spirula_render(p, V, K, W, H):
    from spirula.render.api import rasterization
    from spirula.render.renderer import activate_splats

    a = activate_splats(p)
    colors, _, _, _ = rasterization(
        a["means"],
        a["quats"],
        a["scales"],
        a["opacities"],
        a["sh_coeffs"],
        V[None],
        K[None],
        W,
        H,
        sh_degree=p["sh_degree"],
    )
    return np.clip(np.asarray(colors)[0][..., :3], 0, 1)


@pytest.fixture
def spark_modules():
    """tests/web/node_modules with Spark and three.js (before the browser starts)."""
    modules = WEB / "node_modules"
    if not ((modules / "@sparkjsdev" / "spark").exists() and (modules / "three").exists()):
        pytest.skip("needs @sparkjsdev/spark and three: npm ci in tests/web (make test does)")
    return modules


# Spark's frame against Spirula's render of what Spirula decodes from the same file. Measured
# on chromium's SwiftShader against lavapipe, all five formats: mean abs 0.0026-0.0038, PSNR
# 44.6-47.8 dB (8-bit blending in WebGL, Spark's 8-bit colours and log scales, its elliptical
# 3-sigma cut). Bounds with room for other GPUs, tight enough that 2% of the splats missing
# (34.6 dB), the SH left out (28.1 dB), the aspect from W/H (24.4 dB), SPZ's axes left as
# stored (16.4 dB) or the principal point mirrored (13.0 dB) fail: docs/export.md
SPARK_MAX_MAD = 0.006
SPARK_MIN_PSNR = 40.0


@pytest.mark.parametrize(
    "fmt,suffix,axes",
    [
        ("spz", ".spz", "RUB"),  # Niantic's axes: the page turns the mesh back by a half turn about x
        ("sog", ".sog", "RDF"),
        ("ply-compressed", ".compressed.ply", "RDF"),
        ("splat", ".splat", "RDF"),
        ("ply", ".ply", "RDF"),
    ],
)
def test_spark_draws_what_spirula_renders(tmp_path, spark_modules, browser, device, fmt, suffix, axes):
    """Spark (``@sparkjsdev/spark`` with three.js, from tests/web/node_modules, served from
    127.0.0.1) draws the exported file from one of Spirula's cameras in headless Chromium;
    its frame is compared with Spirula's render of the splats Spirula reads back from the
    same file (so the format's own quantisation, bounded by tests/test_export.py, is not
    counted twice), and the bound must reject that render mirrored or upside down."""
    name = "s" + suffix
    write_splats(tmp_path / name, _spark_scene(), fmt)
    V, K, W, H = _spark_camera()

    def frame(url):
        shot = _spark_frame(browser, url)
        return shot, np.array(browser.execute_script("return window.sparkProjection")).reshape(4, 4).T

    query = dict(file=name, axes=axes, camera=(V, K, W, H))
    shot, projection = _draw(tmp_path, spark_modules, "spark.html", query, frame)
    # the three.js camera's projection is OpenCV's K on OpenGL's axes (near 0.01, far 1000)
    n, f = 0.01, 1000.0
    expected = [
        [2 * K[0, 0] / W, 0, 1 - 2 * K[0, 2] / W, 0],
        [0, 2 * K[1, 1] / H, 2 * K[1, 2] / H - 1, 0],
        [0, 0, -(f + n) / (f - n), -2 * f * n / (f - n)],
        [0, 0, -1, 0],
    ]
    np.testing.assert_allclose(projection, expected, rtol=1e-5, atol=1e-7)
    assert shot.shape == (H, W, 3)
    ours = _spirula_render(read_splats(tmp_path / name), V, K, W, H)

    def mad_psnr(a, b):
        return np.abs(a - b).mean(), -10 * np.log10(np.mean((a - b) ** 2))

    mad, psnr = mad_psnr(shot, ours)
    print("%s: Spark vs Spirula: mean abs %.4f, PSNR %.1f dB" % (fmt, mad, psnr))
    assert shot.mean() > 0.05 and mad < SPARK_MAX_MAD and psnr > SPARK_MIN_PSNR, (mad, psnr)
    for wrong in (ours[:, ::-1], ours[::-1]):
        assert mad_psnr(shot, wrong)[0] > 4 * SPARK_MAX_MAD


def _three_frame(browser, url, W, H, timeout=120.0):
    """tests/web/three_gltf.html's frame as [H,W,3] floats in [0, 1], once it is read."""
    _wait_for(browser, url, "three", timeout)
    px = np.array(browser.execute_script("return window.threePixels"), np.float64).reshape(H, W, 4)
    return px[..., :3] / 255.0


# three.js's frame of the glTF against Spirula's render, measured on SwiftShader's WebGPU
# against lavapipe: mean abs 0.0184, PSNR 30.0 dB; mirrored, 0.117 / 14.9 dB (rows) and
# 0.227 / 10.6 dB (columns). Lower than Spark's agreement by design of three's renderer: it
# scales each splat's opacity by sqrt(det / det with the 0.3 px^2 blur) (Mip-Splatting's
# compensation; Spirula, as 3DGS, adds the blur alone) and cuts at 2 sigma (Spirula: alpha
# 1/255 within 3.33), so its frame is ~4% darker (median ratio 0.958), and it quantises SH to
# 8 bits (v 128 + 128)
THREE_MAX_MAD = 0.03
THREE_MIN_PSNR = 27.0


def test_three_draws_the_gltf_as_spirula_renders(tmp_path, spark_modules, webgpu_browser, device):
    """three.js's own Gaussian splat renderer (GaussianSplat on WebGPURenderer, SwiftShader's
    WebGPU in headless Chromium; tests/web/three_gltf.html, served from 127.0.0.1) draws
    Spirula's `.glb` from one of Spirula's cameras as Spirula renders the same splats, within
    the bounds above, and the bound rejects that frame mirrored either way."""
    write_splats(tmp_path / "s.glb", _spark_scene(), "gltf")
    V, K, W, H = _spark_camera()
    query = dict(file="s.glb", camera=(V, K, W, H))
    shot = _draw(tmp_path, spark_modules, "three_gltf.html", query, lambda url: _three_frame(webgpu_browser, url, W, H))
    ours = _spirula_render(read_splats(tmp_path / "s.glb"), V, K, W, H)

    def mad_psnr(a, b):
        return np.abs(a - b).mean(), -10 * np.log10(np.mean((a - b) ** 2))

    mad, psnr = mad_psnr(shot, ours)
    print("three.js vs Spirula: mean abs %.4f, PSNR %.1f dB" % (mad, psnr))
    assert shot.mean() > 0.05 and mad < THREE_MAX_MAD and psnr > THREE_MIN_PSNR, (mad, psnr)
    for wrong in (ours[:, ::-1], ours[::-1]):
        assert mad_psnr(shot, wrong)[0] > 2.5 * THREE_MAX_MAD


def _trained_splats(root, steps=300):
    """The tiny scene (tests/train_cases.py, 64 x 48) trained ``steps`` MCMC steps with the SH
    degree raised every 50 (to 3 by step 150), as Spirula exports a run: the splats and the
    scene (for its cameras)."""
    from train_cases import tiny_scene

    from spirula.backends import get_device
    from spirula.train.config import TrainConfig
    from spirula.train.trainer import Trainer

    scene = tiny_scene(root)
    cfg = TrainConfig.from_settings(iterations=steps, cap_max=4000, sh_every=50, seed=0)
    trainer = Trainer(scene, cfg, get_device())
    try:
        for _ in range(steps):
            trainer.train_step()
        a = trainer.splat_arrays()
    finally:
        trainer.free()
    splats = dict(means=a["means"], quats=a["quats"], log_scales=a["scales"], opacity_logits=a["opacities"],
                  sh_coeffs=a["sh"], sh_degree=3)  # fmt: skip
    return splats, scene


# Spark on a trained scene against Spirula, measured on SwiftShader against lavapipe (the tiny
# scene trained 300 steps, its first test camera): 33.8 dB (SPZ), 33.3 dB (PLY), mean abs 0.012
# and 0.013; mirrored 10.6 dB. Lower than the synthetic scene's 44-48 dB: trained splats reach
# off screen (Spark drops a centre past 1.4 frustums, Spirula clamps the Jacobian) and carry
# base colours outside [0, 1] (Spark's 8 bits over [0, 1]): docs/export.md
SPARK_TRAINED_MIN_PSNR = 30.0


@pytest.mark.parametrize("fmt,suffix,axes", [("spz", ".spz", "RUB"), ("ply", ".ply", "RDF")])
def test_spark_draws_a_trained_scene_as_spirula_renders(tmp_path, spark_modules, browser, device, fmt, suffix, axes):
    """A trained scene, not a synthetic one: splats grown and relocated by MCMC, SH to degree 3,
    some large and some off screen. Spark draws it from one of the scene's own cameras as
    Spirula renders the splats read back from the file, within the bound above; mirrored, not."""
    splats, scene = _trained_splats(tmp_path / "scene")
    name = "s" + suffix
    write_splats(tmp_path / name, splats, fmt)
    f = scene.frames[scene.test[0] if scene.test else 0]
    V, K, W, H = np.asarray(f.viewmat, np.float64), np.asarray(f.K, np.float64), f.width, f.height
    query = dict(file=name, axes=axes, camera=(V, K, W, H))
    shot = _draw(tmp_path, spark_modules, "spark.html", query, lambda url: _spark_frame(browser, url))
    ours = _spirula_render(read_splats(tmp_path / name), V, K, W, H)

    def psnr(a, b):
        return -10 * np.log10(np.mean((a - b) ** 2))

    print("%s, trained: Spark vs Spirula mean abs %.4f, PSNR %.1f dB (mirrored %.1f dB)"
          % (fmt, np.abs(shot - ours).mean(), psnr(shot, ours), psnr(shot, ours[:, ::-1])))  # fmt: skip
    assert shot.mean() > 0.05 and psnr(shot, ours) > SPARK_TRAINED_MIN_PSNR
    assert psnr(shot, ours[:, ::-1]) < SPARK_TRAINED_MIN_PSNR - 6
