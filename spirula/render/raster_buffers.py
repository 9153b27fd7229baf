"""The rasterizer's buffers: what one render of C cameras (W x H) needs, how
each grows with the splats and intersections, and which one a kernel binds
under which name. :class:`~spirula.render.rasterizer.Rasterizer` records the
kernels over them.

- images [C,H,W(,3)]: the outputs (colour, alpha, depth, last contributor,
  median depth), their cotangents, and with ``geometry`` / ``normals`` the
  distortion and normal images; category ``image``.
- per view [C*N, width] (``splat x img``): each splat's projection in each
  camera, its sort keys, and its gradients (:data:`PER_VIEW`); shaped for the
  live splats, allocated for ``capacity`` (grown by 1.25x, or to ``room``).
- intersections [M] and the backward's chunk state and table: allocated for
  ``isect_capacity``, shaped for the most asked for so far.
- a one-word placeholder for each buffer a variant leaves out (a kernel binds
  every binding; DISTORTION / NORMALS off never read them).

The tile size, the camera record's floats and the chunk state's channels are
the kernels' own, read from shaders/include (spirula/contract/constants.py).
"""

from __future__ import annotations

import math

import numpy as np

from spirula.contract.constants import shader_constant
from spirula.render.scan import PrefixSum
from spirula.render.sort import RadixSort
from spirula.runtime.buffers import Buffer

TILE = shader_constant("include/raster.glsl", "TILE")  # pixels a side of a tile
# chunk_state channels every variant has: T, colour, depth (then normal x 3, distortion)
CHUNK_BASE_CHANNELS = shader_constant("include/raster.glsl", "CHUNK_BASE_CHANNELS")
CAMERA_FLOATS = shader_constant("include/camera.glsl", "CAMERA_FLOATS")  # one camera record
# the lens models the kernels project through (shaders/include/camera.glsl), by COLMAP's names
CAMERA_MODELS = {
    name: shader_constant("include/camera.glsl", "CAMERA_" + name)
    for name in ("PINHOLE", "OPENCV", "OPENCV_FISHEYE", "EQUIRECTANGULAR")
}
DIST_PARAMS = CAMERA_FLOATS - 20  # k1, k2, k3, k4, k5, k6, p1, p2, s1, s2, s3, s4 (slots 20..31)


def tile_grid(width: int, height: int) -> tuple:
    return -(-width // TILE), -(-height // TILE)


def lens_limit(model: int, dist) -> float:
    """The record's slot 13, the lens's valid limit (include/projection.glsl lens_valid):
    OPENCV the largest r^2 = (x/z)^2 + (y/z)^2 (r <= 10) before d r_d / d r of the radial
    distortion stops being positive; OPENCV_FISHEYE the largest theta (<= pi - 0.01) before
    d theta_d / d theta does; 0 otherwise. Sampled on 4000 steps (the reference's twin)."""
    d = np.zeros(DIST_PARAMS) if dist is None else np.asarray(dist, np.float64)
    k1, k2, k3, k4, k5, k6 = d[:6]
    if model == CAMERA_MODELS["OPENCV"]:
        r = np.linspace(0.0, 10.0, 4001)[1:]
        r2 = r * r
        with np.errstate(all="ignore"):
            rd = r * (1 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1 + r2 * (k4 + r2 * (k5 + r2 * k6)))
        x = r2
    elif model == CAMERA_MODELS["OPENCV_FISHEYE"]:
        x = np.linspace(0.0, np.pi - 0.01, 4001)[1:]
        t2 = x * x
        rd = x * (1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))
    else:
        return 0.0
    bad = np.nonzero((np.diff(np.concatenate([[0.0], rd])) <= 0) | ~np.isfinite(rd))[0]
    return float(x[-1] if len(bad) == 0 else (x[bad[0] - 1] if bad[0] > 0 else 0.0))


