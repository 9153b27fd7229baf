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
§3.4) from the PLY's x right, y down, z forward: x and y negated."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from spirula.errors import DatasetError
from spirula.export.common import RDF_TO_GLTF, SH_C0, flip_axes, logit, sigmoid, to_u8, unit_quats
from spirula.files import atomic_write

EXT = "KHR_gaussian_splatting"
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


def encode(p: dict, generator: str = "Spirula") -> bytes:
    p = flip_axes(p, RDF_TO_GLTF)
    n, degree = len(p["means"]), p["sh_degree"]
    colour = np.concatenate(
        [
            to_u8((p["sh_coeffs"][:, 0, :].astype(np.float64) * SH_C0 + 0.5) * 255.0),
            to_u8(sigmoid(p["opacity_logits"]) * 255.0)[:, None],
        ],
        axis=1,
    )
    arrays = [
        (p["means"].astype("<f4"), "VEC3"),
        (colour, "VEC4"),
        (unit_quats(p["quats"])[:, [1, 2, 3, 0]].astype("<f4"), "VEC4"),
        (np.exp(p["log_scales"].astype(np.float64)).astype("<f4"), "VEC3"),
        (sigmoid(p["opacity_logits"]).astype("<f4"), "SCALAR"),
    ]
    arrays += [(np.ascontiguousarray(p["sh_coeffs"][:, k, :], dtype="<f4"), "VEC3") for k in range((degree + 1) ** 2)]
    views, accessors, attributes, blobs, offset = [], [], {}, [], 0
    for i, (name, (a, typ)) in enumerate(zip(attribute_names(degree), arrays)):
        raw = np.ascontiguousarray(a).tobytes()
        views.append(dict(buffer=0, byteOffset=offset, byteLength=len(raw)))
        acc = dict(bufferView=i, componentType=UNSIGNED_BYTE if a.dtype == np.uint8 else FLOAT, count=n, type=typ)
        if name == "COLOR_0":
            acc["normalized"] = True
        if name == "POSITION":
            acc["min"] = [float(v) for v in a.min(axis=0)] if n else [0.0] * 3
            acc["max"] = [float(v) for v in a.max(axis=0)] if n else [0.0] * 3
        accessors.append(acc)
        attributes[name] = i
        pad = (-len(raw)) % 4
        blobs += [raw, b"\0" * pad]
        offset += len(raw) + pad
    gltf = dict(
        asset=dict(version="2.0", generator=generator),
        extensionsUsed=[EXT],
        scene=0,
        scenes=[dict(nodes=[0])],
        nodes=[dict(mesh=0)],
        meshes=[
            dict(
                primitives=[
                    dict(
                        attributes=attributes,
                        mode=POINTS,
                        extensions={
                            EXT: dict(
                                kernel="ellipse",
                                colorSpace="srgb_rec709_display",
                                projection="perspective",
                                sortingMethod="cameraDistance",
                            )
                        },
                    )
                ]
            )
        ],
        buffers=[dict(byteLength=offset)],
        bufferViews=views,
        accessors=accessors,
    )
    js = json.dumps(gltf, separators=(",", ":")).encode()
    js += b" " * ((-len(js)) % 4)
    binary = b"".join(blobs)
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


def write(path, p: dict) -> Path:
    return atomic_write(Path(path), encode(p))


def _accessor(gltf: dict, binary: bytes, index: int, path) -> np.ndarray:
    acc = gltf["accessors"][index]
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
