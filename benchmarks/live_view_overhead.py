"""Training time with and without a live view attached (issue #15: at most 10% slower).

The live view here is the window's render path without a window (no display
on the GPU hosts): every ``--every`` steps, and at every step with
``--every 1`` (a user dragging the camera all the time), one
:class:`~spirula.view.session.ViewSession` frame of the trainer's device
splats at ``--width`` x ``--height``, read back as uint8, as
``WindowLiveView.on_step`` does. Prints one line per run:

    python benchmarks/live_view_overhead.py [DATASET] --iterations 2000 --backend cuda

Without DATASET: the built-in demo scene with its TrainConfig.demo().
"""

import argparse
import json
import tempfile
from pathlib import Path

from spirula.backends import open_device, set_device
from spirula.data import load_dataset
from spirula.train.config import TrainConfig
from spirula.train.run import train_run
from spirula.view.camera import CameraPath
from spirula.view.session import ViewSession


class HeadlessLiveView:
    def __init__(self, path, width, height, every):
        self.path, self.width, self.height, self.every = path, width, height, every
        self.session, self.camera = None, path.camera()

    def on_step(self, step, s):
        if self.session is None:
            self.session = ViewSession(
                s.device, s.splats, s.sh_degree, self.width, self.height,
                background=s.background, max_alpha=s.max_alpha, world=s.world,
            )  # fmt: skip
        self.session.set_splats(s.splats, s.sh_degree, changed=step % self.every == 0)
        self.session.render(self.camera)

    def close(self):
        if self.session is not None:
            self.session.free()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", type=Path, nargs="?")
    ap.add_argument("--downscale", type=int, default=None)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=720)
    ap.add_argument("--every", type=int, nargs="+", default=[0, 10, 1], help="0: no live view")
    a = ap.parse_args()
    device = open_device(a.backend)
    set_device(device)
    kw = dict(iterations=a.iterations, eval_every=0, save_every=0)
    if a.downscale:
        kw["downscale"] = a.downscale
    if a.dataset is None:
        from spirula.data.demo import ensure_demo_scene

        a.dataset, cfg = ensure_demo_scene(), TrainConfig.demo(**kw)
    else:
        cfg = TrainConfig(**kw)
    scene = load_dataset(a.dataset, downscale=cfg.downscale, eval_split=cfg.eval_split, background="auto")
    for every in a.every:
        viewers = [HeadlessLiveView(CameraPath.from_frames(scene.frames), a.width, a.height, every)] if every else []
        with tempfile.TemporaryDirectory() as out:
            m = train_run(scene, cfg, device, Path(out), log=lambda *x: None, viewers=viewers)
        renders = viewers[0].session.renders if viewers else 0
        print(json.dumps(dict(every=every, renders=renders, training_time_s=round(m["training_time_s"], 2))))


if __name__ == "__main__":
    main()