def pack_cameras(viewmats, Ks, models=None, dists=None) -> np.ndarray:
    """[C,CAMERA_FLOATS] float32 camera records (shaders/include/camera.glsl): viewmat (4x4
    row-major) whose last row holds the model id (CAMERA_MODELS; ``models`` [C] of ids or
    names, default PINHOLE) and lens_limit, then fx, fy, cx, cy, then ``dists`` [C,12]
    (k1..k6, p1, p2, s1..s4; default 0). A pinhole record is today's: zeros past fx..cy."""
    viewmats = np.asarray(viewmats, np.float64).reshape(-1, 4, 4)
    Ks = np.asarray(Ks, np.float64).reshape(-1, 3, 3)
    C = len(viewmats)
    out = np.zeros((C, CAMERA_FLOATS), np.float32)
    out[:, :12] = viewmats.reshape(-1, 16)[:, :12]
    out[:, 16] = Ks[:, 0, 0]
    out[:, 17] = Ks[:, 1, 1]
    out[:, 18] = Ks[:, 0, 2]
    out[:, 19] = Ks[:, 1, 2]
    if models is not None:
        ids = [CAMERA_MODELS[m] if isinstance(m, str) else int(m) for m in np.broadcast_to(np.asarray(models), (C,))]
        if not set(ids) <= set(CAMERA_MODELS.values()):
            raise ValueError("camera models %s: not in %s" % (sorted(set(ids)), CAMERA_MODELS))
        d = (
            np.zeros((C, DIST_PARAMS))
            if dists is None
            else np.broadcast_to(np.asarray(dists, np.float64), (C, DIST_PARAMS))
        )
        out[:, 12] = ids
        out[:, 13] = [lens_limit(m, d[c]) for c, m in enumerate(ids)]
        out[:, 20:] = d
    return out


