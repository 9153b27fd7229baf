"""The GPU front end of SfM: SIFT and matching on Spirula's kernels, into COLMAP's database.

``spirula sfm --features gpu`` (the default where a GPU opens: a Vulkan device
that is a CPU, lavapipe, keeps pycolmap's, faster there) replaces
pycolmap's extraction and matching, and keeps the rest in pycolmap:

- **extract**: pycolmap's ``import_images`` makes the cameras and images (the
  same grouping as the CPU path); each image is read as COLMAP reads it (grey
  by Rec. 709 luma; scaled to at most ``max_image_size``, 3200, as COLMAP's
  extractor does) and :func:`spirula.features.extract_features` computes its
  keypoints and RootSIFT descriptors on the device, masks honoured; both go into
  the database (keypoints in COLMAP's six-column affine form);
- **match**: the pairs the CPU path would match (pycolmap's sequential
  pairs, plus the loop candidates of :mod:`spirula.sfm.loops`, or every pair)
  are matched by :func:`spirula.features.match_features` (COLMAP's brute-force
  matcher: ratio 0.8, distance 0.7, cross check) and written as raw matches;
  pycolmap's ``geometric_verification`` then estimates the two-view geometries
  with the same RANSAC options and seed as the CPU path.

Mapping, the gate and undistortion are unchanged (spirula/sfm/colmap.py).
"""

from __future__ import annotations

import time

import numpy as np
from PIL import Image

from spirula.errors import DatasetError, SpirulaError

FEATURES = ("auto", "gpu", "cpu")


def choose(features: str, device=None) -> tuple:
    """``(features, device, why)``: ``"gpu"`` with the device it runs on, or ``"cpu"``
    with None; ``why`` says how ``auto`` chose (a CPU device, lavapipe, chooses the
    CPU path: pycolmap's extraction and matching are ~5x faster than the kernels
    emulated there, docs/sfm.md). ``device``: a device, a function that
    opens one, or None (the process's default device). ``gpu`` without a device is an
    error (one line); ``auto`` falls back to the CPU."""
    if features not in FEATURES:
        raise DatasetError("--features %r: expected one of %s" % (features, ", ".join(FEATURES)))
    if features == "cpu":
        return "cpu", None, "--features cpu"
    if device is None or callable(device):
        from spirula.backends import get_device

        try:
            device = (device or get_device)()
        except SpirulaError as exc:
            if features == "gpu":
                raise
            return "cpu", None, "no GPU device: %s" % " ".join(str(exc).split())
    if features == "auto" and device.info.is_cpu:
        return (
            "cpu",
            None,
            "the device is a CPU (%s), where pycolmap's SIFT and matching are faster; --features gpu to use it"
            % device.info.name,
        )
    return "gpu", device, "--features gpu" if features == "gpu" else "a GPU device opened"


def device_name(device) -> str:
    """``vulkan: <GPU name>``: where the kernels ran, for the stage lines."""
    return "%s: %s" % (getattr(device, "backend", "?"), device.info.name)


def read_grey(path, max_size: int) -> tuple:
    """(the image as :func:`spirula.features.sift.to_grey` takes it, uint8 [H,W] or
    [H,W,3]; (sx, sy): its size's ratio to the file's, 1 unless scaled to ``max_size``)."""
    with Image.open(path) as im:
        im = im.convert("L") if im.mode in ("L", "1", "P", "I", "I;16", "F") else im.convert("RGB")
        w, h = im.size
        scale = min(1.0, max_size / max(w, h)) if max_size > 0 else 1.0
        if scale < 1.0:
            nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
            im = im.resize((nw, nh), Image.BILINEAR)
            return np.asarray(im), (nw / w, nh / h)
        return np.asarray(im), (1.0, 1.0)


def read_mask(path, size: tuple) -> np.ndarray:
    """A mask for an image of ``size`` (W, H) as extraction uses it: nonzero = keep."""
    from spirula.sfm.masks import read_mask as read

    with Image.open(path) as im:
        file_size = im.size
    m = read(path, file_size)
    if file_size != tuple(size):
        m = np.asarray(Image.fromarray(m).resize(size, Image.NEAREST))
    return m


