"""projection_fwd against the float64 reference, element-wise: through the rasterizer, and the
kernel itself in every variant on each backend."""

import numpy as np
import pytest
from render_cases import gpu_render, random_scene, ref_render

# float32 kernel vs float64 reference: the conic inverts a 2x2 covariance whose
# condition number reaches ~1e2 here, so relative errors of ~1e-5 are expected;
# 1e-4 is the bound (gsplat's tests use the same).
RTOL = ATOL = 1e-4


@pytest.mark.parametrize("sh_degree", [0, 1, 2, 3])
def test_projection_matches_reference(sh_degree):
    scene = random_scene(n=257, sh_degree=sh_degree, seed=sh_degree)
    _, _, _, meta = gpu_render(scene)
    _, _, ref = ref_render(scene)
    vis, rvis = (meta["radii"] != 0).any(-1), (ref["radii"] != 0).any(-1)
    # a cull decision may flip where a box edge meets the image edge in float32
    assert (vis != rvis).mean() <= 0.01
    both = vis & rvis
    assert both.sum() > 100
    for key in ("means2d", "conics", "colors", "depths"):
        np.testing.assert_allclose(meta[key][both], ref[key][both], rtol=RTOL, atol=ATOL, err_msg=key)
    assert np.abs(meta["radii"][both] - ref["radii"][both]).max() <= 1
    same_radii = both & (meta["radii"] == ref["radii"]).all(-1)
    assert np.array_equal(meta["tiles_touched"][same_radii], ref["tiles"][same_radii])


def test_culled_entries_are_zero_in_the_metadata():
    scene = random_scene(n=50, spread=4.0, seed=3)  # many off-image
    _, _, _, meta = gpu_render(scene)
    culled = ~(meta["radii"] != 0).any(-1)
    assert culled.any()
    for key in ("means2d", "conics", "colors", "depths", "tiles_touched"):
        assert not meta[key][culled].any(), key


# ---- the kernel on each backend: every variant ---------------------------------------------


def _reference_of(scene, sh_degree, compact):
    """The float64 projection of ``scene`` (its SH as the COMPACT rows hold them)."""
    from reference.projection import projection_fwd

    from spirula.render.rasterizer import EPS2D, FAR_PLANE, NEAR_PLANE
    from spirula.train import storage

    sh = scene["sh_coeffs"]
    if compact:
        sh = storage.decode_sh(storage.encode_sh(sh), sh.shape[1]).reshape(sh.shape)
    s = dict(scene, sh_coeffs=sh)
    return projection_fwd(
        *(
            np.asarray(s[k], np.float64)
            for k in ("means", "quats", "scales", "opacities", "sh_coeffs", "viewmats", "Ks")
        ),
        s["width"],
        s["height"],
        sh_degree,
        EPS2D,
        NEAR_PLANE,
        FAR_PLANE,
    )


