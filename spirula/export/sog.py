"""PlayCanvas's SOG, version 2 (the specification:
https://developer.playcanvas.com/user-manual/gaussian-splatting/formats/sog-v2/;
the reference writer and reader: ``@playcanvas/splat-transform``
src/lib/writers/write-sog.ts, readers/read-sog.ts, read at commit 8d6b801).

A bundled ``.sog`` is a ZIP of ``meta.json`` and lossless WebP images (Pillow
encodes them, ``exact`` so that colour under a zero alpha survives), every
image W x H with W = ceil(sqrt(N) / 4) * 4, H = ceil(N / W / 4) * 4 and splat
i at pixel (i % W, i // W), in Morton order:

- ``means_l`` / ``means_u``: the low and high bytes (RGB = x, y, z) of
  ``65535 * (t - min) / (max - min)``, ``t = sign(v) log(|v| + 1)``, with the
  per-axis ``mins`` / ``maxs`` of t in meta.json;
- ``quats``: smallest three of the unit quaternion wxyz: RGB =
  ``255 * (q * sqrt(2) * 0.5 + 0.5)`` of the three others in order, A =
  252 + the largest's index (the largest made positive);
- ``scales``: RGB = indices into a 256-value codebook of log scales;
- ``sh0``: RGB = indices into a 256-value codebook of ``f_dc``, A =
  ``sigmoid(opacity) * 255``;
- with SH, ``shN_labels`` (RG: a 16-bit palette index) and ``shN_centroids``
  (64 palette entries a row, each entry ``(K - 1)`` pixels whose RGB index a
  256-value codebook of coefficients): the palette k-means clusters of the
  f_rest vectors, ``min(64, 2^floor(log2(N / 1024))) * 1024`` of them.

Axes: the PLY's (version 2 keeps the 3DGS PLY's coordinates)."""

from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path

import numpy as np

from spirula.errors import DatasetError
from spirula.export.common import kmeans, kmeans_1d, logit, morton_order, sigmoid, take, unit_quats
from spirula.files import atomic_write

VERSION = 2
SQRT2 = math.sqrt(2.0)


def image_size(n: int) -> tuple:
    w = max(4, int(math.ceil(math.sqrt(n) / 4)) * 4)
    h = max(4, int(math.ceil(n / w / 4)) * 4)
    return w, h


def palette_size(n: int) -> int:
    return int(min(64, 2 ** math.floor(math.log2(n / 1024))) * 1024) if n else 0


def _webp(pixels: np.ndarray, w: int, h: int) -> bytes:
    from PIL import Image

    img = np.zeros((w * h, 4), dtype=np.uint8)
    img[:, 3] = 255
    img[: len(pixels), : pixels.shape[1]] = pixels
    buf = io.BytesIO()
    Image.fromarray(img.reshape(h, w, 4), "RGBA").save(buf, "WEBP", lossless=True, quality=100, method=4, exact=True)
    return buf.getvalue()


def _log_t(v):
    return np.sign(v) * np.log(np.abs(v) + 1.0)


def encode(p: dict, iterations: int = 10) -> tuple:
    """({file name: bytes} of a bundle, Morton order) of a splat dict."""
    n, K = len(p["means"]), p["sh_coeffs"].shape[1]
    if n == 0:
        raise DatasetError("SOG: no splats to write")
    order = morton_order(p["means"])
    p = take(p, order)
    w, h = image_size(n)
    files = {}
    t = _log_t(p["means"].astype(np.float64))
    lo, hi = t.min(axis=0), t.max(axis=0)
    q16 = np.clip(np.floor(65535.0 * (t - lo) / np.where(hi > lo, hi - lo, 1.0) + 0.5), 0, 65535).astype(np.uint32)
    files["means_l.webp"] = _webp((q16 & 0xFF).astype(np.uint8), w, h)
    files["means_u.webp"] = _webp((q16 >> 8).astype(np.uint8), w, h)
    q = unit_quats(p["quats"])
    largest = np.argmax(np.abs(q), axis=1)
    q = q * (np.where(q[np.arange(n), largest] < 0, -1.0, 1.0) * SQRT2)[:, None]
    others = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])[largest]
    rgb = np.take_along_axis(q, others, axis=1)
    quat_px = np.concatenate([np.clip(np.floor(255.0 * (rgb * 0.5 + 0.5) + 0.5), 0, 255), 252 + largest[:, None]], 1)
    files["quats.webp"] = _webp(quat_px.astype(np.uint8), w, h)
    scale_book, scale_labels = kmeans_1d(p["log_scales"], 256, iterations)
    files["scales.webp"] = _webp(scale_labels.reshape(n, 3), w, h)
    dc_book, dc_labels = kmeans_1d(p["sh_coeffs"][:, 0, :], 256, iterations)
    alpha = np.clip(np.floor(sigmoid(p["opacity_logits"]) * 255.0 + 0.5), 0, 255).astype(np.uint8)
    files["sh0.webp"] = _webp(np.concatenate([dc_labels.reshape(n, 3), alpha[:, None]], axis=1), w, h)
    meta = dict(
        version=VERSION,
        asset=dict(generator="Spirula"),
        count=n,
        means=dict(mins=lo.tolist(), maxs=hi.tolist(), files=["means_l.webp", "means_u.webp"]),
        scales=dict(codebook=scale_book.tolist(), files=["scales.webp"]),
        quats=dict(files=["quats.webp"]),
        sh0=dict(codebook=dc_book.tolist(), files=["sh0.webp"]),
    )
    if K > 1:
        coeffs = K - 1
        rest = p["sh_coeffs"][:, 1:, :].transpose(0, 2, 1).reshape(n, 3 * coeffs)  # channel-major, as f_rest
        centroids, labels = kmeans(rest, palette_size(n), iterations)
        count = len(centroids)
        book, idx = kmeans_1d(centroids, 256, iterations)
        idx = idx.reshape(count, 3, coeffs).transpose(0, 2, 1).reshape(count * coeffs, 3)  # an entry's pixels: RGB
        rows = (count + 63) // 64
        files["shN_centroids.webp"] = _webp(idx, 64 * coeffs, rows)
        lab = np.stack([labels & 0xFF, labels >> 8], axis=1).astype(np.uint8)
        lab = np.concatenate([lab, np.zeros((n, 1), np.uint8)], axis=1)
        files["shN_labels.webp"] = _webp(lab, w, h)
        meta["shN"] = dict(
            count=count,
            bands=int(round(math.sqrt(K))) - 1,
            codebook=book.tolist(),
            files=["shN_centroids.webp", "shN_labels.webp"],
        )
    files = {"meta.json": json.dumps(meta).encode(), **files}
    return files, order


