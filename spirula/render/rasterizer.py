"""The differentiable Gaussian rasterizer, resident on the GPU.

:class:`Rasterizer` owns every buffer one render of C cameras (W x H) needs
and records its kernels into a :class:`~spirula.runtime.sequence.Recorder`:

forward, phase 1 (:meth:`record_project`)
    ``projection_fwd`` -> depth sort (:class:`RadixSort`, 32 bits) ->
    ``intersect_tile_count`` -> ``prefix_sum``: each visible Gaussian's
    first intersection slot, front to back; the total is on the GPU.
forward, phase 2 (:meth:`record_raster`)
    ``intersect_tile_write`` -> tile sort (stable, ceil(log2(C*T)) bits) ->
    ``tile_ranges`` -> ``rasterize_fwd``.
backward (:meth:`record_backward`)
    ``rasterize_chunks`` -> ``rasterize_bwd`` -> ``projection_bwd``.

Tile-list splitting (docs/design.md §2.4): ``rasterize_bwd`` runs one workgroup per chunk
of ``chunk`` entries of a tile's list, starting from the state ``rasterize_fwd`` left at
the chunk's end (``chunk_state``); ``rasterize_chunks`` writes which chunk each workgroup
runs (``chunk_table``).

Sorting by depth first (C*N keys) and then only by tile (M keys, 1-2 passes)
is far cheaper than one 64-bit sort of M (tile, depth) keys, and gives the
same order: tile-major, then depth, then index.

The intersection buffers have a capacity; phase 2 is recorded for it and
reads the true count on the GPU. :meth:`forward` (used by the numpy API)
runs phase 1, reads the count back and sizes phase 2 exactly.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from spirula import settings
from spirula.render.scan import PrefixSum
from spirula.render.sort import RadixSort
from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import Threads

TILE = 16
EPS2D = 0.3
MAX_ALPHA = 0.99  # docs/design.md §2.4 (Inria, gsplat main); gsplat 1.5.3 uses 0.999
NEAR_PLANE = 0.01
FAR_PLANE = 1e10
# rasterize_bwd's chunk: tile-list entries a backward workgroup walks (a multiple of TILE * TILE;
# docs/design.md §2.4). SPIRULA_RASTER_CHUNK overrides it (benchmark sweeps). 1024: the fastest
# of 1024/2048/4096 on the H200 (training step at 256x256 with 1M splats 6.7/7.1/8.1 ms, with
# 100k 1.5/1.9 ms; notes/performance-history.md, "Tile-list splitting"); smaller chunks write more boundary state.
CHUNK = 1024
CHUNK_ENV = settings.RASTER_CHUNK.name
CHUNK_NONE = 0xFFFFFFFF  # a chunk_table entry of no chunk (shaders/include/raster.glsl)
# The kernels' own constants, for host code that must agree with what they draw (the
# mesh's bounds and colours): shaders/include/projection.glsl and sh.glsl
ALPHA_THRESHOLD = 1.0 / 255.0  # a splat fainter than this is not drawn, nor a fainter pixel of one
RADIUS_SIGMAS = 3.33  # a splat's extent cap, in standard deviations (opacity_extent)
SH_C0 = 0.2820947917738781  # the degree-0 SH basis: base colour = 0.5 + SH_C0 * f_dc


@dataclasses.dataclass
class Splats:
    """Gaussian parameters on the GPU, one pool buffer each (category ``splat``).

    means [N,3], quats [N,4] (wxyz, any norm), scales [N,3], opacities [N],
    sh [N,K,3], all float32. ``activated``: scales and opacities hold the
    activated values (the numpy API); otherwise log-scales and opacity logits
    (training).
    """

    means: Buffer
    quats: Buffer
    scales: Buffer
    opacities: Buffer
    sh: Buffer
    activated: bool = True
    # compact storage (training with --compact): K, and sh holds
    # spirula/train/storage.py's rows [N, W] uint32; 0: sh is [N,K,3] float32
    sh_k: int = 0

    @property
    def n(self) -> int:
        return self.means.shape[0]

    @property
    def sh_coeffs(self) -> int:
        return self.sh_k or self.sh.shape[1]

    @property
    def compact(self) -> bool:
        return self.sh_k > 0

    @classmethod
    def alloc(
        cls, device, n: int, sh_coeffs: int, activated: bool = True, prefix: str = "splat", category: str = "splat"
    ) -> Splats:
        pool = device.pool
        return cls(
            pool.alloc(prefix + ".means", (n, 3), np.float32, category),
            pool.alloc(prefix + ".quats", (n, 4), np.float32, category),
            pool.alloc(prefix + ".scales", (n, 3), np.float32, category),
            pool.alloc(prefix + ".opacities", (n,), np.float32, category),
            pool.alloc(prefix + ".sh", (n, sh_coeffs, 3), np.float32, category),
            activated,
        )

    @classmethod
    def from_numpy(
        cls, device, means, quats, scales, opacities, sh, activated: bool = True, prefix: str = "splat"
    ) -> Splats:
        sh = np.asarray(sh, np.float32)
        s = cls.alloc(device, len(means), sh.shape[1], activated, prefix)
        for buf, arr in zip(s.buffers(), (means, quats, scales, opacities, sh)):
            device.upload(buf, np.asarray(arr, np.float32))
        return s

    def buffers(self) -> tuple:
        return (self.means, self.quats, self.scales, self.opacities, self.sh)

    def to_numpy(self, device) -> dict:
        return {
            name: device.readback(buf)
            for name, buf in zip(("means", "quats", "scales", "opacities", "sh"), self.buffers())
        }

    def free(self, device):
        for b in self.buffers():
            device.pool.free(b)


def default_chunk() -> int:
    """The backward's chunk: ``$SPIRULA_RASTER_CHUNK`` if set, else :data:`CHUNK`."""
    text = settings.raster_chunk()
    if not text:
        return CHUNK
    try:
        return check_chunk(int(text))
    except ValueError:
        from spirula.errors import SpirulaError

        raise SpirulaError(
            "%s=%r: the chunk must be a positive multiple of %d" % (CHUNK_ENV, text, TILE * TILE)
        ) from None


