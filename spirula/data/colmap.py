"""COLMAP sparse models: ``cameras``, ``images``, ``points3D`` in ``.bin`` or ``.txt``.

The model folder is ``sparse/0/`` or ``sparse/`` (binary preferred when both
exist), images in ``images/``. Supported camera models: SIMPLE_PINHOLE,
PINHOLE, SIMPLE_RADIAL, RADIAL, OPENCV, FULL_OPENCV, OPENCV_FISHEYE; the distorted
ones train through their own lens (:func:`camera_lens`), or with
``undistort=True`` the perspective ones with k4..k6 = 0 are undistorted at load
(:mod:`spirula.data.undistort`). An image's ``qvec`` (wxyz) and ``tvec`` are
already world->camera in the OpenCV frame, and COLMAP's pixel convention
(centre of the top-left pixel at (0.5, 0.5)) is Spirula's, so K is used as is.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np

from spirula.data.images import rel
from spirula.data.scene import View, check_intrinsics, qvec_to_rotmat
from spirula.errors import DatasetError

# model id -> (name, number of params); the full COLMAP list, so files with any
# camera parse, and only an image that *uses* an unsupported one is an error.
MODELS = {
    0: ("SIMPLE_PINHOLE", 3),
    1: ("PINHOLE", 4),
    2: ("SIMPLE_RADIAL", 4),
    3: ("RADIAL", 5),
    4: ("OPENCV", 8),
    5: ("OPENCV_FISHEYE", 8),
    6: ("FULL_OPENCV", 12),
    7: ("FOV", 5),
    8: ("SIMPLE_RADIAL_FISHEYE", 4),
    9: ("RADIAL_FISHEYE", 5),
    10: ("THIN_PRISM_FISHEYE", 12),
    11: ("RAD_TAN_THIN_PRISM_FISHEYE", 16),
}
NUM_PARAMS = {name: n for name, n in MODELS.values()}
SUPPORTED = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE")


def camera_lens(model: str, params) -> tuple:
    """``(lens, [12] float64 k1..k6, p1, p2, s1..s4)``: the kernels' lens of a supported
    model (docs/design.md §2.3): PINHOLE, OPENCV (SIMPLE_RADIAL, RADIAL, OPENCV and
    FULL_OPENCV, whose k4..k6 are OpenCV's rational denominator) or OPENCV_FISHEYE."""
    p = [float(x) for x in params]
    d = np.zeros(12)
    if model in ("SIMPLE_PINHOLE", "PINHOLE"):
        return "PINHOLE", d
    if model == "SIMPLE_RADIAL":
        d[0] = p[3]
    elif model == "RADIAL":
        d[0:2] = p[3:5]
    elif model == "OPENCV":
        d[0:2], d[6:8] = p[4:6], p[6:8]
    elif model == "FULL_OPENCV":  # fx fy cx cy k1 k2 p1 p2 k3 k4 k5 k6
        d[0:2], d[6:8], d[2:6] = p[4:6], p[6:8], p[8:12]
    elif model == "OPENCV_FISHEYE":  # fx fy cx cy k1 k2 k3 k4
        d[0:4] = p[4:8]
        return "OPENCV_FISHEYE", d
    else:
        raise ValueError(model)
    return "OPENCV", d


def find_model_dir(root: Path):
    """``sparse/0`` or ``sparse`` when it holds a cameras file, else None."""
    for d in (root / "sparse" / "0", root / "sparse"):
        if (d / "cameras.bin").is_file() or (d / "cameras.txt").is_file():
            return d
    return None


def camera_intrinsics(model: str, params) -> tuple:
    """``(K [3,3] float64, dist [6] float64 (k1,k2,k3,k4,p1,p2))`` of a supported model."""
    p = [float(x) for x in params]
    dist = np.zeros(6)
    if model == "SIMPLE_PINHOLE":
        fx = fy = p[0]
        cx, cy = p[1], p[2]
    elif model == "PINHOLE":
        fx, fy, cx, cy = p[:4]
    elif model == "SIMPLE_RADIAL":
        fx = fy = p[0]
        cx, cy = p[1], p[2]
        dist[0] = p[3]
    elif model == "RADIAL":
        fx = fy = p[0]
        cx, cy = p[1], p[2]
        dist[0:2] = p[3:5]
    elif model in ("OPENCV", "FULL_OPENCV"):
        fx, fy, cx, cy = p[:4]
        dist[0:2] = p[4:6]
        dist[4:6] = p[6:8]
        if model == "FULL_OPENCV":
            dist[2] = p[8]  # k4..k6 (a rational term) have no undistortion: camera_lens
    elif model == "OPENCV_FISHEYE":
        fx, fy, cx, cy = p[:4]  # no undistortion: trained through its lens (camera_lens)
    else:
        raise ValueError(model)
    return np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]], dtype=np.float64), dist


