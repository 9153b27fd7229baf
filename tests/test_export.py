"""The share formats (spirula/export, docs/export.md): each writer's layout as
its specification states it (headers, names, axes, quantisation), and the
round trip through our reader within the format's quantisation step, the
bound derived from that step. The CLI's one-line errors and the read-back
through `spirula eval`/`render` are here too; the independent reader
(@playcanvas/splat-transform) and the browsers are in tests/test_export_web.py."""

from __future__ import annotations

import gzip
import io
import json
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from spirula.errors import DatasetError
from spirula.export import common, compressed_ply, read_splats, sog, splat, spz, write_splats
from spirula.export.common import SH_C0, morton_order
from spirula.reference.projection import sh_basis


def scene(n=600, degree=3, seed=0, spread=1.0):
    rng = np.random.default_rng(seed)
    K = (degree + 1) ** 2
    return dict(
        means=(rng.normal(size=(n, 3)) * spread).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        log_scales=rng.uniform(-6, -1, (n, 3)).astype(np.float32),
        opacity_logits=rng.normal(size=n).astype(np.float32) * 2,
        sh_coeffs=np.concatenate(
            [rng.normal(size=(n, 1, 3)) * 1.2, rng.uniform(-0.9, 0.9, (n, K - 1, 3))], axis=1
        ).astype(np.float32),
        sh_degree=degree,
    )


def sig(x):
    return 1 / (1 + np.exp(-np.asarray(x, np.float64)))


def unitq(q):
    q = np.asarray(q, np.float64)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    return q


def quat_error(a, b):
    """Largest component difference between unit quaternions, up to sign."""
    a, b = unitq(a), unitq(b)
    s = np.sign(np.sum(a * b, axis=1, keepdims=True))
    return np.abs(a - s * b).max()


def roundtrip(p, fmt, tmp_path, suffix):
    path = tmp_path / ("s" + suffix)
    write_splats(path, p, fmt)
    return read_splats(path), path