@pytest.mark.parametrize("compact", [False, True], ids=["f32", "compact"])
@pytest.mark.parametrize("activated", [True, False], ids=["activated", "log-logit"])
@pytest.mark.parametrize("sh_degree", [0, 1, 2, 3])
def test_projection_fwd_kernel_matches_reference(backend, sh_degree, activated, compact):
    """The kernel's every output (ACTIVATED off: log scales and logit opacities in; COMPACT:
    the SH as storage.py's rows) against the reference, with the bounds above; culled rows
    are (0, 0) radii, no tiles and the last depth key."""
    from kernel_cases import project

    scene = random_scene(n=301, sh_degree=3, seed=30 + sh_degree, spread=1.6)
    out = project(backend, scene, sh_degree, activated, compact)
    ref = _reference_of(scene, sh_degree, compact)
    C, n = len(scene["viewmats"]), len(scene["means"])
    rows = np.arange(C * n)
    assert np.array_equal(out["depth_ids"], rows)
    radii = out["radii"].reshape(C, n, 2)
    vis, rvis = (radii != 0).any(-1), (ref["radii"] != 0).any(-1)
    assert (vis != rvis).mean() <= 0.01  # a cull flip where a box edge meets the image edge
    both = vis & rvis
    assert both.sum() > 0.3 * both.size
    xyop = out["xyop"].reshape(C, n, 4)
    got = dict(
        means2d=xyop[..., :2],
        depths=xyop[..., 3],
        conics=out["conics"].reshape(C, n, 4)[..., :3],
        colors=out["rgb"].reshape(C, n, 4)[..., :3],
    )
    for key, value in got.items():
        np.testing.assert_allclose(value[both], ref[key][both], rtol=RTOL, atol=ATOL, err_msg=key)
    o = np.broadcast_to(scene["opacities"], (C, n))
    np.testing.assert_allclose(xyop[..., 2][both], o[both], rtol=RTOL, atol=ATOL, err_msg="opacity")
    assert np.abs(radii[both] - ref["radii"][both]).max() <= 1
    same = both & (radii == ref["radii"]).all(-1)
    tiles = out["tile_counts"].reshape(C, n)
    assert np.array_equal(tiles[same], ref["tiles"][same])
    keys = out["depth_keys"].reshape(C, n)
    assert np.array_equal(keys[vis & (tiles > 0)], xyop[..., 3][vis & (tiles > 0)].view(np.uint32))
    assert (keys[~vis | (tiles == 0)] == 0xFFFFFFFF).all()
    assert not tiles[~vis].any()


@pytest.mark.parametrize("activated", [True, False], ids=["activated", "log-logit"])
def test_projection_fwd_kernel_splat_normals_match_reference(backend, activated):
    """NORMALS: the splat normals (a rotation column, x the camera rotation, sign flipped to
    face the camera: a few float32 roundings of unit-size values) are the reference's
    splat_normals within 1e-5."""
    from kernel_cases import project

    from spirula.reference.normals import splat_normals

    scene = random_scene(n=501, sh_degree=0, seed=37, spread=1.6)
    out = project(backend, scene, 0, activated, normals=True)
    vis = (out["radii"] != 0).any(-1)
    assert vis.sum() > 0.3 * vis.size
    want = splat_normals(scene["quats"], scene["scales"], scene["means"], scene["viewmats"]).reshape(-1, 3)
    np.testing.assert_allclose(out["normals"][vis, :3], want[vis], atol=1e-5)
    assert (out["normals"][vis, 3] == 0).all()


@pytest.mark.parametrize("activated", [True, False], ids=["activated", "log-logit"])
def test_projection_fwd_kernel_culls_nonfinite_splats(backend, activated):
    """NaN (any sign or payload), +inf or -inf in a mean, rotation, scale or opacity culls
    that splat (finite.glsl's bit test, on every driver and on CUDA alike)."""
    from kernel_cases import project

    scene = random_scene(n=301, sh_degree=0, seed=36, spread=0.5)
    words = [0x7FC00000, 0xFFFFFFFF, 0x7F800001, 0x7F800000, 0xFF800000]
    kinds = [("means", 3), ("quats", 4), ("scales", 3)] + ([("opacities", 1)] if activated else [])
    broken = []
    for j, ((name, width), word) in enumerate((k, w) for k in kinds for w in words):
        row = 10 * j + 5
        a = scene[name]
        a.reshape(len(a), -1).view(np.uint32)[row, j % width] = word
        broken.append(row)
    with np.errstate(invalid="ignore"):  # log(-inf) of a scale: NaN, as wanted
        out = project(backend, scene, 0, activated)
    C, n = len(scene["viewmats"]), len(scene["means"])
    healthy = np.setdiff1d(np.arange(n), broken)
    radii, tiles, keys = (out[k].reshape(C, n, -1) for k in ("radii", "tile_counts", "depth_keys"))
    assert not radii[:, broken].any() and not tiles[:, broken].any()
    assert (keys[:, broken] == 0xFFFFFFFF).all()
    assert (radii[:, healthy] != 0).any(-1).mean() > 0.5
