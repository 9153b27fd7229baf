"""Tile-list splitting (docs/design.md §2.4, "Chunks of a tile list"): rasterize_bwd walks each
tile's list in chunks of ``chunk`` entries, one workgroup each, starting from the state
rasterize_fwd left at the chunk's end. With chunk = 256 on a scene whose tiles hold up to
~2,300 entries the gradients are the reference's and the unsplit run's, the forward is
unchanged, and the chunk table names every chunk once."""

import numpy as np
import pytest
from render_cases import gpu_render, random_scene
from test_rasterize_bwd import assert_grad_close

from spirula.render.rasterizer import CHUNK_ENV, CHUNK_NONE

W, H = 56, 24  # 4 x 2 tiles, the last column of tiles empty, lists of 0 to ~2,300 entries
UNSPLIT = 1 << 24  # one chunk per tile: the walk before tile-list splitting


def chunky_scene():
    """2,600 faint splats over the left three tile columns (long lists that rarely saturate),
    80 nearly opaque ones in the middle of the depth range (pixels that saturate in a middle
    chunk), 2 cameras."""
    n = 2600
    s = random_scene(n=n, width=W, height=H, sh_degree=1, seed=3)
    rng = np.random.default_rng(4)
    m = s["means"]
    m[:, 0] = rng.uniform(-1.6, 0.2, n)
    m[:, 1] = rng.uniform(-0.6, 0.6, n)
    scales = np.exp(rng.uniform(-1.8, -0.8, (n, 3)))
    op = rng.uniform(0.006, 0.03, n)
    opaque = rng.choice(n, 80, replace=False)
    op[opaque] = 0.97
    m[opaque, 2] = rng.uniform(3.8, 4.4, 80)
    scales[opaque] *= 0.6
    s["scales"] = scales.astype(np.float32)
    s["opacities"] = op.astype(np.float32)
    return s


@pytest.fixture(scope="module")
def scene():
    return chunky_scene()


def render(monkeypatch, scene, chunk, **kwargs):
    monkeypatch.setenv(CHUNK_ENV, str(chunk))
    bg = np.array([[0.3, 0.1, 0.0], [0.0, 0.5, 1.0]], np.float32)
    out = gpu_render(scene, backgrounds=bg, **kwargs)
    assert out[3]["_context"].raster.chunk == chunk
    return out, bg


