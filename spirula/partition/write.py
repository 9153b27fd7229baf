"""Blocks on disk: each a COLMAP text dataset ``spirula train`` reads, and
``manifest.json`` describing the partition.

    OUT/
        manifest.json
        block-00/sparse/0/{cameras,images,points3D}.txt
        block-00/images/<name>   symlinks to the loaded frames' images (copies
                                 where the file system has no symlinks)

The frames are written as loaded (spirula/data/scene.py): undistorted,
downscaled as asked, pinhole K for the image they point at, so a block trains
with no --downscale of its own. Only the source's training views go into
blocks: its test views stay out of every block and judge the merged scene.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from spirula.partition.blocks import Block, PartitionError

MANIFEST = "manifest.json"
FORMAT = 1


def _qvec(R) -> np.ndarray:
    """COLMAP's (w, x, y, z) quaternion of a rotation matrix."""
    from scipy.spatial.transform import Rotation

    x, y, z, w = Rotation.from_matrix(R).as_quat()
    return np.array([w, x, y, z])


def write_colmap_text(root: Path, frames: list, points, colors) -> Path:
    """A COLMAP text model of ``frames`` (spirula.data.Frame) and the seed
    ``points`` [P,3] with ``colors`` [P,3] uint8: one PINHOLE camera per distinct
    (size, K), images linked under ``root/images``."""
    root = Path(root)
    model = root / "sparse" / "0"
    model.mkdir(parents=True, exist_ok=True)
    cams, cam_lines, img_lines = {}, [], []
    for k, f in enumerate(frames):
        key = (f.width, f.height) + tuple(np.round(np.asarray(f.K)[[0, 1, 0, 1], [0, 1, 2, 2]], 9))
        if key not in cams:
            cams[key] = len(cams) + 1
            cam_lines.append("%d PINHOLE %d %d %.12g %.12g %.12g %.12g\n" % ((cams[key],) + key))
        q, t = _qvec(f.viewmat[:3, :3]), f.viewmat[:3, 3]
        img_lines.append("%d %s %d %s\n\n" % (k + 1, " ".join("%.12g" % v for v in (*q, *t)), cams[key], f.name))
        _link(Path(f.image_path), root / "images" / f.name)
    (model / "cameras.txt").write_text("# spirula partition\n" + "".join(cam_lines))
    (model / "images.txt").write_text("# spirula partition\n" + "".join(img_lines))
    with open(model / "points3D.txt", "w") as fp:
        fp.write("# spirula partition\n")
        for i, (p, c) in enumerate(zip(np.asarray(points, np.float64), np.asarray(colors, np.int64))):
            fp.write("%d %.9g %.9g %.9g %d %d %d 0\n" % (i + 1, p[0], p[1], p[2], c[0], c[1], c[2]))
    return root


def _link(src: Path, dst: Path):
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    try:
        os.symlink(src.resolve(), dst)
    except OSError:
        shutil.copyfile(src, dst)


def _bound(v) -> list:
    """JSON has no infinity: an unbounded side is null."""
    return [None if not np.isfinite(x) else float(x) for x in v]


def _unbound(v, sign) -> np.ndarray:
    return np.array([sign * np.inf if x is None else float(x) for x in v])


def write_partition(out: Path, scene, axes, blocks: list, settings: dict) -> dict:
    """Write every block of ``scene`` (cameras: indices into ``scene.train``)
    as a dataset under ``out`` and the manifest; returns the manifest."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for blk in blocks:
        frames = [scene.frames[scene.train[c]] for c in blk.cameras]
        if not frames:
            raise PartitionError(
                "%s: no training camera sees block %d; use fewer blocks or a larger --margin" % (scene.path, blk.index)
            )
        write_colmap_text(out / blk.name, frames, scene.points[blk.points], scene.point_colors[blk.points])
        entries.append(
            dict(
                name=blk.name,
                index=blk.index,
                path=blk.name,
                core_lo=_bound(blk.core_lo),
                core_hi=_bound(blk.core_hi),
                lo=_bound(blk.lo),
                hi=_bound(blk.hi),
                cameras=[f.name for f in frames],
                camera_indices=[int(c) for c in blk.cameras],
                n_points=int(len(blk.points)),
            )
        )
    manifest = dict(
        format=FORMAT,
        source=str(Path(scene.path).resolve()),
        axes=[int(a) for a in axes],
        settings=settings,
        n_points=int(len(scene.points)),
        train_images=[scene.frames[i].name for i in scene.train],
        test_images=[scene.frames[i].name for i in scene.test],
        blocks=entries,
    )
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def read_manifest(path: Path) -> dict:
    """The manifest of a partition folder (or the file itself)."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST
    try:
        m = json.loads(path.read_text())
        if m.get("format") != FORMAT or not isinstance(m.get("blocks"), list):
            raise ValueError("not a format-%d partition manifest" % FORMAT)
    except (OSError, ValueError) as exc:
        raise PartitionError("%s: cannot read the partition manifest (%s)" % (path, exc)) from None
    return m


def manifest_blocks(manifest: dict) -> list:
    """The manifest's blocks as :class:`~spirula.partition.blocks.Block` (cameras:
    indices into the source's training views; points: not stored, empty)."""
    return [
        Block(
            e["index"],
            _unbound(e["core_lo"], -1),
            _unbound(e["core_hi"], 1),
            _unbound(e["lo"], -1),
            _unbound(e["hi"], 1),
            np.array(e["camera_indices"], np.int64),
            np.zeros(0, np.int64),
        )
        for e in manifest["blocks"]
    ]
