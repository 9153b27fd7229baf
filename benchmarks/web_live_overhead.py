"""Training slowdown with the web viewer attached (docs/viewer.md, "Web viewer").

    python benchmarks/web_live_overhead.py DATASET [--steps 2000] [--width 1280 --height 720] [--backend cuda]

Trains DATASET three times from the same seed for --steps steps: without a
viewer, with the web viewer and no browser, and with the web viewer and a
browser that moves its camera before every step (the worst case: a frame
asked for at every step, paced by TRAIN_MAX_FPS). The browser is simulated
on the server side (WebViewer.request), so no chromium is needed. Prints one
line per case: steps per second and the slowdown against the first.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path


class _DraggingBrowser:
    """Asks for a new view before every step (an observer listed before the live view)."""

    def __init__(self, viewer, viewmat, K, width, height):
        self.viewer, self.args = viewer, (viewmat, K, width, height)
        self.client_id, self.scene, self.sent = 1, self, 0

    def set_background_image(self, image, format, jpeg_quality=None):
        self.sent += 1

    def on_step(self, step, state):
        self.viewer.request(self, *self.args)

    def close(self):
        pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=720)
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--port", type=int, default=18080)
    args = ap.parse_args(argv)

    from spirula.backends import open_device, set_device
    from spirula.data import load_dataset
    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run
    from spirula.view import web

    device = open_device(args.backend)
    set_device(device)
    scene = load_dataset(args.dataset)
    cfg = TrainConfig(iterations=args.steps, eval_every=0, save_every=0)
    f = scene.frames[scene.train[0]]
    fov_y = 2 * math.atan(0.5 * f.height / f.K[1][1])  # the dataset camera's, at the viewer's size
    K = web.intrinsics(fov_y, args.width, args.height)
    base = None
    for case in ("no viewer", "web viewer, no browser", "web viewer, a frame asked every step"):
        observers = []
        if case != "no viewer":
            live = web.live_view(scene, args.port, log=lambda msg: None)
            if "every step" in case:
                observers.append(_DraggingBrowser(live.viewer, f.viewmat, K, args.width, args.height))
            observers.append(live)
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            m = train_run(scene, cfg, device, Path(out), log=lambda msg: None, observers=observers)
            wall = time.perf_counter() - t0
        rate = args.steps / m["training_time_s"]
        base = base or rate
        frames = observers[0].sent if len(observers) == 2 else 0
        print(
            "%-40s %8.1f steps/s  %+6.1f%%  %d frames (%dx%d)  wall %.1f s"
            % (case, rate, 100 * (base / rate - 1), frames, args.width, args.height, wall)
        )


if __name__ == "__main__":
    main()