def affine_keypoints(kp: np.ndarray, sx: float = 1.0, sy: float = 1.0) -> np.ndarray:
    """[N,4] (x, y, scale, orientation) of a scaled image -> COLMAP's [N,6] float32
    (x, y, a11, a12, a21, a22) in the file's pixels."""
    kp = np.asarray(kp, np.float64)
    c, s = np.cos(kp[:, 3]), np.sin(kp[:, 3])
    x, y = kp[:, 0] / sx, kp[:, 1] / sy
    a = kp[:, 2]
    return np.stack([x, y, a * c / sx, -a * s / sx, a * s / sy, a * c / sy], 1).astype(np.float32)


def extract(pycolmap, device, database, src, calls, reader, mask_files: dict, max_size: int, bar=None) -> dict:
    """Import the images (``calls``: (names, camera mode) batches) and write each
    one's SIFT keypoints and descriptors, extracted on ``device``, into the
    ``database``. Returns ``{image name: descriptors uint8 [N,128]}``."""
    from spirula.features import extract_features

    pycolmap.Database.open(str(database)).close()  # import_images wants it to exist
    for names, camera_mode in calls:
        pycolmap.import_images(database, src, camera_mode=camera_mode, image_names=names, options=reader)
    db = pycolmap.Database.open(str(database))
    out = {}
    try:
        for im in sorted(db.read_all_images(), key=lambda im: im.name):
            grey, (sx, sy) = read_grey(src / im.name, max_size)
            mask = mask_files.get(im.name)
            if mask is not None:
                mask = read_mask(mask, (grey.shape[1], grey.shape[0]))
            kp, desc = extract_features(device, grey, mask)
            db.write_keypoints(im.image_id, affine_keypoints(kp, sx, sy))
            db.write_descriptors(im.image_id, pycolmap.FeatureDescriptors(pycolmap.FeatureExtractorType.SIFT, desc))
            out[im.name] = desc
            if bar is not None:
                bar.update_to(len(out))
    finally:
        db.close()
    return out


def sequential_pairs(names, overlap: int, quadratic: bool = True) -> list:
    """The pairs (of image names) that pycolmap 4.2's sequential matching matches
    (its pair generator, by name order, no loop detection): each image with the
    one 2^k further for k < ``overlap`` (quadratic overlap), or with the next
    ``overlap``. Computed here: calling pycolmap's SequentialPairGenerator from
    Python corrupts the heap (pycolmap 4.2.1); tests/test_sfm_gpu.py checks these
    against the pairs match_sequential writes."""
    names = sorted(names)
    steps = [1 << k for k in range(overlap)] if quadratic else list(range(1, overlap + 1))
    return [(a, names[i + s]) for i, a in enumerate(names) for s in steps if i + s < len(names)]


def exhaustive_pairs(names) -> list:
    names = sorted(names)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]


def match(pycolmap, device, database, descriptors: dict, pairs, bar=None) -> dict:
    """Match each pair's descriptors on ``device``; write the raw matches into the
    ``database``. Returns ``{"pairs", "matches", "seconds"}``."""
    from spirula.features import match_features

    t0 = time.perf_counter()
    total = 0
    db = pycolmap.Database.open(str(database))
    try:
        ids = {im.name: im.image_id for im in db.read_all_images()}
        for k, (a, b) in enumerate(pairs):
            m = match_features(device, descriptors[a], descriptors[b])
            db.write_matches(ids[a], ids[b], np.ascontiguousarray(m, np.uint32))
            total += len(m)
            if bar is not None:
                bar.update_to(k + 1)
    finally:
        db.close()
    return dict(pairs=len(pairs), matches=total, seconds=time.perf_counter() - t0)


def verify(pycolmap, database, verification, num_threads: int) -> None:
    """pycolmap's geometric verification of every matched pair in the ``database``."""
    options = pycolmap.GeometricVerifierOptions()
    options.num_threads = num_threads
    pycolmap.geometric_verification(
        database,
        verifier_options=options,
        pairing_options=pycolmap.ExistingMatchedPairingOptions(),
        two_view_geometry_options=verification,
    )
