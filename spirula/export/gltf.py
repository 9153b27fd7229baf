"""glTF 2.0 binary (.glb) with ``KHR_gaussian_splatting`` (Khronos,
https://github.com/KhronosGroup/glTF/tree/main/extensions/2.0/Khronos/KHR_gaussian_splatting,
the review draft read at commit 07ee802, with the later decision of
KhronosGroup/glTF#2563 that SCALE is linear).

One mesh of one primitive, ``mode`` 0 (POINTS), its attributes float
accessors, each in its own buffer view: ``POSITION`` (with min/max, as glTF
requires), ``KHR_gaussian_splatting:ROTATION`` (unit quaternion, xyzw),
``KHR_gaussian_splatting:SCALE`` (linear: ``exp(log scale)``),
``KHR_gaussian_splatting:OPACITY`` (``sigmoid(logit)``),
``KHR_gaussian_splatting:SH_DEGREE_l_COEF_n`` (RGB each), and ``COLOR_0``
(normalized uint8 RGBA: base colour and opacity, the point-cloud fallback).
The extension object: ``kernel`` "ellipse", ``colorSpace``
"srgb_rec709_display", ``projection`` "perspective", ``sortingMethod``
"cameraDistance". Axes: glTF's +Y up, +Z forward, -X right (glTF 2.0
§3.4) from the PLY's x right, y down, z forward: x and y negated.

``gltf-spz``: the draft ``KHR_gaussian_splatting_compression_spz_2``
(https://github.com/KhronosGroup/glTF/tree/main/extensions/2.0/Khronos/KHR_gaussian_splatting_compression_spz_2,
README and schema read at commit 3b2a287). The splats are one SPZ stream in
one bufferView, named by ``{"bufferView": i}`` inside the primitive's
``KHR_gaussian_splatting`` object's ``extensions``; the same attributes stay
in the primitive, their accessors FLOAT of the decoded type with ``count``
and no ``bufferView`` (``POSITION``'s min/max those of the decoded
positions). "v2 of the SPZ format" links the library's tag v2.0.0, which
writes SPZ version 3 (smallest-three rotations) and reads 1 to 3: the stream
is spz.py's version 3, byte for byte a ``.spz`` file; versions 2 and 3 are
read. The SPZ is packed from glTF's left-up-front (LUF) axes, as the
extension requires; the library stores right-up-back (RUB) either way, so
it is the same RUB stream spz.py writes from the PLY. Both extensions are in
``extensionsUsed`` and ``extensionsRequired`` (no accessor holds data for a
reader without the SPZ)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from spirula.errors import DatasetError
from spirula.export.common import RDF_TO_GLTF, SH_C0, flip_axes, logit, sigmoid, to_u8, unit_quats
from spirula.files import atomic_write

EXT = "KHR_gaussian_splatting"
SPZ_EXT = "KHR_gaussian_splatting_compression_spz_2"
GLB_MAGIC, JSON_CHUNK, BIN_CHUNK = 0x46546C67, 0x4E4F534A, 0x004E4942
FLOAT, UNSIGNED_BYTE, BYTE, SHORT, UNSIGNED_SHORT = 5126, 5121, 5120, 5122, 5123
POINTS = 0
_NCOMP = {"SCALAR": 1, "VEC3": 3, "VEC4": 4}
_CTYPE = {FLOAT: "<f4", UNSIGNED_BYTE: "u1", BYTE: "i1", SHORT: "<i2", UNSIGNED_SHORT: "<u2"}


def attribute_names(degree: int) -> list:
    names = ["POSITION", "COLOR_0", EXT + ":ROTATION", EXT + ":SCALE", EXT + ":OPACITY"]
    for lvl in range(degree + 1):
        names += ["%s:SH_DEGREE_%d_COEF_%d" % (EXT, lvl, c) for c in range(2 * lvl + 1)]
    return names


def _colour(p: dict) -> np.ndarray:
    """[N,4] COLOR_0 of splats in any axes: ``0.5 + SH_C0 * f_dc`` and the opacity, in [0, 1]."""
    dc = np.clip(p["sh_coeffs"][:, 0, :].astype(np.float64) * SH_C0 + 0.5, 0.0, 1.0)
    return np.concatenate([dc, sigmoid(p["opacity_logits"]).astype(np.float64)[:, None]], axis=1)


def _arrays(p: dict) -> list:
    """(array, accessor type) of each of :func:`attribute_names`, of splats in glTF's axes."""
    arrays = [
        (p["means"].astype("<f4"), "VEC3"),
        (to_u8(_colour(p) * 255.0), "VEC4"),
        (unit_quats(p["quats"])[:, [1, 2, 3, 0]].astype("<f4"), "VEC4"),
        (np.exp(p["log_scales"].astype(np.float64)).astype("<f4"), "VEC3"),
        (sigmoid(p["opacity_logits"]).astype("<f4"), "SCALAR"),
    ]
    K = (p["sh_degree"] + 1) ** 2
    return arrays + [(np.ascontiguousarray(p["sh_coeffs"][:, k, :], dtype="<f4"), "VEC3") for k in range(K)]


