"""Tile culling (docs/design.md §2.4): a Gaussian's intersections are the tiles
whose pixel centres its alpha >= 1/255 ellipse may reach, not its whole box.
Conservative (no pixel that draws a Gaussian loses its tile), and fewer pairs
than the box on raster_bench's slab."""

import sys
from pathlib import Path

import numpy as np
from reference.intersect import MIN_ALPHA, tile_counts, tile_lists
from reference.projection import ALPHA_THRESHOLD, MAX_EXTEND
from render_cases import gpu_render

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from scenes import FOCAL, WIDTH, camera, make_scene  # noqa: E402

TS = 16


def random_ellipses(n, width, height, seed):
    """Projected Gaussians as projection_fwd leaves them (float32): means2d [n,2],
    conics [n,3], opacities [n], radii [n,2]; round blobs and needles up to 300:1,
    opacities from 1/255 to 1, means up to 30 px off the image; half of them with
    the opacity that puts alpha exactly at 1/255 on a pixel centre at a tile's edge."""
    rng = np.random.default_rng(seed)
    means = rng.uniform([-30, -30], [width + 30, height + 30], (n, 2)).astype(np.float32).astype(np.float64)
    s1 = np.exp(rng.uniform(np.log(0.2), np.log(40.0), n))
    s2 = s1 / np.exp(rng.uniform(0.0, np.log(300.0), n))
    th = rng.uniform(0, np.pi, n)
    c, s = np.cos(th), np.sin(th)
    xx = c * c * s1**2 + s * s * s2**2 + 0.3  # + eps2d, as projection_fwd
    yy = s * s * s1**2 + c * c * s2**2 + 0.3
    xy = c * s * (s1**2 - s2**2)
    det = xx * yy - xy * xy
    conics = np.stack([yy / det, -xy / det, xx / det], -1).astype(np.float32).astype(np.float64)
    ops = np.exp(rng.uniform(np.log(ALPHA_THRESHOLD), 0.0, n))
    # every other one exactly at the threshold on a pixel centre at a tile's edge
    edge = np.stack([TS * rng.integers(0, 6, n) + rng.choice([0.5, TS - 0.5], n), rng.integers(0, height, n) + 0.5], -1)
    d = means - edge
    sig = 0.5 * (conics[:, 0] * d[:, 0] ** 2 + conics[:, 2] * d[:, 1] ** 2) + conics[:, 1] * d[:, 0] * d[:, 1]
    o_edge = np.exp(np.minimum(sig, 10.0)) * MIN_ALPHA
    ops = np.where((np.arange(n) % 2 == 0) & (o_edge <= 1.0), o_edge, ops).astype(np.float32)
    ext = np.minimum(MAX_EXTEND, np.sqrt(2 * np.log(ops * 255.0)))
    radii = np.ceil(ext[:, None] * np.sqrt(np.stack([xx, yy], -1))).astype(np.int32)
    return means.astype(np.float32), conics.astype(np.float32), ops, radii


