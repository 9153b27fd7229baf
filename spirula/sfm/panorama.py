"""Camera poses for 360-degree (equirectangular) images: SfM on pinhole views cut from them.

COLMAP's feature extraction and its camera models are made for perspective
images; an equirectangular image stretches everything near its poles and
has no single focal length. So, as COLMAP's own panorama example does, each
panorama is cut into :data:`VIRTUAL` pinhole views (90 degrees each: four
around the horizon, four 35 degrees below it, four 35 degrees above it
turned by 45 degrees), which share the panorama's centre. They form a rig in
COLMAP (``pycolmap.apply_rig_config``): one frame per panorama, the views'
rotations relative to the first fixed, so mapping solves one pose a
panorama. Each pixel of the panorama lends its features to one view only
(the view whose axis is nearest its ray, through the extraction masks), so
no point is triangulated from two views of one panorama.

The output is a nerfstudio dataset with ``camera_model`` EQUIRECTANGULAR (the
original panoramas, not the cut views, and the triangulated points), which
``spirula train`` trains through the equirectangular lens (docs/design.md
§2.3): ``out/transforms.json``, ``out/images/``, ``out/points3D.ply``; COLMAP's
working files (the views, their masks, the database, the rig model) stay in
``out/colmap/``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from spirula.errors import DatasetError

FOV_DEGREES = 90.0  # each virtual view's field of view, across and down
YAWS = 4  # views around the vertical axis, at each pitch
PITCHES = (0.0, 35.0, -35.0)  # degrees, positive looks down (camera y points down)
VIRTUAL = YAWS * len(PITCHES)


def view_rotations() -> np.ndarray:
    """``[VIRTUAL, 3, 3]``: each virtual view's ``cam_from_pano`` rotation (OpenCV axes in
    both: x right, y down, z forward). View 0 looks along the panorama's +z (its
    centre column); views at a non-zero pitch above the horizon are turned by half a
    yaw step, so that together they cover the sphere with overlap."""
    out = []
    for pitch in PITCHES:
        offset = 0.5 * 360.0 / YAWS if pitch < 0 else 0.0
        for k in range(YAWS):
            yaw = np.radians(k * 360.0 / YAWS + offset)
            p = np.radians(pitch)
            ry = np.array([[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]])
            rx = np.array([[1, 0, 0], [0, np.cos(p), np.sin(p)], [0, -np.sin(p), np.cos(p)]])
            pano_from_cam = ry @ rx.T  # tilt about x (down for p > 0), then turn about y
            out.append(pano_from_cam.T)
    return np.array(out)


def view_size(pano_height: int) -> int:
    """Pixels across a virtual view: the panorama's own angular resolution (H/2 for 90 degrees)."""
    return max(16, int(round(pano_height * FOV_DEGREES / 180.0)))


def view_K(size: int) -> np.ndarray:
    f = 0.5 * size / np.tan(np.radians(0.5 * FOV_DEGREES))
    return np.array([[f, 0, 0.5 * size], [0, f, 0.5 * size], [0, 0, 1.0]])


def pano_K(width: int, height: int) -> np.ndarray:
    """The equirectangular camera's K (nerfstudio's: fx = W / 2 pi, fy = H / pi, centre)."""
    return np.array([[width / (2 * np.pi), 0, width / 2], [0, height / np.pi, height / 2], [0, 0, 1.0]])


