"""rasterize_bwd's global float atomics per (Gaussian, tile) pair, counted on raster_bench's slab.

    python benchmarks/bwd_atomics.py [--n 20000] [--width 320 --height 214] [--subgroup 32]

Renders the slab (benchmarks/scenes.py) once, then counts, for every intersection
(a Gaussian in a tile's list), the subgroups with a pixel that blends it, as
rasterize_bwd decides (list position before the pixel's last, sigma >= 0, alpha >= 1/255):
BWD_REDUCE = 0 ("subgroup") does 9 atomics per such subgroup, BWD_REDUCE = 1
("workgroup") 9 per pair with any (ABSGRAD adds 2 per set, DISTORTION 1). Subgroups are
runs of --subgroup consecutive pixels of the 16x16 tile in row order (NVIDIA: 32).
"""

from __future__ import annotations

import argparse

import numpy as np
from scenes import FOCAL, WIDTH, camera, make_scene

FLOATS = 9  # grad_xy 2, grad_conics 3, grad_rgb 3, grad_opacity 1


def count(n: int, width: int, height: int, subgroup: int, chunk: int = 200_000) -> dict:
    from spirula.backends import open_device
    from spirula.render.rasterizer import MAX_ALPHA, TILE, Rasterizer, Splats

    device = open_device("vulkan")
    s = make_scene(n)
    splats = Splats.from_numpy(
        device,
        s["means"],
        s["quats"],
        np.exp(s["log_scales"]),
        1 / (1 + np.exp(-s["opacity_logits"])),
        s["sh"],
        activated=True,
    )
    raster = Rasterizer(device, width, height, 1, capacity=n)
    raster.set_cameras(*camera(width, height, FOCAL * width / WIDTH))
    m = raster.forward(splats, 0)
    keys, ids = raster.intersections()
    ranges = device.readback(raster.ranges)
    xyop = device.readback(raster.xyop, shape=(n, 4))
    conics = device.readback(raster.conics, shape=(n, 4))
    last = np.zeros((raster.tile_height * TILE, raster.tile_width * TILE), np.int64)
    last[:height, :width] = device.readback(raster.out_last)[0]
    # pixel p of a tile (row order) at (tx * 16 + p % 16, ty * 16 + p // 16)
    py, px = np.divmod(np.arange(TILE * TILE), TILE)
    groups = TILE * TILE // subgroup
    sub = red = pairs = 0
    for a in range(0, m, chunk):
        k, g = keys[a : a + chunk].astype(np.int64), ids[a : a + chunk].astype(np.int64)
        ty, tx = np.divmod(k, raster.tile_width)
        x = tx[:, None] * TILE + px[None]
        y = ty[:, None] * TILE + py[None]
        d = xyop[g, None, :2] - np.stack([x + 0.5, y + 0.5], -1)
        c = conics[g]
        sigma = (
            0.5 * (c[:, None, 0] * d[..., 0] ** 2 + c[:, None, 2] * d[..., 1] ** 2)
            + c[:, None, 1] * d[..., 0] * d[..., 1]
        )
        alpha = np.minimum(MAX_ALPHA, xyop[g, None, 2] * np.exp(-sigma))
        pos = np.arange(a, a + len(k)) - ranges[k, 0]
        valid = (pos[:, None] < last[y, x]) & (x < width) & (y < height) & (sigma >= 0) & (alpha >= 1 / 255)
        touched = valid.reshape(len(k), groups, subgroup).any(-1)
        sub += int(touched.sum())
        red += int(touched.any(-1).sum())
        pairs += len(k)
    raster.free()
    splats.free(device)
    return dict(
        pairs=pairs,
        touched_pairs=red,
        subgroup_atomics_per_pair=FLOATS * sub / max(pairs, 1),
        workgroup_atomics_per_pair=FLOATS * red / max(pairs, 1),
        subgroups_per_touched_pair=sub / max(red, 1),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--height", type=int, default=214)
    ap.add_argument("--subgroup", type=int, default=32)
    a = ap.parse_args()
    r = count(a.n, a.width, a.height, a.subgroup)
    print("[bwd_atomics] n=%d %dx%d subgroup=%d " % (a.n, a.width, a.height, a.subgroup), end="")
    print("  ".join("%s=%s" % (k, "%.4g" % v if isinstance(v, float) else v) for k, v in r.items()))


if __name__ == "__main__":
    main()
