"""The viewers' render path: splats on the device drawn through
:class:`spirula.Renderer`, and a headless view that renders on demand.

:class:`ViewRenderer` is the one render call of every viewer (the window,
the web viewer, the live views of training): a :class:`~spirula.Renderer`
whose splats are set once (a file's, uploaded) or bound as they are (a
trainer's, raw or compact), so a frame is one replay of its recorded
sequence and one read back; cameras come in the dataset's coordinates and
``world`` maps them to the splats' (training coordinates).

:class:`ViewSession` renders a :class:`~spirula.view.camera.Camera` at one
image size only when the camera, the size or the splats changed since the
last frame (a dirty check: the same request returns the same array without
touching the GPU). The native window (spirula/view/window.py) draws what it
returns.

:func:`load_source` reads what ``spirula view`` shows: a splat.ply, or a
run folder or checkpoint (with its dataset's cameras while the dataset is
still where the run found it).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from spirula.render.rasterizer import MAX_ALPHA


class ViewRenderer:
    """Renders splats from dataset cameras with a :class:`spirula.Renderer`.

    Args:
        renderer: the :class:`~spirula.render.renderer.Renderer` holding the
            splats (``set_splats`` / ``load_ply`` / ``use_splats`` done).
        world: a :class:`~spirula.data.world.WorldTransform` when the splats
            are in training coordinates (a trainer's), else None.
    """

    def __init__(self, renderer, world=None, look=None):
        self.renderer, self.world, self.look = renderer, world, look

    @classmethod
    def from_params(
        cls, device, params: dict, background=None, max_alpha: float = MAX_ALPHA, appearance=None
    ) -> ViewRenderer:
        """Splats uploaded once from raw numpy parameters: means [N,3], quats
        [N,4] wxyz, scales [N,3] (log), opacities [N] (logit), sh [N,K,3]
        (:func:`spirula.train.run.load_run`'s or :func:`load_source`'s),
        activated on the host as ``spirula render`` does (same numbers).
        ``appearance``: (isp, frame, camera, controller) of a view
        (:attr:`ViewSource.appearance`), applied to every frame (an
        :class:`~spirula.train.appearance.AppearanceLook`), or None: the radiance."""
        from spirula.render.renderer import Renderer, activate_splats

        renderer = Renderer(device=device, max_alpha=max_alpha, background=background)
        renderer.set_splats(**activate_splats(params))
        look = None
        if appearance is not None:
            from spirula.train.appearance import AppearanceLook

            try:
                look = AppearanceLook(renderer.device, *appearance)
            except BaseException:
                renderer.close()
                raise
        return cls(renderer, look=look)

    @classmethod
    def for_training(cls, device, world, background, max_alpha: float) -> ViewRenderer:
        """A renderer for a trainer's splats (bound each step by :meth:`use_splats`)."""
        from spirula.render.renderer import Renderer

        return cls(Renderer(device=device, max_alpha=max_alpha, background=background), world)

    def use_splats(self, splats, sh_degree: int):
        """Follow a trainer's :class:`~spirula.render.rasterizer.Splats` (no
        copy; the recorded sequence is kept while nothing but their contents changed)."""
        self.renderer.use_splats(splats, sh_degree)

    def render(self, viewmat, K, width: int, height: int) -> np.ndarray:
        """[H,W,3] float32 colours (background composited) from the dataset
        camera ``viewmat`` [4,4] (OpenCV world->camera), ``K`` [3,3]; through
        the training image's appearance when the view has one (``look``)."""
        img = self._render(viewmat, K, width, height).numpy()
        return img if self.look is None else self.look(img)

    def render_rgb8(self, viewmat, K, width: int, height: int) -> np.ndarray:
        """[H,W,3] uint8 of :meth:`render` (``to_uint8`` of it, bit for bit),
        converted on the GPU: a viewer's frame reads back 4 bytes a pixel, not 12
        (with an appearance, the float image comes back and is converted here)."""
        if self.look is not None:
            from spirula.render.video import to_uint8

            return to_uint8(self.render(viewmat, K, width, height))
        return self._render(viewmat, K, width, height).rgb8()

    def _render(self, viewmat, K, width: int, height: int):
        viewmat = np.asarray(viewmat, np.float64)
        if self.world is not None:
            viewmat = self.world.viewmats(viewmat[None])[0]
        return self.renderer.render(viewmat, K, width, height)

    def close(self):
        if self.look is not None:
            self.look.close()
            self.look = None
        self.renderer.close()


class ViewSession:
    """Renders ``view`` (a :class:`ViewRenderer`) into ``width`` x ``height``
    uint8 images of a :class:`~spirula.view.camera.Camera`, on demand.
    ``own_view``: :meth:`free` closes the renderer too (a live view borrows
    the training run's)."""

    def __init__(self, view: ViewRenderer, width: int = 1280, height: int = 720, *, own_view: bool = False):
        self.view, self.own_view = view, own_view
        self.width, self.height = int(width), int(height)
        self._version = 0  # bumped when the splats change
        self._last_key = None
        self._image = None
        self.renders = 0  # frames rendered so far (the dirty check's counter)
        self.frame_ms = None  # the last frame's time: rasterize + convert (pack_rgba8) + read back

    # -- what changes -------------------------------------------------------------------
    def splats_changed(self):
        """The splats changed (new contents or buffers): the next render redraws."""
        self._version += 1

    def resize(self, width: int, height: int):
        self.width, self.height = max(int(width), 1), max(int(height), 1)

    def _key(self, camera) -> tuple:
        return (camera.key(), self.width, self.height, self._version)

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
        self._image = self.view.render_rgb8(
            camera.viewmat(), camera.K(self.width, self.height), self.width, self.height
        )
        self.frame_ms = 1e3 * (time.perf_counter() - t0)
        self._last_key = key
        self.renders += 1
        return self._image

    def free(self):
        if self.own_view and self.view is not None:
            self.view.close()
        self.view = None


@dataclasses.dataclass
class ViewSource:
    """What ``spirula view`` shows (:func:`load_source`).

    Attributes:
        params: raw splat arrays (means, quats, scales (log), opacities
            (logit), sh [N,K,3]) in dataset coordinates.
        background: [3] colour behind the splats, or None (black).
        max_alpha: the alpha cap the splats were trained with.
        frames: the dataset's training cameras (:class:`~spirula.data.Frame`
            list), empty for a splat.ply or a run whose dataset moved.
        appearance: (isp, frame, camera, controller) of the view asked for with
            ``appearance_of`` (:func:`spirula.train.run.appearance_of_view`), or None.
    """

    params: dict
    background: object = None
    max_alpha: float = MAX_ALPHA
    frames: list = dataclasses.field(default_factory=list)
    appearance: tuple | None = None


def load_source(source, appearance_of: str | None = None) -> ViewSource:
    """A splat.ply, or a run folder or checkpoint .npz (with its dataset's
    training cameras when the dataset is still there). Bad input raises a
    :class:`~spirula.errors.DatasetError` naming ``source`` (one line, exit 2).
    ``appearance_of``: a training image (train:K, its name or dataset index) whose
    fitted exposure and colour the view applies (``spirula view --appearance-of``;
    a run trained with ``--appearance`` whose dataset is still there), else a
    one-line UsageError."""
    from spirula.errors import DatasetError, SpirulaError, UsageError

    path = Path(source)
    if not path.exists():
        raise DatasetError("%s: no such file or folder" % path)
    from spirula.export import is_splat_file

    if is_splat_file(path):
        from spirula.export import read_splats

        if appearance_of is not None:
            raise UsageError("--appearance-of needs a run (folder or checkpoint): a splat file holds only the radiance")
        p = read_splats(path, allow_empty=False)
        params = dict(
            means=p["means"], quats=p["quats"], scales=p["log_scales"], opacities=p["opacity_logits"], sh=p["sh_coeffs"]
        )
        return ViewSource(params)
    if not (path.is_dir() or path.suffix.lower() == ".npz"):
        raise DatasetError(
            "%s: not a splat file (.ply, .spz, .sog, .splat, .glb), a run folder or a checkpoint .npz" % path
        )
    from spirula.train.run import load_run

    try:
        cfg, params, ckpt, _ = load_run(path)
    except DatasetError:
        raise
    except SpirulaError as exc:  # no checkpoint, or not one: bad input
        raise DatasetError(str(exc)) from None
    out = ViewSource(params, max_alpha=cfg.max_alpha)
    scene = None
    try:
        from spirula.data import load_dataset

        folder = path if path.is_dir() else ckpt.parent.parent
        dataset = json.loads((folder / "config.json").read_text())["dataset"]
        scene = load_dataset(
            dataset,
            downscale=cfg.downscale,
            eval_split=cfg.eval_split,
            background=cfg.background or "auto",
            seed=cfg.seed,
        )
        out.background = scene.background
        out.frames = [scene.frames[i] for i in scene.train] or list(scene.frames)
    except (OSError, KeyError, ValueError, IndexError, SpirulaError):
        scene = None  # the dataset moved: the splats alone still show
    if appearance_of is not None:
        from spirula.train.run import appearance_of_view

        out.appearance = appearance_of_view(path, scene, appearance_of)
    return out