def drawn_tiles(means, conics, ops, width, height, f32=True):
    """Brute force: for each Gaussian, the tiles holding a pixel that draws it
    (the rasterizer's test: sigma >= 0 and o exp(-sigma) >= 1/255), computed
    op by op in float32 as rasterize_fwd does (f32) or in float64."""
    dt = np.float32 if f32 else np.float64
    ys, xs = np.mgrid[0:height, 0:width].astype(dt) + dt(0.5)
    tw = -(-width // TS)
    tile = (ys.astype(np.int64) // TS) * tw + xs.astype(np.int64) // TS
    out = []
    for m, q, o in zip(means.astype(dt), conics.astype(dt), ops.astype(dt)):
        dx, dy = m[0] - xs, m[1] - ys
        sigma = dt(0.5) * (q[0] * dx * dx + q[2] * dy * dy) + q[1] * dx * dy
        alpha = o * np.exp(-sigma)
        out.append(set(np.unique(tile[(sigma >= 0) & (alpha >= dt(MIN_ALPHA))]).tolist()))
    return out


def test_culling_keeps_every_tile_a_pixel_draws_in():
    """Every (pixel, Gaussian) pair with alpha >= 1/255 keeps its tile, in the
    rasterizer's float32 arithmetic and in exact (float64) arithmetic; and the
    culled list is a subset of the box. Needles and faint Gaussians included."""
    W, H = 83, 61
    means, conics, ops, radii = random_ellipses(1200, W, H, seed=1)
    lists = tile_lists(means[None], radii[None], W, H, conics[None], ops)[0]
    boxes = tile_lists(means[None], radii[None], W, H)[0]
    for f32 in (True, False):
        need = drawn_tiles(means, conics, ops, W, H, f32)
        for g in range(len(means)):
            assert need[g] <= set(lists[g].tolist()), (g, f32, need[g] - set(lists[g].tolist()))
    assert all(set(a.tolist()) <= set(b.tolist()) for a, b in zip(lists, boxes))
    kept, box = sum(map(len, lists)), sum(map(len, boxes))
    assert kept < 0.85 * box, (kept, box)  # needles: most of their box is culled


def test_gpu_intersections_hold_every_drawn_pixel():
    """The GPU's own lists, for a scene of needles: every pixel that draws a
    Gaussian (float32 brute force on the GPU's means2d and conics) has that
    Gaussian in its tile."""
    from test_render_edge_cases import scene_of

    W, H = 70, 50
    rng = np.random.default_rng(4)
    n = 60
    scene = scene_of(
        np.c_[rng.uniform(-0.5, 0.5, (n, 2)) * [3.0, 2.0], rng.uniform(3.0, 5.0, n)],
        opacities=np.exp(rng.uniform(np.log(0.01), 0.0, n)).astype(np.float32),
        width=W,
        height=H,
    )
    scene["scales"] = np.c_[rng.uniform(0.2, 0.6, n), np.full(n, 1e-3), np.full(n, 1e-3)].astype(np.float32)
    q = rng.standard_normal((n, 4)).astype(np.float32)
    scene["quats"] = q / np.linalg.norm(q, axis=1, keepdims=True)
    _, _, _, meta = gpu_render(scene)
    keys, ids = meta["_context"].raster.intersections()
    T = meta["_context"].raster.tiles
    have = {(int(i), int(k % T)) for k, i in zip(keys, ids)}
    vis = (meta["radii"][0] != 0).any(-1)
    need = drawn_tiles(meta["means2d"][0][vis], meta["conics"][0][vis], scene["opacities"][vis], W, H)
    for g, tiles in zip(np.nonzero(vis)[0], need):
        assert all((int(g), t) in have for t in tiles), g
    box = tile_counts(meta["means2d"], meta["radii"], W, H).sum()
    assert vis.sum() > 30 and meta["n_isects"] < 0.8 * box, (meta["n_isects"], box)


def test_fewer_pairs_than_the_box_on_the_benchmark_slab():
    """raster_bench's slab (benchmarks/scenes.py) at its full 1237x822 with 20k
    Gaussians: tile culling keeps 60,620 of the box's 79,322 pairs (1.31x fewer;
    the box is gsplat 1.5.3's opacity-aware one, so this is its count too)."""
    n, w, h = 20_000, WIDTH, 822
    s = make_scene(n)
    vm, K = camera(w, h, FOCAL)
    _, _, _, meta = gpu_render(
        dict(
            means=s["means"],
            quats=s["quats"],
            scales=np.exp(s["log_scales"]),
            opacities=1 / (1 + np.exp(-s["opacity_logits"])),
            sh_coeffs=s["sh"],
            viewmats=vm,
            Ks=K,
            width=w,
            height=h,
            sh_degree=0,
        )
    )
    box = int(tile_counts(meta["means2d"], meta["radii"], w, h).sum())
    assert meta["n_isects"] * 1.25 < box, (meta["n_isects"], box)
