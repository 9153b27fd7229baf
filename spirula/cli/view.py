"""``spirula view``: the native viewer window (spirula/view/window.py, docs/viewer.md)."""

from __future__ import annotations

from pathlib import Path

import click

from spirula.cli.main import cli, common_options, open_cli_device


@cli.command("view")
@common_options
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--width", type=click.IntRange(1), default=1280, show_default=True, help="Window width in pixels.")
@click.option("--height", type=click.IntRange(1), default=720, show_default=True, help="Window height in pixels.")
def view_command(source, width, height):
    """Look at SOURCE in a window: a splat.ply, or a run folder (its latest
    checkpoint, with the dataset's cameras: N/P step through them).

    Left drag orbits, right drag pans, scroll dollies, W/A/S/D/Q/E fly,
    +/- change the field of view, R resets, Esc closes. With no display,
    use --port for the web viewer.
    """
    from spirula.view.window import check_display

    check_display()  # before loading anything: no display is one line, exit 2
    window, session = open_view(source, width, height, open_cli_device())
    try:
        window.run()
    finally:
        window.close()
        session.free()


def open_view(source: Path, width: int, height: int, device):
    """(ViewerWindow, ViewSession) on a splat.ply or a run folder, rendering on ``device``."""
    from spirula.view.camera import Camera, CameraPath
    from spirula.view.session import ViewSession
    from spirula.view.window import ViewerWindow

    path = None
    background, max_alpha = None, None
    if source.suffix.lower() == ".ply":
        from spirula.data import read_splat_ply

        ply = read_splat_ply(source)
        params = dict(
            means=ply["means"],
            quats=ply["quats"],
            scales=ply["log_scales"],
            opacities=ply["opacity_logits"],
            sh=ply["sh_coeffs"],
        )
    else:
        from spirula.cli.train import _open_run

        cfg, params, _, scene = _open_run(source)
        path = CameraPath.from_frames([scene.frames[i] for i in scene.train] or scene.frames)
        background, max_alpha = scene.background, cfg.max_alpha
    kw = {} if max_alpha is None else dict(max_alpha=max_alpha)
    session = ViewSession.from_params(device, params, width, height, background=background, **kw)
    camera = path.camera() if path is not None else Camera.fit(params["means"])
    return ViewerWindow(session, camera, path, "spirula view: %s" % source.name), session