def _bounds(means) -> dict:
    n = len(means)
    return dict(
        min=[float(v) for v in means.min(axis=0)] if n else [0.0] * 3,
        max=[float(v) for v in means.max(axis=0)] if n else [0.0] * 3,
    )


def _document(attributes: dict, views: list, accessors: list, nbytes: int, generator: str, nested=None) -> dict:
    ext = dict(kernel="ellipse", colorSpace="srgb_rec709_display", projection="perspective")
    ext["sortingMethod"] = "cameraDistance"
    used = [EXT] + sorted(nested or {})
    doc = dict(asset=dict(version="2.0", generator=generator), extensionsUsed=used)
    if nested:
        ext["extensions"] = nested
        doc["extensionsRequired"] = used
    doc.update(
        scene=0,
        scenes=[dict(nodes=[0])],
        nodes=[dict(mesh=0)],
        meshes=[dict(primitives=[dict(attributes=attributes, mode=POINTS, extensions={EXT: ext})])],
        buffers=[dict(byteLength=nbytes)],
        bufferViews=views,
        accessors=accessors,
    )
    return doc


def _glb(doc: dict, binary: bytes) -> bytes:
    js = json.dumps(doc, separators=(",", ":")).encode()
    js += b" " * ((-len(js)) % 4)
    binary += b"\0" * ((-len(binary)) % 4)
    total = 12 + 8 + len(js) + 8 + len(binary)
    return b"".join(
        [
            struct.pack("<III", GLB_MAGIC, 2, total),
            struct.pack("<II", len(js), JSON_CHUNK),
            js,
            struct.pack("<II", len(binary), BIN_CHUNK),
            binary,
        ]
    )


def encode(p: dict, generator: str = "Spirula") -> bytes:
    p = flip_axes(p, RDF_TO_GLTF)
    n, degree = len(p["means"]), p["sh_degree"]
    views, accessors, attributes, blobs, offset = [], [], {}, [], 0
    for i, (name, (a, typ)) in enumerate(zip(attribute_names(degree), _arrays(p))):
        raw = np.ascontiguousarray(a).tobytes()
        views.append(dict(buffer=0, byteOffset=offset, byteLength=len(raw)))
        acc = dict(bufferView=i, componentType=UNSIGNED_BYTE if a.dtype == np.uint8 else FLOAT, count=n, type=typ)
        if name == "COLOR_0":
            acc["normalized"] = True
        if name == "POSITION":
            acc.update(_bounds(a))
        accessors.append(acc)
        attributes[name] = i
        pad = (-len(raw)) % 4
        blobs += [raw, b"\0" * pad]
        offset += len(raw) + pad
    return _glb(_document(attributes, views, accessors, offset, generator), b"".join(blobs))