class RasterBuffers:
    """Every buffer a render of ``n_cameras`` cameras of ``width`` x ``height``
    needs (module docstring), from ``device``'s pool, named ``<name>.<buffer>``.
    ``chunk``: tile-list entries one ``rasterize_bwd`` workgroup walks (the
    chunk state's size); ``geometry``, ``normals``: allocate the distortion's
    and the normals' buffers (else placeholders); ``capacity``,
    ``isect_capacity``: splats and intersections to start with room for."""

    def __init__(
        self,
        device,
        width: int,
        height: int,
        n_cameras: int,
        capacity: int,
        isect_capacity: int,
        name: str,
        geometry: bool,
        normals: bool,
        chunk: int,
    ):
        self.device = device
        self.chunk = chunk
        self.width, self.height, self.n_cameras = int(width), int(height), int(n_cameras)
        self.tile_width, self.tile_height = tile_grid(self.width, self.height)
        self.tiles = self.tile_width * self.tile_height
        self.name = name
        pool = device.pool
        C, H, W = self.n_cameras, self.height, self.width
        self.cameras = pool.alloc(name + ".cameras", (C, CAMERA_FLOATS), np.float32, "other")
        self.backgrounds = pool.alloc(name + ".backgrounds", (C, 3), np.float32, "other", zero=True)
        self.counts = pool.alloc(name + ".counts", (4,), np.uint32, "other", zero=True)
        self.ranges = pool.alloc(name + ".ranges", (C * self.tiles, 2), np.uint32, "image")
        self.out_colors = pool.alloc(name + ".colors", (C, H, W, 3), np.float32, "image")
        self.out_alphas = pool.alloc(name + ".alphas", (C, H, W), np.float32, "image")
        self.out_depths = pool.alloc(name + ".depths", (C, H, W), np.float32, "image")
        self.out_last = pool.alloc(name + ".last", (C, H, W), np.uint32, "image")
        # median depth (the depth where T crosses 0.5; 0: never): meshing's depth, written by
        # every forward (training too: one select per blended Gaussian)
        self.out_median = pool.alloc(name + ".median", (C, H, W), np.float32, "image")
        self.grad_colors = pool.alloc(name + ".grad_colors", (C, H, W, 3), np.float32, "image", zero=True)
        self.grad_alphas = pool.alloc(name + ".grad_alphas", (C, H, W), np.float32, "image", zero=True)
        self.geometry = bool(geometry)
        if self.geometry:
            self.out_distort = pool.alloc(name + ".distort", (C, H, W), np.float32, "image")
            self.grad_distort = pool.alloc(name + ".grad_distort", (C, H, W), np.float32, "image", zero=True)
        else:  # bound, never read or written (DISTORTION is off); restrict bindings need two
            self.out_distort = self.grad_distort = pool.alloc(name + ".unused", (1,), np.float32, "other")
            self._unused_depth = pool.alloc(name + ".unused_depth", (1,), np.float32, "other")
        self.normals = bool(normals)
        if self.normals:
            # camera-space normal image, sum of n w (not normalized, no background), and the
            # cotangents of it and of the depth image out_depths (rasterize_bwd with NORMALS)
            self.out_normals = pool.alloc(name + ".normals", (C, H, W, 3), np.float32, "image")
            self.grad_normal_image = pool.alloc(
                name + ".grad_normal_image", (C, H, W, 3), np.float32, "image", zero=True
            )
            self.grad_depth_image = pool.alloc(name + ".grad_depth_image", (C, H, W), np.float32, "image", zero=True)
        else:  # bound, never read or written (NORMALS is off)
            self.out_normals = pool.alloc(name + ".unused_normals", (1,), np.float32, "other")
            self._unused_splat_normals = pool.alloc(name + ".unused_splat_normals", (4,), np.float32, "other")
            self.grad_normal_image = pool.alloc(name + ".unused_grad_normal_image", (1,), np.float32, "other")
            self.grad_depth_image = pool.alloc(name + ".unused_grad_depth_image", (1,), np.float32, "other")
            self._unused_grad_normals = pool.alloc(name + ".unused_grad_normals", (1,), np.float32, "other")
        # chunk_state channels (shaders/include/raster.glsl): T, colour, depth, normal, distortion
        self.chunk_channels = CHUNK_BASE_CHANNELS + 3 * self.normals + self.geometry
        self.capacity = 0
        self.isect_capacity = 0
        self._per_view = {}
        self._isect = {}
        self._chunks = {}
        self.depth_sort = RadixSort(device, 1, name + ".depth_sort")
        self.tile_sort = RadixSort(device, 1, name + ".tile_sort")
        self.offsets_scan = PrefixSum(device, 1, name=name + ".offsets_scan")
        self.reserve(capacity, isect_capacity)

    _PER_VIEW = (
        ("xyop", 4, np.float32),
        ("conics", 4, np.float32),
        ("rgb", 4, np.float32),
        ("radii", 2, np.int32),
        ("tile_counts", 1, np.uint32),
        ("depth_keys", 1, np.uint32),
        ("depth_ids", 1, np.uint32),
        ("depth_keys_tmp", 1, np.uint32),
        ("depth_ids_tmp", 1, np.uint32),
        ("offsets", 1, np.uint32),
        ("grad_xy", 2, np.float32),
        ("grad_conics", 3, np.float32),
        ("grad_rgb", 3, np.float32),
        ("grad_opacity", 1, np.float32),
        ("grad_xy_abs", 2, np.float32),
    )
    _GEOMETRY_VIEWS = (("grad_depth", 1, np.float32),)  # with geometry: dL/d depth (distortion)
    # with normals: camera-space splat normals, dL/d them
    _NORMAL_VIEWS = (("splat_normals", 4, np.float32), ("grad_normals", 3, np.float32))
    _SCRATCH = ("depth_keys_tmp", "depth_ids_tmp", "isect_keys_tmp", "isect_ids_tmp")

    def row_bytes(self) -> dict:
        """Bytes per splat of every per-view buffer (all cameras), by buffer name."""
        return {name: self.n_cameras * width * np.dtype(dtype).itemsize for name, width, dtype in self._views()}

    def _views(self) -> tuple:
        """(name, width, dtype) of every per-view buffer."""
        return (
            self._PER_VIEW
            + (self._GEOMETRY_VIEWS if self.geometry or self.normals else ())
            + (self._NORMAL_VIEWS if self.normals else ())
        )

    def max_isects(self) -> int:
        """The most intersections the intersection buffers (and the chunk state) can bind
        on this device."""
        info = self.device.info
        rng = info.max_storage_buffer_range if info is not None else 1 << 62
        return min(rng // 4, rng // (4 * TILE * TILE * self.chunk_channels) * self.chunk)

    def isect_bytes(self) -> float:
        """Bytes per intersection: the four intersection buffers and the chunk state."""
        return 16 + 4 * TILE * TILE * self.chunk_channels / self.chunk

    def chunk_ids(self, isect_capacity: int) -> int:
        """Entries of the chunk table (rasterize_bwd's workgroups) for ``isect_capacity``."""
        return self.n_cameras * self.tiles + -(-int(isect_capacity) // self.chunk) + 1

    def _chunk_shapes(self, n_isects: int) -> dict:
        """Shapes of the chunk buffers for ``n_isects`` intersections."""
        slots = -(-int(n_isects) // self.chunk)
        return dict(
            chunk_state=((slots, self.chunk_channels, TILE * TILE), np.float32),
            chunk_table=((self.chunk_ids(n_isects), 2), np.uint32),
        )

    def reserve(
        self, n_gaussians: int, n_isects: int = 0, room: int | None = None, isect_room: int | None = None
    ) -> bool:
        """Room for ``n_gaussians`` and ``n_isects``; True if any buffer was reallocated
        (sequences recorded before must be recorded again).

        Growth allocates ``room`` Gaussians (``isect_room`` intersections) when
        given (also shrinking a capacity past 1.3x ``n_gaussians``), else 1.25x
        the old capacity. The per-view buffers are shaped for
        ``n_gaussians`` and the intersection buffers for the most
        intersections asked for so far: the live need (BufferPool.live_bytes)."""
        grew = False
        pool = self.device.pool
        n_gaussians, n_isects = max(int(n_gaussians), 1), max(int(n_isects), 1)
        # given room, a capacity past 1.3x the count shrinks (after ADC pruned)
        if n_gaussians > self.capacity or (room is not None and self.capacity > 1.3 * n_gaussians):
            cap = max(n_gaussians, int(room) if room is not None else int(self.capacity * 1.25))
            rows = self.n_cameras * cap
            for name, width, dtype in self._views():
                shape = (rows, width) if width > 1 else (rows,)
                buf = self._per_view.get(name)
                if buf is None:
                    self._per_view[name] = pool.alloc(
                        "%s.%s" % (self.name, name), shape, dtype, "splat x img", scratch=name in self._SCRATCH
                    )
                else:
                    pool.resize(buf, (min(buf.shape[0], rows),) + buf.shape[1:], keep=False)
                    pool.reserve(buf, rows * width * np.dtype(dtype).itemsize, keep=False)
            self.capacity = cap
            self.depth_sort.reserve(rows)
            self.offsets_scan.reserve(rows)
            grew = True
        self._shape_views(n_gaussians)
        if n_isects > self.isect_capacity or (isect_room is not None and isect_room > self.isect_capacity):
            most = self.max_isects()
            if n_isects > most:
                from spirula.errors import OutOfMemoryError
                from spirula.runtime.buffers import fmt_bytes

                raise OutOfMemoryError(
                    "%s: %s intersections need %s per buffer but %s binds at most %s (%s intersections);"
                    " lower the splat count (--cap-max, --vram-budget) or the image size (--downscale)"
                    % (
                        self.name,
                        f"{n_isects:,}",
                        fmt_bytes(4 * n_isects),
                        self.device.info.name,
                        fmt_bytes(4 * most),
                        f"{most:,}",
                    )
                )
            cap = max(n_isects, int(isect_room) if isect_room is not None else int(self.isect_capacity * 1.25))
            cap = min(cap, most)
            for name in ("isect_keys", "isect_ids", "isect_keys_tmp", "isect_ids_tmp"):
                buf = self._isect.get(name)
                if buf is None:
                    self._isect[name] = pool.alloc(
                        "%s.%s" % (self.name, name),
                        (n_isects,),
                        np.uint32,
                        "splat x img",
                        scratch=name in self._SCRATCH,
                        capacity=4 * cap,
                    )
                else:
                    pool.reserve(buf, 4 * cap, keep=False)
            room = self._chunk_shapes(cap)
            for name, (shape, dtype) in self._chunk_shapes(n_isects).items():
                nbytes = math.prod(room[name][0]) * np.dtype(dtype).itemsize
                buf = self._chunks.get(name)
                if buf is None:
                    self._chunks[name] = pool.alloc(
                        "%s.%s" % (self.name, name), shape, dtype, "splat x img", capacity=nbytes
                    )
                else:
                    pool.reserve(buf, nbytes, keep=False)
            self.isect_capacity = cap
            self.tile_sort.reserve(cap)
            grew = True
        for buf in self._isect.values():
            if n_isects > buf.shape[0]:
                pool.resize(buf, (n_isects,), keep=False)
        for name, (shape, _) in self._chunk_shapes(n_isects).items():
            buf = self._chunks[name]
            if shape[0] > buf.shape[0]:
                pool.resize(buf, shape, keep=False)
        return grew

    def _shape_views(self, n: int):
        """Shape the per-view buffers for ``n`` Gaussians (no reallocation: n <= capacity)."""
        rows = self.n_cameras * max(int(n), 1)
        pool = self.device.pool
        for name, width, _ in self._views():
            buf = self._per_view[name]
            if buf.shape[0] != rows:
                pool.resize(buf, (rows, width) if width > 1 else (rows,), keep=False)

    def __getattr__(self, name):
        views = self.__dict__.get("_per_view", {})
        if name in views:
            return views[name]
        isect = self.__dict__.get("_isect", {})
        if name in isect:
            return isect[name]
        chunks = self.__dict__.get("_chunks", {})
        if name in chunks:
            return chunks[name]
        raise AttributeError(name)

    def set_cameras(self, viewmats, Ks, models=None, dists=None):
        """Upload C world->camera matrices [C,4,4] and intrinsics [C,3,3] (and lenses:
        pack_cameras)."""
        packed = pack_cameras(viewmats, Ks, models, dists)
        if len(packed) != self.n_cameras:
            raise ValueError("%s: %d cameras given, built for %d" % (self.name, len(packed), self.n_cameras))
        self.device.upload(self.cameras, packed)

    def set_backgrounds(self, backgrounds):
        """Upload background colours [C,3] (None: black)."""
        bg = (
            np.zeros((self.n_cameras, 3), np.float32)
            if backgrounds is None
            else np.broadcast_to(np.asarray(backgrounds, np.float32), (self.n_cameras, 3))
        )
        self.device.upload(self.backgrounds, np.ascontiguousarray(bg))

    @property
    def total_offset(self) -> int:
        """Where the intersection count lies in ``offsets_scan.scratch`` (for n Gaussians)."""
        return self.offsets_scan.total_offset(self.n_cameras * self._n)

    def num_intersections(self) -> int:
        """The intersection count of the last phase 1 run (a readback)."""
        return int(
            self.device.readback(self.offsets_scan.scratch, shape=(1,), dtype=np.uint32, offset=4 * self.total_offset)[
                0
            ]
        )

    # binding name -> per-view buffer, and the placeholder bound when the variant has none
    _VIEW_ALIASES = {"normals": "splat_normals"}
    _PLACEHOLDERS = {
        "grad_depth": "_unused_depth",
        "splat_normals": "_unused_splat_normals",
        "grad_normals": "_unused_grad_normals",
    }

    def bindings(self, *names) -> dict:
        """Buffers as the kernels bind them, by name: ``{name: buffer}``. A name
        is a per-view buffer (``normals``: the splat normals [C*N,4]), an
        intersection or chunk buffer, or an image or camera buffer attribute
        (``out_colors``, ``cameras``); a per-view buffer this variant lacks
        (``grad_depth`` without geometry or normals, the normals' without
        normals) binds its one-word placeholder."""
        out = {}
        for name in names:
            key = self._VIEW_ALIASES.get(name, name)
            buf = self._per_view.get(key, self._isect.get(key, self._chunks.get(key)))
            if buf is None:
                buf = getattr(self, self._PLACEHOLDERS.get(key, key), None)
            if not isinstance(buf, Buffer):
                raise KeyError("%s: no buffer %s" % (self.name, name))
            out[name] = buf
        return out

    def intersections(self) -> tuple:
        """The last forward's tile-sorted intersections, read back: (tile keys
        [M] = camera * tiles + tile, ids [M] = camera * N + Gaussian), uint32."""
        m = min(self.num_intersections(), self.isect_capacity)
        keys = (
            self._isect["isect_keys"] if self._isect_ids is self._isect["isect_ids"] else self._isect["isect_keys_tmp"]
        )
        return (self.device.readback(keys, shape=(m,)), self.device.readback(self._isect_ids, shape=(m,)))

    def free(self):
        """Return every buffer of this rasterizer to the pool."""
        pool = self.device.pool
        for buf in (
            list(self._per_view.values())
            + list(self._isect.values())
            + list(self._chunks.values())
            + [
                self.cameras,
                self.backgrounds,
                self.counts,
                self.ranges,
                self.out_colors,
                self.out_alphas,
                self.out_depths,
                self.out_last,
                self.out_median,
                self.out_distort,
                self.grad_colors,
                self.grad_alphas,
                self.depth_sort.hist,
                self.depth_sort.scan.scratch,
                self.tile_sort.hist,
                self.tile_sort.scan.scratch,
                self.offsets_scan.scratch,
            ]
            + ([self.grad_distort] if self.geometry else [self._unused_depth])
            + [self.out_normals, self.grad_normal_image, self.grad_depth_image]
            + ([] if self.normals else [self._unused_splat_normals, self._unused_grad_normals])
        ):
            pool.free(buf)