def cut_views(pano: np.ndarray, rotations: np.ndarray, size: int) -> tuple:
    """``(views [V,size,size,C] uint8, masks [V,size,size] uint8)``: the pinhole views of the
    equirectangular image ``pano`` [H,W,C] uint8 (bilinear, wrapping round the seam) and
    their extraction masks (255 where this view's axis is the nearest to the pixel's ray)."""
    from spirula.data.lenses import pixel_rays

    h, w = pano.shape[:2]
    dirs, _ = pixel_rays("PINHOLE", view_K(size), None, size, size)
    axes = rotations[:, 2, :]  # each view's forward axis in the panorama's frame
    img = pano.astype(np.float32)
    views, masks = [], []
    for R in rotations:
        d = dirs @ R  # rows: R^T d, the ray in the panorama's frame
        lon = np.arctan2(d[..., 0], d[..., 2])
        lat = np.arctan2(d[..., 1], np.hypot(d[..., 0], d[..., 2]))
        u = lon * (w / (2 * np.pi)) + w / 2 - 0.5  # pixel coordinates of pixel centres
        v = np.clip(lat * (h / np.pi) + h / 2 - 0.5, 0, h - 1)
        x0, y0 = np.floor(u).astype(int), np.floor(v).astype(int)
        fx, fy = (u - x0)[..., None], (v - y0)[..., None]
        xa, xb = x0 % w, (x0 + 1) % w
        ya, yb = np.clip(y0, 0, h - 1), np.clip(y0 + 1, 0, h - 1)
        top = img[ya, xa] * (1 - fx) + img[ya, xb] * fx
        bottom = img[yb, xa] * (1 - fx) + img[yb, xb] * fx
        views.append(np.clip(np.rint(top * (1 - fy) + bottom * fy), 0, 255).astype(np.uint8))
        nearest = np.argmax(d @ axes.T, -1)
        masks.append(np.where(nearest == len(masks), 255, 0).astype(np.uint8))
    return np.array(views), np.array(masks)


def _prefix(k: int) -> str:
    return "view%02d/" % k


