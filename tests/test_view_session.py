"""spirula/view/session.py: the headless view renders what
spirula.rasterization() renders, through spirula.Renderer, and only when
something changed."""

import numpy as np
from view_cases import activated, blob_params

from spirula.render.api import rasterization
from spirula.render.renderer import Renderer
from spirula.view.camera import Camera
from spirula.view.session import ViewRenderer, ViewSession

W, H = 77, 45  # not multiples of the 16-pixel tile


def reference_image(params, camera, width=W, height=H):
    a = activated(params)
    colors, *_ = rasterization(
        **a, viewmats=camera.viewmat()[None], Ks=camera.K(width, height)[None], width=width, height=height
    )
    return np.rint(np.clip(colors[0], 0, 1) * 255).astype(np.uint8)


def test_session_image_equals_rasterization(device):
    params = blob_params()
    renderer = Renderer(device=device).set_splats(**activated(params), sh_degree=1)
    session = ViewSession(ViewRenderer(renderer), W, H, own_view=True)
    camera = Camera.fit(params["means"])
    camera.orbit(0.4, 0.1)
    # the same kernels on the same inputs: bit for bit
    assert np.array_equal(session.render(camera), reference_image(params, camera))
    assert session.render(camera).shape == (H, W, 3) and session.render(camera).dtype == np.uint8
    session.free()


def test_session_from_raw_params_matches_rasterization(device):
    params = blob_params(seed=3)
    session = ViewSession(ViewRenderer.from_params(device, params), W, H, own_view=True)
    camera = Camera.fit(params["means"])
    got, want = session.render(camera), reference_image(params, camera)
    # activated on the host in float32 (activate_splats), as activated() does: bit for bit
    assert np.array_equal(got, want)
    assert want.std() > 10  # the splats are in view
    session.free()


def test_nothing_rerenders_while_nothing_changes(device):
    params = blob_params(n=50)
    session = ViewSession(ViewRenderer.from_params(device, params), W, H, own_view=True)
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
    session.splats_changed()  # the splats changed (same buffers, new contents)
    session.render(camera)
    assert session.renders == 4
    session.render(camera.copy())  # an equal camera is no change
    assert session.renders == 4
    session.free()


def test_live_views_stay_within_their_share_of_training_time(monkeypatch):
    """A view whose frame costs 5 training steps (a 1280x720 frame on a small
    scene) is called only as often as live_view_budget of the wall time
    affords, and every call renders: training is at most budget + one frame
    slower, never 6x."""
    from spirula.view import live, session
    from spirula.view.live import LiveViewConfig

    budget = LiveViewConfig().live_view_budget

    class Stub:
        def use_splats(self, splats, sh_degree):
            pass

        def close(self):
            pass

    monkeypatch.setattr(session.ViewRenderer, "for_training", classmethod(lambda cls, *a: Stub()))
    now = [0.0]
    step_s, frame_s = 0.002, 0.010

    class CostlyView:
        calls = 0

        def on_step(self, step, state):
            CostlyView.calls += 1
            now[0] += frame_s

        def close(self):
            pass

    hook = live.LiveHook([CostlyView()], None, None, None, 0.99, budget, clock=lambda: now[0])
    splats = type("S", (), {"n": 10})()
    for s in range(1, 1001):
        now[0] += step_s  # the training step
        hook.on_step(s, 1000, 0.1, splats, 0)
    spent = CostlyView.calls * frame_s
    assert spent <= budget * now[0] + frame_s, (CostlyView.calls, now[0])
    assert spent >= 0.8 * budget * now[0]  # and it uses its share: frames keep coming
