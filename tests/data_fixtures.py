"""A small synthetic scene, written in every dataset format Spirula reads.

:func:`make_truth` builds it deterministically: 12 cameras on a circle of
radius 4 at height 1 (world z up) looking at the origin, 64x48 pinhole images
with fx = fy = 60 and the principal point at the centre (the only intrinsics
Blender can express), 500 coloured points. The writers put it on disk as
COLMAP binary, COLMAP text, Blender (RGBA PNGs) and nerfstudio (with
``applied_transform`` and a ``ply_file_path``, like ``ns-process-data``).

The camera maths here is written independently of spirula.data (OpenCV
look-at, COLMAP's quaternion convention, the radial-tangential model and its
fixed-point inverse), so the tests compare two implementations.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

W, H, F = 64, 48, 60.0
N_CAMS, N_POINTS = 12, 500
# ns-process-data's applied_transform: swap y/z, negate the new z.
NS_APPLIED = np.array([[1.0, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0]])


@dataclass
class Truth:
    names: list  # "0000.png" ...
    K: np.ndarray  # [3,3]
    viewmats: np.ndarray  # [C,4,4] world->camera, OpenCV
    points: np.ndarray  # [P,3] float32
    colors: np.ndarray  # [P,3] uint8
    images: list = field(default_factory=list)  # [H,W,3] uint8 per camera
    alphas: list = field(default_factory=list)  # [H,W] uint8 per camera (Blender)


def look_at(center, target=(0, 0, 0), up=(0, 0, 1)) -> np.ndarray:
    """World->camera [4,4] (OpenCV: x right, y down, z forward) of a camera at
    ``center`` looking at ``target``."""
    c = np.asarray(center, float)
    fwd = np.asarray(target, float) - c
    fwd /= np.linalg.norm(fwd)
    right = np.cross(fwd, up)
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    R = np.stack([right, down, fwd])  # rows: camera axes in world
    v = np.eye(4)
    v[:3, :3] = R
    v[:3, 3] = -R @ c
    return v


def rotmat_to_qvec(R) -> np.ndarray:
    """wxyz quaternion (w >= 0) of a rotation matrix (Shepperd's method)."""
    R = np.asarray(R, float)
    tr = np.trace(R)
    if tr > 0:
        s = 2 * math.sqrt(tr + 1)
        q = [0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2 * math.sqrt(1 + R[i, i] - R[j, j] - R[k, k])
        q = [0.0] * 4
        q[0] = (R[k, j] - R[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (R[j, i] + R[i, j]) / s
        q[1 + k] = (R[k, i] + R[i, k]) / s
    q = np.array(q)
    return q if q[0] >= 0 else -q


def pattern(k: int) -> np.ndarray:
    """A distinct [H,W,3] uint8 test image for camera k."""
    i, j = np.mgrid[0:H, 0:W]
    r = (j * 4 + k * 10) % 256
    g = (i * 5 + k * 20) % 256
    b = ((i // 8 + j // 8 + k) % 2) * 200 + 20
    return np.stack([r, g, b], axis=2).astype(np.uint8)


def make_truth(seed: int = 0) -> Truth:
    rng = np.random.default_rng(seed)
    views = []
    for k in range(N_CAMS):
        t = 2 * math.pi * k / N_CAMS
        views.append(look_at((4 * math.cos(t), 4 * math.sin(t), 1.0)))
    K = np.array([[F, 0, W / 2], [0, F, H / 2], [0, 0, 1]])
    pts = (rng.normal(size=(N_POINTS, 3)) * 0.5).astype(np.float32)
    cols = rng.integers(0, 256, size=(N_POINTS, 3), dtype=np.uint8)
    i, j = np.mgrid[0:H, 0:W]
    alpha = np.where((i - H / 2) ** 2 + (j - W / 2) ** 2 < 18**2, 255, 0).astype(np.uint8)
    alpha[:, :4] = 128
    return Truth(
        names=["%04d.png" % k for k in range(N_CAMS)],
        K=K,
        viewmats=np.stack(views),
        points=pts,
        colors=cols,
        images=[pattern(k) for k in range(N_CAMS)],
        alphas=[alpha] * N_CAMS,
    )


def _save_images(folder: Path, names, images) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for n, im in zip(names, images):
        Image.fromarray(im).save(folder / n)


def _camera_params(model, params):
    ids = {"SIMPLE_PINHOLE": 0, "PINHOLE": 1, "SIMPLE_RADIAL": 2, "RADIAL": 3, "OPENCV": 4, "OPENCV_FISHEYE": 5}
    ids.update(FULL_OPENCV=6, FOV=7)
    return ids[model], [float(p) for p in params]


def write_colmap(
    root: Path,
    truth: Truth,
    binary: bool = True,
    model: str = "PINHOLE",
    params=None,
    images=None,
    model_dir: str = "sparse/0",
    write_points: bool = True,
) -> Path:
    """A COLMAP dataset: ``<model_dir>/{cameras,images,points3D}.{bin,txt}`` and
    ``images/``. One camera (id 1) shared by all images (ids 1..C)."""
    root = Path(root)
    d = root / model_dir
    d.mkdir(parents=True, exist_ok=True)
    if params is None:
        params = [F, F, W / 2, H / 2]
    mid, params = _camera_params(model, params)
    _save_images(root / "images", truth.names, truth.images if images is None else images)
    rng = np.random.default_rng(1)
    if binary:
        with open(d / "cameras.bin", "wb") as f:
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<iiQQ", 1, mid, W, H))
            f.write(struct.pack("<%dd" % len(params), *params))
        with open(d / "images.bin", "wb") as f:
            f.write(struct.pack("<Q", len(truth.names)))
            for k, (name, vm) in enumerate(zip(truth.names, truth.viewmats)):
                q = rotmat_to_qvec(vm[:3, :3])
                f.write(struct.pack("<i4d3di", k + 1, *q, *vm[:3, 3], 1))
                f.write(name.encode() + b"\0")
                npt = 3 + k % 2
                f.write(struct.pack("<Q", npt))
                for _ in range(npt):
                    f.write(struct.pack("<ddq", *rng.random(2) * 40, int(rng.integers(-1, N_POINTS))))
        if write_points:
            with open(d / "points3D.bin", "wb") as f:
                f.write(struct.pack("<Q", len(truth.points)))
                for p, (x, y, z) in enumerate(truth.points.astype(np.float64)):
                    f.write(struct.pack("<Q3d3BdQ", p + 1, x, y, z, *truth.colors[p].tolist(), 0.5, 2))
                    f.write(struct.pack("<4i", 1, p, 2, p))
    else:
        (d / "cameras.txt").write_text(
            "# Camera list with one line of data per camera:\n#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]\n"
            "# Number of cameras: 1\n"
            "1 %s %d %d %s\n" % (model, W, H, " ".join(repr(p) for p in params))
        )
        lines = [
            "# Image list with two lines of data per image:",
            "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME",
            "#   POINTS2D[] as (X, Y, POINT3D_ID)",
            "# Number of images: %d, mean observations per image: 1.5" % len(truth.names),
        ]
        for k, (name, vm) in enumerate(zip(truth.names, truth.viewmats)):
            q = rotmat_to_qvec(vm[:3, :3])
            lines.append(" ".join([str(k + 1)] + [repr(float(x)) for x in (*q, *vm[:3, 3])] + ["1", name]))
            lines.append("" if k % 2 else "12.5 3.25 -1 7.0 8.0 4")  # empty POINTS2D lines too
        (d / "images.txt").write_text("\n".join(lines) + "\n")
        if write_points:
            lines = ["# 3D point list", "# Number of points: %d, mean track length: 2" % len(truth.points)]
            for p, xyz in enumerate(truth.points.astype(np.float64)):
                lines.append(
                    "%d %s %s %s %d %d %d 0.5 1 %d 2 %d"
                    % (p + 1, *map(repr, xyz.tolist()), *truth.colors[p].tolist(), p, p)
                )
            (d / "points3D.txt").write_text("\n".join(lines) + "\n")
    return root


def opencv_to_opengl_c2w(vm) -> np.ndarray:
    c2w = np.linalg.inv(vm)
    c2w[:3, 1:3] *= -1
    return c2w


def write_points_ply(path: Path, pts, cols, normals: bool = True) -> None:
    """Binary little-endian PLY as 3DGS writes points3d.ply (x y z [nx ny nz] red green blue)."""
    fields = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
    if normals:
        fields += [("nx", "<f4"), ("ny", "<f4"), ("nz", "<f4")]
    fields += [("red", "u1"), ("green", "u1"), ("blue", "u1")]
    a = np.zeros(len(pts), dtype=fields)
    a["x"], a["y"], a["z"] = pts[:, 0], pts[:, 1], pts[:, 2]
    a["red"], a["green"], a["blue"] = cols[:, 0], cols[:, 1], cols[:, 2]
    types = {"<f4": "float", "u1": "uchar"}
    head = ["ply", "format binary_little_endian 1.0", "element vertex %d" % len(pts)]
    head += ["property %s %s" % (types[t], n) for n, t in fields] + ["end_header"]
    Path(path).write_bytes(("\n".join(head) + "\n").encode() + a.tobytes())


def write_blender(root: Path, truth: Truth, interval: int = 8, with_points: bool = True) -> Path:
    """``transforms_{train,test}.json`` (frames k % interval == 0 are test), RGBA
    PNGs ``train/r_NNN.png`` / ``test/r_NNN.png`` (file_path without suffix),
    and ``points3d.ply`` unless ``with_points`` is False."""
    root = Path(root)
    angle = 2 * math.atan(0.5 * W / F)
    splits = {"train": [], "test": []}
    for k, vm in enumerate(truth.viewmats):
        split = "test" if k % interval == 0 else "train"
        (root / split).mkdir(parents=True, exist_ok=True)
        rgba = np.concatenate([truth.images[k], truth.alphas[k][:, :, None]], axis=2)
        Image.fromarray(rgba, "RGBA").save(root / split / ("r_%03d.png" % k))
        splits[split].append(
            {
                "file_path": "./%s/r_%03d" % (split, k),
                "rotation": 0.1,
                "transform_matrix": opencv_to_opengl_c2w(vm).tolist(),
            }
        )
    for split, frames in splits.items():
        (root / ("transforms_%s.json" % split)).write_text(
            json.dumps({"camera_angle_x": angle, "frames": frames}, indent=1)
        )
    (root / "transforms_val.json").write_text(json.dumps({"camera_angle_x": angle, "frames": []}))
    if with_points:
        write_points_ply(root / "points3d.ply", truth.points, truth.colors)
    return root


def write_nerfstudio(
    root: Path, truth: Truth, dist: dict | None = None, images=None, per_frame_intrinsics: bool = False
) -> Path:
    """``transforms.json`` as ns-process-data writes it: poses and points moved by
    ``applied_transform``, images in ``images/``, ``sparse_pc.ply``."""
    root = Path(root)
    _save_images(root / "images", truth.names, truth.images if images is None else images)
    A = np.vstack([NS_APPLIED, [0, 0, 0, 1]])
    intr = {"fl_x": F, "fl_y": F, "cx": W / 2, "cy": H / 2, "w": W, "h": H}
    meta = {
        "camera_model": "OPENCV",
        "frames": [],
        "applied_transform": NS_APPLIED.tolist(),
        "ply_file_path": "sparse_pc.ply",
    }
    if not per_frame_intrinsics:
        meta.update(intr)
    meta.update(dist or {})
    for k, (name, vm) in enumerate(zip(truth.names, truth.viewmats)):
        fr = {
            "file_path": "images/" + name,
            "transform_matrix": (A @ opencv_to_opengl_c2w(vm)).tolist(),
            "colmap_im_id": k + 1,
        }
        if per_frame_intrinsics:
            fr.update(intr)
        meta["frames"].append(fr)
    (root / "transforms.json").write_text(json.dumps(meta, indent=1))
    pts = (truth.points.astype(np.float64) @ NS_APPLIED[:, :3].T + NS_APPLIED[:, 3]).astype(np.float32)
    write_points_ply(root / "sparse_pc.ply", pts, truth.colors, normals=False)
    return root


# --- lens distortion, written independently of spirula.data.undistort -------


def distort_normalized(x, y, k1=0.0, k2=0.0, p1=0.0, p2=0.0):
    """OpenCV / COLMAP OPENCV forward model on normalized coordinates."""
    r2 = x * x + y * y
    radial = 1 + k1 * r2 + k2 * r2 * r2
    return (x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x), y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y)


def undistort_normalized(xd, yd, iters=100, **c):
    """Fixed-point inverse of :func:`distort_normalized` (contracting for mild lenses)."""
    x, y = xd.copy(), yd.copy()
    for _ in range(iters):
        dx, dy = distort_normalized(x, y, **c)
        x, y = x + (xd - dx), y + (yd - dy)
    return x, y


def smooth_scene(x, y) -> np.ndarray:
    """A smooth RGB function of normalized image coordinates, in [0.1, 0.9]
    (wavelengths >= ~30 px at f = 60, so bilinear resampling error is small)."""
    r = 0.5 + 0.4 * np.sin(2 * math.pi * 1.7 * x + 0.3)
    g = 0.5 + 0.4 * np.cos(2 * math.pi * 1.9 * y - 0.2)
    b = 0.5 + 0.4 * np.sin(2 * math.pi * (1.1 * x + 1.3 * y))
    return np.stack([r, g, b], axis=-1)


def render_pinhole_and_distorted(dist: dict):
    """``(pinhole [H,W,3] float64, distorted [H,W,3] uint8)`` of :func:`smooth_scene`
    for K = (F, F, W/2, H/2): the distorted image's pixel centre u_d shows the
    scene at undistort(K^-1 u_d)."""
    v, u = np.mgrid[0:H, 0:W] + 0.5
    xd, yd = (u - W / 2) / F, (v - H / 2) / F
    pin = smooth_scene(xd, yd)
    x, y = undistort_normalized(xd, yd, **dist)
    dimg = np.clip(np.rint(smooth_scene(x, y) * 255), 0, 255).astype(np.uint8)
    return pin, dimg
