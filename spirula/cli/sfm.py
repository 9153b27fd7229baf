"""``spirula sfm IMAGES OUT``: camera poses for a folder of images (pycolmap), docs/sfm.md."""

from __future__ import annotations

from pathlib import Path

import click

from spirula.cli.common import common_options, open_cli_device, verbose, verbose_option
from spirula.sfm.colmap import CAMERA_MODELS, DEFAULT_CAMERA_MODEL, MAPPERS, MATCHERS, MAX_EXHAUSTIVE, cores
from spirula.sfm.front import FEATURES
from spirula.sfm.loops import RETRIEVAL_PER_IMAGE


@click.command()
@common_options  # --backend / --device: where --features gpu runs; mapping runs on the CPU (pycolmap)
@verbose_option
@click.argument("images", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--matcher",
    type=click.Choice(MATCHERS),
    default="auto",
    show_default=True,
    help="Which image pairs are matched: sequential (video frames: each against the next 10, more far"
    " apart), exhaustive (every pair: photo sets), retrieval (each image with its %d most similar: large"
    " photo sets), auto (sequential for numbered frames, exhaustive up to %d images, else retrieval)."
    % (RETRIEVAL_PER_IMAGE, MAX_EXHAUSTIVE),
)
@click.option(
    "--mapper",
    type=click.Choice(MAPPERS),
    default="incremental",
    show_default=True,
    help="Incremental mapping with bundle adjustment, or global mapping (GLOMAP: faster, less robust).",
)
@click.option(
    "--camera-model",
    type=click.Choice(CAMERA_MODELS),
    default=DEFAULT_CAMERA_MODEL,
    show_default=True,
    help="Lens model estimated; OPENCV for wide or distorting lenses, OPENCV_FISHEYE for fisheye ones."
    " OPENCV and OPENCV_FISHEYE keep their lens in the output (training goes through it); others are undistorted.",
)
@click.option(
    "--undistort/--no-undistort",
    default=None,
    help="Write undistorted images and a PINHOLE model, or the original images with the estimated lens"
    " [default: the lens kept for OPENCV and OPENCV_FISHEYE, undistorted otherwise].",
)
@click.option(
    "--masks",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder of masks (white = keep) [default: masks/ beside IMAGES, when it exists].",
)
@click.option(
    "--single-camera/--camera-per-image",
    default=None,
    help="One camera (intrinsics) shared by all images, or one per image"
    " [default: one per image size and camera (EXIF make, model, focal length)].",
)
@click.option(
    "--features",
    type=click.Choice(FEATURES),
    default="auto",
    show_default=True,
    help="Where SIFT extraction and matching run: gpu (Spirula's kernels on --backend's device, into"
    " COLMAP's database), cpu (pycolmap's), auto (gpu where a GPU opens, cpu elsewhere and on a CPU"
    " device such as lavapipe, where pycolmap's is faster). Geometric"
    " verification and mapping are pycolmap's either way.",
)
def sfm(images, out, matcher, mapper, camera_model, undistort, masks, single_camera, features):
    """Estimate camera poses for the images in IMAGES; write a dataset to OUT.

    OUT gets images/ (undistorted) and sparse/0/ (a PINHOLE COLMAP model), ready
    for `spirula train OUT` (with --camera-model OPENCV or OPENCV_FISHEYE: the
    original images and the estimated lens; --undistort: PINHOLE), plus masks/
    when masks were used and colmap/ (the database, raw models and sfm.log,
    COLMAP's own output). Photos with an
    EXIF orientation are turned upright first. A result that fails the
    quality gate (too few images registered, high reprojection error, short
    tracks) exits with 2.
    """
    from spirula.extras import need

    need("spirula sfm", "pycolmap")
    from spirula.sfm.colmap import run_sfm

    started = []

    def log(msg):
        if not started:  # once the input is checked: a bad one is the only line
            started.append(True)
            click.echo("sfm: %s on %d cores" % (images, cores()), err=True)
        click.echo("sfm: " + msg, err=True)

    result = run_sfm(
        images,
        out,
        matcher=matcher,
        mapper=mapper,
        camera_model=camera_model,
        masks=masks,
        single_camera=single_camera,
        features=features,
        device=open_cli_device,  # --backend / --device, opened unless --features cpu
        undistort=undistort,
        log=log,
        verbose=verbose(),
    )
    log("total     %6.1f s  train with: spirula train %s" % (result.total, result.out))
