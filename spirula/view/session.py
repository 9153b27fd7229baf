"""A headless view of splats on the device, rendered on demand.

:class:`ViewSession` holds device-resident splats (loaded from a PLY or run,
or the trainer's own, borrowed) and renders them from a
:class:`~spirula.view.camera.Camera` with the project's rasterizer, only when
the camera, the image size or the splats changed since the last frame (a dirty
check: the same request returns the same array without touching the GPU).
The native window (spirula/view/window.py) and the live training view draw
what it returns; the web viewer can too.
"""

from __future__ import annotations

import time

import numpy as np

from spirula.render.rasterizer import MAX_ALPHA, Rasterizer, Splats


class ViewSession:
    """Renders ``splats`` (a :class:`~spirula.render.rasterizer.Splats` on
    ``device``; raw log-scales/logits unless ``splats.activated``) at SH
    degree ``sh_degree`` into ``width`` x ``height`` uint8 images.

    ``world``: a :class:`~spirula.train.world.WorldTransform` when the splats
    live in training coordinates (the live view); cameras are in the dataset's
    coordinates either way. ``background``: [3] colour behind the splats
    (default black). ``own_splats``: :meth:`free` frees them too.
    """

    def __init__(
        self,
        device,
        splats: Splats,
        sh_degree: int,
        width: int = 1280,
        height: int = 720,
        *,
        background=None,
        max_alpha: float = MAX_ALPHA,
        world=None,
        own_splats: bool = False,
    ):
        self.device = device
        self.splats, self.sh_degree = splats, int(sh_degree)
        self.background = None if background is None else np.asarray(background, np.float32).reshape(1, 3)
        self.max_alpha, self.world, self.own_splats = max_alpha, world, own_splats
        self.width, self.height = int(width), int(height)
        self._raster = None
        self._version = 0  # bumped when the splats change
        self._last_key = None
        self._image = None
        self.renders = 0  # frames rendered so far (the dirty check's counter)
        self.frame_ms = None  # the last frame's time: rasterize + read back + convert

    @classmethod
    def from_params(cls, device, params: dict, width: int = 1280, height: int = 720, **kw) -> ViewSession:
        """A session owning splats uploaded from raw numpy parameters: means
        [N,3], quats [N,4] wxyz, scales [N,3] (log), opacities [N] (logit),
        sh [N,K,3] (:func:`spirula.train.run.load_run`'s or a PLY's)."""
        splats = Splats.from_numpy(
            device,
            params["means"],
            params["quats"],
            params["scales"],
            params["opacities"],
            params["sh"],
            activated=False,
            prefix="view",
        )
        sh_degree = int(round(np.sqrt(np.asarray(params["sh"]).shape[1]))) - 1
        return cls(device, splats, sh_degree, width, height, own_splats=True, **kw)

    # -- what changes -------------------------------------------------------------------
    def set_splats(self, splats: Splats, sh_degree: int | None = None, changed: bool = True):
        """New splats (or the same buffers with new contents): the next render
        redraws. ``changed=False``: only follow the buffers (the trainer
        replaced them) without asking for a new frame."""
        self.splats = splats
        if sh_degree is not None:
            self.sh_degree = int(sh_degree)
        if changed:
            self._version += 1

    def resize(self, width: int, height: int):
        self.width, self.height = max(int(width), 1), max(int(height), 1)

    def _key(self, camera) -> tuple:
        return (camera.key(), self.width, self.height, self._version, self.sh_degree)

    def needs_render(self, camera) -> bool:
        return self._image is None or self._key(camera) != self._last_key

    # -- rendering ----------------------------------------------------------------------
    def render(self, camera) -> np.ndarray:
        """[H,W,3] uint8 of the splats from ``camera``; the previous frame's
        array (no GPU work) when nothing changed since."""
        key = self._key(camera)
        if self._image is not None and key == self._last_key:
            return self._image
        t0 = time.perf_counter()
        viewmat = camera.viewmat()
        if self.world is not None:
            viewmat = self.world.viewmats(viewmat[None])[0]
        img = self._rasterize(viewmat, camera.K(self.width, self.height))
        self._image = np.rint(np.clip(img, 0.0, 1.0) * 255).astype(np.uint8)
        self.frame_ms = 1e3 * (time.perf_counter() - t0)
        self._last_key = key
        self.renders += 1
        return self._image

    def _rasterize(self, viewmat, K) -> np.ndarray:
        """The one rendering call: [H,W,3] float32 colours (background
        composited) of ``self.splats`` from world->camera ``viewmat`` [4,4] and ``K`` [3,3]."""
        r = self._raster
        if r is None or (r.width, r.height) != (self.width, self.height):
            if r is not None:
                r.free()
            r = self._raster = Rasterizer(
                self.device,
                self.width,
                self.height,
                1,
                capacity=self.splats.n,
                name="view.raster",
                max_alpha=self.max_alpha,
            )
            r.set_backgrounds(self.background)
        r.set_cameras(np.asarray(viewmat)[None], np.asarray(K)[None])
        r.forward(self.splats, self.sh_degree)
        return self.device.readback(r.out_colors)[0]

    def free(self):
        if self._raster is not None:
            self._raster.free()
            self._raster = None
        if self.own_splats and self.splats is not None:
            self.splats.free(self.device)
            self.splats = None
