"""Time ``spirula sfm`` (issue #13, docs/performance.md) on the synthetic
textured scene of tests/sfm_scene.py (known cameras on an 80 degree arc):
renders N frames (in parallel, one process per core: numpy ray casting is
the slow part at 1080p, not what is measured), then runs ``spirula sfm`` as
a subprocess and prints its stage lines and wall time.

    python benchmarks/sfm_bench.py --frames 120 --size 384x288 [--work DIR] [--cores N]

``--cores N`` pins the SfM run to the first N cores (``taskset``), for the
2-core figure on a larger machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _render_one(args):
    import sfm_scene
    from PIL import Image

    i, n, width, height, folder = args
    table = sfm_scene._noise_table(0)
    f = 0.95 * width
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    R, t = sfm_scene.look_at(sfm_scene.arc_centres(n)[i])
    Image.fromarray(sfm_scene.render(R, t, K, width, height, table)).save(Path(folder) / ("frame_%05d.png" % (i + 1)))


def render_frames(folder: Path, n: int, width: int, height: int):
    """The frames sfm_scene.make_scene writes, rendered in parallel."""
    folder.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(_render_one, [(i, n, width, height, str(folder)) for i in range(n)]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--size", default="384x288")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--cores", type=int, default=None)
    ap.add_argument("--matcher", default="auto")
    a = ap.parse_args()
    width, height = (int(v) for v in a.size.split("x"))
    work = a.work or Path(tempfile.mkdtemp(prefix="sfm_bench_"))
    images = work / ("frames_%d_%dx%d" % (a.frames, width, height))
    t0 = time.perf_counter()
    if not images.is_dir() or len(list(images.glob("*.png"))) != a.frames:
        render_frames(images, a.frames, width, height)
    print("[sfm-bench] rendered %d frames %dx%d in %.1f s" % (a.frames, width, height, time.perf_counter() - t0))
    out = work / ("sfm_%d_%dx%d_%s" % (a.frames, width, height, a.cores or "all"))
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    cmd = [sys.executable, "-m", "spirula", "sfm", str(images), str(out), "--matcher", a.matcher]
    if a.cores:
        cmd = ["taskset", "-c", "0-%d" % (a.cores - 1)] + cmd
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT)
    print(
        "[sfm-bench] %d frames %dx%d, %s cores: spirula sfm exit %d, wall %.1f s"
        % (a.frames, width, height, a.cores or os.cpu_count(), r.returncode, time.perf_counter() - t0)
    )


if __name__ == "__main__":
    main()
