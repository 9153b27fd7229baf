"""The native viewer (spirula/view/window.py) under Xvfb from Debian's
packages (scripts/install_system_deps.sh): the window shows exactly the
headless image, `spirula train --viewer` trains with the window open, and
without a display `spirula view` says so in one line (exit 2)."""

import os
import shutil
import subprocess

import numpy as np
import pytest
from test_cli_train import SMALL, assert_one_line_error, spirula
from train_cases import write_tiny_colmap
from view_cases import blob_params


@pytest.fixture(scope="module")
def xvfb():
    """A private X server: its DISPLAY value (':N')."""
    exe = shutil.which("Xvfb")
    if exe is None:
        pytest.skip("Xvfb is not installed (scripts/install_system_deps.sh installs it)")
    r, w = os.pipe()
    proc = subprocess.Popen(
        [exe, "-displayfd", str(w), "-screen", "0", "640x480x24", "-nolisten", "tcp"],
        pass_fds=(w,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()  # Xvfb writes its display number once it accepts clients
    if not number:
        proc.kill()
        pytest.skip("Xvfb could not start")
    yield ":" + number
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def display(xvfb, monkeypatch):
    monkeypatch.setenv("DISPLAY", xvfb)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    return xvfb


def test_window_shows_the_headless_image(display, device):
    from spirula.view.camera import Camera
    from spirula.view.session import ViewRenderer, ViewSession
    from spirula.view.window import ViewerWindow

    params = blob_params()
    # rows of 231 bytes: GL's 4-byte alignment is off
    session = ViewSession(ViewRenderer.from_params(device, params), 77, 45, own_view=True)
    window = ViewerWindow(session, Camera.fit(params["means"]), title="test")
    try:
        assert window.draw()
        assert not window.draw()  # nothing changed: no new frame
        shown = window.read_front()
        # one texel per pixel, nearest filtering, 8 bits in and out: exact
        assert np.array_equal(shown, session.render(window.camera))
        assert shown.std() > 10
        glfw = window.glfw
        d = window.camera.distance
        window._on_button(window.win, glfw.MOUSE_BUTTON_LEFT, glfw.PRESS, 0)  # a left drag orbits
        x, y = glfw.get_cursor_pos(window.win)
        window._on_cursor(window.win, x + 40, y + 10)
        window._on_button(window.win, glfw.MOUSE_BUTTON_LEFT, glfw.RELEASE, 0)
        assert window.camera.distance == d
        assert window.draw() and not np.array_equal(window.read_front(), shown)
        window._on_scroll(window.win, 0, 1)  # scrolling dollies in
        assert window.camera.distance < d and window.draw()
        assert "ms/frame" in __import__("glfw").get_window_title(window.win)
    finally:
        window.close()
        session.free()


def test_live_view_draws_at_most_one_frame_per_step_and_survives_closing(display, device, tmp_path):
    """In-process training with the window attached: frames for new splats
    every K steps only; after the user closes the window training goes on."""
    from spirula.data import load_dataset
    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run
    from spirula.view.camera import CameraPath
    from spirula.view.live import LiveViewConfig, live_hook
    from spirula.view.window import WindowLiveView

    scene = load_dataset(write_tiny_colmap(tmp_path / "data"))
    # live_view_budget=1: the views every step (the budget is tested in test_view_session.py)
    cfg = TrainConfig.from_settings(iterations=12, cap_max=2000, sh_degree=1, eval_every=0, save_every=0)
    seen = []

    class Watched(WindowLiveView):
        def on_step(self, step, trainer_state):
            super().on_step(step, trainer_state)
            if self.window is not None:
                seen.append((step, self.session.renders, trainer_state.n_splats))
                if step == 8:  # the user closes the window
                    self.window.glfw.set_window_should_close(self.window.win, True)

    view = Watched(CameraPath.from_frames(scene.frames), 64, 48, every=5)
    metrics = train_run(
        scene,
        cfg,
        device,
        tmp_path / "run",
        log=lambda *a: None,
        live_hook=live_hook([view], LiveViewConfig(live_view_budget=1.0)),
    )
    assert metrics["step"] == 12 and (tmp_path / "run" / "splat.ply").exists()
    renders = {step: n for step, n, _ in seen}
    assert renders[1] == 1  # the first frame when the window opens
    assert renders[4] == 1  # no camera move, no new splats due: no frame
    assert renders[5] == 2  # new splats every 5 steps
    assert max(renders) == 8 and view.closed  # closed at step 8, gone at step 9; 9..12 trained without it


def test_window_and_web_live_views_share_one_renderer(display, device, tmp_path):
    """`spirula train --viewer --viewer-port P`: both views on one hook; each
    draws frames, and both render through the same renderer (one rasterizer)."""
    from test_web_viewer import _FakeClient, _free_port
    from train_cases import tiny_scene

    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run
    from spirula.view import web
    from spirula.view.camera import CameraPath
    from spirula.view.live import LiveViewConfig, live_hook
    from spirula.view.window import WindowLiveView

    scene = tiny_scene(tmp_path / "tiny")
    views = []

    class Window(WindowLiveView):
        def on_step(self, step, state):
            views.append(state.view)
            super().on_step(step, state)

    window = Window(CameraPath.from_frames(scene.frames), 48, 32, every=1)
    live = web.live_view(scene, _free_port(), log=lambda msg: None)
    live.max_fps = float("inf")  # no pacing: steps on lavapipe may take any time
    live.refresh_s = 1e9  # no refresh of the unmoved view: one frame, the asked one
    browser = _FakeClient(1)
    f = scene.frames[scene.train[0]]
    live.viewer.request(browser, f.viewmat, f.K, 40, 30)
    cfg = TrainConfig.from_settings(iterations=3, cap_max=600, sh_degree=1, save_every=0, log_every=100, eval_every=0)
    renders = []
    window_close = window.close

    def close():  # the frames the window drew, before it lets go of its session
        renders.append(window.session.renders if window.session is not None else 0)
        window_close()

    window.close = close
    train_run(
        scene,
        cfg,
        device,
        tmp_path / "run",
        log=lambda msg: None,
        live_hook=live_hook([window, live], LiveViewConfig(live_view_budget=1.0)),
    )
    assert len(views) == 3 and all(v is views[0] for v in views)  # one renderer for both, every step
    assert renders == [3] and len(browser.images) == 1  # a window frame per step; the browser's asked view
    assert browser.images[0].shape == (30, 40, 3)


def test_train_viewer_flag_runs_with_the_window_open_and_view_opens_the_run(display, device, tmp_path):
    from spirula.cli.view import open_view

    data = write_tiny_colmap(tmp_path / "data")
    out = tmp_path / "run"
    port = __import__("test_web_viewer")._free_port()
    proc = spirula("train", data, "--iterations", 10, "--output", out, "--viewer", "--viewer-port", port, *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "web viewer at http://127.0.0.1:" in proc.stderr  # both views, the window and the browser's
    assert "Traceback" not in proc.stderr
    assert (out / "splat.ply").exists()
    # `spirula view RUN` starts on the dataset's first training camera; `spirula view PLY` fits the splats
    for source in (out, out / "splat.ply"):
        window, session = open_view(source, 64, 48, device)
        try:
            assert window.draw()
            assert np.array_equal(window.read_front(), session.render(window.camera))
            if source == out:
                assert window.path is not None and len(window.path) > 1
                assert np.allclose(window.camera.viewmat(), window.path.viewmats[0])
                glfw = window.glfw
                window._on_key(window.win, glfw.KEY_N, 0, glfw.PRESS, 0)  # the next dataset camera
                assert np.allclose(window.camera.viewmat(), window.path.viewmats[1])
                assert window.draw()
        finally:
            window.close()
            session.free()


def test_view_without_a_display_is_one_line(tmp_path):
    from spirula.data.ply import write_splat_ply

    p = blob_params(n=10)
    ply = tmp_path / "s.ply"
    write_splat_ply(ply, p["means"], p["quats"], p["scales"], p["opacities"], p["sh"])
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = str(__import__("conftest").ROOT)
    proc = subprocess.run(
        [__import__("sys").executable, "-m", "spirula", "view", str(ply)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2
    assert_one_line_error(proc, "no display", "--port")
    data = write_tiny_colmap(tmp_path / "data")
    proc = spirula("train", data, "--viewer", "--output", tmp_path / "run", env={"DISPLAY": "", "WAYLAND_DISPLAY": ""})
    assert proc.returncode == 2
    assert_one_line_error(proc, "no display", "--port")
    assert not (tmp_path / "run").exists()  # said before training