def run_panorama_sfm(
    images, out, names, log, num_threads: int = -1, stages=None, seed: int = 0, gpu=None, why: str = ""
) -> dict:
    """SfM of the equirectangular ``names`` in the folder ``images`` into the nerfstudio
    dataset ``out`` (module docstring; ``out/colmap`` exists). ``stages``: colmap.py's
    stage runner (COLMAP's output into the log, progress bars), None to call directly;
    ``seed``: RANSAC's and the mapper's; ``gpu``: the device of the GPU front end
    (spirula/sfm/front.py: the views' SIFT and matching on its kernels, ``why`` it was
    chosen), None for pycolmap's on the CPU. Returns ``{"quality", "model_sizes",
    "times"}`` (the quality in panoramas); a one-line
    :class:`~spirula.errors.DatasetError` for panoramas that are not 2:1 or of different
    sizes."""
    import pycolmap
    from PIL import Image

    def run(name, fn, *args, total=None, unit="block", **kwargs):
        if stages is None:
            kwargs.pop("own_bar", None)
            return fn(*args, **kwargs)
        return stages.run(name, fn, *args, total=total, unit=unit, **kwargs)

    images, out = Path(images), Path(out)
    work = out / "colmap"
    views_dir, masks_dir = work / "views", work / "view_masks"
    times = {}
    t0 = time.perf_counter()
    size = None
    rotations = view_rotations()
    view_names = []
    for name in names:
        with Image.open(images / name) as im:
            pano = np.asarray(im.convert("RGB"))
        h, w = pano.shape[:2]
        if w != 2 * h:
            raise DatasetError(
                "%s: %dx%d is not an equirectangular panorama (width = 2 x height)" % (images / name, w, h)
            )
        if size is None:
            size, shape = view_size(h), (h, w)
        elif (h, w) != shape:
            raise DatasetError(
                "%s: %dx%d, the other panoramas are %dx%d (one size for all)"
                % (images / name, w, h, shape[1], shape[0])
            )
        views, masks = cut_views(pano, rotations, size)
        view_names += [_prefix(k) + name for k in range(VIRTUAL)]
        for k in range(VIRTUAL):
            # COLMAP finds an image's mask as MASKS/<image name>.png
            for path, arr in (
                (views_dir / (_prefix(k) + name), views[k]),
                (masks_dir / (_prefix(k) + name + ".png"), masks[k]),
            ):
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(path, quality=95)
    times["cut"] = time.perf_counter() - t0
    log(
        "cut       %6.1f s  %d panoramas into %d pinhole views of %d px (%d degrees)"
        % (times["cut"], len(names), VIRTUAL * len(names), size, FOV_DEGREES)
    )

    # the rig: view 0 is the reference; view k sits at view k's rotation from it, no translation
    K = view_K(size)
    camera = pycolmap.Camera.create_from_model_id(0, pycolmap.CameraModelId.PINHOLE, K[0, 0], size, size)
    camera.params = [K[0, 0], K[1, 1], K[0, 2], K[1, 2]]
    rig_cameras = []
    for k, R in enumerate(rotations):
        rel = None
        if k:
            rel = pycolmap.Rigid3d(pycolmap.Rotation3d(R @ rotations[0].T), np.zeros((3, 1)))
        rc = pycolmap.RigConfigCamera(ref_sensor=k == 0, image_prefix=_prefix(k), cam_from_rig=rel)
        rc.camera = camera
        rig_cameras.append(rc)
    rig = pycolmap.RigConfig(cameras=rig_cameras)

    t0 = time.perf_counter()
    db = work / "database.db"
    reader = pycolmap.ImageReaderOptions()
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.num_threads = num_threads
    if gpu is not None:
        from spirula.sfm import front

        masks = {v: masks_dir / (v + ".png") for v in view_names}
        calls = [(view_names, pycolmap.CameraMode.PER_FOLDER)]
        descriptors = run(
            "extract", front.extract, pycolmap, gpu, db, views_dir, calls, reader, masks,
            extraction.eff_max_image_size(), total=len(view_names), unit="view", own_bar=True,
        )  # fmt: skip
        where = "on the GPU (%s; %s), %s features" % (
            front.device_name(gpu),
            why,
            format(sum(len(d) for d in descriptors.values()), ","),
        )
    else:
        reader.mask_path = str(masks_dir)
        run(
            "extract",
            pycolmap.extract_features,
            db,
            views_dir,
            camera_mode=pycolmap.CameraMode.PER_FOLDER,
            reader_options=reader,
            extraction_options=extraction,
            device=pycolmap.Device.cpu,
        )
        where = "on the CPU (pycolmap%s)" % ("; " + why if why else "")
    with pycolmap.Database.open(str(db)) as database:
        run("rig", pycolmap.apply_rig_config, [rig], database)
    times["extract"] = time.perf_counter() - t0
    log(
        "extract   %6.1f s  SIFT in %d views %s, one rig of %d views a panorama"
        % (times["extract"], VIRTUAL * len(names), where, VIRTUAL)
    )

    t0 = time.perf_counter()
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = num_threads
    verification = pycolmap.TwoViewGeometryOptions()
    verification.ransac.random_seed = seed
    if gpu is not None:
        from spirula.features import release

        # the views of one panorama see disjoint parts of it (the masks): no pair to match
        pairs = [(a, b) for a, b in front.exhaustive_pairs(view_names) if _pano_name(a) != _pano_name(b)]
        try:
            got = run("match", front.match, pycolmap, gpu, db, descriptors, pairs, total=len(pairs), unit="pair",
                      own_bar=True)  # fmt: skip
        finally:
            release(gpu)  # the extractors' and matchers' buffers
        t1 = time.perf_counter()
        run("verify", front.verify, pycolmap, db, verification, num_threads)
        times["verify"] = time.perf_counter() - t1
        how = (
            "exhaustive over other panoramas' views, %s pairs on the GPU (%.1f s, %s matches), "
            "verified by pycolmap (%.1f s)"
            % (
                format(got["pairs"], ","),
                got["seconds"],
                format(got["matches"], ","),
                times["verify"],
            )
        )
    else:
        run(
            "match",
            pycolmap.match_exhaustive,
            db,
            matching_options=matching,
            verification_options=verification,
            device=pycolmap.Device.cpu,
        )
        how = "exhaustive over the views"
    times["match"] = time.perf_counter() - t0
    log("match     %6.1f s  %s" % (times["match"], how))

    t0 = time.perf_counter()
    sparse = work / "sparse"
    sparse.mkdir(parents=True, exist_ok=True)
    options = pycolmap.IncrementalPipelineOptions()
    options.num_threads = num_threads
    options.random_seed = seed
    # the views' lenses and their rotations in the rig are exact by construction: refining
    # them only lets a view's focal trade against the pose (measured: 96 px focals refined
    # to 95-101 px tilted every panorama by 6.7 degrees)
    options.ba_refine_focal_length = False
    options.ba_refine_principal_point = False
    options.ba_refine_extra_params = False
    options.ba_refine_sensor_from_rig = False
    options.mapper.abs_pose_refine_focal_length = False
    options.mapper.abs_pose_refine_extra_params = False
    models = run("map", pycolmap.incremental_mapping, db, views_dir, sparse, options)
    times["map"] = time.perf_counter() - t0
    from spirula.sfm import gate

    ranked = sorted(models.values(), key=lambda r: -r.num_reg_frames())
    sizes = [r.num_reg_frames() for r in ranked]
    log(
        "map       %6.1f s  incremental, %d model%s, %d of %d panoramas registered"
        % (times["map"], len(sizes), "" if len(sizes) == 1 else "s", sizes[0] if sizes else 0, len(names))
    )
    if not ranked:
        quality = gate.Quality(len(names), 0, 0, 0, float("nan"), float("nan"))
        return {"quality": quality, "model_sizes": sizes, "times": times}
    rec = ranked[0]
    n_points = rec.num_points3D()
    quality = gate.Quality(
        n_images=len(names),
        n_registered=sizes[0],
        n_models=len(sizes),
        n_points=n_points,
        reprojection_px=float(rec.compute_mean_reprojection_error()) if n_points else float("nan"),
        track_length=float(rec.compute_mean_track_length()) if n_points else 0.0,
    )
    if quality.failure() is None:
        t0 = time.perf_counter()
        _write_dataset(rec, images, out, rotations, shape)
        times["write"] = time.perf_counter() - t0
    return {"quality": quality, "model_sizes": sizes, "times": times}


