"""PLY files: the 3DGS ``splat.ply`` every viewer reads, and seed point clouds.

``splat.ply`` (docs/design.md §6): ``binary_little_endian``, one ``vertex``
element of float32 properties, in this order::

    x y z  nx ny nz  f_dc_0 f_dc_1 f_dc_2  f_rest_0 .. f_rest_{3(K-1)-1}
    opacity  scale_0 scale_1 scale_2  rot_0 rot_1 rot_2 rot_3

``f_dc_c = sh[:, 0, c]``; ``f_rest`` is channel-major:
``f_rest_{c*(K-1) + (k-1)} = sh[:, k, c]`` for k = 1..K-1 (all red
coefficients, then green, then blue). ``opacity`` is the logit, ``scale_*``
the log, ``rot`` the quaternion wxyz (not necessarily normalized); normals are 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spirula.errors import DatasetError
from spirula.files import atomic_write

_TYPES = {
    "char": "i1",
    "int8": "i1",
    "uchar": "u1",
    "uint8": "u1",
    "short": "i2",
    "int16": "i2",
    "ushort": "u2",
    "uint16": "u2",
    "int": "i4",
    "int32": "i4",
    "uint": "u4",
    "uint32": "u4",
    "float": "f4",
    "float32": "f4",
    "double": "f8",
    "float64": "f8",
}


def splat_property_names(K: int) -> list:
    """The property names of a splat.ply with ``K`` SH coefficients per channel."""
    return (
        ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
        + ["f_rest_%d" % i for i in range(3 * (K - 1))]
        + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    )


def write_splat_ply(path, means, quats, log_scales, opacity_logits, sh_coeffs) -> None:
    """Write splats as a 3DGS ``splat.ply``, atomically (a temp file in the same
    folder, then ``os.replace``).

    means ``[N,3]``, quats ``[N,4]`` wxyz, log_scales ``[N,3]``, opacity_logits
    ``[N]`` (or ``[N,1]``), sh_coeffs ``[N,K,3]`` with K a square (1, 4, 9, 16);
    any float dtype, stored as float32. Raises ValueError for wrong shapes.
    """
    means = np.asarray(means, dtype=np.float32)
    n = means.shape[0] if means.ndim == 2 else -1
    quats = np.asarray(quats, dtype=np.float32)
    log_scales = np.asarray(log_scales, dtype=np.float32)
    opac = np.asarray(opacity_logits, dtype=np.float32)
    sh = np.asarray(sh_coeffs, dtype=np.float32)
    if opac.ndim == 2 and opac.shape[1:] == (1,):
        opac = opac[:, 0]
    for name, a, shape in (
        ("means", means, (n, 3)),
        ("quats", quats, (n, 4)),
        ("log_scales", log_scales, (n, 3)),
        ("opacity_logits", opac, (n,)),
    ):
        if n < 0 or a.shape != shape:
            raise ValueError("write_splat_ply: %s has shape %s, expected %s" % (name, a.shape, shape))
    K = sh.shape[1] if sh.ndim == 3 else 0
    if sh.ndim != 3 or sh.shape[0] != n or sh.shape[2] != 3 or K < 1 or int(round(K**0.5)) ** 2 != K:
        raise ValueError(
            "write_splat_ply: sh_coeffs has shape %s, expected [%d,K,3] with K in 1, 4, 9, 16..." % (sh.shape, n)
        )
    names = splat_property_names(K)
    cols = np.empty((n, len(names)), dtype="<f4")
    cols[:, 0:3] = means
    cols[:, 3:6] = 0.0
    cols[:, 6:9] = sh[:, 0, :]
    r = 3 * (K - 1)
    cols[:, 9 : 9 + r] = sh[:, 1:, :].transpose(0, 2, 1).reshape(n, r)
    cols[:, 9 + r] = opac
    cols[:, 10 + r : 13 + r] = log_scales
    cols[:, 13 + r : 17 + r] = quats
    header = ["ply", "format binary_little_endian 1.0", "element vertex %d" % n]
    header += ["property float %s" % nm for nm in names]
    header += ["end_header"]
    atomic_write(Path(path), [("\n".join(header) + "\n").encode("ascii"), cols.tobytes()])


def read_ply_vertices(path) -> np.ndarray:
    """The ``vertex`` element of a PLY file (ascii or binary, either endianness)
    as a numpy structured array with the file's property names and types.
    Elements before ``vertex`` must have no list properties."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError("%s: missing" % path) from None
    except OSError as exc:
        raise DatasetError("%s: cannot read (%s)" % (path, exc.strerror)) from None
    end = data.find(b"end_header")
    if not data.startswith(b"ply") or end < 0:
        raise DatasetError("%s: not a PLY file (no 'ply' ... 'end_header' header)" % path)
    nl = data.find(b"\n", end)
    body = data[nl + 1 :] if nl >= 0 else b""
    fmt, elements = None, []
    for ln in data[:end].decode("ascii", errors="replace").splitlines():
        tok = ln.split()
        if not tok or tok[0] in ("ply", "comment", "obj_info"):
            continue
        if tok[0] == "format" and len(tok) >= 2:
            fmt = tok[1]
        elif tok[0] == "element" and len(tok) == 3 and tok[2].isdigit():
            elements.append((tok[1], int(tok[2]), []))
        elif tok[0] == "property" and elements and len(tok) >= 3:
            if tok[1] == "list":
                elements[-1][2].append((tok[-1], None))
            elif tok[1] in _TYPES:
                elements[-1][2].append((tok[2], _TYPES[tok[1]]))
            else:
                raise DatasetError("%s: property %s has unknown type %s" % (path, tok[2], tok[1]))
        else:
            raise DatasetError("%s: malformed header line %r" % (path, ln[:60]))
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise DatasetError("%s: unsupported PLY format %r" % (path, fmt))
    order = "<" if fmt != "binary_big_endian" else ">"
    offset = 0
    for name, count, props in elements:
        if any(t is None for _, t in props):
            if name == "vertex":
                raise DatasetError("%s: vertex element has list properties" % path)
            raise DatasetError("%s: element %r before vertex has list properties" % (path, name))
        dt = np.dtype([(p, (order if fmt != "ascii" else "<") + t) for p, t in props])
        if fmt == "ascii":
            lines = body.decode("ascii", errors="replace").splitlines()
            rows = [ln.split() for ln in lines[offset : offset + count]]
            if len(rows) < count or any(len(r) < len(props) for r in rows):
                raise DatasetError("%s: truncated (element %s needs %d rows)" % (path, name, count))
            if name == "vertex":
                out = np.zeros(count, dtype=dt)
                try:
                    arr = np.array([r[: len(props)] for r in rows], dtype=np.float64).reshape(count, len(props))
                except ValueError:
                    bad = next(k for k, r in enumerate(rows) if not _numbers(r[: len(props)]))
                    raise DatasetError(
                        "%s: vertex %d is not %d numbers: %r" % (path, bad, len(props), " ".join(rows[bad])[:60])
                    ) from None
                if elements[-1][0] == "vertex" and any(ln.strip() for ln in lines[offset + count :]):
                    raise DatasetError("%s: more vertex rows than the header's %d" % (path, count))
                for j, (p, _) in enumerate(props):
                    out[p] = arr[:, j]
                return out
            offset += count
            continue
        size = dt.itemsize * count
        if name == "vertex":
            if offset + size > len(body):
                raise DatasetError(
                    "%s: truncated (expected %d bytes of vertex data, file has %d)" % (path, size, len(body) - offset)
                )
            extra = len(body) - offset - size
            if elements[-1][0] == "vertex" and extra >= max(dt.itemsize, 1):
                raise DatasetError(
                    "%s: %d bytes after the %d vertices the header declares (a wrong vertex count?)"
                    % (path, extra, count)
                )
            return np.frombuffer(body, dtype=dt, count=count, offset=offset).copy()
        offset += size
    raise DatasetError("%s: no vertex element" % path)


