"""The share formats read by others: PlayCanvas's ``@playcanvas/splat-transform``
(npm, pinned in tests/web/package.json, installed by ``make test``: ``npm ci``
in tests/web) converts each file Spirula wrote back to a PLY, and the splats
must be what Spirula's own reader decodes (the same quantised values: what the
round trips of tests/test_export.py bound against the original); and it writes
a glTF that Spirula's reader must read as the original. The self-contained HTML
page is opened from disk in headless Chromium and compared with Spirula's own
render of the same camera. Skipped, with the reason, without node or the
packages (tests/web/node_modules) or the browser."""

from __future__ import annotations

import json
import shutil
import subprocess
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