def test_distortion_behind_identity_matches_the_recursion():
    """G behind a boundary, 2 (L - L_P - X) with X = D_S A_P - A_S D_P (include/raster.glsl
    chunk_distortion_behind), against rasterize_bwd's recursion G += w dL/dw from the back."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(2, 60))
        z = np.sort(rng.uniform(0.5, 8.0, n))
        alpha = rng.uniform(0.01, 0.6, n)
        T = np.concatenate([[1.0], np.cumprod(1.0 - alpha)])
        w = alpha * T[:-1]
        A, D = np.concatenate([[0.0], np.cumsum(w)]), np.concatenate([[0.0], np.cumsum(w * z)])
        L = np.concatenate([[0.0], np.cumsum(2.0 * w * (z * A[:-1] - D[:-1]))])
        assert np.isclose(L[-1], np.sum(w[:, None] * w[None, :] * np.abs(z[:, None] - z[None, :])))
        # the recursion, back to front, as shaders/rasterize_bwd.comp
        bA = bD = G = 0.0
        want = np.zeros(n + 1)
        for k in range(n - 1, -1, -1):
            A_prev, D_prev = A[-1] - bA - w[k], D[-1] - bD - w[k] * z[k]
            dw = 2.0 * (z[k] * A_prev - D_prev) + 2.0 * (bD - z[k] * bA)
            G, bA, bD = G + dw * w[k], bA + w[k], bD + w[k] * z[k]
            want[k] = G
        for b in range(n + 1):  # a boundary before entry b: P = [0, b), S = [b, n)
            X = (D[-1] - D[b]) * (1.0 - T[b]) - (T[b] - T[-1]) * D[b]
            np.testing.assert_allclose(2.0 * (L[-1] - L[b] - X), want[b], rtol=1e-9, atol=1e-12)


def test_chunk_table_names_every_chunk_once(monkeypatch, scene):
    from spirula.render.api import rasterization_backward

    (colors, alphas, _, meta), _ = render(monkeypatch, scene, 256)
    rasterization_backward(meta, np.ones_like(colors), None)
    raster = meta["_context"].raster
    ranges = raster.device.readback(raster.ranges).astype(np.int64)
    ids = raster.chunk_ids(raster.isect_capacity)
    table = raster.device.readback(raster.chunk_table, shape=(ids, 2))
    n = ranges[:, 1] - ranges[:, 0]
    want = {(t, k) for t in range(len(n)) for k in range(-(-n[t] // 256))}
    got = [tuple(int(v) for v in e) for e in table if e[0] != CHUNK_NONE]
    assert len(got) == len(set(got)) == len(want) and set(got) == want
    # the ids are f(t) + k, f(t) = t + start / chunk
    for i, (t, k) in enumerate(table):
        if t != CHUNK_NONE:
            assert i == t + ranges[t, 0] // 256 + k
    assert (n == 0).any() and n.max() > 8 * 256 and (n % 256 != 0).any()
    assert len(want) > 3 * len(n)  # many more workgroups than tiles


def test_rasterize_chunks_kernel_matches_numpy(backend):
    """The kernel alone on each backend, from tile lists of 0 to 2,600 entries: chunk k of
    tile t (list [s, e)) at id t + s // chunk + k, every other entry left CHUNK_NONE."""
    from kernel_cases import run_kernel

    from spirula.runtime.sequence import Threads

    rng = np.random.default_rng(15)
    tiles, chunk = 777, 256
    n = np.where(rng.random(tiles) < 0.2, 0, rng.integers(1, 2600, tiles))
    ends = np.cumsum(n)
    ranges = np.stack([ends - n, ends], 1).astype(np.uint32)
    ranges[n == 0] = 0  # an empty tile keeps the (0, 0) tile_ranges' caller filled
    ids = tiles + -(-int(ends[-1]) // chunk) + 1  # Rasterizer.chunk_ids
    want = np.full((ids, 2), CHUNK_NONE, np.uint32)
    for t, (s, e) in enumerate(ranges.astype(np.int64)):
        for k in range(-(-(e - s) // chunk)):
            want[t + s // chunk + k] = (t, k)
    out = run_kernel(
        backend,
        "rasterize_chunks",
        Threads(tiles),
        dict(ranges=ranges, chunk_table=np.full((ids, 2), CHUNK_NONE, np.uint32)),  # the caller's fill
        {},
        read=("chunk_table",),
        push=dict(tiles=tiles, chunk=chunk, chunk_ids=ids),
    )
    assert np.array_equal(out["chunk_table"], want)


@pytest.mark.parametrize("distortion,normals", [(False, False), (True, False), (False, True), (True, True)])
def test_chunked_backward_matches_reference_and_the_unsplit_walk(monkeypatch, scene, distortion, normals):
    """chunk = 256 against the float64 reference (tests/test_rasterize_bwd.py's float32 atomics
    bound) and against one chunk per tile. Only the summation order differs between the two:
    a chunk starts from the forward's T and its sums behind as final - prefix (each within
    ~1e-7 of the colour, depth and distortion totals), not from the backward's running sums,
    so each pixel's term moves by ~1e-7 x the largest term x 1 / (1 - alpha) <= 100: the same
    1e-4 x max + 1e-3 x |value| bound, which the atomics' arbitrary order already needs."""
    from reference.rasterize import rasterize_bwd

    from spirula.render.api import rasterization_backward

    runs = []
    for chunk in (256, UNSPLIT):
        (colors, alphas, _, meta), bg = render(monkeypatch, scene, chunk, distortion=distortion, normals=normals)
        rng = np.random.default_rng(5)
        gc = rng.standard_normal(colors.shape).astype(np.float32)
        ga = rng.standard_normal(alphas.shape).astype(np.float32)
        gx = rng.standard_normal(alphas.shape).astype(np.float32) if distortion else None
        gn = rng.standard_normal(colors.shape).astype(np.float32) if normals else None
        gd = rng.standard_normal(alphas.shape).astype(np.float32) if normals else None
        got = rasterization_backward(meta, gc, ga, grad_distortions=gx, grad_normals=gn, grad_accum_depths=gd)
        raster = meta["_context"].raster
        C, N = meta["radii"].shape[:2]
        dev = raster.device
        got["conics"] = dev.readback(raster.grad_conics, shape=(C * N, 3)).reshape(C, N, 3)
        got["colors"] = dev.readback(raster.grad_rgb, shape=(C * N, 3)).reshape(C, N, 3)
        got["opacity"] = dev.readback(raster.grad_opacity, shape=(C * N,)).reshape(C, N)
        images = dict(colors=colors, alphas=alphas, last=dev.readback(raster.out_last))
        images["median"] = meta["median_depths"]
        if distortion:
            images["distortions"] = meta["distortions"]
        if normals:
            images["normals"] = meta["normals"]
            got["splat_normals"] = dev.readback(raster.splat_normals, shape=(C * N, 4)).reshape(C, N, 4)[..., :3]
        runs.append((got, images))
    (chunked, images), (unsplit, unsplit_images) = runs
    # the forward is unchanged: the chunk state is written beside it
    for name in images:
        np.testing.assert_array_equal(images[name], unsplit_images[name], err_msg=name)
    # the scene: long lists, and pixels that saturate in a middle chunk of their tile
    last = images["last"]
    saturated = images["alphas"][..., 0] > 1.0 - 1.1e-4
    most = np.zeros_like(last)
    for ty in range(2):
        for tx in range(4):
            block = np.s_[:, 16 * ty : 16 * ty + 16, 16 * tx : 16 * tx + 16]
            most[block] = last[block].max(axis=(1, 2), keepdims=True)
    assert (saturated & (last < most - 512)).sum() > 20

    opac = np.broadcast_to(scene["opacities"], (C, N))
    geo = (meta["means2d"], meta["conics"])
    rest = (opac, meta["depths"], meta["radii"], W, H)
    want = rasterize_bwd(*geo, meta["colors"], *rest, bg, grad_colors=gc, grad_alphas=ga, grad_distortions=gx)
    want = dict(want, opacity=want["opacities"])
    if normals:
        b = rasterize_bwd(*geo, chunked["splat_normals"], *rest, grad_colors=gn, grad_depths=gd)
        for name in ("means2d", "conics", "depths"):
            want[name] = want[name] + b[name]
        want["opacity"] = want["opacity"] + b["opacities"]
        want["normals"] = b["colors"]
    names = ["means2d", "conics", "colors", "opacity"]
    names += ["depths"] if distortion or normals else []
    names += ["normals"] if normals else []
    vis = (meta["radii"] != 0).any(-1)
    for name in names:
        assert_grad_close(chunked[name][vis], want[name][vis], name + " vs reference")
        assert_grad_close(chunked[name][vis], unsplit[name][vis], name + " vs unsplit")


@pytest.mark.parametrize("text", ["300", "0", "-256", "big"])
def test_a_bad_chunk_override_is_one_line(monkeypatch, device, text):
    """$SPIRULA_RASTER_CHUNK must be a positive multiple of 256: else one SpirulaError line
    naming the variable (the CLI prints it and exits 2); Rasterizer(chunk=) raises ValueError."""
    from spirula.errors import SpirulaError
    from spirula.render.rasterizer import Rasterizer

    monkeypatch.setenv(CHUNK_ENV, text)
    with pytest.raises(SpirulaError, match=CHUNK_ENV) as info:
        Rasterizer(device, 32, 32)
    assert "\n" not in str(info.value)
    monkeypatch.delenv(CHUNK_ENV)
    with pytest.raises(ValueError, match="multiple of 256"):
        Rasterizer(device, 32, 32, chunk=384)
    raster = Rasterizer(device, 32, 32, chunk=512)
    assert raster.chunk == 512
    raster.free()