def _numbers(tokens) -> bool:
    try:
        [float(t) for t in tokens]
    except ValueError:
        return False
    return True


def _fields(v: np.ndarray, names, path) -> np.ndarray:
    missing = [n for n in names if n not in v.dtype.names]
    if missing:
        raise DatasetError("%s: missing propert%s %s" % (path, "y" if len(missing) == 1 else "ies", " ".join(missing)))
    return np.stack([v[n].astype(np.float32) for n in names], axis=1) if names else np.zeros((len(v), 0), np.float32)


def read_splat_ply(path, allow_empty: bool = True) -> dict:
    """Read a 3DGS ``splat.ply`` (property order is free; extra properties are
    ignored). Returns float32 arrays ``means [N,3]``, ``quats [N,4]`` wxyz,
    ``log_scales [N,3]``, ``opacity_logits [N]``, ``sh_coeffs [N,K,3]`` and the
    int ``sh_degree`` (K = (deg+1)^2). ``allow_empty=False`` (what is to be
    rendered): a file with no splats is a :class:`DatasetError`."""
    v = read_ply_vertices(path)
    n = len(v)
    if n == 0 and not allow_empty:
        raise DatasetError("%s: the splat file holds no splats" % path)
    rest = sorted((nm for nm in v.dtype.names if nm.startswith("f_rest_")), key=lambda s: int(s[7:]))
    r = len(rest)
    K = r // 3 + 1
    if r % 3 or int(round(K**0.5)) ** 2 != K or rest != ["f_rest_%d" % i for i in range(r)]:
        raise DatasetError(
            "%s: %d f_rest properties, expected 3*(K-1) numbered from 0 with K in 1, 4, 9, 16" % (path, r)
        )
    sh = np.empty((n, K, 3), dtype=np.float32)
    sh[:, 0, :] = _fields(v, ["f_dc_0", "f_dc_1", "f_dc_2"], path)
    sh[:, 1:, :] = _fields(v, rest, path).reshape(n, 3, K - 1).transpose(0, 2, 1)
    return {
        "means": _fields(v, ["x", "y", "z"], path),
        "quats": _fields(v, ["rot_0", "rot_1", "rot_2", "rot_3"], path),
        "log_scales": _fields(v, ["scale_0", "scale_1", "scale_2"], path),
        "opacity_logits": _fields(v, ["opacity"], path)[:, 0],
        "sh_coeffs": sh,
        "sh_degree": int(round(K**0.5)) - 1,
    }


