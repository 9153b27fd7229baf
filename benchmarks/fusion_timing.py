"""Time fuse_splats on a synthetic splat (discs on a sphere) at some resolutions.

    python benchmarks/fusion_timing.py --backend cuda --splats 1000000 --resolution 256 512

Prints, per resolution: views, render size, seconds, slabs, and the pool's peak bytes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--splats", type=int, default=1_000_000)
    ap.add_argument("--resolution", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--views", type=int, default=64)
    ap.add_argument("--size", type=int, default=512)
    a = ap.parse_args()
    from test_mesh_fusion import sphere_splats

    from spirula.backends import open_device
    from spirula.mesh.cameras import sphere_cameras, splat_support
    from spirula.mesh.fuse import fuse_splats, plan_slabs, volume_grid

    dev = open_device(a.backend)
    splats = sphere_splats(n=a.splats)
    support = splat_support(splats["scales"], splats["opacities"])
    cams = sphere_cameras(splats["means"], n=a.views, size=a.size, support=support)
    fuse_splats(dev, splats, cams, resolution=32, progress=False)  # warm-up: kernels compiled
    for res in a.resolution:
        dims = volume_grid(splats["means"], res, support=support)[2]
        t = time.perf_counter()
        vol = fuse_splats(dev, splats, cams, resolution=res, progress=False)
        dt = time.perf_counter() - t
        print(
            "backend %s splats %d res %d dims %s views %d size %d: %.2f s, %d slab(s), pool peak %.2f GB,"
            " observed %.1f%%"
            % (
                a.backend,
                a.splats,
                res,
                dims,
                a.views,
                a.size,
                dt,
                len(plan_slabs(dims, dev)),
                dev.pool.peak_bytes / 1e9,
                100 * np.mean(vol.weight > 0),
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
