"""spirula.Renderer in a host program (docs/embedding.md): the documented
example runs as written and its GPU post-process of the rendered tensor equals
the same post-process of rasterization()'s image; the host's kp.Manager
survives the renderer; a second frame of the same size allocates nothing."""

import gc
import re

import numpy as np
import pytest
from conftest import ROOT
from render_cases import random_scene

import spirula

EMBEDDING_MD = ROOT / "docs" / "embedding.md"
LUMA = np.array([0.2126, 0.7152, 0.0722])

# The renderer on a borrowed manager compiles its kernels without float
# atomics and float controls (a borrowed manager's features are unknown), the
# numpy API with them: different SPIR-V of the same maths, so a pixel may
# round differently. A pixel sums at most ~80 blended terms here (500 splats,
# T stops at 1e-4), each rounded to 2^-24 relative in either build: bound
# 80 * 2 * 6e-8 ~ 1e-5 on a 0..1 colour (and on its luma, a convex mix).
# Measured on lavapipe: 2.4e-7.
COLOUR_ATOL = 1e-5


def _example_code() -> str:
    blocks = re.findall(r"```python\n(.*?)```", EMBEDDING_MD.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "docs/embedding.md should hold one python example"
    return blocks[0]


def _reference_gray(splats, viewmat, K, W, H):
    colors = spirula.rasterization(**splats, viewmats=viewmat[None], Ks=K[None], width=W, height=H)[0][0]
    return np.clip(colors.astype(np.float64), 0, 1) @ LUMA


def test_embedding_example_post_processes_the_render_on_the_gpu(device):
    ns = {"__name__": "embedding_example"}
    exec(compile(_example_code(), str(EMBEDDING_MD), "exec"), ns)
    splats, K, W, H = ns["splats"], ns["K"], ns["W"], ns["H"]
    first = np.eye(4, dtype=np.float32)
    np.testing.assert_allclose(ns["gray"], _reference_gray(splats, first, K, W, H), atol=COLOUR_ATOL, rtol=0)
    assert ns["gray"].std() > 0.01  # the splats are in view: not a blank image
    np.testing.assert_allclose(
        ns["gray_moved"], _reference_gray(splats, ns["viewmat"], K, W, H), atol=COLOUR_ATOL, rtol=0
    )
    assert np.abs(ns["gray_moved"] - ns["gray"]).max() > 0.01  # the second frame is a new render


def _scene(n=200):
    s = random_scene(n=n, cameras=1, width=61, height=43, sh_degree=1, seed=3)
    splats = {k: s[k] for k in ("means", "quats", "scales", "opacities", "sh_coeffs")}
    return splats, s["viewmats"][0], s["Ks"][0], s["width"], s["height"]


def _host_manager_works(mgr, kp):
    t = mgr.tensor(np.arange(8, dtype=np.float32))
    seq = mgr.sequence()
    seq.record(kp.OpTensorSyncDevice([t])).record(kp.OpTensorSyncLocal([t])).eval()
    return np.array_equal(t.data(), np.arange(8, dtype=np.float32))


@pytest.mark.parametrize("end", ["close", "drop"])
def test_renderer_never_destroys_the_hosts_manager(device, end):
    import kp

    mgr = kp.Manager()
    mine = mgr.tensor(np.ones(4, np.float32))
    splats, viewmat, K, W, H = _scene()
    r = spirula.Renderer(manager=mgr)
    assert r.manager is mgr and not r.device.owns_manager
    r.set_splats(**splats)
    r.render(viewmat, K, W, H)
    if end == "close":
        r.close()
    del r
    gc.collect()
    assert _host_manager_works(mgr, kp)
    assert mine.is_init()


def test_second_render_of_the_same_size_allocates_nothing(device):
    splats, viewmat, K, W, H = _scene()
    r = spirula.Renderer(device=device)
    r.set_splats(**splats)
    first = r.render(viewmat, K, W, H).numpy()
    pool, seq = device.pool, r._seq
    before = pool.allocations
    moved = viewmat.copy()
    moved[0, 3] += 0.05
    out = r.render(moved, K, W, H)
    r.set_splats(**splats)  # the same N and K: uploaded into the same buffers
    again = r.render(viewmat, K, W, H)
    assert pool.allocations == before and r._seq is seq  # nothing allocated, nothing recorded again
    assert again.image is out.image
    np.testing.assert_array_equal(again.numpy(), first)
    want = spirula.rasterization(**splats, viewmats=viewmat[None], Ks=K[None], width=W, height=H, device=device)[0]
    np.testing.assert_array_equal(first, want[0])  # the same device and kernels: bit for bit
    r.close()


def test_splats_from_the_hosts_tensors_are_bound_without_a_copy(device):
    import kp

    mgr = kp.Manager()
    splats, viewmat, K, W, H = _scene()
    r = spirula.Renderer(manager=mgr)
    want = r.set_splats(**splats).render(viewmat, K, W, H).numpy()
    tensors = {k: mgr.tensor(np.ascontiguousarray(v, np.float32).reshape(-1)) for k, v in splats.items()}
    mgr.sequence().eval(kp.OpTensorSyncDevice(list(tensors.values())))
    before = r.device.pool.allocations
    got = r.set_splats(**tensors).render(viewmat, K, W, H).numpy()
    assert r.device.pool.allocations == before  # bound, not copied
    np.testing.assert_array_equal(got, want)
    r.close()


def test_renderer_refuses_what_it_cannot_draw(device, tmp_path):
    r = spirula.Renderer(device=device)
    with pytest.raises(spirula.errors.SpirulaError, match="no splats yet"):
        r.render(np.eye(4), np.eye(3), 8, 8)
    with pytest.raises(spirula.errors.SpirulaError, match="nowhere.ply"):
        r.load_ply(tmp_path / "nowhere.ply")
    splats, *_ = _scene(10)
    with pytest.raises(spirula.errors.SpirulaError, match="SH coefficients"):
        r.set_splats(**{**splats, "sh_coeffs": np.zeros((10, 3, 3), np.float32)})
    r.close()


def test_a_trainers_raw_splats_render_as_their_activated_copy(device):
    """use_splats binds GPU splats as they are (here raw: log-scales, logits,
    as a trainer holds them): the image is that of the activated arrays."""
    from spirula.render.rasterizer import Splats

    splats, viewmat, K, W, H = _scene()
    o = splats["opacities"]
    raw = Splats.from_numpy(
        device,
        splats["means"],
        splats["quats"],
        np.log(splats["scales"]),
        np.log(o / (1 - o)),
        splats["sh_coeffs"],
        activated=False,
    )
    r = spirula.Renderer(device=device)
    got = r.use_splats(raw).render(viewmat, K, W, H).numpy()
    want = r.set_splats(**splats).render(viewmat, K, W, H).numpy()
    # exp/sigmoid of the GPU against numpy's log/exp round trip: a few ulps
    # of each scale and opacity, a few 1e-7 of a 0..1 colour
    np.testing.assert_allclose(got, want, atol=COLOUR_ATOL, rtol=0)
    r.close()
    raw.free(device)
