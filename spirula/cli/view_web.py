"""``spirula view-web SPLAT.ply|RUN --port 8080``: the web viewer (spirula/view/web.py).

Temporary and hidden: it becomes ``spirula view ... --port`` when merged with
the window viewer's spirula/cli/view.py.
"""

from __future__ import annotations

from pathlib import Path

import click

from spirula.cli.main import cli, common_options, open_cli_device


@cli.command("view-web", hidden=True)
@common_options
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Web viewer port.")
@click.option(
    "--viewer-host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every interface; prefer an ssh -L tunnel).",
)
def view_web(source, port, viewer_host):
    """Serve a web viewer of SOURCE (a splat.ply, a run folder or a checkpoint)
    on http://HOST:PORT until Ctrl-C (docs/viewer.md, 'Web viewer')."""
    from spirula.view.web import serve

    serve(source, port, viewer_host, device=open_cli_device(), log=lambda msg: click.echo(msg, err=True))
