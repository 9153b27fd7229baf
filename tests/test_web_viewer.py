"""The web viewer (spirula/view/web.py): its camera maths, and a real headless
browser (Debian's chromium through selenium, nothing downloaded) that loads the
page, waits for the first streamed frame, drags the camera and sees the image
change. The browser test skips only when chromium or chromedriver is missing
(scripts/install_system_deps.sh --browser-tests installs them)."""

from __future__ import annotations

import io
import socket
import threading
import time

import numpy as np
import pytest

from spirula.view import web


def _quat(R):
    """wxyz of a rotation matrix (trace > 0 branch suffices for the test's rotations)."""
    w = np.sqrt(1.0 + np.trace(R)) / 2.0
    return np.array([w, (R[2, 1] - R[1, 2]) / (4 * w), (R[0, 2] - R[2, 0]) / (4 * w), (R[1, 0] - R[0, 1]) / (4 * w)])


def test_viewmat_from_pose_inverts_the_camera_to_world_pose():
    rng = np.random.default_rng(0)
    a = rng.normal(size=3) * 0.5
    # a rotation from its axis-angle (Rodrigues), trace > 0 for |a| < 2pi/3
    th = np.linalg.norm(a)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]]) / th
    R = np.eye(3) + np.sin(th) * k + (1 - np.cos(th)) * k @ k
    t = rng.normal(size=3)
    V = web.viewmat_from_pose(_quat(R), t)
    pose = np.eye(4)
    pose[:3, :3], pose[:3, 3] = R, t
    # float64 round trip of a 4x4 product: a few ulps of values of order 1
    np.testing.assert_allclose(V @ pose, np.eye(4), atol=1e-12)
    # the camera centre maps to the origin; a point ahead (+z in the camera) has z > 0
    np.testing.assert_allclose(V @ np.append(t, 1), [0, 0, 0, 1], atol=1e-12)
    assert (V @ np.append(t + R[:, 2], 1))[2] == pytest.approx(1.0)


def test_intrinsics_put_the_vertical_fov_edges_on_the_image_edges():
    K = web.intrinsics(np.pi / 2, 200, 100)  # 90 degrees: top edge at y/z = -1
    top = K @ np.array([0.0, -1.0, 1.0])
    assert top[1] / top[2] == pytest.approx(0.0) and top[0] / top[2] == pytest.approx(100.0)
    assert web.frame_size(2560, 1440, 1280) == (1280, 720)
    assert web.frame_size(300, 200, 1280) == (300, 200)