def encode_spz(p: dict, generator: str = "Spirula") -> bytes:
    """The ``.glb`` of ``KHR_gaussian_splatting_compression_spz_2``: the SPZ
    stream (spz.py, version 3, RUB) in bufferView 0, the attributes' accessors
    without data (FLOAT, ``count``; POSITION's min/max of the decoded splats)."""
    from spirula.export import spz

    blob = spz.compress(p)
    q = flip_axes(spz.decode(blob, "SPZ stream"), RDF_TO_GLTF)
    n, degree = len(q["means"]), q["sh_degree"]
    attributes, accessors = {}, []
    for i, (name, (a, typ)) in enumerate(zip(attribute_names(degree), _arrays(q))):
        acc = dict(componentType=FLOAT, count=n, type=typ)
        if name == "POSITION":
            acc.update(_bounds(a))
        accessors.append(acc)
        attributes[name] = i
    views = [dict(buffer=0, byteLength=len(blob))]
    doc = _document(attributes, views, accessors, len(blob), generator, nested={SPZ_EXT: dict(bufferView=0)})
    return _glb(doc, blob)


def write(path, p: dict, compression: str | None = None) -> Path:
    """A ``.glb`` of float accessors, or with ``compression="spz"`` of one SPZ stream."""
    if compression not in (None, "spz"):
        raise ValueError("glTF compression %r: None or 'spz'" % compression)
    return atomic_write(Path(path), encode_spz(p) if compression == "spz" else encode(p))


def _accessor(gltf: dict, binary: bytes, index: int, path) -> np.ndarray:
    acc = gltf["accessors"][index]
    if "bufferView" not in acc:
        raise DatasetError("%s: accessor %d has no bufferView and no extension read here fills it" % (path, index))
    view = gltf["bufferViews"][acc["bufferView"]]
    if view.get("buffer", 0) != 0:
        raise DatasetError("%s: accessor %d is not in the GLB's binary chunk" % (path, index))
    ct, typ, count = acc["componentType"], acc["type"], acc["count"]
    if ct not in _CTYPE or typ not in _NCOMP:
        raise DatasetError("%s: accessor %d of %s %s is not a splat attribute" % (path, index, ct, typ))
    dt = np.dtype(_CTYPE[ct])
    ncomp = _NCOMP[typ]
    stride = view.get("byteStride") or dt.itemsize * ncomp
    start = view.get("byteOffset", 0) + acc.get("byteOffset", 0)
    if count and start + stride * (count - 1) + dt.itemsize * ncomp > len(binary):
        raise DatasetError("%s: accessor %d runs past the binary chunk" % (path, index))
    raw = np.frombuffer(binary[start : start + stride * count].ljust(stride * count, b"\0"), dtype=np.uint8)
    a = raw.reshape(count, stride)[:, : dt.itemsize * ncomp].copy().view(dt).reshape(count, ncomp).astype(np.float64)
    if acc.get("normalized") and ct != FLOAT:
        a = np.maximum(a / {UNSIGNED_BYTE: 255.0, UNSIGNED_SHORT: 65535.0, BYTE: 127.0, SHORT: 32767.0}[ct], -1.0)
    return a


