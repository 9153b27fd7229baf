"""render_fps: frames per second of spirula.Renderer, headless (issue #15 item 6).

    python benchmarks/render_fps.py [--n 1000000] [--ply splat.ply] [--sizes 1280x720,1920x1080]
                                    [--frames 300] [--sh-degree 3] [--backend vulkan|cuda]

A render loop as a viewer runs it: the splats are set once, then each frame
is one ``Renderer.render`` from a camera that sways (+-5 degrees of yaw) in
front of the splats, so no two consecutive frames are the same view. A
frame's time is the wall clock around ``render``, which returns only when
the GPU has finished the frame (the sequence is evaluated and waited for:
the GPU is synced every frame); nothing is read back. The first ``--warmup``
frames (pipeline creation, buffer growth) are not counted. Printed per size:
median and mean frame time, fps from each, and the intersections per frame.

Without ``--ply`` the splats are raster_bench's random slab
(benchmarks/scenes.py) of ``--n`` splats at ``--sh-degree``, the camera at
the origin looking down +z with the slab's focal length scaled to the width.
With ``--ply`` the camera orbits the splats as ``spirula render`` does
(spirula/render/camera_path.py), at a 50 degree vertical field of view.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_sizes(text: str) -> list:
    out = []
    for part in text.split(","):
        w, h = part.lower().split("x")
        out.append((int(w), int(h)))
    return out


def sway(k: int, frames: int) -> np.ndarray:
    """World->camera at the origin, yawed by 5 degrees x sin(2 pi k / frames)."""
    a = np.radians(5.0) * np.sin(2 * np.pi * k / max(frames, 1))
    vm = np.eye(4)
    vm[:3, :3] = [[np.cos(a), 0, -np.sin(a)], [0, 1, 0], [np.sin(a), 0, np.cos(a)]]
    return vm


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="random splats (without --ply)")
    p.add_argument("--ply", type=Path, default=None, help="a splat.ply to render instead")
    p.add_argument("--sizes", default="1280x720,1920x1080")
    p.add_argument("--frames", type=int, default=300, help="timed frames per size")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--sh-degree", type=int, default=3)
    p.add_argument("--backend", default="vulkan")
    args = p.parse_args(argv)

    from spirula.backends import open_device
    from spirula.render import camera_path
    from spirula.render.renderer import Renderer, activate_splats

    device = open_device(args.backend)
    renderer = Renderer(device=device)
    if args.ply is not None:
        from spirula.data.ply import read_splat_ply

        ply = read_splat_ply(args.ply)
        splats, sh_degree = activate_splats(ply), ply["sh_degree"]
        what = "%s (%s splats, SH degree %d)" % (args.ply, f"{len(splats['means']):,}", sh_degree)
    else:
        from scenes import FOCAL, WIDTH, make_scene

        splats, sh_degree = activate_splats(make_scene(args.n, sh_degree=args.sh_degree)), args.sh_degree
        what = "random slab of %s splats, SH degree %d" % (f"{args.n:,}", sh_degree)
    t0 = time.perf_counter()
    renderer.set_splats(**splats, sh_degree=sh_degree)
    print("render_fps: %s on %s (upload %.2f s)" % (what, device.info.name, time.perf_counter() - t0))
    for w, h in parse_sizes(args.sizes):
        total = args.warmup + args.frames
        if args.ply is not None:
            K = camera_path.intrinsics(w, h, 50.0)
            path = camera_path.orbit_around_splats(splats["means"], total)
        else:
            f = FOCAL * w / WIDTH
            K = np.array([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1]])
            path = [sway(k, total) for k in range(total)]
        times, isects = [], []
        for k in range(total):
            t = time.perf_counter()
            out = renderer.render(path[k], K, w, h)
            dt = time.perf_counter() - t
            if k >= args.warmup:
                times.append(dt)
                isects.append(out.n_intersections)
        med, mean = statistics.median(times), statistics.fmean(times)
        print(
            "%5dx%-5d median %7.3f ms (%6.1f fps)  mean %7.3f ms (%6.1f fps)  %s intersections/frame  [%d frames]"
            % (w, h, 1e3 * med, 1 / med, 1e3 * mean, 1 / mean, f"{int(np.median(isects)):,}", len(times))
        )
    renderer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