def _pano_name(image_name: str) -> str:
    return image_name.split("/", 1)[1]


def _write_dataset(rec, images, out, rotations, shape) -> None:
    """The nerfstudio EQUIRECTANGULAR dataset of the registered panoramas (module docstring)."""
    h, w = shape
    frames = []
    pano_from_ref = rotations[0].T
    seen = set()
    for frame in rec.frames.values():
        if not frame.has_pose:
            continue
        image_ids = [d.id for d in frame.data_ids]
        if not image_ids:
            continue
        name = _pano_name(rec.images[image_ids[0]].name)
        if name in seen:
            continue
        seen.add(name)
        rig_from_world = frame.rig_from_world.matrix()  # [3,4]
        pano_from_world = np.eye(4)
        pano_from_world[:3, :3] = pano_from_ref @ rig_from_world[:, :3]
        pano_from_world[:3, 3] = pano_from_ref @ rig_from_world[:, 3]
        c2w = np.linalg.inv(pano_from_world)
        c2w[:3, 1:3] *= -1  # OpenCV -> nerfstudio's OpenGL camera axes
        (out / "images").mkdir(parents=True, exist_ok=True)
        shutil.copy2(images / name, out / "images" / name)
        frames.append({"file_path": "images/" + name, "transform_matrix": c2w.tolist()})
    frames.sort(key=lambda f: f["file_path"])
    pts = np.array([p.xyz for p in rec.points3D.values()], np.float32).reshape(-1, 3)
    cols = np.array([p.color for p in rec.points3D.values()], np.uint8).reshape(-1, 3)
    rec_arr = np.zeros(
        len(pts), dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")]
    )
    for k, key in enumerate("xyz"):
        rec_arr[key] = pts[:, k]
    rec_arr["red"], rec_arr["green"], rec_arr["blue"] = cols[:, 0], cols[:, 1], cols[:, 2]
    head = "ply\nformat binary_little_endian 1.0\nelement vertex %d\n" % len(rec_arr)
    head += "".join("property %s %s\n" % ("float" if k in "xyz" else "uchar", k) for k in rec_arr.dtype.names)
    (out / "points3D.ply").write_bytes((head + "end_header\n").encode() + rec_arr.tobytes())
    meta = {"camera_model": "EQUIRECTANGULAR", "w": w, "h": h, "frames": frames, "ply_file_path": "points3D.ply"}
    (out / "transforms.json").write_text(json.dumps(meta, indent=1))