def read(path) -> dict:
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 20 or struct.unpack_from("<I", data)[0] != GLB_MAGIC:
        raise DatasetError("%s: not a binary glTF (.glb) file" % path)
    _, version, total = struct.unpack_from("<III", data)
    jlen, jtype = struct.unpack_from("<II", data, 12)
    if version != 2 or jtype != JSON_CHUNK:
        raise DatasetError("%s: glTF version %d or first chunk not JSON" % (path, version))
    try:
        gltf = json.loads(data[20 : 20 + jlen])
    except ValueError as exc:
        raise DatasetError("%s: unreadable glTF JSON (%s)" % (path, exc)) from None
    off = 20 + jlen
    binary = b""
    if off + 8 <= len(data):
        blen, btype = struct.unpack_from("<II", data, off)
        if btype == BIN_CHUNK:
            binary = data[off + 8 : off + 8 + blen]
    prim = next(
        (pr for m in gltf.get("meshes", []) for pr in m.get("primitives", []) if EXT in pr.get("extensions", {})),
        None,
    )
    if prim is None:
        raise DatasetError("%s: no primitive with %s (a mesh, not splats?)" % (path, EXT))
    attrs = prim["attributes"]
    nested = prim["extensions"][EXT].get("extensions") or {}
    if SPZ_EXT in nested:
        return _read_spz(gltf, binary, prim, nested[SPZ_EXT], path)
    unknown = sorted(e for e in nested if e in gltf.get("extensionsRequired", []))
    if unknown:
        raise DatasetError(
            "%s: %s is not supported (read here: %s alone or with %s)" % (path, ", ".join(unknown), EXT, SPZ_EXT)
        )
    need = ["POSITION", EXT + ":ROTATION", EXT + ":SCALE", EXT + ":OPACITY", EXT + ":SH_DEGREE_0_COEF_0"]
    missing = [a for a in need if a not in attrs]
    if missing:
        raise DatasetError("%s: the splat primitive lacks %s" % (path, ", ".join(missing)))
    get = lambda name: _accessor(gltf, binary, attrs[name], path)  # noqa: E731
    degree = 0
    while degree < 3 and all("%s:SH_DEGREE_%d_COEF_%d" % (EXT, degree + 1, c) in attrs for c in range(2 * degree + 3)):
        degree += 1
    K = (degree + 1) ** 2
    means = get("POSITION")
    n = len(means)
    sh = np.empty((n, K, 3), dtype=np.float32)
    k = 0
    for lvl in range(degree + 1):
        for c in range(2 * lvl + 1):
            sh[:, k, :] = get("%s:SH_DEGREE_%d_COEF_%d" % (EXT, lvl, c))
            k += 1
    scale = get(EXT + ":SCALE")
    p = dict(
        means=means.astype(np.float32),
        quats=unit_quats(get(EXT + ":ROTATION")[:, [3, 0, 1, 2]]).astype(np.float32),
        log_scales=np.log(np.maximum(scale, 1e-30)).astype(np.float32),
        opacity_logits=logit(get(EXT + ":OPACITY")[:, 0]).astype(np.float32),
        sh_coeffs=sh,
        sh_degree=degree,
    )
    return flip_axes(p, RDF_TO_GLTF)


def _read_spz(gltf: dict, binary: bytes, prim: dict, ext: dict, path) -> dict:
    """The splats of a primitive with ``KHR_gaussian_splatting_compression_spz_2``:
    its bufferView's SPZ stream (versions 2 and 3, what the SPZ library's v2.0.0
    reads), already in the PLY's axes (RUB in the stream either way)."""
    from spirula.export import spz

    index = ext.get("bufferView")
    views = gltf.get("bufferViews", [])
    if not isinstance(index, int) or not 0 <= index < len(views):
        raise DatasetError("%s: %s names bufferView %r, which is not there" % (path, SPZ_EXT, index))
    view = views[index]
    if view.get("buffer", 0) != 0:
        raise DatasetError("%s: the SPZ bufferView %d is not in the GLB's binary chunk" % (path, index))
    start = view.get("byteOffset", 0)
    if start + view["byteLength"] > len(binary):
        raise DatasetError("%s: the SPZ bufferView %d runs past the binary chunk" % (path, index))
    p = spz.decode(binary[start : start + view["byteLength"]], "%s (%s bufferView %d)" % (path, SPZ_EXT, index), (2, 3))
    count = gltf["accessors"][prim["attributes"]["POSITION"]]["count"] if "POSITION" in prim["attributes"] else None
    if count != len(p["means"]):
        raise DatasetError("%s: POSITION's count %s, the SPZ stream holds %d splats" % (path, count, len(p["means"])))
    return p
