"""``spirula frames``: the sharpest frames of a video, as images for SfM."""

from __future__ import annotations

from pathlib import Path

import click

from spirula.cli.common import common_options
from spirula.sfm.frames import DEFAULT_MAX_FRAMES, MIN_AUTO_FRAMES, MOTION_STEP


def _log(msg):
    click.echo(msg, err=True)


@click.command()
@common_options  # every command takes them (tests/test_backends.py); frames runs on the CPU
@click.argument("video", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--fps",
    type=float,
    default=None,
    help="Frames kept per second of video: the sharpest of each 1/F s window [default: automatic, a frame each "
    "time the view has moved %g%% of the frame, at least %d]." % (100 * MOTION_STEP, MIN_AUTO_FRAMES),
)
@click.option("--every", type=int, default=None, help="Keep the sharpest of every N decoded frames instead of --fps.")
@click.option(
    "--max-frames",
    type=int,
    default=None,
    help="At most this many frames (the windows widen) [default: %d]." % DEFAULT_MAX_FRAMES,
)
def frames(video, out, fps, every, max_frames):
    """Decode VIDEO (any format FFmpeg reads; phone videos come out upright)
    and write the sharpest frame of each window into the folder OUT as
    frame_00001.jpg, ... (JPEG quality 95), ready for `spirula sfm`. By
    default the windows follow the view's motion (docs/capture.md); --fps and
    --every cut them by time or frame count. Earlier frame_*.jpg in OUT are
    replaced."""
    from spirula.extras import need

    need("spirula frames", "av")
    from spirula.sfm.frames import extract_frames

    extract_frames(video, out, fps=fps, every=every, max_frames=max_frames, log=_log)
