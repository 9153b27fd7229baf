"""``spirula render``: a run or a splat.ply to PNGs of dataset views, or to a
video or an image sequence along a camera path (docs/training.md, "Rendering")."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from spirula.cli.common import (
    FiniteFloat,
    appearance_of_option,
    common_options,
    open_cli_device,
    open_run,
    positive_float,
)
from spirula.errors import UsageError

DEFAULT_SIZE = (1280, 720)  # a path's image size without a dataset
DEFAULT_FOV = 50.0  # degrees, vertical, without a dataset
DEFAULT_FPS = 30.0
DEFAULT_FRAMES = 120
MAX_SIZE = 16384  # an image side, in pixels
MAX_FRAMES = 1_000_000
PERSPECTIVE = ("PINHOLE", "OPENCV")  # lenses whose K a camera path's pinhole keeps


def _positive(name, value):
    if value is not None and not value > 0:
        raise UsageError("%s %s: must be positive" % (name, value))


@click.command("render")
@common_options
@click.argument("source", type=click.Path(path_type=Path))
@click.option(
    "--dataset",
    type=click.Path(path_type=Path),
    default=None,
    help="The dataset of a splat.ply (its cameras: views, the dataset path, the orbit) [default for a run: its own].",
)
@click.option(
    "--camera",
    "cameras",
    multiple=True,
    help="A dataset view: its index, 'test:K', 'train:K' or its image name (repeatable) [default: every test view].",
)
@click.option(
    "--out", type=click.Path(path_type=Path), default=None, help="Folder of the views [default: RUN/renders]."
)
@click.option(
    "--camera-path",
    type=click.Choice(["orbit", "dataset"]),
    default=None,
    help="Render along a path instead: an orbit around the splats (or the dataset's cameras), or the dataset's"
    " training cameras in order, interpolated [default with --video/--images: orbit].",
)
@click.option("--video", type=click.Path(path_type=Path), default=None, help="Write the path as a video (out.mp4).")
@click.option("--images", type=click.Path(path_type=Path), default=None, help="Write the path as PNGs in this folder.")
@click.option(
    "--width", type=click.IntRange(1, MAX_SIZE), default=None, help="Image width [default: the dataset's, else 1280]."
)
@click.option(
    "--height", type=click.IntRange(1, MAX_SIZE), default=None, help="Image height [default: the dataset's, else 720]."
)
@click.option("--fps", type=positive_float(), default=None, help="Video frame rate [default: %g]." % DEFAULT_FPS)
@click.option(
    "--frames",
    type=click.IntRange(1, MAX_FRAMES),
    default=None,
    help="Frames along the path [default: %d]." % DEFAULT_FRAMES,
)
@click.option(
    "--fov",
    type=FiniteFloat(0, 180, min_open=True, max_open=True),
    default=None,
    help="Vertical field of view, degrees [default: the dataset's, else 50].",
)
@appearance_of_option
def render_command(
    source, dataset, cameras, out, camera_path, video, images, width, height, fps, frames, fov, appearance_of
):
    """Render a run (folder or checkpoint) or a SPLAT.ply: dataset views to PNG
    files, or, with --video or --images, frames along a camera path."""
    path_mode = camera_path is not None or video is not None or images is not None
    if video is not None:
        from spirula.extras import need

        need("spirula render --video", "av")
    shape = dict(width=width, height=height, fps=fps, frames=frames, fov=fov)
    given = ["--" + k for k, v in shape.items() if v is not None]
    if given and not path_mode:
        raise UsageError("%s: only with a camera path (--video FILE or --images DIR)" % ", ".join(given))
    fps = DEFAULT_FPS if fps is None else fps
    frames = DEFAULT_FRAMES if frames is None else frames
    if path_mode:
        if (video is None) == (images is None):
            raise UsageError("a camera path needs exactly one of --video FILE and --images DIR")
        if cameras or out is not None:
            raise UsageError("--camera and --out pick dataset views; a camera path writes --video or --images")
        for name, value in (("--width", width), ("--height", height), ("--fps", fps), ("--frames", frames)):
            _positive(name, value)
        if fov is not None and not 0 < fov < 180:
            raise UsageError("--fov %s: the vertical field of view must be between 0 and 180 degrees" % fov)
    splats, sh_degree, scene, max_alpha, folder = _load_source(source, dataset, need_scene=not path_mode)
    look = _appearance_of(source, scene, appearance_of)
    if not path_mode:
        _render_views(source, splats, sh_degree, scene, max_alpha, folder, cameras, out, look)
        if out is None and not is_splat_file(source):
            from spirula.train.run_folder import RENDERS_SOURCE, checkpoint_source, latest_checkpoint, write_source

            # RUN/renders says which checkpoint it shows (stale once the run moves on)
            ckpt = source if source.is_file() else latest_checkpoint(folder)
            write_source(folder / "renders" / RENDERS_SOURCE, checkpoint_source(folder, ckpt))
        return
    size = (width, height)
    _render_path(
        splats, sh_degree, scene, max_alpha, camera_path or "orbit", video, images, size, fps, frames, fov, look
    )


def _appearance_of(source: Path, scene, spec):
    """--appearance-of: a function that applies the chosen training image's appearance to a
    render (spirula.train.appearance.AppearanceLook), or None."""
    if spec is None:
        return None
    from spirula.train.appearance import AppearanceLook
    from spirula.train.run import appearance_of_view

    if is_splat_file(source):
        raise UsageError("--appearance-of needs a run (folder or checkpoint): a splat file holds only the radiance")
    return AppearanceLook(open_cli_device(), *appearance_of_view(source, scene, spec))


def _load_source(source: Path, dataset, need_scene: bool):
    """(activated splats, SH degree, scene or None, max_alpha, the run's folder) of a run or a splat.ply."""
    from spirula.data import load_dataset
    from spirula.export import read_splats
    from spirula.render.rasterizer import MAX_ALPHA
    from spirula.render.renderer import activate_splats

    if not source.exists():
        raise UsageError("%s: no such run folder, checkpoint or splat file" % source)
    if is_splat_file(source):
        ply = read_splats(source, allow_empty=False)
        scene = load_dataset(dataset) if dataset is not None else None  # its lenses kept (views render through them)
        if need_scene and scene is None:
            raise UsageError("%s: dataset views need the splats' dataset (--dataset DIR)" % source)
        return activate_splats(ply), ply["sh_degree"], scene, MAX_ALPHA, source.parent
    cfg, params, ckpt, scene = open_run(source)
    if dataset is not None:
        scene = load_dataset(dataset, downscale=cfg.downscale, eval_split=cfg.eval_split, seed=cfg.seed)
    sh_degree = int(round(np.sqrt(params["sh"].shape[1]))) - 1
    folder = source if source.is_dir() else ckpt.parent.parent
    return activate_splats(params), sh_degree, scene, cfg.max_alpha, folder


def _renderer(splats, sh_degree, scene, max_alpha):
    from spirula.render.renderer import Renderer

    background = None if scene is None else scene.background
    r = Renderer(device=open_cli_device(), max_alpha=max_alpha, background=background)
    return r.set_splats(**splats, sh_degree=sh_degree)


def _render_views(source, splats, sh_degree, scene, max_alpha, folder, cameras, out, look=None):
    from PIL import Image

    from spirula.progress import track, write
    from spirula.render.video import check_writable, to_uint8

    indices = [_camera_index(scene, c) for c in cameras] if cameras else list(scene.test)
    if not indices:
        raise UsageError("%s: no test views to render; pick some with --camera" % source)
    out = check_writable(out or (folder / "renders"), "--out", folder=True)
    renderer = _renderer(splats, sh_degree, scene, max_alpha)
    for i in track(indices, "rendering", unit="view"):
        f = scene.frames[i]
        # through the view's own lens (Frame.model, Frame.dist), as evaluation renders it
        img = renderer.render(f.viewmat, f.K, f.width, f.height, model=f.model, dist=f.dist).numpy()
        if look is not None:
            img = look(img)
        path = out / (Path(f.name).stem + ".png")
        Image.fromarray(to_uint8(img)).save(path)
        write(str(path))
    renderer.close()


def is_splat_file(source: Path) -> bool:
    from spirula.export import is_splat_file as splat_file

    return splat_file(source)


def _render_path(splats, sh_degree, scene, max_alpha, kind, video, images, size, fps, frames, fov, look=None):
    from spirula.progress import track, write
    from spirula.render import camera_path
    from spirula.render.video import ImageWriter, VideoWriter, check_writable

    if kind == "dataset" and scene is None:
        raise UsageError("--camera-path dataset needs a dataset: a run, or --dataset DIR with a splat.ply")
    views = [scene.frames[i] for i in (scene.train or range(len(scene.frames)))] if scene is not None else []
    ref = views[0] if views else None
    width, height = size
    w = width or (ref.width if ref else DEFAULT_SIZE[0])
    h = height or (ref.height if ref else DEFAULT_SIZE[1])
    if video is not None and (w % 2 or h % 2):
        if width is not None and height is not None:
            raise UsageError("--video needs even sizes (yuv420p), got --width %d --height %d" % (w, h))
        w, h = w - w % 2, h - h % 2  # a dataset's odd size, rounded down
    # a path is rendered through a pinhole: a perspective lens's intrinsics carry over,
    # a fisheye's or an equirectangular camera's focal length would not mean the same
    if fov is not None or ref is None or ref.model not in PERSPECTIVE:
        K = camera_path.intrinsics(w, h, fov if fov is not None else DEFAULT_FOV)
    else:  # the first view's intrinsics scaled to the output size
        K = np.diag([w / ref.width, h / ref.height, 1.0]) @ np.asarray(ref.K, np.float64)
    if kind == "dataset":
        path = camera_path.interpolate_cameras([v.viewmat for v in views], frames)
    elif views:
        path = camera_path.orbit_around_cameras([v.viewmat for v in views], frames)
    else:
        path = camera_path.orbit_around_splats(splats["means"], frames)
    if video is not None:
        writer = VideoWriter(check_writable(video, "--video"), w, h, fps)
    else:
        writer = ImageWriter(check_writable(images, "--images", folder=True))
    renderer = _renderer(splats, sh_degree, scene, max_alpha)
    try:
        for vm in track(path, "rendering", unit="frame"):
            img = renderer.render(vm, K, w, h).numpy()
            writer.write(look(img) if look is not None else img)
    finally:
        writer.close()
        renderer.close()
    write(str(video if video is not None else images))


def _camera_index(scene, spec: str) -> int:
    from spirula.train.run import view_index

    return view_index(scene, spec)
