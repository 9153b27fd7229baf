"""The native viewer window: GLFW for the window and input, moderngl to show
the rendered image.

Display path: the :class:`~spirula.view.session.ViewSession` renders with the
project's rasterizer (Vulkan or CUDA compute) and returns an [H,W,3] uint8
image; it is uploaded into one OpenGL texture and drawn as a fullscreen quad
by a 10-line shader. That works on every desktop: an OpenGL 3.3 core
context is what macOS offers (where glDrawPixels and the fixed pipeline are
gone), and Windows and Linux (Mesa, NVIDIA, AMD) all have it.
moderngl checks GL errors on every call and reads the framebuffer back for
the tests. GLFW (the ``glfw`` wheel bundles libglfw) gives the window,
mouse and keys on X11, Wayland, macOS and Windows.

Controls: left drag orbit; right drag (or shift + left) pan; middle drag
look around; scroll dolly; W/A/S/D fly forward/left/back/right, Q/E
down/up (shift: faster); +/- field of view; N/P (or the arrow keys) next /
previous dataset camera; R back to the first view; Esc closes.

glfw and moderngl are imported here only: ``spirula train`` without
``--viewer`` never loads them.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from spirula import settings
from spirula.errors import SpirulaError

ORBIT_RAD_PER_PIXEL = 0.005
DOLLY_PER_SCROLL = 0.9  # the distance shrinks 10% per scroll step
FLY_SPEED = 0.5  # scene scales per second
FOV_STEP = 1.1

_VERTEX = """
#version 330
in vec2 pos;
out vec2 uv;
void main() {
    uv = vec2(pos.x * 0.5 + 0.5, 0.5 - pos.y * 0.5);  // image row 0 at the top
    gl_Position = vec4(pos, 0.0, 1.0);
}
"""
_FRAGMENT = """
#version 330
uniform sampler2D image;
in vec2 uv;
out vec4 color;
void main() { color = vec4(texture(image, uv).rgb, 1.0); }
"""


class DisplayError(SpirulaError):
    """No display to open a window on (exit status 2)."""

    exit_code = 2


NO_DISPLAY_HINT = "use `spirula view ... --port 8080` (or `spirula train ... --viewer-port 8080`) for the web viewer"


def check_display():
    """Raise :class:`DisplayError` when no X11 or Wayland display is set (Linux, BSD)."""
    if sys.platform.startswith(("linux", "freebsd", "openbsd")) and not settings.display():
        raise DisplayError("no display ($DISPLAY and $WAYLAND_DISPLAY are unset); " + NO_DISPLAY_HINT)


class ViewerWindow:
    """A GLFW window showing ``session``'s renders from ``camera``.

    Args:
        session: a :class:`~spirula.view.session.ViewSession` (its size
            follows the window's framebuffer).
        camera: the :class:`~spirula.view.camera.Camera` the controls move.
        path: a :class:`~spirula.view.camera.CameraPath` of dataset views, or None.
        title: the window title's first part.
        visible: False for a hidden window (tests).
    """

    def __init__(self, session, camera, path=None, title: str = "spirula", visible: bool = True):
        check_display()
        import glfw
        import moderngl

        self.glfw = glfw
        if not glfw.init():
            raise DisplayError("GLFW could not open the display (%s); %s" % (_glfw_error(glfw), NO_DISPLAY_HINT))
        glfw.window_hint(glfw.CONTEXT_VERSION_MAJOR, 3)
        glfw.window_hint(glfw.CONTEXT_VERSION_MINOR, 3)
        glfw.window_hint(glfw.OPENGL_PROFILE, glfw.OPENGL_CORE_PROFILE)
        glfw.window_hint(glfw.OPENGL_FORWARD_COMPAT, True)  # macOS needs it
        glfw.window_hint(glfw.VISIBLE, visible)
        self.win = glfw.create_window(session.width, session.height, title, None, None)
        if not self.win:
            err = _glfw_error(glfw)
            glfw.terminate()
            raise DisplayError("no OpenGL 3.3 window (%s); %s" % (err, NO_DISPLAY_HINT))
        glfw.make_context_current(self.win)
        glfw.swap_interval(0)  # frames are drawn on demand; never wait for vsync
        self.ctx = moderngl.create_context()
        self.prog = self.ctx.program(vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
        quad = self.ctx.buffer(np.array([-1, -1, 1, -1, -1, 1, 1, 1], np.float32).tobytes())
        self.vao = self.ctx.vertex_array(self.prog, [(quad, "2f", "pos")])
        self.texture = None
        self.session, self.camera, self.path, self.title = session, camera, path, title
        self.home = camera.copy()
        self.status = ""  # extra title text (the live view's step, loss, splats)
        self.frames = 0
        self._drag = None  # (button, x, y)
        self._held = set()
        self._last_move = time.perf_counter()
        glfw.set_mouse_button_callback(self.win, self._on_button)
        glfw.set_cursor_pos_callback(self.win, self._on_cursor)
        glfw.set_scroll_callback(self.win, self._on_scroll)
        glfw.set_key_callback(self.win, self._on_key)
        self._fit_size()

    # -- input ----------------------------------------------------------------------
    def _focal(self) -> float:
        return float(self.camera.K(self.session.width, self.session.height)[1, 1])

    def _on_button(self, win, button, action, mods):
        glfw = self.glfw
        if action == glfw.PRESS:
            x, y = glfw.get_cursor_pos(win)
            kind = {glfw.MOUSE_BUTTON_LEFT: "orbit", glfw.MOUSE_BUTTON_RIGHT: "pan", glfw.MOUSE_BUTTON_MIDDLE: "look"}
            kind = kind.get(button)
            if kind == "orbit" and mods & glfw.MOD_SHIFT:
                kind = "pan"
            self._drag = (kind, x, y)
        elif action == glfw.RELEASE:
            self._drag = None

    def _on_cursor(self, win, x, y):
        if self._drag is None or self._drag[0] is None:
            return
        kind, x0, y0 = self._drag
        # cursor positions are in screen coordinates; the image is in framebuffer pixels (2x on HiDPI)
        ratio = self.session.height / max(self.glfw.get_window_size(win)[1], 1)
        dx, dy = (x - x0) * ratio, (y - y0) * ratio
        self._drag = (kind, x, y)
        if kind == "orbit":
            self.camera.orbit(-dx * ORBIT_RAD_PER_PIXEL, dy * ORBIT_RAD_PER_PIXEL)
        elif kind == "look":
            self.camera.look(-dx * ORBIT_RAD_PER_PIXEL, -dy * ORBIT_RAD_PER_PIXEL)
        else:  # the point under the cursor follows it
            f = self._focal()
            self.camera.pan(-dx / f, -dy / f)

    def _on_scroll(self, win, xoff, yoff):
        self.camera.dolly(DOLLY_PER_SCROLL**yoff)

    def _on_key(self, win, key, scancode, action, mods):
        glfw = self.glfw
        if action == glfw.RELEASE:
            self._held.discard(key)
            return
        if action == glfw.PRESS:
            self._held.add(key)
            self._last_move = time.perf_counter()
        if key == glfw.KEY_ESCAPE:
            glfw.set_window_should_close(win, True)
        elif key in (glfw.KEY_EQUAL, glfw.KEY_KP_ADD):
            self.camera.zoom(1 / FOV_STEP)
        elif key in (glfw.KEY_MINUS, glfw.KEY_KP_SUBTRACT):
            self.camera.zoom(FOV_STEP)
        elif key == glfw.KEY_R and action == glfw.PRESS:
            self.camera = self.home.copy()
        elif key in (glfw.KEY_N, glfw.KEY_RIGHT, glfw.KEY_P, glfw.KEY_LEFT) and self.path is not None:
            self.camera = self.path.step(1 if key in (glfw.KEY_N, glfw.KEY_RIGHT) else -1)

    def _fly(self):
        """Move the camera for the fly keys held since the last call."""
        glfw = self.glfw
        now = time.perf_counter()
        dt, self._last_move = min(now - self._last_move, 0.1), now
        axes = {
            glfw.KEY_D: (1, 0, 0),
            glfw.KEY_A: (-1, 0, 0),
            glfw.KEY_E: (0, -1, 0),
            glfw.KEY_Q: (0, 1, 0),
            glfw.KEY_W: (0, 0, 1),
            glfw.KEY_S: (0, 0, -1),
        }
        move = sum((np.array(axes[k], float) for k in self._held if k in axes), np.zeros(3))
        if move.any():
            fast = 4.0 if {glfw.KEY_LEFT_SHIFT, glfw.KEY_RIGHT_SHIFT} & self._held else 1.0
            self.camera.fly(*(move * FLY_SPEED * fast * dt))

    def flying(self) -> bool:
        glfw = self.glfw
        return bool(self._held & {glfw.KEY_W, glfw.KEY_A, glfw.KEY_S, glfw.KEY_D, glfw.KEY_Q, glfw.KEY_E})

    # -- frames -------------------------------------------------------------------------
    @property
    def should_close(self) -> bool:
        return self.win is None or bool(self.glfw.window_should_close(self.win))

    def poll(self, wait: float = 0.0):
        """Handle pending input (waiting up to ``wait`` seconds for some)."""
        if wait > 0 and not self.flying():
            self.glfw.wait_events_timeout(wait)
        else:
            self.glfw.poll_events()
        self._fly()

    def _fit_size(self):
        w, h = self.glfw.get_framebuffer_size(self.win)
        if w > 0 and h > 0:
            self.session.resize(w, h)

    def draw(self, force: bool = False) -> bool:
        """Render and show a frame if anything changed (or ``force``); True if drawn."""
        self._fit_size()
        if not (force or self.session.needs_render(self.camera)):
            return False
        image = self.session.render(self.camera)
        h, w = image.shape[:2]
        if self.texture is None or self.texture.size != (w, h):
            if self.texture is not None:
                self.texture.release()
            self.texture = self.ctx.texture((w, h), 3, alignment=1)
            self.texture.filter = (self.ctx.NEAREST, self.ctx.NEAREST)  # one texel per pixel
        self.texture.write(np.ascontiguousarray(image).tobytes())
        self.ctx.screen.use()
        self.ctx.viewport = (0, 0, w, h)
        self.texture.use(0)
        self.vao.render(self.ctx.TRIANGLE_STRIP)
        self.glfw.swap_buffers(self.win)
        self.frames += 1
        self._set_title()
        return True

    def _set_title(self):
        ms = self.session.frame_ms
        parts = [self.title, "%.1f ms/frame" % ms if ms is not None else ""]
        if self.status:
            parts.append(self.status)
        self.glfw.set_window_title(self.win, " | ".join(p for p in parts if p))

    def read_front(self) -> np.ndarray:
        """[H,W,3] uint8: the last frame as OpenGL shows it (row 0 at the top).
        Reads the back buffer after redrawing it (the front one is not readable)."""
        self.ctx.screen.use()
        self.texture.use(0)
        self.vao.render(self.ctx.TRIANGLE_STRIP)
        w, h = self.texture.size
        data = self.ctx.screen.read(viewport=(0, 0, w, h), components=3, alignment=1)
        return np.frombuffer(data, np.uint8).reshape(h, w, 3)[::-1]

    def run(self):
        """Show frames until the window is closed: wait for input, redraw on change."""
        self.draw(force=True)
        while not self.should_close:
            self.poll(wait=0.5)
            self.draw()

    def close(self):
        if self.win is None:
            return
        self.glfw.destroy_window(self.win)
        self.win = None
        self.glfw.terminate()


def _glfw_error(glfw) -> str:
    try:
        code, desc = glfw.get_error()
    except Exception:
        return "unknown error"
    if isinstance(desc, bytes):
        desc = desc.decode(errors="replace")
    return desc or "error %s" % code


class WindowLiveView:
    """The native window as a :class:`~spirula.view.live.LiveView` on a
    training run (``spirula train --viewer``).

    Each ``on_step`` handles pending input and draws at most one frame: when
    the camera moved, or every ``every`` steps for the new splats. The window
    opens at the first step (on the dataset's first camera of ``path``) and
    renders through the run's shared renderer (``state.view``); closing it
    stops the viewer, not training.
    """

    def __init__(self, path, width: int = 800, height: int = 600, every: int = 10, title: str = "spirula train"):
        self.path, self.width, self.height, self.every, self.title = path, width, height, max(int(every), 1), title
        self.window = None
        self.session = None
        self.closed = False
        self.refreshed = 0  # the step whose splats the window last took

    def on_step(self, step: int, state) -> None:
        from spirula.view.session import ViewSession

        if self.closed:
            return
        if self.window is None:
            self.session = ViewSession(state.view, self.width, self.height)
            try:
                self.window = ViewerWindow(self.session, self.path.camera(), self.path, self.title)
            except DisplayError as exc:  # the viewer fails, training goes on
                print("spirula: warning: --viewer: %s" % exc, file=sys.stderr)
                self.close()
                return
        if step - self.refreshed >= self.every:  # new splats every K steps (the hook may skip steps)
            self.refreshed = step
            self.session.splats_changed()
        self.window.status = "step %d/%d | loss %.4f | %s splats" % (
            step,
            state.iterations,
            state.loss,
            f"{state.n_splats:,}",
        )
        self.window.poll()
        if self.window.should_close:
            self.close()
            return
        self.window.draw()

    def close(self) -> None:
        self.closed = True
        if self.window is not None:
            self.window.close()
            self.window = None
        if self.session is not None:
            self.session.free()
            self.session = None