class _Reader:
    """Bounds-checked little-endian reads from a whole ``.bin`` file."""

    def __init__(self, path: Path, root: Path):
        self.data = path.read_bytes()
        self.pos = 0
        self.label = rel(path, root)

    def need(self, n: int) -> None:
        if self.pos + n > len(self.data):
            raise DatasetError(
                "%s: truncated (expected %d bytes at offset %d, file has %d)"
                % (self.label, n, self.pos, len(self.data))
            )

    def read(self, fmt: str) -> tuple:
        s = struct.Struct("<" + fmt)
        self.need(s.size)
        out = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return out

    def skip(self, n: int) -> None:
        self.need(n)
        self.pos += n

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise DatasetError(
                "%s: truncated (unterminated image name at offset %d, file has %d)"
                % (self.label, self.pos, len(self.data))
            )
        raw = self.data[self.pos : end]
        self.pos = end + 1
        return raw.decode("utf-8", errors="surrogateescape")

    def done(self, what: str) -> None:
        if self.pos != len(self.data):
            raise DatasetError(
                "%s: %d unexpected bytes after the last %s (offset %d)"
                % (self.label, len(self.data) - self.pos, what, self.pos)
            )


def _read_cameras_bin(path, root) -> dict:
    r = _Reader(path, root)
    cams = {}
    for _ in range(r.read("Q")[0]):
        cid, mid, w, h = r.read("iiQQ")
        if mid not in MODELS:
            raise DatasetError("%s: camera %d has unknown model id %d" % (r.label, cid, mid))
        name, n = MODELS[mid]
        cams[cid] = (name, int(w), int(h), r.read("%dd" % n))
    r.done("camera")
    return cams


def _read_images_bin(path, root) -> list:
    r = _Reader(path, root)
    out, ids = [], set()
    for _ in range(r.read("Q")[0]):
        iid, qw, qx, qy, qz, tx, ty, tz, cid = r.read("i7di")
        name = r.cstring()
        r.skip(24 * r.read("Q")[0])  # points2D: x, y (double), point3D id (int64)
        if iid in ids:
            raise DatasetError("%s: image %d is listed twice" % (r.label, iid))
        ids.add(iid)
        out.append((iid, (qw, qx, qy, qz), (tx, ty, tz), cid, name))
    r.done("image")
    return out


def _read_points_bin(path, root) -> tuple:
    r = _Reader(path, root)
    n = r.read("Q")[0]
    xyz, rgb = [], []
    head = struct.Struct("<Q3d3BdQ")
    data = r.data
    for _ in range(n):
        r.need(head.size)
        _, x, y, z, cr, cg, cb, _, track = head.unpack_from(data, r.pos)
        r.pos += head.size
        r.skip(8 * track)  # (image id, point2D index) int32 pairs
        xyz.append((x, y, z))
        rgb.append((cr, cg, cb))
    r.done("point")
    return _finite_points(np.array(xyz, dtype=np.float64).reshape(-1, 3), r.label), np.array(
        rgb, dtype=np.uint8
    ).reshape(-1, 3)


def _finite_points(xyz, label) -> np.ndarray:
    """``[P,3] float32`` of the float64 ``xyz``; a DatasetError naming the file
    when a point is not finite, in float32 too (1e39 overflows it)."""
    ok = np.all(np.isfinite(xyz) & (np.abs(xyz) <= np.finfo(np.float32).max), axis=1)
    if not np.all(ok):
        bad = np.flatnonzero(~ok)
        raise DatasetError(
            "%s: %d of %d points have non-finite coordinates (the first: point #%d of the file, %s)"
            % (label, len(bad), len(xyz), bad[0] + 1, xyz[bad[0]].tolist())
        )
    return xyz.astype(np.float32)


