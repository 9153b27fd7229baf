"""Time ``spirula frames`` (issue #13, docs/performance.md) on clips it
encodes with PyAV: 20 s at 30 fps (600 frames) of a moving, textured pattern,
at 384x288 (kept: 120 frames, --fps 6) and 1920x1080 (kept: 200, --fps 10),
H.264 (libx264 veryfast, CRF 20: about the bit rate of a phone).

    python benchmarks/frames_bench.py [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CASES = [((384, 288), 6.0, 120), ((1920, 1080), 10.0, 200)]
SECONDS, RATE = 20, 30


def write_clip(path: Path, w: int, h: int):
    import av

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:h, 0 : 2 * w].astype(np.float32)
    base = 128 + 60 * np.sin(xx / 23.0) * np.cos(yy / 17.0) + rng.normal(0, 30, (h, 2 * w))
    base = base.clip(0, 255).astype(np.uint8)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=RATE)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"crf": "20", "preset": "veryfast"}
        for i in range(SECONDS * RATE):
            x = (i * w) // (SECONDS * RATE)  # pans one image width over the clip
            g = base[:, x : x + w]
            img = np.stack([g, np.roll(g, 7, 0), np.roll(g, 13, 1)], axis=2)
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = i, Fraction(1, RATE)
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="frames_bench"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print("| clip | kept | wall s (best of %d) | decoded frames/s |" % args.repeat)
    print("|---|---|---|---|")
    for (w, h), fps, kept in CASES:
        clip = work / ("clip_%dx%d.mp4" % (w, h))
        if not clip.exists():
            write_clip(clip, w, h)
        best = float("inf")
        for _ in range(args.repeat):
            out = work / ("frames_%dx%d" % (w, h))
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "spirula", "frames", str(clip), str(out), "--fps", str(fps)],
                capture_output=True,
                text=True,
                env=env,
            )
            best = min(best, time.perf_counter() - t0)
            assert proc.returncode == 0, proc.stderr
            assert len(list(out.glob("frame_*.jpg"))) == kept, proc.stderr
        mb = clip.stat().st_size / 2**20
        print(
            "| %dx%d, %d s at %d fps (%d frames, %.1f MiB) | %d (--fps %g) | %.2f | %.0f |"
            % (w, h, SECONDS, RATE, SECONDS * RATE, mb, kept, fps, best, SECONDS * RATE / best)
        )


if __name__ == "__main__":
    main()