def read_points_ply(path) -> tuple:
    """A seed point cloud: ``(points [P,3] float32, colors [P,3] uint8)`` from
    x, y, z and, when present, red, green, blue (uchar; float colours in [0,1]
    are scaled by 255). Without colours every point is mid-grey (128)."""
    v = read_ply_vertices(path)
    with np.errstate(over="ignore"):  # a double beyond float32 becomes inf, reported below
        pts = _fields(v, ["x", "y", "z"], path)
    bad = np.flatnonzero(~np.all(np.isfinite(pts), axis=1))
    if len(bad):
        raise DatasetError(
            "%s: %d of %d points have non-finite coordinates (the first: vertex %d, %s)"
            % (path, len(bad), len(pts), bad[0], pts[bad[0]].tolist())
        )
    if all(c in v.dtype.names for c in ("red", "green", "blue")):
        c = np.stack([v["red"], v["green"], v["blue"]], axis=1)
        if c.dtype.kind == "f" and not np.all(np.isfinite(c)):
            raise DatasetError("%s: non-finite colours (red, green, blue)" % path)
        if c.dtype.kind == "f":
            c = c * 255.0 if c.size and c.max() <= 1.0 else c
            c = np.rint(c)
        cols = np.clip(c, 0, 255).astype(np.uint8)
    else:
        cols = np.full((len(pts), 3), 128, dtype=np.uint8)
    return pts, cols
