"""Tile intersection and sort, on each backend: the GPU's sorted list equals the reference's
(camera, tile, depth, Gaussian) order computed from the GPU's own projection; and each of
intersect_tile_count, intersect_tile_write and tile_ranges alone against numpy."""

import numpy as np
import pytest
from kernel_cases import project, run_kernel
from reference.intersect import intersect, tile_lists
from render_cases import gpu_render, random_scene

from spirula.render.rasterizer import tile_grid
from spirula.runtime.sequence import Threads


@pytest.mark.parametrize("n,cameras,size", [(300, 2, (75, 53)), (1000, 1, (130, 97)), (3, 3, (17, 33))])
def test_sorted_intersections_match_reference_exactly(backend, n, cameras, size):
    scene = random_scene(n=n, cameras=cameras, width=size[0], height=size[1], seed=n)
    _, _, _, meta = gpu_render(scene, device=backend)
    raster = meta["_context"].raster
    keys, ids = raster.intersections()
    ref = intersect(meta["means2d"], meta["radii"], meta["depths"], *size, meta["conics"], scene["opacities"])
    T = raster.tiles
    got = np.stack([ids // n, keys % T, ids % n], 1).astype(np.int64)  # camera, tile, gaussian
    want = np.array([(c, t, g) for c, t, _, g in ref["isects"]], np.int64).reshape(-1, 3)
    assert meta["n_isects"] == len(want)
    assert np.array_equal(keys // T, ids // n)  # key's camera = id's camera
    assert np.array_equal(got, want)
    assert np.array_equal(meta["tiles_touched"], ref["tiles"])
    ranges = raster.device.readback(raster.ranges).reshape(cameras, T, 2)
    nonempty = ref["tile_ranges"][..., 1] > ref["tile_ranges"][..., 0]
    assert np.array_equal(ranges[nonempty], ref["tile_ranges"][nonempty])
    assert np.all(ranges[~nonempty] == 0)


def test_equal_depths_keep_index_order():
    """Ties in depth sort by Gaussian index (the sort is stable)."""
    scene = random_scene(n=64, cameras=1, seed=9)
    scene["means"][:, 2] = 4.0  # every depth equal
    _, _, _, meta = gpu_render(scene)
    keys, ids = meta["_context"].raster.intersections()
    for t in np.unique(keys):
        g = ids[keys == t]
        assert np.all(np.diff(g.astype(np.int64)) > 0)


def test_intersect_tile_count_on_a_folded_grid(backend):
    n = 21 * 256 - 5  # groups (7, 3): linear id = y * 7 + x
    rng = np.random.default_rng(6)
    ids, counts = rng.permutation(n).astype(np.uint32), rng.integers(0, 7, n).astype(np.uint32)
    out = run_kernel(
        backend,
        "intersect_tile_count",
        (7, 3, 1),
        dict(sorted_ids=ids, tile_counts=counts),
        dict(offsets=((n,), np.uint32)),
        push=dict(n=n),
    )
    assert np.array_equal(out["offsets"], counts[ids])


def test_intersect_tile_write_is_the_references_lists_up_to_the_capacity(backend):
    """From the backend's own projection: the reference's tile lists (tile culling, row by
    row) of the Gaussians in depth order, cut at the capacity (the last pairs dropped)."""
    scene = random_scene(n=700, seed=8, spread=1.5)
    p = project(backend, scene, 0)
    n, C = len(scene["means"]), len(scene["viewmats"])
    W, H = scene["width"], scene["height"]
    tw, th = tile_grid(W, H)
    seen = (p["radii"] != 0).any(-1).reshape(C, n, 1)
    xyop = np.where(seen, p["xyop"].reshape(C, n, 4), 0)  # culled rows: unwritten (NaN here)
    lists = tile_lists(
        xyop[..., :2], p["radii"].reshape(C, n, 2), W, H, p["conics"].reshape(C, n, 4)[..., :3], xyop[..., 2]
    )
    assert np.array_equal(np.vectorize(len)(lists).reshape(-1), p["tile_counts"])  # what projection_fwd counted
    order = np.argsort(p["depth_keys"], kind="stable").astype(np.uint32)
    counts = p["tile_counts"][order]
    offsets = (np.cumsum(counts, dtype=np.uint64) - counts).astype(np.uint32)
    total = int(counts.sum())
    assert total > 1000
    cap = total - 10
    out = run_kernel(
        backend,
        "intersect_tile_write",
        Threads(cap),
        dict(
            sorted_ids=order,
            offsets=offsets,
            totals=np.array([0, total], np.uint32),
            xyop=p["xyop"],
            radii=p["radii"],
            conics=p["conics"],
        ),
        dict(isect_keys=((cap,), np.uint32), isect_ids=((cap,), np.uint32)),
        push=dict(n=C * n, n_gaussians=n, tile_width=tw, tile_height=th, capacity=cap, count_offset=1),
    )
    keys = np.concatenate([(i // n) * tw * th + lists[i // n, i % n] for i in order])
    ids = np.repeat(order, counts)
    assert np.array_equal(out["isect_keys"], keys[:cap])
    assert np.array_equal(out["isect_ids"], ids[:cap])


def test_tile_ranges_reads_the_count_on_the_gpu(backend):
    tiles, m_max, m = 600, 5000, 4321  # m read on the GPU, below the dispatch size
    keys = np.sort(np.random.default_rng(9).choice(tiles, m_max)).astype(np.uint32)
    k = backend.pool.alloc("test.keys", (m_max,), np.uint32)
    num = backend.pool.alloc("test.num", (3,), np.uint32)
    ranges = backend.pool.alloc("test.ranges", (tiles, 2), np.uint32)
    backend.upload(k, keys)
    backend.upload(num, np.array([0, 0, m], np.uint32))
    rec = backend.recorder("test.ranges")
    rec.fill(ranges, 0)
    rec.dispatch(
        "tile_ranges",
        Threads(m_max),
        dict(isect_keys=k, num_isects=num, ranges=ranges),
        push=dict(m_max=m_max, count_offset=2),
    )
    rec.finish().run()
    got = backend.readback(ranges)
    for b in (k, num, ranges):
        backend.pool.free(b)
    t = np.arange(tiles)
    want = np.stack([np.searchsorted(keys[:m], t), np.searchsorted(keys[:m], t, "right")], 1)
    want[want[:, 0] == want[:, 1]] = 0  # tiles with no intersection keep the (0, 0) filled
    assert np.array_equal(got, want)
