"""Niantic's SPZ (https://github.com/nianticlabs/spz, README "File Format" and
src/cc/load-spz.cc, read at commit 21715c3 of 2026-07-10).

Written as version 3: a gzip stream (zlib) of a 16-byte header (magic
``NGSP`` 0x5053474e, version, point count, SH degree, fractional bits,
flags, reserved) and the attributes one after another: positions (24-bit
signed fixed point, ``fractionalBits`` = 12 unless the splats reach past
+-2048, then fewer), alphas (``sigmoid(opacity) * 255``), colours
(``f_dc * 0.15 * 255 + 127.5``), scales (``(log scale + 10) * 16``),
rotations (smallest three: 2 bits for the largest component's index, three
10-bit signed magnitudes over sqrt(1/2), xyzw) and SH (coefficient-major,
channel inner, ``round(x * 128) + 128`` snapped to 5 bits for degree 1 and 4
bits above). SPZ holds right-up-back axes (RUB); the 3DGS PLY is
right-down-front (RDF), so y and z are negated on the way in and out, as the
reference library does for a PLY. Read: versions 2 and 3 (gzip) and 4
(ZSTD streams with a table of contents, through ``zstandard``)."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np

from spirula.errors import DatasetError
from spirula.export.common import RDF_TO_RUB, flip_axes, logit, round_half_up, sigmoid, to_u8, unit_quats
from spirula.files import atomic_write

MAGIC = 0x5053474E
VERSION = 3
COLOR_SCALE = 0.15
SQRT1_2 = 0.7071067811865476
SH1_BITS, SH_REST_BITS = 5, 4
FLAG_ANTIALIASED, FLAG_EXTENSIONS = 0x1, 0x2


def fractional_bits(means) -> int:
    """12 (a quarter millimetre in metres), or fewer when a coordinate would not fit 24 bits."""
    m = float(np.max(np.abs(means))) if len(means) else 0.0
    bits = 12
    while bits > 0 and round(m * (1 << bits)) > (1 << 23) - 1:
        bits -= 1
    return bits


def _quantize_sh(x, bucket: int) -> np.ndarray:
    q = round_half_up(np.asarray(x, dtype=np.float64) * 128.0) + 128.0
    q = np.trunc((q + bucket // 2) / bucket) * bucket
    return np.clip(q, 0, 255).astype(np.uint8)


def pack_quats(q_wxyz) -> np.ndarray:
    """[N,4] uint8: the smallest-three code of each unit quaternion (xyzw order), little-endian."""
    q = unit_quats(q_wxyz)[:, [1, 2, 3, 0]]  # xyzw
    n = len(q)
    largest = np.argmax(np.abs(q), axis=1)
    negate = q[np.arange(n), largest] < 0
    comp = largest.astype(np.uint64)
    for i in range(4):
        keep = largest != i
        negbit = ((q[:, i] < 0) ^ negate).astype(np.uint64)
        mag = np.floor(511.0 * (np.abs(q[:, i]) / SQRT1_2) + 0.5).astype(np.uint64)
        comp = np.where(keep, (comp << np.uint64(10)) | (negbit << np.uint64(9)) | mag, comp)
    return comp.astype("<u4").view(np.uint8).reshape(n, 4)


def unpack_quats(r) -> np.ndarray:
    """[N,4] wxyz float32 from smallest-three codes [N,4] uint8."""
    comp = np.ascontiguousarray(r).view("<u4")[:, 0].astype(np.uint64)
    n = len(comp)
    largest = (comp >> np.uint64(30)).astype(np.int64)
    q = np.zeros((n, 4), dtype=np.float64)
    for i in (3, 2, 1, 0):
        sel = largest != i
        mag = (comp & np.uint64(511)).astype(np.float64)
        neg = ((comp >> np.uint64(9)) & np.uint64(1)).astype(bool)
        v = SQRT1_2 * mag / 511.0
        q[:, i] = np.where(sel, np.where(neg, -v, v), 0.0)
        comp = np.where(sel, comp >> np.uint64(10), comp)
    q[np.arange(n), largest] = np.sqrt(np.maximum(0.0, 1.0 - np.sum(q * q, axis=1)))
    return q[:, [3, 0, 1, 2]].astype(np.float32)


def encode(p: dict) -> bytes:
    """The uncompressed version-3 stream (header + attributes) of a splat dict."""
    p = flip_axes(p, RDF_TO_RUB)
    n, degree = len(p["means"]), p["sh_degree"]
    bits = fractional_bits(p["means"])
    header = struct.pack("<IIIBBBB", MAGIC, VERSION, n, degree, bits, 0, 0)
    fixed = round_half_up(p["means"].astype(np.float64) * (1 << bits)).astype(np.int64)
    pos = (fixed.reshape(-1, 1) >> np.array([0, 8, 16])) & 0xFF
    alphas = to_u8(sigmoid(p["opacity_logits"]) * 255.0)
    colors = to_u8(p["sh_coeffs"][:, 0, :].astype(np.float64) * (COLOR_SCALE * 255.0) + 0.5 * 255.0)
    scales = to_u8((p["log_scales"].astype(np.float64) + 10.0) * 16.0)
    rots = pack_quats(p["quats"])
    rest = p["sh_coeffs"][:, 1:, :]
    sh = np.zeros(rest.shape, dtype=np.uint8)
    if rest.shape[1]:
        sh[:, :3] = _quantize_sh(rest[:, :3], 1 << (8 - SH1_BITS))
        sh[:, 3:] = _quantize_sh(rest[:, 3:], 1 << (8 - SH_REST_BITS))
    parts = [pos.astype(np.uint8), alphas, colors, scales, rots, sh]
    return header + b"".join(np.ascontiguousarray(a).tobytes() for a in parts)


def compress(p: dict) -> bytes:
    """The bytes of a ``.spz`` file (and of a glTF's SPZ bufferView): the gzip of :func:`encode`."""
    return gzip.compress(encode(p), compresslevel=9, mtime=0)


def write(path, p: dict) -> Path:
    return atomic_write(Path(path), compress(p))


def _decode(body: bytes, n: int, degree: int, bits: int, version: int, path) -> dict:
    K = (degree + 1) ** 2
    rot_bytes = 4 if version >= 3 else 3
    sizes = [n * 9, n, n * 3, n * 3, n * rot_bytes, n * (K - 1) * 3]
    if len(body) < sum(sizes):
        raise DatasetError("%s: truncated SPZ (%d bytes of splats, %d needed)" % (path, len(body), sum(sizes)))
    offs = np.cumsum([0] + sizes)
    buf = np.frombuffer(body, dtype=np.uint8)
    pos = buf[offs[0] : offs[1]].reshape(n, 3, 3).astype(np.int32)
    fixed = pos[..., 0] | (pos[..., 1] << 8) | (pos[..., 2] << 16)
    fixed = np.where(fixed & 0x800000, fixed - (1 << 24), fixed)
    alphas = buf[offs[1] : offs[2]].astype(np.float64) / 255.0
    colors = buf[offs[2] : offs[3]].reshape(n, 3).astype(np.float64)
    scales = buf[offs[3] : offs[4]].reshape(n, 3).astype(np.float64)
    rots = buf[offs[4] : offs[5]].reshape(n, rot_bytes)
    if version >= 3:
        quats = unpack_quats(rots)
    else:
        xyz = rots.astype(np.float64) / 127.5 - 1.0
        w = np.sqrt(np.maximum(0.0, 1.0 - np.sum(xyz * xyz, axis=1)))
        quats = np.concatenate([w[:, None], xyz], axis=1).astype(np.float32)
    sh = np.empty((n, K, 3), dtype=np.float32)
    sh[:, 0, :] = (colors / 255.0 - 0.5) / COLOR_SCALE
    sh[:, 1:, :] = (buf[offs[5] : offs[6]].reshape(n, K - 1, 3).astype(np.float32) - 128.0) / 128.0
    p = dict(
        means=(fixed.astype(np.float64) / (1 << bits)).astype(np.float32),
        quats=quats,
        log_scales=(scales / 16.0 - 10.0).astype(np.float32),
        opacity_logits=logit(alphas, 0.5 / 255).astype(np.float32),
        sh_coeffs=sh,
        sh_degree=degree,
    )
    return flip_axes(p, RDF_TO_RUB)


def read(path) -> dict:
    """The splats of an SPZ file (versions 2, 3 and 4), in the PLY's axes."""
    path = Path(path)
    return decode(path.read_bytes(), path)


def decode(data: bytes, path, versions=(2, 3, 4)) -> dict:
    """The splats of SPZ bytes (a file's or a glTF bufferView's: ``path`` names
    them in errors), in the PLY's axes; ``versions`` those accepted."""
    if data[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise DatasetError("%s: not a readable gzip stream (%s)" % (path, exc)) from None
        if len(raw) < 16:
            raise DatasetError("%s: SPZ header truncated" % path)
        magic, version, n, degree, bits, flags, _ = struct.unpack_from("<IIIBBBB", raw)
        if magic != MAGIC:
            raise DatasetError("%s: not an SPZ file (magic %#x)" % (path, magic))
        gz = [v for v in versions if v in (2, 3)]
        if version not in gz:
            raise DatasetError(
                "%s: SPZ version %d in a gzip stream (%s are read)" % (path, version, " and ".join(map(str, gz)))
            )
        if degree > 3:
            raise DatasetError("%s: SH degree %d (0 to 3 are rendered)" % (path, degree))
        return _decode(raw[16:], n, degree, bits, version, path)
    if len(data) >= 32 and struct.unpack_from("<I", data)[0] == MAGIC:
        if 4 not in versions:
            version = struct.unpack_from("<I", data, 4)[0]
            raise DatasetError(
                "%s: SPZ version %d, plain (ZSTD) streams; here only gzip versions %s are read"
                % (path, version, " and ".join(map(str, versions)))
            )
        return _read_v4(data, path)
    raise DatasetError("%s: not an SPZ file (neither gzip nor an NGSP header)" % path)


def _read_v4(data: bytes, path) -> dict:
    magic, version, n, degree, bits, flags, streams, toc = struct.unpack_from("<IIIBBBBI", data)
    if version != 4:
        raise DatasetError("%s: SPZ version %d with a plain header (4 is)" % (path, version))
    if degree > 3:
        raise DatasetError("%s: SH degree %d (0 to 3 are rendered)" % (path, degree))
    import zstandard

    off = toc + 16 * streams
    parts = []
    try:
        for i in range(streams):
            csize, usize = struct.unpack_from("<QQ", data, toc + 16 * i)
            parts.append(zstandard.ZstdDecompressor().decompress(data[off : off + csize], max_output_size=usize))
            off += csize
    except (struct.error, zstandard.ZstdError) as exc:
        raise DatasetError("%s: SPZ streams unreadable (%s)" % (path, exc)) from None
    return _decode(b"".join(parts), n, degree, bits, version, path)
