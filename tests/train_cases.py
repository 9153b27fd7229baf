"""Small training scenes for the trainer, CLI and validation tests.

:func:`write_tiny_colmap` writes the synthetic scene of data_fixtures (12
cameras on a circle of radius 4 looking at the origin, 64x48 pinhole images,
500 seed points around the origin) as a COLMAP binary model with bright
textured images, every value in [190, 255] / 255: a render of splats whose
colours stay below 0.7 on the black COLMAP background is then darker than
the ground truth at every pixel, so the L1 term's sign is never in doubt.
The default split (every 8th image) leaves 10 training and 2 test views.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from data_fixtures import make_truth, pattern, write_colmap, write_nerfstudio

PARAMS = ("means", "quats", "scales", "opacities", "sh")  # SplatModel's parameter names


def sigmoid(x):
    return 1 / (1 + np.exp(-np.asarray(x, np.float64)))


def bright_image(k: int) -> np.ndarray:
    """[H,W,3] uint8 in [190, 255]: camera k's test pattern, compressed."""
    return (190 + pattern(k).astype(np.int64) * 65 // 255).astype(np.uint8)


def write_tiny_colmap(root: Path) -> Path:
    truth = make_truth()
    return write_colmap(Path(root), truth, binary=True, images=[bright_image(k) for k in range(len(truth.names))])


def write_tiny_mixed_sizes(root: Path) -> Path:
    """The tiny scene as a nerfstudio dataset whose odd views are half size
    (32x24, intrinsics halved, images 2x2-averaged): two image sizes."""
    import json

    from PIL import Image

    truth = make_truth()
    images = [bright_image(k) for k in range(len(truth.names))]
    root = write_nerfstudio(Path(root), truth, images=images, per_frame_intrinsics=True)
    meta = json.loads((root / "transforms.json").read_text())
    for k, fr in enumerate(meta["frames"]):
        if k % 2:
            small = images[k].reshape(images[k].shape[0] // 2, 2, images[k].shape[1] // 2, 2, 3).mean((1, 3))
            Image.fromarray(np.rint(small).astype(np.uint8)).save(root / fr["file_path"])
            for key in ("fl_x", "fl_y", "cx", "cy", "w", "h"):
                fr[key] = fr[key] / 2
    (root / "transforms.json").write_text(json.dumps(meta, indent=1))
    return root


def tiny_scene(root: Path):
    from spirula.data import load_dataset

    return load_dataset(write_tiny_colmap(root))


def random_init(n: int, sh_degree: int, seed: int = 0, spread: float = 0.45) -> dict:
    """Raw splat parameters in the tiny scene's dataset coordinates: means
    around the origin (seen by every camera), sizes 0.06..0.2 (about 1-3
    pixels of standard deviation at the cameras' distance), opacities
    0.2..0.8, colours 0.1..0.6 and small higher SH bands."""
    rng = np.random.default_rng(seed)
    K = (sh_degree + 1) ** 2
    sh = np.zeros((n, K, 3), np.float32)
    sh[:, 0] = (rng.uniform(0.1, 0.6, (n, 3)) - 0.5) / 0.28209479177387814
    sh[:, 1:] = rng.uniform(-0.02, 0.02, (n, K - 1, 3))
    o = rng.uniform(0.2, 0.8, n)
    return dict(
        means=rng.normal(0, spread, (n, 3)).astype(np.float32),
        quats=rng.standard_normal((n, 4)).astype(np.float32),
        scales=np.log(rng.uniform(0.06, 0.2, (n, 3))).astype(np.float32),
        opacities=np.log(o / (1 - o)).astype(np.float32),
        sh=sh,
    )


def refine(trainer, step: int):
    """The trainer's strategy refines its splats now, as after step ``step``,
    and the trainer takes the result over; returns the strategy's Changes."""
    s = trainer.strategy
    if trainer.cfg.strategy.name == "mcmc":
        changes = s.refine(trainer.model, step, trainer.device)
    else:
        changes = s.refine(trainer.model, trainer.stats, step, trainer.extent, trainer.device)
    trainer.adopt(changes)
    return changes


def run_one_thread(module: str, function: str, path) -> dict:
    """``module.function(str(path))``'s JSON, computed in a process of its own with lavapipe on
    one thread (LP_NUM_THREADS=1): its workgroups then run in order, so float atomics add in
    one order and two runs of the same work agree bit for bit (with several threads they
    differ in the last bits, by the threads' timing). ``module``: a test module of tests/."""
    import json
    import os
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    env = dict(os.environ, LP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tests.parent), str(tests), env.get("PYTHONPATH")]))
    code = "import json, %s as t; print(json.dumps(t.%s(%r)))" % (module, function, str(path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
