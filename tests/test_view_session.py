"""spirula/view/session.py: the headless view renders what
spirula.rasterization() renders, and only when something changed."""

import numpy as np
from view_cases import activated, blob_params

from spirula.render.api import rasterization
from spirula.render.rasterizer import Splats
from spirula.view.camera import Camera
from spirula.view.session import ViewSession

W, H = 77, 45  # not multiples of the 16-pixel tile


def reference_image(params, camera, width=W, height=H):
    a = activated(params)
    colors, *_ = rasterization(
        **a, viewmats=camera.viewmat()[None], Ks=camera.K(width, height)[None], width=width, height=height
    )
    return np.rint(np.clip(colors[0], 0, 1) * 255).astype(np.uint8)


def test_session_image_equals_rasterization(device):
    params = blob_params()
    a = activated(params)
    splats = Splats.from_numpy(
        device, a["means"], a["quats"], a["scales"], a["opacities"], a["sh_coeffs"], activated=True
    )
    session = ViewSession(device, splats, 1, W, H, own_splats=True)
    camera = Camera.fit(params["means"])
    camera.orbit(0.4, 0.1)
    # the same kernels on the same inputs: bit for bit
    assert np.array_equal(session.render(camera), reference_image(params, camera))
    assert session.render(camera).shape == (H, W, 3) and session.render(camera).dtype == np.uint8
    session.free()


def test_session_from_raw_params_matches_rasterization(device):
    params = blob_params(seed=3)
    session = ViewSession.from_params(device, params, W, H)
    camera = Camera.fit(params["means"])
    got, want = session.render(camera).astype(int), reference_image(params, camera).astype(int)
    # exp/sigmoid on the GPU instead of numpy: float32 differences of a few ulps,
    # which move a colour across a rounding boundary of the uint8 scale on rare pixels
    assert np.abs(got - want).max() <= 1
    assert (got != want).mean() < 0.01
    assert want.std() > 10  # the splats are in view
    session.free()


def test_nothing_rerenders_while_nothing_changes(device):
    params = blob_params(n=50)
    session = ViewSession.from_params(device, params, W, H)
    camera = Camera.fit(params["means"])
    first = session.render(camera)
    assert session.renders == 1 and session.frame_ms > 0
    for _ in range(5):
        assert not session.needs_render(camera)
        assert session.render(camera) is first
    assert session.renders == 1
    camera.orbit(0.2, 0)  # the camera changed
    session.render(camera)
    assert session.renders == 2
    session.resize(40, 30)  # the size changed
    assert session.render(camera).shape == (30, 40, 3) and session.renders == 3
    session.set_splats(session.splats)  # the splats changed (same buffers, new contents)
    session.render(camera)
    assert session.renders == 4
    session.render(camera.copy())  # an equal camera is no change
    assert session.renders == 4
    session.free()
