"""Training time with and without a live view attached (issue #15: at most 10% slower).

    python benchmarks/live_view_overhead.py [DATASET] --view window --view web --iterations 2000 --backend cuda

Trains DATASET (default: the built-in demo scene with its TrainConfig.demo())
from the same seed once without a view, then once per case of each
``--view``, through ``train_run(live_hook=live_hook(viewers))`` and its one shared renderer
(spirula/view/live.py):

- ``window``: the window's render path without a window (no display on the
  GPU hosts): a :class:`~spirula.view.session.ViewSession` on the run's
  renderer, a frame of new splats every ``--every`` steps (the window's
  default 10), and at every step with ``--every 1`` (a user dragging the
  camera all the time), read back as uint8, as ``WindowLiveView.on_step`` does.
- ``web``: the web viewer (a real viser server on ``--port``) with no
  browser, and with a browser that moves its camera before every step (the
  worst case: a frame asked for at every step, paced by TRAIN_MAX_FPS),
  simulated on the server side (``WebViewer.request``, no chromium), JPEG
  encoding included.

Prints one line per case: steps per second, the slowdown against no view,
the frames rendered.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import tempfile
from pathlib import Path


class HeadlessWindow:
    """WindowLiveView's frames without the window: new splats every ``every`` steps."""

    def __init__(self, path, width, height, every):
        self.camera, self.width, self.height, self.every = path.camera(), width, height, every
        self.session = None
        self.frames = 0

    def on_step(self, step, state):
        from spirula.view.session import ViewSession

        if self.session is None:
            self.session = ViewSession(state.view, self.width, self.height)
        if step % self.every == 0:
            self.session.splats_changed()
        self.session.render(self.camera)
        self.frames = self.session.renders

    def close(self):
        if self.session is not None:
            self.session.free()


class DraggingBrowser:
    """Asks the web viewer for a new view before every step (listed before it)."""

    def __init__(self, viewer, viewmat, K, width, height):
        self.viewer, self.args = viewer, (viewmat, K, width, height)
        self.client_id, self.scene, self.frames = 1, self, 0

    def set_background_image(self, image, format, jpeg_quality=None):
        self.frames += 1

    def on_step(self, step, state):
        self.viewer.request(self, *self.args)

    def close(self):
        pass


def cases(view: str, scene, args) -> list:
    """(name, make_viewers) for ``view``: make_viewers() -> (viewers, the one counting frames or None)."""
    from spirula.view import web
    from spirula.view.camera import CameraPath

    if view == "window":
        path = CameraPath.from_frames(scene.frames)

        def window(every):
            v = HeadlessWindow(path, args.width, args.height, every)
            return [v], v

        return [("window, new splats every %d steps" % e, lambda e=e: window(e)) for e in args.every]
    f = scene.frames[scene.train[0]]
    fov_y = 2 * math.atan(0.5 * f.height / f.K[1][1])  # the dataset camera's, at the viewer's size
    K = web.intrinsics(fov_y, args.width, args.height)

    def browser(dragging):
        live = web.live_view(scene, args.port, log=lambda msg: None)
        if not dragging:
            return [live], None
        b = DraggingBrowser(live.viewer, f.viewmat, K, args.width, args.height)
        return [b, live], b

    return [("web, no browser", lambda: browser(False)), ("web, a frame asked every step", lambda: browser(True))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path, nargs="?")
    ap.add_argument("--view", choices=["window", "web"], action="append", help="repeatable [default: both]")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--downscale", type=int, default=None)
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=720)
    ap.add_argument("--every", type=int, nargs="+", default=[10, 1], help="window: steps between new-splat frames")
    ap.add_argument("--repeats", type=int, default=3, help="rounds over the cases; medians are printed")
    ap.add_argument("--port", type=int, default=18080, help="web: the viewer's port")
    args = ap.parse_args(argv)

    from spirula.backends import open_device, set_device
    from spirula.data import load_dataset
    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run
    from spirula.view.live import live_hook

    device = open_device(args.backend)
    set_device(device)
    kw = dict(iterations=args.iterations, eval_every=0, save_every=0)
    if args.downscale:
        kw["downscale"] = args.downscale
    if args.dataset is None:
        from spirula.data.demo import ensure_demo_scene

        args.dataset, cfg = ensure_demo_scene(), TrainConfig.demo(**kw)
    else:
        cfg = TrainConfig(**kw)
    scene = load_dataset(args.dataset, downscale=cfg.downscale, eval_split=cfg.eval_split, background="auto")
    runs = [("no view", lambda: ([], None))]
    for view in args.view or ["window", "web"]:
        runs += cases(view, scene, args)

    def rate_of(make, iterations):
        viewers, counter = make()
        c = dataclasses.replace(cfg, iterations=iterations)
        with tempfile.TemporaryDirectory() as out:
            m = train_run(scene, c, device, Path(out), log=lambda *x: None, live_hook=live_hook(viewers))
        return iterations / m["training_time_s"], counter.frames if counter else 0

    # a first run compiles the pipelines and warms the caches; then the cases take turns,
    # --repeats rounds, so a drift of the machine's clocks falls on every case alike
    rate_of(runs[0][1], min(args.iterations, 200))
    rates = {name: [] for name, _ in runs}
    frames = {}
    for _ in range(args.repeats):
        for name, make in runs:
            rate, frames[name] = rate_of(make, args.iterations)
            rates[name].append(rate)
    base = statistics.median(rates["no view"])
    for name, _ in runs:
        rate = statistics.median(rates[name])
        print(
            "%-40s %8.1f steps/s (median of %d)  %+6.1f%%  %d frames (%dx%d)"
            % (name, rate, args.repeats, 100 * (base / rate - 1), frames[name], args.width, args.height)
        )


if __name__ == "__main__":
    main()