def check_chunk(chunk: int) -> int:
    """``chunk`` if it is a positive multiple of TILE * TILE, else a ValueError."""
    chunk = int(chunk)
    if chunk <= 0 or chunk % (TILE * TILE):
        raise ValueError("the chunk must be a positive multiple of %d, got %d" % (TILE * TILE, chunk))
    return chunk


def tile_grid(width: int, height: int) -> tuple:
    return -(-width // TILE), -(-height // TILE)


def pack_cameras(viewmats, Ks) -> np.ndarray:
    """[C,20] float32: viewmat (4x4 row-major) then fx, fy, cx, cy."""
    viewmats = np.asarray(viewmats, np.float64).reshape(-1, 4, 4)
    Ks = np.asarray(Ks, np.float64).reshape(-1, 3, 3)
    out = np.zeros((len(viewmats), 20), np.float32)
    out[:, :16] = viewmats.reshape(-1, 16)
    out[:, 16] = Ks[:, 0, 0]
    out[:, 17] = Ks[:, 1, 1]
    out[:, 18] = Ks[:, 0, 2]
    out[:, 19] = Ks[:, 1, 2]
    return out


class Rasterizer:
    """Buffers and recorded kernels to render and back-propagate C cameras.

    Args:
        device: a :class:`~spirula.runtime.device.Device` (either backend).
        width, height: image size (all cameras).
        n_cameras: C, cameras rendered together.
        capacity: Gaussians to reserve room for (grows with :meth:`reserve`).
        isect_capacity: intersections to reserve room for.
        max_alpha: the cap on one Gaussian's alpha at a pixel (0.99: docs/design.md §2.4;
            gsplat 1.5.3 uses 0.999).
        geometry: allocate the depth distortion's buffers (``out_distort``, ``grad_distort``
            [C,H,W] and the per-view ``grad_depth`` [C*N]) so that :meth:`record_raster` and
            :meth:`record_raster_backward` can be recorded with ``distortion=True``
            (training with --geometry); without it they bind a one-word placeholder.
        normals: allocate the splat normals [C*N,4] and the normal image ``out_normals``
            [C,H,W,3] so that :meth:`record_project` and :meth:`record_raster` can be recorded
            with ``normals=True`` (--geometry's normal consistency); without it they bind a
            one-word placeholder.
        chunk: tile-list entries one ``rasterize_bwd`` workgroup walks, a multiple of 256
            (default :func:`default_chunk`: ``$SPIRULA_RASTER_CHUNK`` or :data:`CHUNK`).
    """

    def __init__(
        self,
        device,
        width: int,
        height: int,
        n_cameras: int = 1,
        capacity: int = 1,
        isect_capacity: int = 1,
        name: str = "raster",
        max_alpha: float = MAX_ALPHA,
        geometry: bool = False,
        normals: bool = False,
        chunk: int | None = None,
    ):
        if not 0.0 < max_alpha < 1.0:
            raise ValueError("max_alpha must be in (0, 1), got %r" % (max_alpha,))
        self.device = device
        self.max_alpha = float(max_alpha)
        self.chunk = default_chunk() if chunk is None else check_chunk(chunk)
        self.width, self.height, self.n_cameras = int(width), int(height), int(n_cameras)
        self.tile_width, self.tile_height = tile_grid(self.width, self.height)
        self.tiles = self.tile_width * self.tile_height
        self.name = name
        pool = device.pool
        C, H, W = self.n_cameras, self.height, self.width
        self.cameras = pool.alloc(name + ".cameras", (C, 20), np.float32, "other")
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
        self.chunk_channels = 5 + 3 * self.normals + self.geometry
        self.capacity = 0
        self.isect_capacity = 0
        self._per_view = {}
        self._isect = {}
        self._chunks = {}
        self._forward_flags = None
        self.depth_sort = RadixSort(device, 1, name + ".depth_sort")
        self.tile_sort = RadixSort(device, 1, name + ".tile_sort")
        self.offsets_scan = PrefixSum(device, 1, name=name + ".offsets_scan")
        self.reserve(capacity, isect_capacity)

    # -- buffers ------------------------------------------------------------------
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

    def set_cameras(self, viewmats, Ks):
        """Upload C world->camera matrices [C,4,4] and intrinsics [C,3,3]."""
        packed = pack_cameras(viewmats, Ks)
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

    # -- recording ----------------------------------------------------------------
    def _spec(self, splats: Splats, sh_degree: int) -> dict:
        if (sh_degree + 1) ** 2 > splats.sh_coeffs:
            raise ValueError(
                "sh_degree %d needs %d SH coefficients, the splats have %d"
                % (sh_degree, (sh_degree + 1) ** 2, splats.sh_coeffs)
            )
        return dict(SH_DEGREE=sh_degree, SH_COEFFS=splats.sh_coeffs, ACTIVATED=int(splats.activated))

    def _check_normals(self, normals: bool):
        if normals and not self.normals:
            raise ValueError("%s: the normal image needs a Rasterizer made with normals=True" % self.name)

    def splat_normals_binding(self):
        """The per-view splat normals [C*N,4] (normals), else a placeholder to bind."""
        return self._per_view["splat_normals"] if self.normals else self._unused_splat_normals

    def record_project(self, rec, splats: Splats, sh_degree: int, normals: bool = False):
        """Phase 1: project, sort by depth, count and scan the tile overlaps. ``normals``:
        also write each splat's camera-space normal (needs ``normals``)."""
        self._check_normals(normals)
        n = splats.n
        if n > self.capacity:
            raise ValueError("%s: %d Gaussians exceed the reserved %d" % (self.name, n, self.capacity))
        self._n = n
        rows = self.n_cameras * n
        self._shape_views(n)
        self.device.upload(self.counts, np.array([rows, 0, 0, 0], np.uint32))
        v = self._per_view
        rec.dispatch(
            "projection_fwd",
            Threads(rows),
            dict(
                means=splats.means,
                quats=splats.quats,
                scales=splats.scales,
                opacities=splats.opacities,
                sh=splats.sh,
                cameras=self.cameras,
                xyop=v["xyop"],
                conics=v["conics"],
                rgb=v["rgb"],
                radii=v["radii"],
                tile_counts=v["tile_counts"],
                depth_keys=v["depth_keys"],
                depth_ids=v["depth_ids"],
                normals=self.splat_normals_binding(),
            ),
            push=dict(
                n=n,
                n_cameras=self.n_cameras,
                width=self.width,
                height=self.height,
                tile_width=self.tile_width,
                tile_height=self.tile_height,
                eps2d=EPS2D,
                near_plane=NEAR_PLANE,
                far_plane=FAR_PLANE,
            ),
            spec=dict(self._spec(splats, sh_degree), NORMALS=int(normals)),
            defines=dict(COMPACT=1) if splats.compact else None,
        )
        keys, ids = self.depth_sort.record(
            rec,
            v["depth_keys"],
            v["depth_ids"],
            v["depth_keys_tmp"],
            v["depth_ids_tmp"],
            max(rows, 1),
            32,
            self.counts,
            0,
        )
        self._sorted_ids = ids
        rec.dispatch(
            "intersect_tile_count",
            Threads(rows),
            dict(sorted_ids=ids, tile_counts=v["tile_counts"], offsets=v["offsets"]),
            push=dict(n=rows),
        )
        self.offsets_scan.record(rec, v["offsets"], rows)

    def _check_distortion(self, distortion: bool):
        if distortion and not self.geometry:
            raise ValueError("%s: the depth distortion needs a Rasterizer made with geometry=True" % self.name)

    def record_raster(self, rec, isect_capacity: int | None = None, distortion: bool = False, normals: bool = False):
        """Phase 2: write and sort the intersections, find the tile ranges, rasterize.

        Recorded for ``isect_capacity`` (default: the reserved capacity)
        intersections; the true count is read on the GPU. ``distortion``: also
        write the depth distortion to ``out_distort`` (needs ``geometry``);
        ``normals``: blend the splat normals (written by :meth:`record_project` with
        ``normals=True``) into ``out_normals`` (needs ``normals``).
        """
        self._check_distortion(distortion)
        self._check_normals(normals)
        cap = max(int(isect_capacity or self.isect_capacity), 1)
        if cap > self.isect_capacity:
            raise ValueError("%s: %d intersections exceed the reserved %d" % (self.name, cap, self.isect_capacity))
        rows = self.n_cameras * self._n
        v, x = self._per_view, self._isect
        rec.dispatch(
            "intersect_tile_write",
            Threads(cap),
            dict(
                sorted_ids=self._sorted_ids,
                offsets=v["offsets"],
                totals=self.offsets_scan.scratch,
                xyop=v["xyop"],
                radii=v["radii"],
                isect_keys=x["isect_keys"],
                isect_ids=x["isect_ids"],
                conics=v["conics"],
            ),
            push=dict(
                n=rows,
                n_gaussians=self._n,
                tile_width=self.tile_width,
                tile_height=self.tile_height,
                capacity=cap,
                count_offset=self.total_offset,
            ),
        )
        bits = max(1, math.ceil(math.log2(max(self.n_cameras * self.tiles, 2))))
        keys, ids = self.tile_sort.record(
            rec,
            x["isect_keys"],
            x["isect_ids"],
            x["isect_keys_tmp"],
            x["isect_ids_tmp"],
            cap,
            bits,
            self.offsets_scan.scratch,
            self.total_offset,
        )
        self._isect_ids = ids
        rec.fill(self.ranges, 0)
        rec.dispatch(
            "tile_ranges",
            Threads(cap),
            dict(isect_keys=keys, num_isects=self.offsets_scan.scratch, ranges=self.ranges),
            push=dict(m_max=cap, count_offset=self.total_offset),
        )
        rec.dispatch(
            "rasterize_fwd",
            (self.tile_width, self.tile_height, self.n_cameras),
            dict(
                ranges=self.ranges,
                isect_ids=ids,
                xyop=v["xyop"],
                conics=v["conics"],
                rgb=v["rgb"],
                backgrounds=self.backgrounds,
                out_colors=self.out_colors,
                out_alphas=self.out_alphas,
                out_depths=self.out_depths,
                out_last=self.out_last,
                out_median=self.out_median,
                out_distort=self.out_distort,
                normals=self.splat_normals_binding(),
                out_normals=self.out_normals,
                chunk_state=self._chunks["chunk_state"],
            ),
            push=dict(
                width=self.width,
                height=self.height,
                tile_width=self.tile_width,
                tile_height=self.tile_height,
                max_alpha=self.max_alpha,
                chunk=self.chunk,
                chunk_channels=self.chunk_channels,
            ),
            spec=dict(DISTORTION=int(distortion), NORMALS=int(normals)),
        )
        self._raster_cap = cap
        self._forward_flags = (distortion, normals)

    def record_backward(
        self,
        rec,
        splats: Splats,
        sh_degree: int,
        grads: Splats,
        absgrad: bool = False,
        distortion: bool = False,
        normals: bool = False,
    ):
        """Back-propagate ``grad_colors``/``grad_alphas`` (already on the GPU) into
        ``grads`` (a Splats-shaped set of gradient buffers, fully overwritten).
        Record after :meth:`record_raster` (it uses that forward's buffers).
        Float32 splats only (training's compact splats go through fpbo)."""
        if splats.compact:
            raise ValueError("projection_bwd reads float32 SH; compact splats are trained through fpbo")
        self.record_raster_backward(rec, absgrad, distortion, normals)
        v = self._per_view
        rec.dispatch(
            "projection_bwd",
            Threads(self._n),
            dict(
                means=splats.means,
                quats=splats.quats,
                scales=splats.scales,
                opacities=splats.opacities,
                sh=splats.sh,
                cameras=self.cameras,
                radii=v["radii"],
                grad_xy=v["grad_xy"],
                grad_conics=v["grad_conics"],
                grad_rgb=v["grad_rgb"],
                grad_opacity=v["grad_opacity"],
                grad_means=grads.means,
                grad_quats=grads.quats,
                grad_scales=grads.scales,
                grad_opacities=grads.opacities,
                grad_sh=grads.sh,
                grad_normals=self.grad_normals_binding(),
            ),
            push=dict(n=self._n, n_cameras=self.n_cameras, width=self.width, height=self.height, eps2d=EPS2D),
            spec=dict(self._spec(splats, sh_degree), NORMALS=int(normals)),
        )

    def record_raster_backward(self, rec, absgrad: bool = False, distortion: bool = False, normals: bool = False):
        """``rasterize_bwd`` alone: per (camera, Gaussian) gradients of the 2D
        mean, conic, colour and opacity in ``grad_xy`` etc. (zeroed first).
        ``distortion``: also back-propagate ``grad_distort`` (dL/d the depth
        distortion image, on the GPU) into those and into ``grad_depth``
        (dL/d each Gaussian's camera z); needs ``geometry``. ``normals``: also
        back-propagate ``grad_normal_image`` [C,H,W,3] and ``grad_depth_image``
        [C,H,W] (dL/d ``out_normals`` and dL/d ``out_depths``, on the GPU) into those,
        ``grad_depth`` and ``grad_normals`` [C*N,3] (dL/d each splat's camera-space
        normal); needs ``normals`` and a forward recorded with ``normals=True``."""
        self._check_distortion(distortion)
        self._check_normals(normals)
        if self._forward_flags is None:
            raise ValueError("%s: record the forward (record_raster) before the backward" % self.name)
        fwd_distortion, fwd_normals = self._forward_flags
        if (distortion and not fwd_distortion) or (normals and not fwd_normals):
            # the chunks start from the forward's sums behind each boundary (chunk_state)
            raise ValueError(
                "%s: a backward with distortion=%s, normals=%s needs a forward recorded with them"
                % (self.name, distortion, normals)
            )
        v = self._per_view
        rows = self.n_cameras * self._n
        widths = {name: width for name, width, _ in self._views()}
        names = ("grad_xy", "grad_conics", "grad_rgb", "grad_opacity")
        names += (("grad_xy_abs",) if absgrad else ()) + (("grad_depth",) if distortion or normals else ())
        names += ("grad_normals",) if normals else ()
        for name in names:
            rec.fill(v[name], 0, nbytes=4 * widths[name] * max(rows, 1))
        ids = self.chunk_ids(self._raster_cap)
        table = self._chunks["chunk_table"]
        rec.fill(table, CHUNK_NONE, nbytes=8 * ids)
        tiles = self.n_cameras * self.tiles
        rec.dispatch(
            "rasterize_chunks",
            Threads(tiles),
            dict(ranges=self.ranges, chunk_table=table),
            push=dict(tiles=tiles, chunk=self.chunk, chunk_ids=ids),
        )
        rec.dispatch(
            "rasterize_bwd",
            ids,
            dict(
                ranges=self.ranges,
                isect_ids=self._isect_ids,
                xyop=v["xyop"],
                conics=v["conics"],
                rgb=v["rgb"],
                backgrounds=self.backgrounds,
                out_alphas=self.out_alphas,
                out_last=self.out_last,
                grad_colors=self.grad_colors,
                grad_alphas=self.grad_alphas,
                grad_xy=v["grad_xy"],
                grad_conics=v["grad_conics"],
                grad_rgb=v["grad_rgb"],
                grad_opacity=v["grad_opacity"],
                grad_xy_abs=v["grad_xy_abs"],
                out_depths=self.out_depths,
                grad_distort=self.grad_distort,
                grad_depth=self.grad_depth_binding(),
                normals=self.splat_normals_binding(),
                grad_normal_image=self.grad_normal_image,
                grad_depth_image=self.grad_depth_image,
                grad_normals=self.grad_normals_binding(),
                chunk_table=table,
                chunk_state=self._chunks["chunk_state"],
            ),
            push=dict(
                width=self.width,
                height=self.height,
                tile_width=self.tile_width,
                tile_height=self.tile_height,
                max_alpha=self.max_alpha,
                chunk=self.chunk,
                chunk_channels=self.chunk_channels,
                chunk_ids=ids,
            ),
            spec=dict(ABSGRAD=int(absgrad), DISTORTION=int(distortion), NORMALS=int(normals)),
        )

    def grad_normals_binding(self):
        """The per-view dL/d splat normal buffer [C*N,3] (normals), else a placeholder to bind."""
        return self._per_view["grad_normals"] if self.normals else self._unused_grad_normals

    def grad_depth_binding(self):
        """The per-view dL/d depth buffer [C*N] (geometry or normals), else a placeholder to bind."""
        return self._per_view["grad_depth"] if "grad_depth" in self._per_view else self._unused_depth

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

    # -- whole passes ---------------------------------------------------------------
    def forward(self, splats: Splats, sh_degree: int, distortion: bool = False, normals: bool = False) -> int:
        """Run the forward pass now, sizing the intersection buffers exactly
        (``distortion``: also the depth distortion; ``normals``: also the normal image).
        Returns the number of intersections."""
        self.reserve(splats.n)
        rec = self.device.recorder(self.name + ".project")
        self.record_project(rec, splats, sh_degree, normals)
        rec.finish().run()
        m = self.num_intersections()
        self.reserve(splats.n, m)
        rec = self.device.recorder(self.name + ".raster")
        self.record_raster(rec, max(m, 1), distortion, normals)
        rec.finish().run()
        return m

    def backward(
        self,
        splats: Splats,
        sh_degree: int,
        grads: Splats,
        absgrad: bool = False,
        distortion: bool = False,
        normals: bool = False,
    ):
        """Run the backward pass now (after :meth:`forward`, grad images uploaded)."""
        rec = self.device.recorder(self.name + ".backward")
        self.record_backward(rec, splats, sh_degree, grads, absgrad, distortion, normals)
        rec.finish().run()