def test_start_view_from_camera_looks_along_the_cameras_z():
    V = web.viewmat_from_pose([1, 0, 0, 0], [1.0, 2.0, 3.0])
    s = web.start_view_from_camera(V, 2.0)
    np.testing.assert_allclose(s.position, [1, 2, 3])
    np.testing.assert_allclose(s.look_at, [1, 2, 5])
    np.testing.assert_allclose(s.up, [0, -1, 0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _splat_ply(path):
    """300 coloured splats in a ball of radius 1 around the origin."""
    from spirula.data.ply import write_splat_ply

    rng = np.random.default_rng(1)
    n = 300
    means = rng.normal(size=(n, 3)).astype(np.float32) * 0.5
    sh = np.zeros((n, 1, 3), np.float32)
    sh[:, 0] = (rng.uniform(size=(n, 3)) - 0.5) / 0.2820948  # DC -> colour in [0,1]
    quats = np.tile(np.float32([1, 0, 0, 0]), (n, 1))
    write_splat_ply(path, means, quats, np.full((n, 3), np.log(0.08), np.float32), np.full(n, 2.0, np.float32), sh)
    return path


def _wait(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    pytest.fail("timed out after %.0f s waiting for %s" % (timeout, what))


def _settle(viewer, quiet=0.5, timeout=10):
    """Wait until no frame has been sent for ``quiet`` seconds."""
    end = time.monotonic() + timeout
    n, t = viewer.frames_sent, time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.05)
        if viewer.frames_sent != n:
            n, t = viewer.frames_sent, time.monotonic()
        elif time.monotonic() - t >= quiet:
            return


def test_dragging_the_browser_camera_changes_the_streamed_image(tmp_path, browser):
    from PIL import Image
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    ply = _splat_ply(tmp_path / "splat.ply")
    ready, stop = [], threading.Event()
    server = threading.Thread(
        target=web.serve,
        args=(ply, _free_port()),
        kwargs=dict(stop=stop, on_ready=ready.append, log=lambda msg: None),
        daemon=True,
    )
    server.start()
    try:
        _wait(lambda: ready or not server.is_alive(), 30, "the server to listen")
        assert ready, "web.serve ended before listening"
        viewer = ready[0]
        assert viewer.host == "127.0.0.1"  # loopback unless --viewer-host says otherwise
        browser.get(viewer.url)
        _wait(lambda: viewer.frames_sent > 0, 20, "the first rendered frame")
        _settle(viewer)  # the page lays out its panel: the canvas, and so the frame, may resize once
        first = viewer.last_frame.copy()
        assert first.std() > 5, "the first frame is blank: the splats are not in view"

        canvas = max(browser.find_elements(By.TAG_NAME, "canvas"), key=lambda c: c.size["width"] * c.size["height"])
        before = np.asarray(Image.open(io.BytesIO(canvas.screenshot_as_png)).convert("RGB"), np.int16)
        sent = viewer.frames_sent
        chain = ActionChains(browser).move_to_element(canvas).click_and_hold()
        for _ in range(8):
            chain.move_by_offset(15, 5).pause(0.02)
        chain.release().perform()
        _wait(lambda: viewer.frames_sent > sent, 20, "a frame of the dragged camera")
        _settle(viewer)
        after_frame = viewer.last_frame
        after = np.asarray(Image.open(io.BytesIO(canvas.screenshot_as_png)).convert("RGB"), np.int16)

        # a rotation of the camera moves the splats in the image: many pixels change by far more
        # than JPEG's error (a few levels); 2% of the pixels is far below what a 120-pixel drag moves
        # viser may report a smaller canvas while the camera moves: compare at the first frame's size
        after_frame = np.asarray(Image.fromarray(after_frame).resize(first.shape[1::-1], Image.BILINEAR), np.int16)
        assert (np.abs(after_frame - first).max(-1) > 30).mean() > 0.02
        assert before.shape == after.shape
        assert (np.abs(after - before).max(-1) > 30).mean() > 0.02, "the page still shows the old image"
    finally:
        stop.set()
        server.join(timeout=10)


class _FakeClient:
    """A browser as the viewer sees it: an id and a scene that receives images."""

    def __init__(self, client_id):
        self.client_id, self.images = client_id, []
        self.scene = self

    def set_background_image(self, image, format, jpeg_quality=None):
        self.images.append(image)


class _Recorder:
    def __init__(self):
        self.steps, self.closed, self.n_splats = [], 0, []

    def on_step(self, step, state):
        self.steps.append(step)
        self.n_splats.append(state.n_splats)

    def close(self):
        self.closed += 1


def test_training_renders_one_asked_for_view_per_step_for_the_web_live_view(tmp_path, device):
    from train_cases import tiny_scene

    from spirula.train.config import TrainConfig
    from spirula.train.run import train_run
    from spirula.view.live import LiveViewConfig, live_hook

    scene = tiny_scene(tmp_path / "tiny")
    live = web.live_view(scene, _free_port(), log=lambda msg: None)
    live.refresh_s = 1e9  # no refresh of unmoved views: only the two asked views are rendered
    live.max_fps = float("inf")  # and no pacing: steps on lavapipe may take any time
    a, b = _FakeClient(1), _FakeClient(2)
    f = scene.frames[scene.train[0]]
    for c in (a, b):  # two browsers ask before the first step
        live.viewer.request(c, f.viewmat, f.K, 40, 30)
    rec = _Recorder()
    cfg = TrainConfig.from_settings(iterations=3, cap_max=600, sh_degree=1, save_every=0, log_every=100, eval_every=0)
    train_run(
        scene,
        cfg,
        device,
        tmp_path / "run",
        log=lambda msg: None,
        live_hook=live_hook([rec, live], LiveViewConfig(live_view_budget=1.0)),
    )
    assert rec.steps == [1, 2, 3] and rec.closed == 1 and rec.n_splats[-1] > 0
    # the first step rendered one of the two asked views, the second the other: one frame per step
    # (close() waits for the sender thread, so every image has gone out)
    assert len(a.images) == 1 and len(b.images) == 1
    img = a.images[0]
    assert img.shape == (30, 40, 3) and img.dtype == np.uint8
    assert img.std() > 1, "the live view rendered a flat image: the splats are not in view"


@pytest.mark.parametrize("compact", [True, False])
def test_live_views_render_the_trainers_splats_through_one_renderer(tmp_path, device, compact):
    """The hook binds the trainer's splats (compact or float32) to one
    spirula.Renderer: its image is the trainer's own render, one rasterizer
    serves every size (remade on a size change, never one per size), and
    while only the camera moves (or the splats' contents) the recorded
    sequence is replayed."""
    from train_cases import tiny_scene

    from spirula.train.config import TrainConfig
    from spirula.train.schedule import sh_degree_at
    from spirula.train.trainer import Trainer
    from spirula.view.live import LiveHook

    scene = tiny_scene(tmp_path / "tiny")
    cfg = TrainConfig.from_settings(iterations=3, cap_max=600, sh_degree=1, save_every=0, eval_every=0, compact=compact)
    tr = Trainer(scene, cfg, device, log=lambda msg: None)
    assert tr.model.params.compact == compact
    rec = _Recorder()
    hook = LiveHook([rec], device, tr.world, scene.background, cfg.max_alpha, 1.0)
    f = scene.frames[scene.test[0]]
    states = []
    rec.on_step = lambda step, state: states.append(state)
    for _ in range(2):
        out = tr.train_step()
        hook.on_step(tr.step, cfg.iterations, out["loss"], tr.model.params, sh_degree_at(cfg, tr.step))
        deg = sh_degree_at(cfg, tr.step)
        for size in ((40, 30), (33, 21)):
            got = states[-1].render(f.viewmat, f.K, *size)
            # the same kernels on the same inputs: bit-identical
            np.testing.assert_array_equal(got, tr.render(f.viewmat, f.K, deg, size))
    renderer = hook.view.renderer
    assert renderer.splats is tr.model.params  # bound, not copied
    assert (renderer._raster.width, renderer._raster.height) == (33, 21)  # the first size's was freed
    seq = renderer._seq
    moved = np.array(f.viewmat, np.float64)
    moved[0, 3] += 0.05
    out = tr.train_step()  # new contents, the same buffers
    hook.on_step(tr.step, cfg.iterations, out["loss"], tr.model.params, sh_degree_at(cfg, tr.step))
    states[-1].render(moved, f.K, 33, 21)
    assert renderer._seq is seq  # replayed, not recorded again
    hook.close()
    assert rec.closed == 1
    tr.free()


def test_a_bad_source_is_one_line_and_exit_status_2(tmp_path, capsys):
    from spirula.cli.main import main
    from spirula.data.ply import write_splat_ply

    empty = tmp_path / "empty.ply"
    z = np.zeros((0, 3), np.float32)
    write_splat_ply(empty, z, np.zeros((0, 4), np.float32), z, np.zeros(0, np.float32), np.zeros((0, 1, 3), np.float32))
    cases = ((tmp_path / "missing.ply", "no such file"), (__file__, "not a splat file"), (empty, "holds no splats"))
    for source, says in cases:
        with pytest.raises(SystemExit) as exc:
            main(["view", str(source), "--port", str(_free_port())])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0] and str(source) in err[0]
