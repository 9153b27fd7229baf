"""``spirula view SOURCE``: the native viewer window (spirula/view/window.py),
or with ``--port`` the web viewer (spirula/view/web.py); docs/viewer.md."""

from __future__ import annotations

from pathlib import Path

import click

from spirula.cli.common import appearance_of_option, common_options, open_cli_device, web_viewer_options
from spirula.errors import UsageError


@click.command("view")
@common_options
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--width", type=click.IntRange(1, 16384), default=1280, show_default=True, help="Window width in pixels.")
@click.option(
    "--height", type=click.IntRange(1, 16384), default=720, show_default=True, help="Window height in pixels."
)
@web_viewer_options(
    "--port", "Serve the web viewer on this port instead of opening a window (remote GPUs; docs/viewer.md)."
)
@appearance_of_option
def view_command(source, width, height, port, viewer_host, appearance_of):
    """Look at SOURCE (a splat.ply, or a run folder or checkpoint: its latest
    splats, with the dataset's cameras) in a window, or, with --port, in a
    browser at http://HOST:PORT until Ctrl-C. A mesh (spirula mesh's .glb,
    an .obj, or a .ply with faces) is shown in the web viewer (--port).

    Window: left drag orbits, right drag pans, scroll dollies, W/A/S/D/Q/E
    fly, +/- change the field of view, N/P step through the dataset's
    cameras, R resets, Esc closes. With no display, use --port.
    """
    from spirula.extras import need
    from spirula.view.mesh import is_mesh_file

    if not source.exists():
        what = "mesh file" if is_mesh_file(source) else "file, run folder or checkpoint"
        raise UsageError("%s: no such %s" % (source, what))
    for note in _stale_notes(source):
        click.echo(note, err=True)
    if is_mesh_file(source):
        from spirula.view.mesh import load_mesh, serve_mesh

        need("spirula view of a mesh", "viser", "trimesh")
        if port is None:
            raise UsageError("%s: a mesh is shown in the web viewer: add --port PORT (docs/viewer.md)" % source)
        if appearance_of is not None:
            raise UsageError("--appearance-of: %s is a mesh; it applies to a run's splats" % source)
        serve_mesh(load_mesh(source), port, viewer_host, log=lambda msg: click.echo(msg, err=True))
        return
    if port is not None:
        need("spirula view --port", "viser")
        from spirula.view.web import serve

        serve(
            source,
            port,
            viewer_host,
            device=open_cli_device(),
            log=lambda msg: click.echo(msg, err=True),
            appearance_of=appearance_of,
        )
        return
    need("spirula view", "glfw", "moderngl")
    from spirula.view.window import check_display

    check_display()  # before loading anything: no display is one line, exit 2
    window, session = open_view(source, width, height, open_cli_device(), appearance_of)
    try:
        window.run()
    finally:
        window.close()
        session.free()


def _stale_notes(source: Path) -> list:
    """A line for what is stale among a run's derived files: the mesh viewed
    (RUN/mesh.glb against RUN/splat.ply), or, for a run folder, each of them."""
    from spirula.train.run_folder import stale_notes

    source = Path(source)
    if source.is_dir():
        return stale_notes(source)
    if source.is_file():
        return stale_notes(source.parent, only=source)
    return []


def open_view(source: Path, width: int, height: int, device, appearance_of: str | None = None):
    """(ViewerWindow, ViewSession) on a splat.ply or a run folder, rendering on ``device``
    (through training image ``appearance_of``'s appearance, if given)."""
    from spirula.view.camera import Camera, CameraPath
    from spirula.view.session import ViewRenderer, ViewSession, load_source
    from spirula.view.window import ViewerWindow

    src = load_source(source, appearance_of)
    path = CameraPath.from_frames(src.frames) if src.frames else None
    view = ViewRenderer.from_params(device, src.params, src.background, src.max_alpha, src.appearance)
    session = ViewSession(view, width, height, own_view=True)
    camera = path.camera() if path is not None else Camera.fit(src.params["means"])
    try:
        return ViewerWindow(session, camera, path, "spirula view: %s" % Path(source).name), session
    except BaseException:
        session.free()
        raise
