"""``spirula export --format html``: one self-contained page that shows the
splats: a small WebGL2 viewer (written here, no library, no network) and the
splats inlined as base64 ``.splat`` records (32 bytes a splat, base colour
only: spirula/export/splat.py). It opens from disk (file://).

The page draws each splat as the 3DGS paper's EWA splat: the 3D covariance
``R S S^T R^T`` projected with the pinhole's Jacobian, 0.3 px^2 added to the
2D covariance, cut at 3 sigma, ``alpha = min(0.99, opacity * exp(-d^2/2))``,
dropped under 1/255, composited back to front after a per-splat depth sort on
the CPU (16-bit counting sort), premultiplied. The camera is OpenCV's (x
right, y down, z forward), as Spirula's: ``#camera=`` in the URL (a JSON list
of the 16 numbers of the world-to-camera matrix, row-major, then fx, fy, cx,
cy, width, height) sets it exactly (the browser test renders a dataset view
this way); else the embedded one (a dataset view), else an orbit around the
splats. Drag to orbit, wheel to zoom. ``window.spirulaReady`` turns true
after the first frame."""

from __future__ import annotations

import base64
import html as _html
import json
from pathlib import Path

from spirula.export import splat as splat_format
from spirula.export.common import splats_of
from spirula.files import atomic_write

VIEWER = Path(__file__).with_name("viewer.html")  # the page: @@TITLE@@, @@COUNT@@, @@CONFIG@@, @@DATA@@


def encode(p: dict, title: str = "splats", camera: dict | None = None, background=(0.0, 0.0, 0.0)) -> str:
    """The page of a splat dict; ``camera``: ``{"V": 16 floats (row-major
    world-to-camera), "K": [fx, fy, cx, cy], "size": [W, H]}`` for the first view."""
    p = splats_of(p, 0)
    data = base64.b64encode(splat_format.encode(p)).decode("ascii")
    config = dict(camera=camera, background=[float(b) for b in background])
    page = VIEWER.read_text(encoding="utf-8")
    for key, value in (
        ("TITLE", _html.escape(title)),
        ("COUNT", f"{len(p['means']):,}"),
        ("CONFIG", json.dumps(config)),
        ("DATA", data),  # last: base64 holds no '@'
    ):
        page = page.replace("@@%s@@" % key, value)
    return page


def write(path, p: dict, title: str = "splats", camera: dict | None = None, background=(0.0, 0.0, 0.0)) -> Path:
    return atomic_write(Path(path), encode(p, title, camera, background))
