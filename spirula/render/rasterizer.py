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

import math

import numpy as np

from spirula import settings
from spirula.contract.constants import shader_constant
from spirula.render.raster_buffers import TILE, RasterBuffers, pack_cameras, tile_grid
from spirula.render.splats import SPLAT_NAMES, Splats
from spirula.runtime.sequence import Threads

__all__ = ["Rasterizer", "Splats", "SPLAT_NAMES", "TILE", "tile_grid", "pack_cameras", "default_chunk", "check_chunk"]

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
CHUNK_NONE = shader_constant("include/raster.glsl", "CHUNK_NONE")  # a chunk_table entry of no chunk
# The kernels' own constants, for host code that must agree with what they draw (the
# mesh's bounds and colours), read from shaders/include/projection.glsl and sh.glsl
# a splat fainter than this is not drawn, nor a fainter pixel of one
ALPHA_THRESHOLD = shader_constant("include/projection.glsl", "ALPHA_THRESHOLD")
# a splat's extent cap, in standard deviations (opacity_extent)
RADIUS_SIGMAS = shader_constant("include/projection.glsl", "RADIUS_SIGMAS")
SH_C0 = shader_constant("include/sh.glsl", "SH_C0")  # the degree-0 SH basis: base colour = 0.5 + SH_C0 * f_dc


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


class Rasterizer(RasterBuffers):
    """Buffers (:class:`~spirula.render.raster_buffers.RasterBuffers`) and recorded
    kernels to render and back-propagate C cameras.

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
        self.max_alpha = float(max_alpha)
        chunk = default_chunk() if chunk is None else check_chunk(chunk)
        super().__init__(device, width, height, n_cameras, capacity, isect_capacity, name, geometry, normals, chunk)
        self._forward_flags = None  # (distortion, normals) of the recorded forward

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
                **splats.bindings(),
                **self.bindings("cameras", "xyop", "conics", "rgb", "radii", "tile_counts", "depth_keys", "depth_ids"),
                **self.bindings("normals"),
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
            dict(**self.bindings("tile_counts", "offsets"), sorted_ids=ids),
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
        x = self._isect
        rec.dispatch(
            "intersect_tile_write",
            Threads(cap),
            dict(
                **self.bindings("offsets", "xyop", "radii", "conics", "isect_keys", "isect_ids"),
                sorted_ids=self._sorted_ids,
                totals=self.offsets_scan.scratch,
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
                **self.bindings("ranges", "xyop", "conics", "rgb", "normals", "backgrounds", "chunk_state"),
                **self.bindings("out_colors", "out_alphas", "out_depths", "out_last", "out_median", "out_distort"),
                **self.bindings("out_normals"),
                isect_ids=ids,
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
        rec.dispatch(
            "projection_bwd",
            Threads(self._n),
            dict(
                **splats.bindings(),
                **grads.bindings("grad_"),
                **self.bindings("cameras", "radii", "grad_xy", "grad_conics", "grad_rgb", "grad_opacity"),
                **self.bindings("grad_normals"),
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
                **self.bindings("ranges", "xyop", "conics", "rgb", "normals", "backgrounds", "chunk_state"),
                **self.bindings("out_alphas", "out_last", "out_depths", "grad_colors", "grad_alphas", "grad_distort"),
                **self.bindings("grad_xy", "grad_conics", "grad_rgb", "grad_opacity", "grad_xy_abs", "grad_depth"),
                **self.bindings("grad_normal_image", "grad_depth_image", "grad_normals"),
                isect_ids=self._isect_ids,
                chunk_table=table,
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