def bundle(files: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:  # WebP is compressed already
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def write(path, p: dict) -> Path:
    files, _ = encode(p)
    return atomic_write(Path(path), bundle(files))


def _files_of(path: Path) -> dict:
    """{name: bytes} of a bundle (.sog) or of the folder of a meta.json."""
    if path.name == "meta.json" or path.is_dir():
        folder = path if path.is_dir() else path.parent
        meta = (folder / "meta.json").read_bytes()
        names = [f for v in json.loads(meta).values() if isinstance(v, dict) for f in v.get("files", [])]
        return {"meta.json": meta, **{f: (folder / f).read_bytes() for f in names if (folder / f).is_file()}}
    try:
        with zipfile.ZipFile(path) as z:
            return {Path(i.filename).name: z.read(i) for i in z.infolist() if not i.is_dir()}
    except zipfile.BadZipFile:
        raise DatasetError("%s: not a SOG bundle (not a ZIP archive)" % path) from None


def _image(files: dict, name: str, path, n: int) -> np.ndarray:
    from PIL import Image

    if name not in files:
        raise DatasetError("%s: SOG lacks %s" % (path, name))
    img = np.asarray(Image.open(io.BytesIO(files[name])).convert("RGBA")).reshape(-1, 4)
    if n and len(img) < n:
        raise DatasetError("%s: %s holds %d pixels for %d splats" % (path, name, len(img), n))
    return img[:n] if n else img


def read(path) -> dict:
    path = Path(path)
    files = _files_of(path)
    try:
        meta = json.loads(files["meta.json"])
    except (KeyError, ValueError):
        raise DatasetError("%s: SOG without a readable meta.json" % path) from None
    if meta.get("version") != VERSION:
        raise DatasetError("%s: SOG version %s (version 2 is read)" % (path, meta.get("version")))
    n = int(meta["count"])
    ml = _image(files, meta["means"]["files"][0], path, n).astype(np.uint32)
    mu = _image(files, meta["means"]["files"][1], path, n).astype(np.uint32)
    lo, hi = np.array(meta["means"]["mins"]), np.array(meta["means"]["maxs"])
    t = lo + (hi - lo) * ((ml[:, :3] | (mu[:, :3] << 8)) / 65535.0)
    means = np.sign(t) * (np.exp(np.abs(t)) - 1.0)
    qp = _image(files, meta["quats"]["files"][0], path, n)
    abc = (qp[:, :3] / 255.0 * 2.0 - 1.0) / SQRT2
    largest = qp[:, 3].astype(np.int64) - 252
    if np.any((largest < 0) | (largest > 3)):
        raise DatasetError("%s: quats.webp alpha outside 252..255" % path)
    quats = np.zeros((n, 4))
    others = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])[largest]
    np.put_along_axis(quats, others, abc, axis=1)
    quats[np.arange(n), largest] = np.sqrt(np.maximum(0.0, 1.0 - np.sum(abc * abc, axis=1)))
    scale_book = np.asarray(meta["scales"]["codebook"], dtype=np.float32)
    log_scales = scale_book[_image(files, meta["scales"]["files"][0], path, n)[:, :3]]
    sh0 = _image(files, meta["sh0"]["files"][0], path, n)
    dc_book = np.asarray(meta["sh0"]["codebook"], dtype=np.float32)
    shn = meta.get("shN")
    degree = int(shn["bands"]) if shn else 0
    K = (degree + 1) ** 2
    sh = np.zeros((n, K, 3), dtype=np.float32)
    sh[:, 0, :] = dc_book[sh0[:, :3]]
    if degree:
        coeffs = K - 1
        cent = _image(files, shn["files"][0], path, 0)
        book = np.asarray(shn["codebook"], dtype=np.float32)
        count = int(shn["count"])
        if len(cent) < count * coeffs:
            raise DatasetError("%s: shN_centroids holds %d pixels for %d entries" % (path, len(cent), count))
        # the centroid image is 64 * coeffs wide: entry e's pixels are e * coeffs ... (e + 1) * coeffs - 1
        palette = book[cent[: count * coeffs, :3]].reshape(count, coeffs, 3)
        lab = _image(files, shn["files"][1], path, n).astype(np.int64)
        labels = lab[:, 0] | (lab[:, 1] << 8)
        ok = labels < count
        sh[ok, 1:, :] = palette[labels[ok]]
    return dict(
        means=means.astype(np.float32),
        quats=quats.astype(np.float32),
        log_scales=log_scales.astype(np.float32),
        opacity_logits=logit(sh0[:, 3] / 255.0, 0.5 / 255).astype(np.float32),
        sh_coeffs=sh,
        sh_degree=degree,
    )