# -- axes --------------------------------------------------------------------------------
@pytest.mark.parametrize("signs", [common.RDF_TO_RUB, common.RDF_TO_GLTF])
def test_axis_change_turns_positions_rotations_and_sh_together(signs):
    """A half turn F of the world: the splat's covariance becomes F S F and its
    colour seen along F d is the old colour seen along d (the SH parity table
    against the reference's SH basis)."""
    from spirula.reference.projection import quat_to_rotmat

    p = scene(50, 3)
    f = common.flip_axes(p, signs)
    F = np.diag(signs)
    np.testing.assert_allclose(f["means"], p["means"] @ F, atol=1e-6)
    R0, R1 = (
        quat_to_rotmat(p["quats"] / np.linalg.norm(p["quats"], axis=1, keepdims=True)),
        quat_to_rotmat(f["quats"] / np.linalg.norm(f["quats"], axis=1, keepdims=True)),
    )
    np.testing.assert_allclose(R1, F @ R0 @ F, atol=1e-5)
    dirs = np.random.default_rng(1).normal(size=(50, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    before = np.einsum("nk,nkc->nc", sh_basis(dirs, 3), p["sh_coeffs"].astype(np.float64))
    after = np.einsum("nk,nkc->nc", sh_basis(dirs @ F, 3), f["sh_coeffs"].astype(np.float64))
    np.testing.assert_allclose(after, before, atol=1e-5)


# -- SPZ -------------------------------------------------------------------------------------
def test_spz_header_and_layout_follow_the_spec(tmp_path):
    p = scene(10, 1)
    p["means"][0] = (1.0, 2.0, 3.0)
    path = tmp_path / "s.spz"
    write_splats(path, p, "spz")
    data = path.read_bytes()
    assert data[:2] == b"\x1f\x8b"  # gzip
    raw = gzip.decompress(data)
    magic, version, n, degree, bits, flags, reserved = struct.unpack_from("<IIIBBBB", raw)
    assert (magic, version, n, degree, bits, flags, reserved) == (0x5053474E, 3, 10, 1, 12, 0, 0)
    # positions, alphas, colours, scales, rotations (4 bytes), SH (9 a splat)
    assert len(raw) == 16 + 10 * (9 + 1 + 3 + 3 + 4 + 9)
    xyz = np.frombuffer(raw[16 : 16 + 9], np.uint8).reshape(3, 3).astype(np.int32)
    fixed = xyz[:, 0] | (xyz[:, 1] << 8) | (xyz[:, 2] << 16)
    fixed = np.where(fixed & 0x800000, fixed - (1 << 24), fixed)
    np.testing.assert_array_equal(fixed, [4096, -2 * 4096, -3 * 4096])  # RUB: y and z negated
    alpha = raw[16 + 90]
    assert alpha == int(np.floor(sig(p["opacity_logits"][0]) * 255 + 0.5))


@pytest.mark.parametrize("fmt,suffix", [("spz", ".spz"), ("gltf-spz", ".spz.glb")])
def test_spz_round_trip_within_its_quantisation(tmp_path, fmt, suffix):
    """SPZ, and the glTF of KHR_gaussian_splatting_compression_spz_2 that holds the same stream."""
    p = scene(600, 3)
    r, _ = roundtrip(p, fmt, tmp_path, suffix)
    assert r["sh_degree"] == 3
    np.testing.assert_allclose(r["means"], p["means"], atol=0.5 / 4096 + 1e-6)
    np.testing.assert_allclose(r["log_scales"], p["log_scales"], atol=0.5 / 16 + 1e-5)
    np.testing.assert_allclose(sig(r["opacity_logits"]), sig(p["opacity_logits"]), atol=0.5 / 255 + 1e-6)
    dc = np.clip(p["sh_coeffs"][:, 0], -127.5 / (0.15 * 255), 127.5 / (0.15 * 255))
    np.testing.assert_allclose(r["sh_coeffs"][:, 0], dc, atol=0.5 / (0.15 * 255) + 1e-5)
    # degree 1: 5 bits (buckets of 8 steps of 1/128), above: 4 bits (16 steps): rounding + half a bucket
    np.testing.assert_allclose(r["sh_coeffs"][:, 1:4], p["sh_coeffs"][:, 1:4], atol=4.5 / 128 + 1e-6)
    np.testing.assert_allclose(r["sh_coeffs"][:, 4:], p["sh_coeffs"][:, 4:], atol=8.5 / 128 + 1e-6)
    # smallest three: 9-bit magnitudes of components up to sqrt(1/2); the largest from unit length
    assert quat_error(r["quats"], p["quats"]) < 3e-3


def test_spz_reads_version_2_and_far_splats_keep_their_place(tmp_path):
    p = scene(40, 0, spread=1.0)
    p["means"][0] = (5000.0, -3000.0, 10.0)  # past 24 bits at 12 fractional bits: fewer bits
    r, path = roundtrip(p, "spz", tmp_path, ".spz")
    bits = gzip.decompress(path.read_bytes())[13]
    assert bits < 12
    np.testing.assert_allclose(r["means"], p["means"], atol=0.5 / (1 << bits) + 1e-3)
    # version 2: first-three quaternions (3 bytes, w >= 0)
    raw = bytearray(spz.encode(p))
    struct.pack_into("<I", raw, 4, 2)
    n = 40
    q = unitq(common.flip_axes(p, common.RDF_TO_RUB)["quats"])[:, [1, 2, 3, 0]]
    q = q * np.where(q[:, 3:] < 0, -1, 1)
    rot_off = 16 + n * (9 + 1 + 3 + 3)
    v2 = bytes(raw[:rot_off]) + common.to_u8(q[:, :3] * 127.5 + 127.5).tobytes() + bytes(raw[rot_off + 4 * n :])
    (tmp_path / "v2.spz").write_bytes(gzip.compress(v2))
    r2 = read_splats(tmp_path / "v2.spz")
    qa = unitq(p["quats"])
    qa = qa * np.where(qa[:, :1] < 0, -1, 1)  # w >= 0, as version 2 stores it; w itself from unit length
    np.testing.assert_allclose(r2["quats"][:, 1:], qa[:, 1:], atol=0.5 / 127.5 + 1e-6)


# -- compressed PLY -----------------------------------------------------------------------
def test_compressed_ply_header_is_supersplats(tmp_path):
    p = scene(300, 2)
    path = tmp_path / "s.compressed.ply"
    write_splats(path, p, "ply-compressed")
    head = path.read_bytes().split(b"end_header\n")[0].decode().splitlines()
    assert head[:2] == ["ply", "format binary_little_endian 1.0"]
    assert "element chunk 2" in head and "element vertex 300" in head and "element sh 300" in head
    props = [ln.split()[-1] for ln in head if ln.startswith("property float")]
    assert props == compressed_ply.CHUNK_PROPS
    assert [ln for ln in head if ln.startswith("property uint")] == [
        "property uint " + s for s in compressed_ply.VERTEX_PROPS
    ]
    assert [ln for ln in head if ln.startswith("property uchar")] == ["property uchar f_rest_%d" % i for i in range(24)]
    size = len(path.read_bytes()) - len("\n".join(head)) - len("\nend_header\n")
    assert size == 2 * 18 * 4 + 300 * 16 + 300 * 24


def test_compressed_ply_round_trip_within_its_quantisation(tmp_path):
    p = scene(1000, 3)
    r, path = roundtrip(p, "ply-compressed", tmp_path, ".compressed.ply")
    o = morton_order(p["means"])
    q = common.take(p, o)
    n = len(o)
    ci = np.arange(n) // 256
    body = path.read_bytes().split(b"end_header\n", 1)[1]
    chunks = np.frombuffer(body[: 4 * 18 * 4], "<f4").reshape(4, 18).astype(np.float64)
    ext = (chunks[:, 3:6] - chunks[:, 0:3])[ci]
    step = ext / np.array([2047, 1023, 2047])
    assert np.all(np.abs(r["means"] - q["means"]) <= step / 2 + 1e-5)
    sext = (chunks[:, 9:12] - chunks[:, 6:9])[ci] / np.array([2047, 1023, 2047])
    assert np.all(np.abs(r["log_scales"] - q["log_scales"]) <= sext / 2 + 1e-5)
    cext = (chunks[:, 15:18] - chunks[:, 12:15])[ci] / 255
    assert np.all(np.abs(r["sh_coeffs"][:, 0] - q["sh_coeffs"][:, 0]) * SH_C0 <= cext / 2 + 1e-6)
    np.testing.assert_allclose(sig(r["opacity_logits"]), sig(q["opacity_logits"]), atol=0.5 / 255 + 1e-6)
    np.testing.assert_allclose(r["sh_coeffs"][:, 1:], q["sh_coeffs"][:, 1:], atol=1 / 64 + 1e-6)  # steps of 1/32
    assert quat_error(r["quats"], q["quats"]) < 2.5e-3  # 10-bit unorms of components up to sqrt(1/2)


# -- .splat ----------------------------------------------------------------------------------
def test_splat_records_are_32_bytes_and_round_trip(tmp_path):
    p = scene(200, 2)
    r, path = roundtrip(p, "splat", tmp_path, ".splat")
    assert path.stat().st_size == 200 * 32 and r["sh_degree"] == 0
    rec = np.frombuffer(path.read_bytes(), splat.RECORD)
    np.testing.assert_array_equal(rec["position"], p["means"])
    np.testing.assert_allclose(rec["scale"], np.exp(p["log_scales"]), rtol=1e-6)
    np.testing.assert_array_equal(r["means"], p["means"])
    np.testing.assert_allclose(r["log_scales"], p["log_scales"], atol=1e-6)
    col = np.clip(0.5 + SH_C0 * p["sh_coeffs"][:, 0], 0, 1)
    np.testing.assert_allclose(np.clip(0.5 + SH_C0 * r["sh_coeffs"][:, 0], 0, 1), col, atol=0.5 / 255 + 1e-6)
    np.testing.assert_allclose(sig(r["opacity_logits"]), sig(p["opacity_logits"]), atol=0.5 / 255 + 1e-6)
    assert quat_error(r["quats"], p["quats"]) < 2 / 128  # one step of 1/128 a component, renormalised


# -- glTF ------------------------------------------------------------------------------------
def test_glb_follows_khr_gaussian_splatting(tmp_path):
    p = scene(100, 2)
    path = tmp_path / "s.glb"
    write_splats(path, p, "gltf")
    data = path.read_bytes()
    magic, version, total = struct.unpack_from("<III", data)
    assert (magic, version, total) == (0x46546C67, 2, len(data))
    jlen = struct.unpack_from("<I", data, 12)[0]
    doc = json.loads(data[20 : 20 + jlen])
    assert doc["extensionsUsed"] == ["KHR_gaussian_splatting"]
    prim = doc["meshes"][0]["primitives"][0]
    assert prim["mode"] == 0
    assert prim["extensions"]["KHR_gaussian_splatting"]["kernel"] == "ellipse"
    assert prim["extensions"]["KHR_gaussian_splatting"]["colorSpace"] == "srgb_rec709_display"
    names = set(prim["attributes"])
    assert {"POSITION", "KHR_gaussian_splatting:ROTATION", "KHR_gaussian_splatting:SCALE"} <= names
    assert {"KHR_gaussian_splatting:OPACITY", "KHR_gaussian_splatting:SH_DEGREE_0_COEF_0"} <= names
    assert {"KHR_gaussian_splatting:SH_DEGREE_2_COEF_%d" % c for c in range(5)} <= names
    assert "KHR_gaussian_splatting:SH_DEGREE_3_COEF_0" not in names
    acc = doc["accessors"]
    pos = acc[prim["attributes"]["POSITION"]]
    assert pos["type"] == "VEC3" and pos["componentType"] == 5126 and "min" in pos and "max" in pos
    # glTF's +Y up, +Z forward from the PLY's y down, z forward: x and y negated
    np.testing.assert_allclose(pos["max"], (p["means"] * [-1, -1, 1]).max(axis=0), rtol=1e-6)
    r = read_splats(path)
    np.testing.assert_allclose(r["means"], p["means"], atol=1e-6)
    np.testing.assert_allclose(r["log_scales"], p["log_scales"], atol=1e-5)  # SCALE stored linear
    np.testing.assert_allclose(r["opacity_logits"], p["opacity_logits"], atol=1e-3)
    np.testing.assert_allclose(r["sh_coeffs"], p["sh_coeffs"], atol=1e-6)
    assert quat_error(r["quats"], p["quats"]) < 1e-6


@pytest.mark.parametrize("fmt", ["gltf", "gltf-spz"])
def test_glb_read_by_pygltflib(tmp_path, fmt):
    pygltflib = pytest.importorskip("pygltflib")
    write_splats(tmp_path / "s.glb", scene(30, 1), fmt)
    g = pygltflib.GLTF2().load(str(tmp_path / "s.glb"))
    assert g.meshes[0].primitives[0].mode == 0 and g.accessors[0].count == 30


def _glb_json(data: bytes) -> tuple:
    magic, version, total = struct.unpack_from("<III", data)
    assert (magic, version, total) == (0x46546C67, 2, len(data))
    jlen, jtype = struct.unpack_from("<II", data, 12)
    blen, btype = struct.unpack_from("<II", data, 20 + jlen)
    assert (jtype, btype) == (0x4E4F534A, 0x004E4942) and jlen % 4 == 0 and blen % 4 == 0
    return json.loads(data[20 : 20 + jlen]), data[28 + jlen : 28 + jlen + blen]


def test_glb_spz_follows_khr_gaussian_splatting_compression_spz_2(tmp_path):
    """KhronosGroup/glTF extensions/2.0/Khronos/KHR_gaussian_splatting_compression_spz_2
    (commit 3b2a287): the SPZ stream in the bufferView that the primitive's
    KHR_gaussian_splatting object's extensions name; accessors of the decoded
    type, count of the SPZ's splats, no bufferView; both extensions used and
    required; the SPZ of SPZ library v2.0.0 (stream version 3), packed from
    glTF's LUF axes into SPZ's RUB: the same bytes as the .spz file."""
    p = scene(100, 2)
    p["means"][0] = (1.0, 2.0, 3.0)
    write_splats(tmp_path / "s.spz.glb", p, "gltf-spz")
    write_splats(tmp_path / "s.spz", p, "spz")
    doc, binary = _glb_json((tmp_path / "s.spz.glb").read_bytes())
    both = ["KHR_gaussian_splatting", "KHR_gaussian_splatting_compression_spz_2"]
    assert doc["extensionsUsed"] == both and doc["extensionsRequired"] == both
    prim = doc["meshes"][0]["primitives"][0]
    assert prim["mode"] == 0
    ext = prim["extensions"]["KHR_gaussian_splatting"]
    assert ext["kernel"] == "ellipse" and ext["colorSpace"] == "srgb_rec709_display"
    assert ext["extensions"] == {"KHR_gaussian_splatting_compression_spz_2": {"bufferView": 0}}
    assert doc["bufferViews"] == [{"buffer": 0, "byteLength": doc["buffers"][0]["byteLength"]}]
    blob = binary[: doc["bufferViews"][0]["byteLength"]]
    assert blob == (tmp_path / "s.spz").read_bytes()
    raw = gzip.decompress(blob)
    magic, version, n, degree = struct.unpack_from("<IIIB", raw)
    assert (magic, version, n, degree) == (0x5053474E, 3, 100, 2)
    xyz = np.frombuffer(raw[16 : 16 + 9], np.uint8).reshape(3, 3).astype(np.int32)
    fixed = xyz[:, 0] | (xyz[:, 1] << 8) | (xyz[:, 2] << 16)
    fixed = np.where(fixed & 0x800000, fixed - (1 << 24), fixed)
    np.testing.assert_array_equal(fixed, [4096, -2 * 4096, -3 * 4096])  # glTF (-1, -2, 3) LUF -> RUB
    names = list(prim["attributes"])
    assert names[:6] == [
        "POSITION",
        "COLOR_0",
        "KHR_gaussian_splatting:ROTATION",
        "KHR_gaussian_splatting:SCALE",
        "KHR_gaussian_splatting:OPACITY",
        "KHR_gaussian_splatting:SH_DEGREE_0_COEF_0",
    ]
    assert names[6:] == [
        "KHR_gaussian_splatting:SH_DEGREE_%d_COEF_%d" % (d, c) for d in (1, 2) for c in range(2 * d + 1)
    ]
    types = dict(POSITION="VEC3", COLOR_0="VEC4")
    types.update({"KHR_gaussian_splatting:ROTATION": "VEC4", "KHR_gaussian_splatting:OPACITY": "SCALAR"})
    for name, i in prim["attributes"].items():
        acc = doc["accessors"][i]
        assert "bufferView" not in acc and acc["count"] == 100 and acc["componentType"] == 5126
        assert acc["type"] == types.get(name, "VEC3"), name
    r = read_splats(tmp_path / "s.spz.glb")
    pos = doc["accessors"][prim["attributes"]["POSITION"]]
    gl = r["means"] * [-1, -1, 1]  # the decoded positions in glTF's axes
    np.testing.assert_array_equal(pos["min"], gl.min(axis=0))
    np.testing.assert_array_equal(pos["max"], gl.max(axis=0))
    np.testing.assert_allclose(r["means"][0], (1.0, 2.0, 3.0), atol=1e-6)
    for key, v in read_splats(tmp_path / "s.spz").items():
        np.testing.assert_array_equal(r[key], v)


def test_glb_spz_refuses_what_it_does_not_read(tmp_path):
    """One line naming the file: an SPZ version outside the extension's (2, 3), a
    splat count the accessors disagree with, a required extension not read here."""
    write_splats(tmp_path / "s.spz.glb", scene(20, 0), "gltf-spz")
    data = (tmp_path / "s.spz.glb").read_bytes()
    doc, binary = _glb_json(data)
    blob = binary[: doc["bufferViews"][0]["byteLength"]]

    def glb(doc, blob, name):
        from spirula.export.gltf import _glb

        (tmp_path / name).write_bytes(_glb(doc, blob))
        with pytest.raises(DatasetError) as err:
            read_splats(tmp_path / name)
        assert name in str(err.value) and "\n" not in str(err.value)
        return str(err.value)

    raw = bytearray(gzip.decompress(blob))
    struct.pack_into("<I", raw, 4, 4)
    v4 = gzip.compress(bytes(raw))
    d = json.loads(json.dumps(doc))
    d["bufferViews"][0]["byteLength"] = d["buffers"][0]["byteLength"] = len(v4)
    assert "SPZ version 4" in glb(d, v4, "v4.glb")
    d = json.loads(json.dumps(doc))
    d["accessors"][0]["count"] = 21
    assert "count 21" in glb(d, blob, "count.glb")
    d = json.loads(json.dumps(doc))
    other = "KHR_gaussian_splatting_compression_spz"
    d["meshes"][0]["primitives"][0]["extensions"]["KHR_gaussian_splatting"]["extensions"] = {other: {"bufferView": 0}}
    d["extensionsUsed"] = d["extensionsRequired"] = ["KHR_gaussian_splatting", other]
    assert other + " is not supported" in glb(d, blob, "other.glb")


# -- SOG -------------------------------------------------------------------------------------
def test_sog_bundle_meta_and_images_follow_version_2(tmp_path):
    from PIL import Image

    p = scene(2048, 3)
    path = tmp_path / "s.sog"
    write_splats(path, p, "sog")
    with zipfile.ZipFile(path) as z:
        files = {i.filename: z.read(i) for i in z.infolist()}
    meta = json.loads(files["meta.json"])
    assert meta["version"] == 2 and meta["count"] == 2048
    assert meta["means"]["files"] == ["means_l.webp", "means_u.webp"]
    assert len(meta["scales"]["codebook"]) <= 256 and len(meta["sh0"]["codebook"]) <= 256
    assert meta["shN"]["bands"] == 3 and meta["shN"]["count"] == 2048  # palette min(64, 2^floor(log2(N/1024)))k
    w, h = sog.image_size(2048)
    assert (w, h) == (48, 44)  # ceil(sqrt(N)/4)*4, ceil(N/W/4)*4
    for name in ("means_l.webp", "means_u.webp", "quats.webp", "scales.webp", "sh0.webp", "shN_labels.webp"):
        assert files[name][:4] == b"RIFF" and files[name][12:16] == b"VP8L"  # lossless WebP
        assert Image.open(io.BytesIO(files[name])).size == (w, h)
    assert Image.open(io.BytesIO(files["shN_centroids.webp"])).size == (64 * 15, 32)
    quats = np.asarray(Image.open(io.BytesIO(files["quats.webp"])).convert("RGBA")).reshape(-1, 4)[:2048]
    assert set(np.unique(quats[:, 3])) <= {252, 253, 254, 255}


def test_sog_round_trip_within_its_quantisation(tmp_path):
    rng = np.random.default_rng(3)
    p = scene(2048, 1)
    # at most 256 distinct values: the codebooks hold them exactly; 2048 splats: a palette entry each
    p["log_scales"] = rng.choice(np.linspace(-6, -1, 200), size=(2048, 3)).astype(np.float32)
    p["sh_coeffs"][:, 0] = rng.choice(np.linspace(-2, 2, 250), size=(2048, 3))
    p["sh_coeffs"][:, 1:] = rng.choice(np.linspace(-0.5, 0.5, 101), size=(2048, 3, 3))
    r, path = roundtrip(p, "sog", tmp_path, ".sog")
    q = common.take(p, morton_order(p["means"]))
    meta = json.loads(zipfile.ZipFile(path).read("meta.json"))
    lo, hi = np.array(meta["means"]["mins"]), np.array(meta["means"]["maxs"])
    half = (hi - lo) / 65535 / 2  # in log space: a linear error of at most that times (|x| + 1) e^half
    bound = half * (np.abs(q["means"]) + 1) * np.exp(half) + 1e-6
    assert np.all(np.abs(r["means"] - q["means"]) <= bound)
    np.testing.assert_allclose(r["log_scales"], q["log_scales"], atol=1e-6)
    np.testing.assert_allclose(r["sh_coeffs"], q["sh_coeffs"], atol=1e-6)
    np.testing.assert_allclose(sig(r["opacity_logits"]), sig(q["opacity_logits"]), atol=0.5 / 255 + 1e-6)
    # 8 bits over [-1, 1] for components up to sqrt(1/2): half a step of 2 / 255 / sqrt(2), and the largest
    assert quat_error(r["quats"], q["quats"]) < 8e-3


def test_sog_clusters_sh_into_a_palette_when_there_are_more_splats(tmp_path):
    p = scene(3000, 2)
    r, _ = roundtrip(p, "sog", tmp_path, ".sog")
    assert r["sh_degree"] == 2
    q = common.take(p, morton_order(p["means"]))
    # 2048 entries for 3000 uniform random vectors: a lossy palette, but nearer than nothing
    err = np.abs(r["sh_coeffs"][:, 1:] - q["sh_coeffs"][:, 1:]).mean()
    assert err < 0.6 * np.abs(q["sh_coeffs"][:, 1:]).mean()


# -- reading, the CLI -------------------------------------------------------------------------
def test_bad_files_are_one_line_errors(tmp_path):
    for name, data in (("a.spz", b"not gzip"), ("b.sog", b"PK-not"), ("c.splat", b"x" * 33), ("d.glb", b"glTF")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DatasetError, match=name):
            read_splats(tmp_path / name)


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "spirula", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_export_writes_each_format_and_refuses_bad_input(tmp_path):
    from spirula.data import write_splat_ply

    p = scene(300, 1)
    write_splat_ply(
        tmp_path / "splat.ply", p["means"], p["quats"], p["log_scales"], p["opacity_logits"], p["sh_coeffs"]
    )
    for fmt, suffix in (
        ("spz", ".spz"),
        ("ply-compressed", ".compressed.ply"),
        ("html", ".html"),
        ("gltf-spz", ".spz.glb"),
    ):
        res = _cli("export", str(tmp_path / "splat.ply"), "--format", fmt)
        assert res.returncode == 0, res.stderr
        assert (tmp_path / ("splat" + suffix)).is_file() and "export: 300 splats" in res.stderr
    res = _cli("export", str(tmp_path / "splat.spz"), "-o", str(tmp_path / "again.glb"), "--sh-degree", "0")
    assert res.returncode == 0, res.stderr
    assert read_splats(tmp_path / "again.glb")["sh_degree"] == 0
    res = _cli("export", str(tmp_path / "splat.ply"), "-o", str(tmp_path / "x.spz.glb"))  # gltf-spz by its suffix
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "x.spz.glb").read_bytes() == (tmp_path / "splat.spz.glb").read_bytes()
    for args, words in (
        (["export", str(tmp_path / "nothing.spz"), "--format", "spz"], "no such"),
        (["export", str(tmp_path / "splat.ply")], "give --format"),
        (["export", str(tmp_path / "splat.ply"), "--format", "ply"], "overwrite its input"),
        (["export", str(tmp_path / "splat.ply"), "--format", "spz", "-o", str(tmp_path / "no" / "x.spz")], "not exist"),
        (["export", str(tmp_path / "splat.html"), "--format", "spz"], "not a run folder or a splat file"),
    ):
        res = _cli(*args)
        assert res.returncode == 2 and words in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