def _text_lines(path: Path, root: Path):
    """``(line number, stripped line)`` of every line, comments included."""
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise DatasetError("%s: cannot read (%s)" % (rel(path, root), exc.strerror)) from None
    if not text:  # COLMAP writes its comment header even for an empty model
        raise DatasetError("%s: empty file" % rel(path, root))
    return [(i + 1, ln.strip()) for i, ln in enumerate(text.splitlines())]


_HEADER_COUNT = re.compile(r"#\s*Number of (cameras|images|points)\s*:\s*(\d+)", re.I)


def _check_count(lines, what: str, found: int, label: str) -> None:
    """COLMAP's text files open with ``# Number of <what>: N``; when that
    comment is there, N must be the number of records read (a file cut at a
    line boundary, or lines lost, would otherwise go unnoticed)."""
    for _, ln in lines:
        if not ln.startswith("#"):
            break
        m = _HEADER_COUNT.match(ln)
        if m and m.group(1).lower() == what and int(m.group(2)) != found:
            raise DatasetError("%s: the header says %s %s, but the file has %d" % (label, m.group(2), what, found))


def _read_cameras_txt(path, root) -> dict:
    cams, lines = {}, _text_lines(path, root)
    for no, ln in lines:
        if not ln or ln.startswith("#"):
            continue
        tok = ln.split()
        try:
            cid, model, w, h = int(tok[0]), tok[1], int(tok[2]), int(tok[3])
            params = tuple(float(t) for t in tok[4:])
        except (ValueError, IndexError):
            raise DatasetError(
                "%s: line %d: expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS..., got %r" % (rel(path, root), no, ln[:80])
            ) from None
        if model in NUM_PARAMS and len(params) != NUM_PARAMS[model]:
            raise DatasetError(
                "%s: line %d: camera %d (%s) has %d parameters, expected %d"
                % (rel(path, root), no, cid, model, len(params), NUM_PARAMS[model])
            )
        if cid in cams:
            raise DatasetError("%s: line %d: camera %d is defined twice" % (rel(path, root), no, cid))
        cams[cid] = (model, w, h, params)
    _check_count(lines, "cameras", len(cams), rel(path, root))
    return cams


def _image_record(ln: str):
    """``(image id, qvec, tvec, camera id, name)`` of an image line, else None."""
    tok = ln.split(None, 9)
    if len(tok) < 10:
        return None
    try:
        return int(tok[0]), tuple(map(float, tok[1:5])), tuple(map(float, tok[5:8])), int(tok[8]), tok[9]
    except ValueError:
        return None


def _is_points2d(ln: str) -> bool:
    """True for a POINTS2D line: (X Y POINT3D_ID) triples, X and Y reals, the id an integer."""
    tok = ln.split()
    if len(tok) % 3:
        return False
    try:
        for k in range(0, len(tok), 3):
            float(tok[k]), float(tok[k + 1]), int(tok[k + 2])
    except ValueError:
        return False
    return True


def _read_images_txt(path, root) -> list:
    """Image records by their structure, not by alternating lines: an image
    line (10 fields, the name last) may be followed by its POINTS2D line
    (empty, or missing altogether in files some tools write); comments and
    blank lines may appear anywhere. The line after an image line is its
    POINTS2D line when it reads as one ((real, real, integer) triples); an
    image line never does (10 fields, or more only when the name has spaces,
    and a name is not an integer), while a POINTS2D line with integral
    coordinates can read as an image line, hence this order."""
    label, out, ids = rel(path, root), [], set()
    lines = _text_lines(path, root)
    after_image = False
    for no, ln in lines:
        if not ln or ln.startswith("#"):
            continue
        if after_image and _is_points2d(ln):
            after_image = False
            continue
        rec = _image_record(ln)
        if rec is None:
            raise DatasetError(
                "%s: line %d: expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME%s, got %r"
                % (label, no, " or its POINTS2D line (X Y POINT3D_ID ...)" if after_image else "", ln[:80])
            )
        if rec[0] in ids:
            raise DatasetError("%s: line %d: image %d is listed twice" % (label, no, rec[0]))
        ids.add(rec[0])
        out.append(rec)
        after_image = True
    _check_count(lines, "images", len(out), label)
    return out


