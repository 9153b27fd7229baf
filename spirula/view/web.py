"""The web viewer: a viser server streaming renders from the browser's camera.

``spirula view SPLAT.ply|RUN --port 8080`` (:func:`serve`) and
``spirula train ... --viewer-port 8080`` (:class:`WebLiveView`) open a viser
server (https://viser.studio, as gsplat and nerfstudio use); the browser draws
nothing of the splats itself: it sends its camera, Spirula renders that view
through the viewers' one render path (:class:`~spirula.view.session.ViewRenderer`,
a :class:`spirula.Renderer` holding the splats on the GPU) and sends back a
JPEG, shown as viser's background image. Rendering is on demand: a frame is made only when a browser camera
moved (or a browser connected) or the splats changed.

Threads: viser's web threads only record which browser wants which view
(:meth:`WebViewer._on_camera`) and send finished images; every GPU call
happens on the thread that calls :meth:`WebViewer.render_pending`: the main
thread of ``spirula view``, the training thread between two steps (at most
one frame per step) in ``spirula train``. The GPU is never used by two
threads at once.

Cameras: viser's ``CameraHandle.wxyz``/``position`` are the camera->world
rotation and translation in OpenCV axes (x right, y down, z forward), and
``fov`` the vertical field of view in radians (viser's docs, CameraHandle), so
``viewmat`` (world->camera, docs/design.md) is the inverse of that pose.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spirula.data.scene import qvec_to_rotmat
from spirula.errors import SpirulaError

MAX_FRAME_SIZE = 1280  # longest side of a streamed frame, in pixels (the browser scales it to its canvas)
JPEG_QUALITY = 85
TRAIN_REFRESH_S = 0.5  # while training: re-render an unmoved view this often (splats change every step)
TRAIN_MAX_FPS = 30.0  # while training: frames per second at most, however fast the steps and the drags
STATUS_EVERY_S = 0.25  # while training: progress text at most this often


# ---- camera maths -----------------------------------------------------------------------


def viewmat_from_pose(wxyz, position) -> np.ndarray:
    """[4,4] float64 OpenCV world->camera matrix of a viser camera: ``wxyz`` the
    camera->world rotation, ``position`` [3] the camera centre in world units."""
    R = qvec_to_rotmat(wxyz)
    V = np.eye(4)
    V[:3, :3] = R.T
    V[:3, 3] = -R.T @ np.asarray(position, dtype=np.float64)
    return V


def intrinsics(fov_y: float, width: int, height: int) -> np.ndarray:
    """[3,3] float64 pinhole K with vertical field of view ``fov_y`` (radians),
    square pixels and the principal point at the image centre (pixel centres
    at +0.5, so the centre is (W/2, H/2))."""
    f = 0.5 * height / np.tan(0.5 * fov_y)
    return np.array([[f, 0.0, 0.5 * width], [0.0, f, 0.5 * height], [0.0, 0.0, 1.0]])


def frame_size(canvas_w: int, canvas_h: int, max_size: int = MAX_FRAME_SIZE) -> tuple:
    """(width, height) of the frame for a canvas: its size, scaled down to fit
    ``max_size`` on the longest side, at least 1 pixel each."""
    s = min(1.0, max_size / max(canvas_w, canvas_h, 1))
    return max(1, round(canvas_w * s)), max(1, round(canvas_h * s))


@dataclass
class StartView:
    """Where the browser's camera starts: world points, ``up`` the world's up."""

    position: tuple
    look_at: tuple
    up: tuple


def start_view_from_camera(viewmat, distance: float) -> StartView:
    """The view of a dataset camera (OpenCV world->camera [4,4]), looking at the
    point ``distance`` in front of it."""
    V = np.asarray(viewmat, dtype=np.float64)
    R = V[:3, :3].T  # camera->world
    centre = -R @ V[:3, 3]
    return StartView(tuple(centre), tuple(centre + distance * R[:, 2]), tuple(-R[:, 1]))


def start_view_from_points(means) -> StartView:
    """A view of a point cloud [N,3] from outside its bulk: its median, seen from
    the +x+y+z diagonal at twice the 90th-percentile radius, +z up (viser's)."""
    means = np.asarray(means, dtype=np.float64)
    centre = np.median(means, axis=0) if len(means) else np.zeros(3)
    radius = float(np.percentile(np.linalg.norm(means - centre, axis=1), 90)) if len(means) else 1.0
    offset = 2.0 * max(radius, 1e-3) / np.sqrt(3.0)
    return StartView(tuple(centre + offset), tuple(centre), (0.0, 0.0, 1.0))


# ---- the server -----------------------------------------------------------------------


@dataclass
class ViewRequest:
    """One browser's wish: render ``viewmat``/``K`` at ``width`` x ``height``."""

    client_id: int
    viewmat: np.ndarray
    K: np.ndarray
    width: int
    height: int


class WebViewer:
    """A viser server on ``host:port`` and the views its browsers ask for.

    Web threads call :meth:`_on_camera`; the render thread calls
    :meth:`render_pending` with a ``render(viewmat, K, width, height) -> [H,W,3]
    uint8`` function, the only place the GPU is used.
    """

    def __init__(
        self,
        port: int,
        host: str = "127.0.0.1",
        start: StartView | None = None,
        title: str = "Spirula",
        max_size: int = MAX_FRAME_SIZE,
    ):
        self.max_size = max_size
        try:
            import viser
        except ImportError:
            raise SpirulaError("the web viewer needs viser: pip install viser") from None
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # viser's banner: our log line says where
                self.server = viser.ViserServer(host=host, port=port, label=title, verbose=False)
        except OSError as exc:
            raise SpirulaError("web viewer: cannot listen on %s:%d (%s)" % (host, port, exc.strerror or exc)) from None
        # viser moves to the next free port when the one asked for is taken
        self.host, self.port, self.asked_port = host, self.server.get_port(), port
        if start is not None:
            self.server.scene.set_up_direction(start.up)
            cam = self.server.initial_camera
            cam.up = start.up
            cam.position = start.position
            cam.look_at = start.look_at
        self.status = self.server.gui.add_markdown("")
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._views: dict = {}  # client id -> ViewRequest: each browser's latest camera
        self._dirty: set = set()  # client ids whose view needs a new frame
        self._clients: dict = {}
        self.frames_sent = 0
        self.last_frame: np.ndarray | None = None  # the last image sent (tests read it)
        self._outbox: dict = {}  # client id -> (client, image): the newest frame not yet sent
        self._outbox_ready = threading.Condition(self._lock)
        self._closing = False
        self._sender = threading.Thread(target=self._send_loop, name="spirula-web-send", daemon=True)
        self._sender.start()
        self.server.on_client_connect(self._on_connect)
        self.server.on_client_disconnect(self._on_disconnect)

    @property
    def url(self) -> str:
        """The page's address (``http://host:port``)."""
        return "http://%s:%d" % (self.host, self.port)

    def where(self) -> str:
        """The URL for the log, and a note when the asked port was taken."""
        moved = self.asked_port not in (0, self.port)
        return self.url + (" (port %d was taken)" % self.asked_port if moved else "")

    # -- web threads: record, never render ------------------------------------------------
    def _on_connect(self, client):
        with self._lock:
            self._clients[client.client_id] = client
        client.camera.on_update(self._on_camera)

    def _on_disconnect(self, client):
        with self._lock:
            self._clients.pop(client.client_id, None)
            self._views.pop(client.client_id, None)
            self._dirty.discard(client.client_id)

    def _on_camera(self, camera):
        w, h = frame_size(camera.image_width, camera.image_height, self.max_size)
        viewmat = viewmat_from_pose(camera.wxyz, camera.position)
        self.request(camera.client, viewmat, intrinsics(camera.fov, w, h), w, h)

    def request(self, client, viewmat, K, width: int, height: int):
        """``client`` (a viser ClientHandle) wants the view ``viewmat`` [4,4], ``K``
        [3,3] at ``width`` x ``height``; replaces its earlier wish (any thread)."""
        with self._lock:
            self._clients[client.client_id] = client
            self._views[client.client_id] = ViewRequest(client.client_id, viewmat, K, int(width), int(height))
            self._dirty.add(client.client_id)
        self._wake.set()

    # -- render thread --------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until a view needs a frame (True) or ``timeout`` passes (False)."""
        woke = self._wake.wait(timeout)
        self._wake.clear()
        return woke

    def invalidate(self):
        """The splats changed: every browser's view needs a new frame."""
        with self._lock:
            self._dirty.update(self._views)
        self._wake.set()

    def has_clients(self) -> bool:
        with self._lock:
            return bool(self._views)

    def render_pending(self, render, limit: int | None = None) -> int:
        """Render the views waiting for a frame (at most ``limit``) with
        ``render(viewmat, K, width, height) -> [H,W,3] uint8`` and queue them for
        sending. Returns the number rendered."""
        done = 0
        while limit is None or done < limit:
            with self._lock:
                if not self._dirty:
                    break
                cid = self._dirty.pop()
                req, client = self._views.get(cid), self._clients.get(cid)
            if req is None or client is None:
                continue
            img = render(req.viewmat, req.K, req.width, req.height)
            with self._lock:  # never blocks on the network: a frame not yet sent is replaced
                self._outbox[cid] = (client, img)
                self._outbox_ready.notify()
            done += 1
        return done

    def _send_loop(self):
        while True:
            with self._lock:
                while not self._outbox and not self._closing:
                    self._outbox_ready.wait()
                if not self._outbox:
                    return
                client, img = self._outbox.pop(next(iter(self._outbox)))
            try:  # JPEG encoding here, off the render thread
                client.scene.set_background_image(img, format="jpeg", jpeg_quality=JPEG_QUALITY)
            except Exception:  # a browser that left meanwhile
                continue
            self.last_frame = img
            self.frames_sent += 1

    def set_status(self, text: str):
        """Markdown shown in the browser's control panel."""
        self.status.content = text

    def close(self):
        """Send what was rendered, then stop the server."""
        with self._lock:
            self._closing = True
            self._outbox_ready.notify()
        self._sender.join(timeout=5)
        with contextlib.redirect_stdout(io.StringIO()):
            self.server.stop()


# ---- spirula view --port: a splat file or a run ----------------------------------------


def start_view(source) -> StartView:
    """Where the browser starts on a :class:`~spirula.view.session.ViewSource`:
    the dataset's first training camera looking at the splats' median, or
    outside the splats when there is no dataset."""
    means = source.params["means"]
    if not source.frames:
        return start_view_from_points(means)
    V = np.asarray(source.frames[0].viewmat, dtype=np.float64)
    distance = float(np.linalg.norm(np.median(means, axis=0) + V[:3, :3].T @ V[:3, 3]))
    return start_view_from_camera(V, max(distance, 1e-3))


def serve(
    splats_source,
    port: int,
    host: str = "127.0.0.1",
    *,
    device=None,
    stop=None,
    on_ready=None,
    log=print,
    appearance_of: str | None = None,
):
    """Serve the web viewer of ``splats_source`` (a splat.ply, a run folder or a
    checkpoint) until Ctrl-C, or until the ``stop`` :class:`threading.Event` is
    set. The splats are uploaded once; renders happen on this thread, only
    when a browser's camera changes. ``on_ready(viewer)`` is called once the
    server listens. ``appearance_of``: a training image whose exposure and colour
    every frame gets (``spirula view --appearance-of``; default: the radiance)."""
    from spirula.view.session import ViewRenderer, load_source

    source = load_source(splats_source, appearance_of)
    view = ViewRenderer.from_params(device, source.params, source.background, source.max_alpha, source.appearance)
    try:
        viewer = WebViewer(port, host, start_view(source))
    except BaseException:
        view.close()
        raise
    n = len(source.params["means"])
    look = "" if appearance_of is None else "  \nappearance of %s" % appearance_of
    viewer.set_status("**%s**  \n%s splats%s" % (Path(splats_source).name, f"{n:,}", look))
    log("spirula: web viewer of %s (%s splats) at %s" % (splats_source, f"{n:,}", viewer.where()))

    def render(viewmat, K, width, height):
        return view.render_rgb8(viewmat, K, width, height)

    if on_ready is not None:
        on_ready(viewer)
    try:
        while stop is None or not stop.is_set():
            if viewer.wait(0.2):
                viewer.render_pending(render)
    finally:
        viewer.close()
        view.close()


# ---- spirula train --viewer-port: the live view ----------------------------------------


class WebLiveView:
    """The web viewer of a training run (the ``LiveView`` protocol of
    spirula/view/live.py: ``on_step`` and ``close``, called by the training
    loop between steps, on its thread).

    ``on_step`` renders at most one frame, and at most ``max_fps`` a second: a
    view a browser asked for since the last step first, else, every
    ``refresh_s`` seconds, a browser's unmoved view of the changed splats,
    through the run's shared renderer (``state.render``).
    """

    def __init__(
        self,
        port: int,
        host: str = "127.0.0.1",
        start: StartView | None = None,
        log=print,
        refresh_s: float = TRAIN_REFRESH_S,
        max_fps: float = TRAIN_MAX_FPS,
    ):
        self.viewer = WebViewer(port, host, start, title="Spirula training")
        self.refresh_s, self.max_fps = refresh_s, max_fps
        self._frame_due = 0.0
        self._refresh_due = self._status_due = 0.0
        log("spirula: web viewer at %s" % self.viewer.where())

    def on_step(self, step: int, state) -> None:
        now = time.perf_counter()
        if now >= self._status_due:
            self._status_due = now + STATUS_EVERY_S
            self.viewer.set_status(
                "**training**  \nstep %d / %d  \nloss %.4f  \n%s splats"
                % (step, state.iterations, state.loss, f"{state.n_splats:,}")
            )
        if now < self._frame_due or not self.viewer.has_clients():
            return
        if now >= self._refresh_due:
            self._refresh_due = now + self.refresh_s
            self.viewer.invalidate()

        def render(viewmat, K, width, height):
            return state.render_rgb8(viewmat, K, width, height)

        if self.viewer.render_pending(render, limit=1):
            self._frame_due = now + 1.0 / self.max_fps

    def close(self):
        self.viewer.close()


def live_view(scene, port: int, host: str = "127.0.0.1", log=print) -> WebLiveView:
    """The :class:`WebLiveView` of training on ``scene``, starting at its first
    training camera, looking at the seed points' median."""
    f = scene.frames[scene.train[0]] if scene.train else scene.frames[0]
    V = np.asarray(f.viewmat, dtype=np.float64)
    centre = -V[:3, :3].T @ V[:3, 3]
    target = np.median(scene.points, axis=0) if len(scene.points) else centre + V[2, :3]
    return WebLiveView(port, host, start_view_from_camera(V, max(float(np.linalg.norm(target - centre)), 1e-3)), log)
