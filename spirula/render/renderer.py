"""The embeddable renderer: set the splats once, render many frames on the GPU.

:class:`Renderer` is what a host program (a Kompute app, a viewer, the
``spirula render`` command, the fps benchmark) uses to draw splats without
reading anything back: each :meth:`Renderer.render` is one recorded
sequence (camera in through host-visible memory, phases 1 and 2 of
:class:`~spirula.render.rasterizer.Rasterizer`, the intersection count out
through host-visible memory), evaluated once, recorded again only when the
image size, the splat count or a buffer's capacity changed. The image stays
on the GPU as a Kompute tensor the host binds in its own algorithms
(docs/embedding.md); :meth:`RenderResult.numpy` copies it out on request.

Conventions are :func:`spirula.rasterization`'s (docs/design.md §2): OpenCV
world->camera view matrices, pixel intrinsics with pixel centres at +0.5,
quaternions wxyz, activated scales and opacities unless ``activated=False``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from spirula.errors import SpirulaError, UsageError
from spirula.render.raster_buffers import CAMERA_FLOATS
from spirula.render.rasterizer import MAX_ALPHA, Rasterizer, Splats
from spirula.runtime.buffers import Buffer

# Intersections reserved per splat before the first frame has counted them,
# and the headroom over the most a frame has needed (as training's ISECT_HEADROOM).
ISECTS_PER_SPLAT_GUESS = 8
ISECT_HEADROOM = 1.25
_FRAME_IN_WORDS = CAMERA_FLOATS + 4  # camera (CAMERA_FLOATS, pack_cameras) + background (3) + pad
_SPLAT_FIELDS = ("means", "quats", "scales", "opacities", "sh_coeffs")


def activate_splats(params: dict) -> dict:
    """Raw splat parameters (``log_scales`` or ``scales`` as logs,
    ``opacity_logits`` or ``opacities`` as logits: a splat.ply as
    :func:`~spirula.data.ply.read_splat_ply` gives it, or a run's checkpoint)
    as float32 activated arrays for :meth:`Renderer.set_splats` and
    :func:`spirula.rasterization`: ``exp`` of the scales, ``sigmoid`` of the
    opacities, computed on the host in float32 (so both renderers get the
    same numbers)."""
    log_scales = np.asarray(params["log_scales"] if "log_scales" in params else params["scales"], np.float32)
    logits = np.asarray(params["opacity_logits"] if "opacity_logits" in params else params["opacities"], np.float32)
    sh = params["sh_coeffs"] if "sh_coeffs" in params else params["sh"]
    with np.errstate(over="ignore"):  # a huge logit saturates to 0 or 1, a huge log-scale to inf (culled)
        return dict(
            means=np.asarray(params["means"], np.float32),
            quats=np.asarray(params["quats"], np.float32),
            scales=np.exp(log_scales),
            opacities=(np.float32(1) / (np.float32(1) + np.exp(-logits))).astype(np.float32),
            sh_coeffs=np.asarray(sh, np.float32),
        )


@dataclasses.dataclass
class RenderResult:
    """One rendered frame, on the GPU.

    ``image``: the colour buffer's tensor (Vulkan: a ``kp.Tensor`` on the
    renderer's manager; CUDA: device memory, its address in :attr:`device_ptr`).
    Layout: ``height * width * 3`` float32, row-major RGB, no padding:
    pixel (row i, column j) channel c (0 red, 1 green, 2 blue) is element
    ``(i * width + j) * 3 + c``; row 0 is the top of the image. Colours are
    linear 0..1 (not clamped; the background composited). The tensor may be
    longer than that (its capacity is a multiple of 16 bytes); Kompute sees
    its elements as uint32 words, a shader declares them ``float``.
    ``alpha``: ``height * width`` float32 coverage (1 - transmittance), the same order.

    Both tensors are the renderer's and are overwritten by its next
    :meth:`Renderer.render`; they stay valid until a render with another
    image size (or :meth:`Renderer.close`), which may replace them.
    """

    image: object
    alpha: object
    width: int
    height: int
    n_intersections: int
    _renderer: Renderer = dataclasses.field(repr=False, default=None)
    _colors: Buffer = dataclasses.field(repr=False, default=None)
    _alphas: Buffer = dataclasses.field(repr=False, default=None)

    @property
    def device_ptr(self) -> int:
        """CUDA backend: the image's device address (``CUdeviceptr``)."""
        ptr = getattr(self.image, "ptr", None)
        if ptr is None:
            raise TypeError("device_ptr is the CUDA backend's; on Vulkan bind `image` (a kp.Tensor)")
        return int(ptr)

    def numpy(self) -> np.ndarray:
        """A copy of the image: [H,W,3] float32."""
        return self._renderer.device.readback(self._colors, shape=(self.height, self.width, 3))

    def alpha_numpy(self) -> np.ndarray:
        """A copy of the coverage: [H,W] float32."""
        return self._renderer.device.readback(self._alphas, shape=(self.height, self.width))

    def rgb8(self) -> np.ndarray:
        """The image as a viewer shows it: [H,W,3] uint8, equal to
        ``to_uint8(self.numpy())`` (spirula/render/video.py) bit for bit, converted
        on the GPU (``pack_rgba8``), so 4 bytes a pixel come back instead of 12.
        A view of a new [H,W] uint32 array of RGBA words (``np.ascontiguousarray``
        for a packed RGB buffer). Valid until the renderer's next render."""
        return self._renderer._rgb8(self)


class Renderer:
    """Renders one set of splats from any camera, keeping everything on the GPU.

    Args:
        manager: a host program's ``kp.Manager`` to render with (Vulkan). It
            stays the host's: the renderer never destroys it, and the host
            may keep using it after the renderer is closed or dropped.
        device: a :class:`~spirula.runtime.device.Device` to use; or, with
            ``manager``, the physical device index the manager was created
            with (needed only where several GPUs share a name); or, alone,
            the index of the device to open. Default: the process's
            device (:func:`spirula.get_device`) for Vulkan, device 0 for CUDA.
        backend: ``"vulkan"`` (default) or ``"cuda"``; on CUDA the image is
            device memory (:attr:`RenderResult.device_ptr`).
        max_alpha: the cap on one splat's alpha at a pixel (docs/design.md §2.4).
        background: default background colour [3] (black).

    Usage::

        r = spirula.Renderer(manager=mgr)
        r.load_ply("splat.ply")                      # or r.set_splats(...)
        out = r.render(viewmat, K, 1280, 720)        # out.image: a kp.Tensor on mgr
        rgb = out.numpy()                            # [720,1280,3], only if wanted
    """

    def __init__(
        self,
        manager=None,
        device=None,
        *,
        backend: str = "vulkan",
        max_alpha: float = MAX_ALPHA,
        background=None,
    ):
        from spirula.backends import check_backend, get_device, open_device
        from spirula.runtime.device import Device

        check_backend(backend)
        self._owns_device = False
        if isinstance(device, Device):
            if manager is not None and getattr(device, "mgr", None) is not manager:
                raise SpirulaError("Renderer: device and manager disagree (the device runs on another kp.Manager)")
            self.device = device
        elif manager is not None:
            if backend != "vulkan":
                raise SpirulaError("Renderer: a kp.Manager is Vulkan's; backend=%r cannot use it" % backend)
            self.device = open_device("vulkan", device, manager=manager)
            self._owns_device = True
        elif device is not None or backend != "vulkan":
            self.device = open_device(backend, device)
            self._owns_device = True
        else:
            self.device = get_device()
        if not 0.0 < max_alpha < 1.0:
            raise ValueError("max_alpha must be in (0, 1), got %r" % (max_alpha,))
        self.max_alpha = float(max_alpha)
        self.background = np.zeros(3, np.float32) if background is None else _colour(background)
        self.splats = None
        self.sh_degree = 0
        self._own_splats = False  # whether self.splats' buffers are the pool's (else the host's tensors)
        self._raster = None
        self._seq = None
        self._seq_key = None
        pool = self.device.pool
        self._frame_in = pool.alloc("renderer.frame_in", (_FRAME_IN_WORDS,), np.float32, "viewer", host=True)
        self._frame_out = pool.alloc("renderer.frame_out", (4,), np.uint32, "viewer", host=True)
        self._packed = None  # host-visible [H*W] uint32 RGBA8 words (RenderResult.rgb8)
        self._pack_seq = None
        self._pack_key = None

    @property
    def manager(self):
        """The ``kp.Manager`` the renderer runs on (Vulkan)."""
        return getattr(self.device, "mgr", None)

    # -- splats -------------------------------------------------------------------------
    def load_ply(self, path) -> Renderer:
        """Render the splats of a 3DGS ``splat.ply`` (:func:`~spirula.data.ply.read_splat_ply`;
        scales and opacities activated on the host by :func:`activate_splats`)."""
        from spirula.export import read_splats

        ply = read_splats(path, allow_empty=False)
        return self.set_splats(**activate_splats(ply), sh_degree=ply["sh_degree"])

    def set_splats(
        self, means, quats, scales, opacities, sh_coeffs, *, sh_degree: int | None = None, activated: bool = True
    ) -> Renderer:
        """The splats to render, from numpy arrays or from GPU tensors.

        numpy (any float dtype): uploaded into the renderer's buffers, reused
        while N and K are unchanged (no allocation). ``kp.Tensor`` s on the
        renderer's manager (Vulkan) or pool :class:`~spirula.runtime.buffers.Buffer` s:
        bound as they are, with no copy; they must stay alive and unchanged
        in size while the renderer uses them, and the host may update their
        contents between renders. Pass all five as one kind.

        Layouts (float32, row-major, no padding: docs/design.md §2.2):
        ``means`` [N,3] xyz; ``quats`` [N,4] wxyz (any norm); ``scales`` [N,3]
        and ``opacities`` [N], activated (positive scales, opacities in
        [0,1]) unless ``activated=False`` (log-scales and logits, as
        training stores them); ``sh_coeffs`` [N,K,3] coefficient-major
        (RGB innermost), K in 1, 4, 9, 16. Tensors give their N and K
        through their sizes (N from ``means``; K from ``sh_coeffs``).
        ``sh_degree``: the degree used (default the largest K allows).
        """
        arrays = (means, quats, scales, opacities, sh_coeffs)
        if all(isinstance(a, np.ndarray) or isinstance(a, (list, tuple)) for a in arrays):
            from spirula.render.api import check_splats

            means, quats, scales, opacities, sh_coeffs = check_splats(means, quats, scales, opacities, sh_coeffs)
            n, k = len(means), sh_coeffs.shape[1]
            self._check_counts(n, k)
            if not (self._own_splats and self.splats.n == n and self.splats.sh_coeffs == k):
                self._drop_splats()
                self.splats = Splats.alloc(self.device, n, k, activated, prefix="renderer.splat", category="viewer")
                self._own_splats = True
            self.splats.activated = bool(activated)
            for buf, arr in zip(self.splats.buffers(), (means, quats, scales, opacities, sh_coeffs)):
                self.device.upload(buf, arr)
        else:
            n = means.shape[0] if isinstance(means, Buffer) else _tensor_bytes(means) // 12
            bufs = []
            for name, a, width in zip(_SPLAT_FIELDS, arrays, (3, 4, 3, 1, None)):
                if isinstance(a, Buffer):
                    bufs.append(a)
                    continue
                if width is None:  # sh_coeffs: K from the size
                    shape = (n, _tensor_bytes(a) // (12 * n) if n else 0, 3)
                else:
                    shape = (n, width) if width > 1 else (n,)
                bufs.append(self._wrap(name, a, shape))
            sh = bufs[4]
            k = sh.shape[1] if len(sh.shape) == 3 else 0
            self._check_counts(n, k)
            for name, b, width in zip(_SPLAT_FIELDS, bufs, (3, 4, 3, 1, 3 * k)):
                if b.capacity < 4 * n * width:
                    raise SpirulaError(
                        "set_splats: %s holds %d bytes, %d splats need %d" % (name, b.capacity, n, 4 * n * width)
                    )
            self._drop_splats()
            self.splats = Splats(*bufs, activated=bool(activated))
            self._own_splats = False
        most = min(int(np.sqrt(self.splats.sh_coeffs)) - 1, 3)
        self.sh_degree = most if sh_degree is None else int(sh_degree)
        if not 0 <= self.sh_degree <= most:
            raise ValueError(
                "sh_degree %d needs 0..3 and (sh_degree+1)^2 <= K = %d" % (self.sh_degree, self.splats.sh_coeffs)
            )
        return self

    def use_splats(self, splats: Splats, sh_degree: int | None = None) -> Renderer:
        """Render a :class:`~spirula.render.rasterizer.Splats` already on this
        renderer's device (a trainer's ``model.params``: raw or activated,
        float32 or compact), bound with no copy. Buffers it reallocates
        (growth) are picked up at the next render. Binding the same object
        again (a live view, every training step) keeps the recorded sequence:
        it is recorded again only when N, K, the SH degree or a buffer changed."""
        if splats is not self.splats:
            self._drop_splats()
            self.splats, self._own_splats = splats, False
        most = min(int(np.sqrt(splats.sh_coeffs)) - 1, 3)
        self.sh_degree = most if sh_degree is None else int(sh_degree)
        return self

    @staticmethod
    def _check_counts(n: int, k: int):
        if n < 1:
            raise SpirulaError("set_splats: no splats (N = 0)")
        if k not in (1, 4, 9, 16):
            raise SpirulaError("set_splats: %d SH coefficients per channel, expected 1, 4, 9 or 16" % k)

    def _wrap(self, name: str, tensor, shape) -> Buffer:
        """A Buffer around a host's tensor (not the pool's: never freed here)."""
        nbytes = _tensor_bytes(tensor)
        return Buffer(self.device.pool, "host." + name, "viewer", np.float32, shape, nbytes, tensor, False)

    def _drop_splats(self):
        if self.splats is not None and self._own_splats:
            self.splats.free(self.device)
        self.splats = None
        self._seq = None

    # -- rendering ------------------------------------------------------------------------
    def render(
        self, viewmat, K, width: int, height: int, background=None, model: str = "PINHOLE", dist=None
    ) -> RenderResult:
        """Render the splats from one camera; the image stays on the GPU.

        Args:
            viewmat: [4,4] world->camera (OpenCV: x right, y down, z forward).
            K: [3,3] pixel intrinsics (fx, fy, cx, cy; pixel centres at +0.5).
            width, height: image size in pixels.
            background: [3] colour behind the splats (default: the renderer's).
            model: the lens, by COLMAP's name: ``"PINHOLE"`` (default), ``"OPENCV"``,
                ``"OPENCV_FISHEYE"`` or ``"EQUIRECTANGULAR"`` (docs/design.md §2.3;
                a dataset's ``Frame.model``).
            dist: its [12] parameters (k1..k6, p1, p2, s1..s4; ``Frame.dist``), None = zeros.
                A pinhole without ``dist`` packs the same camera record as before lenses.

        Returns:
            A :class:`RenderResult`; the GPU work is finished when it returns.
            With unchanged size and splat count nothing is allocated and no
            sequence is recorded: the frame is one sequence evaluation.
        """
        if self.splats is None:
            raise SpirulaError("Renderer.render: no splats yet (load_ply or set_splats first)")
        width, height = int(width), int(height)
        if width <= 0 or height <= 0:
            raise ValueError("image size must be positive, got %dx%d" % (width, height))
        viewmat = np.asarray(viewmat, np.float64).reshape(4, 4)
        K = np.asarray(K, np.float64).reshape(3, 3)
        if not (np.isfinite(viewmat).all() and np.isfinite(K).all()):
            raise SpirulaError("Renderer.render: the camera holds a non-finite value")
        model, dist = _lens(model, dist)
        raster = self._rasterizer(width, height)
        frame = self._frame_in.host_view()
        from spirula.render.rasterizer import pack_cameras

        frame[:CAMERA_FLOATS] = pack_cameras(viewmat[None], K[None], [model], None if dist is None else dist[None])[0]
        frame[CAMERA_FLOATS : CAMERA_FLOATS + 3] = self.background if background is None else _colour(background)
        while True:
            self._sequence(raster).run()
            m = int(self._frame_out.host_view()[0])
            if m <= raster.isect_capacity:
                break
            # too many intersections for the recorded capacity: grow and draw again
            raster.reserve(self.splats.n, m, isect_room=int(m * ISECT_HEADROOM))
        if m > raster.isect_keys.shape[0]:
            raster.reserve(self.splats.n, m)  # the live need: the most a frame has needed
        return RenderResult(
            raster.out_colors.tensor,
            raster.out_alphas.tensor,
            width,
            height,
            m,
            self,
            raster.out_colors,
            raster.out_alphas,
        )

    def _rasterizer(self, width: int, height: int) -> Rasterizer:
        r = self._raster
        if r is None or (r.width, r.height) != (width, height):
            if r is not None:
                r.free()
                self._raster = None
            n = self.splats.n
            r = Rasterizer(self.device, width, height, 1, capacity=n, name="renderer.raster", max_alpha=self.max_alpha)
            r.reserve(n, n * ISECTS_PER_SPLAT_GUESS)
            self._raster = r
            self._seq = None
        elif self.splats.n > r.capacity:
            r.reserve(self.splats.n)
        return r

    def _sequence(self, raster: Rasterizer):
        s = self.splats
        key = (id(raster), s.n, s.sh_coeffs, s.activated, self.sh_degree, raster.isect_capacity) + tuple(
            (id(b), b.version) for b in s.buffers()
        )
        if self._seq is None or self._seq_key != key or self._seq.stale:
            rec = self.device.recorder("renderer.frame")
            rec.copy(self._frame_in, raster.cameras, nbytes=4 * CAMERA_FLOATS)
            rec.copy(self._frame_in, raster.backgrounds, nbytes=12, src_offset=4 * CAMERA_FLOATS)
            raster.record_project(rec, s, self.sh_degree)
            raster.record_raster(rec)
            rec.copy(raster.offsets_scan.scratch, self._frame_out, nbytes=4, src_offset=4 * raster.total_offset)
            self._seq, self._seq_key = rec.finish(), key
        return self._seq

    def _rgb8(self, result: RenderResult) -> np.ndarray:
        """``pack_rgba8`` of ``result``'s colours into a host-visible buffer (the
        kernel writes mapped memory: no staging copy), then one host copy."""
        from spirula.render.pack import record_pack_rgba8, rgb8_view

        count = result.width * result.height
        if self._packed is None or self._packed.shape != (count,):
            if self._packed is not None:
                self.device.pool.free(self._packed)
            self._packed = self.device.pool.alloc("renderer.rgb8", (count,), np.uint32, "viewer", host=True)
            self._pack_seq = None
        key = (id(result._colors), id(result._colors.tensor), id(self._packed))
        if self._pack_seq is None or self._pack_key != key or self._pack_seq.stale:
            rec = self.device.recorder("renderer.rgb8")
            record_pack_rgba8(rec, result._colors, self._packed, count)
            self._pack_seq, self._pack_key = rec.finish(), key
        self._pack_seq.run()
        words = self._packed.host_view().reshape(result.height, result.width).copy()
        return rgb8_view(words)

    def close(self):
        """Free the renderer's GPU buffers (never the host's manager or tensors)."""
        if self._raster is not None:
            self._raster.free()
            self._raster = None
        self._drop_splats()
        if self._packed is not None:
            self.device.pool.free(self._packed)
            self._packed, self._pack_seq = None, None
        for b in (self._frame_in, self._frame_out):
            self.device.pool.free(b)
        if self._owns_device:
            self.device.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _lens(model, dist):
    """(model name, [12] float64 or None) of Renderer.render's lens arguments, checked."""
    from spirula.render.raster_buffers import CAMERA_MODELS, DIST_PARAMS

    if model not in CAMERA_MODELS:
        raise UsageError("camera model %r: expected one of %s" % (model, ", ".join(CAMERA_MODELS)))
    if dist is not None:
        dist = np.asarray(dist, np.float64).reshape(-1)
        if dist.shape != (DIST_PARAMS,) or not np.isfinite(dist).all():
            raise UsageError("dist: expected %d finite numbers (k1..k6, p1, p2, s1..s4)" % DIST_PARAMS)
    return model, dist


def _colour(value) -> np.ndarray:
    c = np.asarray(value, np.float32).reshape(-1)
    if c.shape != (3,) or not np.isfinite(c).all():
        raise UsageError("background: expected 3 finite numbers (RGB 0..1), got %r" % (value,))
    return c


def _tensor_bytes(tensor) -> int:
    """Bytes of a ``kp.Tensor`` (Spirula's storage tensors are 32-bit words;
    a host's tensor says its element size through its data) or of CUDA memory."""
    if hasattr(tensor, "nbytes"):
        return int(tensor.nbytes)
    size = int(tensor.size())
    try:
        import kp

        if tensor.tensor_type() == kp.TensorTypes.storage:
            return 4 * size
    except ImportError:
        pass
    return size * tensor.data().dtype.itemsize