def _read_points_txt(path, root) -> tuple:
    xyz, rgb, lines = [], [], _text_lines(path, root)
    for no, ln in lines:
        if not ln or ln.startswith("#"):
            continue
        tok = ln.split()
        try:
            xyz.append((float(tok[1]), float(tok[2]), float(tok[3])))
            rgb.append((int(tok[4]), int(tok[5]), int(tok[6])))
        except (ValueError, IndexError):
            raise DatasetError(
                "%s: line %d: expected POINT3D_ID X Y Z R G B ERROR TRACK..., got %r" % (rel(path, root), no, ln[:80])
            ) from None
    _check_count(lines, "points", len(xyz), rel(path, root))
    return (
        _finite_points(np.array(xyz, dtype=np.float64).reshape(-1, 3), rel(path, root)),
        np.clip(np.array(rgb, dtype=np.int64), 0, 255).astype(np.uint8).reshape(-1, 3),
    )


def read_model(model_dir: Path, root: Path) -> tuple:
    """Read a sparse model: ``(cameras, images, points, colors, files)`` where
    ``cameras`` maps id -> (model, width, height, params), ``images`` is a list
    of (image id, qvec wxyz, tvec, camera id, name), ``points [P,3] float32``,
    ``colors [P,3] uint8`` (None, None when there is no points3D file) and
    ``files`` maps 'cameras'/'images' to the file paths read."""
    ext = ".bin" if (model_dir / "cameras.bin").is_file() else ".txt"
    files = {k: model_dir / (k + ext) for k in ("cameras", "images", "points3D")}
    if not files["images"].is_file():
        raise DatasetError("%s: missing (the model has %s)" % (rel(files["images"], root), rel(files["cameras"], root)))
    if ext == ".bin":
        cams = _read_cameras_bin(files["cameras"], root)
        imgs = _read_images_bin(files["images"], root)
        pts = _read_points_bin(files["points3D"], root) if files["points3D"].is_file() else (None, None)
    else:
        cams = _read_cameras_txt(files["cameras"], root)
        imgs = _read_images_txt(files["images"], root)
        pts = _read_points_txt(files["points3D"], root) if files["points3D"].is_file() else (None, None)
    return cams, imgs, pts[0], pts[1], files


def load_colmap(root: Path, model_dir: Path) -> tuple:
    """``(views, image_dir, points, colors, referenced_by)`` of a COLMAP dataset:
    views sorted by name at the cameras' resolution, K and dist from the camera
    model. Raises :class:`~spirula.errors.DatasetError` for an image using a camera the model
    does not define or an unsupported model."""
    cams, imgs, points, colors, files = read_model(model_dir, root)
    if not imgs:
        raise DatasetError("%s: no registered images" % rel(files["images"], root))
    views, checked = [], set()
    for iid, q, t, cid, name in imgs:
        if cid not in cams:
            raise DatasetError(
                "%s: image %d uses camera %d, which %s does not define"
                % (rel(files["images"], root), iid, cid, files["cameras"].name)
            )
        model, w, h, params = cams[cid]
        if model not in SUPPORTED:
            raise DatasetError(
                "%s: camera %d has model %s, which Spirula does not support (supported: %s;"
                " run COLMAP's image_undistorter first)"
                % (rel(files["cameras"], root), cid, model, ", ".join(SUPPORTED))
            )
        if w <= 0 or h <= 0:
            raise DatasetError("%s: camera %d has size %dx%d" % (rel(files["cameras"], root), cid, w, h))
        if not np.all(np.isfinite(q)) or np.linalg.norm(q) < 1e-12 or not np.all(np.isfinite(t)):
            raise DatasetError("%s: image %d (%s) has an invalid pose" % (rel(files["images"], root), iid, name))
        K, dist = camera_intrinsics(model, params)
        lens, lens_dist = camera_lens(model, params)
        if cid not in checked:
            where = "%s: camera %d (%s)" % (rel(files["cameras"], root), cid, model)
            if not (np.all(np.isfinite(dist)) and np.all(np.isfinite(lens_dist))):
                raise DatasetError("%s: distortion parameters %s are not all finite" % (where, list(params[4:])))
            check_intrinsics(where, w, h, K[0, 0], K[1, 1], K[0, 2], K[1, 2])
            checked.add(cid)
        vm = np.eye(4)
        vm[:3, :3] = qvec_to_rotmat(q)
        vm[:3, 3] = t
        views.append(
            View(
                name=name,
                width=w,
                height=h,
                K=K,
                viewmat=vm,
                dist=dist,
                model=model,
                lens=lens,
                lens_dist=lens_dist,
            )
        )
    views.sort(key=lambda v: v.name)
    return views, root / "images", points, colors, rel(files["images"], root)
