"""A dense TSDF volume on the GPU, fused view by view (``shaders/tsdf_integrate.comp``).

Conventions: the volume is [X,Y,Z] voxels, voxel (i, j, k) centred at
``origin + ((i, j, k) + 0.5) * voxel_size`` (world units); C order, k fastest.
``tsdf`` is a signed distance in world units, positive outside (in front of the
surface), truncated to [-truncation, truncation]; ``weight`` 0 marks a voxel no view
observed (its tsdf is the initial +truncation: mask it out for marching cubes).
Views: OpenCV world->camera ``viewmat`` [4,4], pixel intrinsics ``K`` [3,3],
pixel centres at +0.5; depth is the camera-space z the rasterizer's median depth
gives, colour is premultiplied by alpha (rendered on a black background).

One volume is one dense box that must fit a storage buffer; spirula/mesh/fuse.py
tiles larger volumes into slabs of TSDFVolumes.
"""

from __future__ import annotations

import numpy as np

from spirula.mesh.fusion_config import DEFAULT
from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import Threads

BYTES_PER_VOXEL = 24  # tsdf f32 + weight f32 + rgbw 4 x f32


class TSDFVolume:
    """A [X,Y,Z] truncated signed distance volume with colour, resident on ``device``.

    Args:
        device: a :class:`~spirula.runtime.device.Device` (either backend).
        origin: [3] world position of the volume's corner (voxel (0,0,0)'s lower corner).
        voxel_size: edge of a voxel, world units.
        dims: (X, Y, Z) voxels.
        truncation: the truncation distance, world units (default 4 voxels).
        config: the kernel's thresholds (:class:`~spirula.mesh.fusion_config.FusionConfig`).
        x_offset: this volume is the x slab [x_offset, x_offset + X) of the volume at
            ``origin`` (voxel (i, j, k) centred at origin + ((x_offset + i, j, k) + 0.5) * voxel_size,
            computed exactly as in the whole volume).
    """

    def __init__(
        self, device, origin, voxel_size, dims, truncation=None, config=DEFAULT, name="tsdf", x_offset: int = 0
    ):
        from spirula.errors import SpirulaError

        self.device, self.config, self.name = device, config, name
        self.origin = np.asarray(origin, np.float64).reshape(3)
        self.voxel_size = float(voxel_size)
        self.dims = tuple(int(d) for d in dims)
        self.x_offset = int(x_offset)
        self.truncation = float(truncation if truncation is not None else config.truncation_voxels * voxel_size)
        if len(self.dims) != 3 or min(self.dims) < 1 or not self.voxel_size > 0 or not self.truncation > 0:
            raise SpirulaError(
                "TSDF volume: need 3 positive dims, a positive voxel size and truncation, got dims %s,"
                " voxel size %r, truncation %r" % (self.dims, self.voxel_size, self.truncation)
            )
        if not np.isfinite(self.origin).all():
            raise SpirulaError("TSDF volume: the origin %s is not finite" % (self.origin.tolist(),))
        n = int(np.prod(self.dims))
        info = device.info
        rng = info.max_storage_buffer_range if info is not None else 1 << 62
        if 16 * n > rng or n >= 1 << 32:
            raise SpirulaError(
                "TSDF volume: %s voxels need %d bytes of colour in one buffer, the device binds at most %d;"
                " fuse in slabs (spirula.mesh.fuse) or lower the resolution" % (self.dims, 16 * n, rng)
            )
        self.n = n
        pool = device.pool
        self.tsdf = pool.alloc(name + ".tsdf", self.dims, np.float32, "other")
        self.weight = pool.alloc(name + ".weight", self.dims, np.float32, "other")
        self.rgbw = pool.alloc(name + ".rgbw", self.dims + (4,), np.float32, "other")
        self._staging = {}
        self.reset()

    def reset(self):
        """Every voxel unobserved: tsdf = +truncation, weight 0, colour 0."""
        self.device.fill(self.tsdf, float(self.truncation))
        self.device.fill(self.weight, 0)
        self.device.fill(self.rgbw, 0)

    def _image(self, key, arr, shape):
        """Upload a numpy image into a staging buffer of this volume."""
        arr = np.ascontiguousarray(np.asarray(arr, np.float32).reshape(shape))
        buf = self._staging.get(key)
        if buf is None or buf.shape != arr.shape:
            if buf is not None:
                self.device.pool.free(buf)
            buf = self._staging[key] = self.device.pool.alloc(
                "%s.%s" % (self.name, key), arr.shape, np.float32, "other"
            )
        self.device.upload(buf, arr)
        return buf

    def record_integrate(self, rec, depth: Buffer, alpha: Buffer, color: Buffer, viewmat, K, width, height, index=0):
        """Record the fusion of view ``index`` of device images: depth, alpha [>= (index+1)*H*W]
        f32 and color [>= (index+1)*H*W, 3] f32 (the rasterizer's ``out_median``,
        ``out_alphas``, ``out_colors`` of camera ``index``)."""
        vm = np.asarray(viewmat, np.float64).reshape(4, 4)
        K = np.asarray(K, np.float64).reshape(3, 3)
        if not (np.isfinite(vm).all() and np.isfinite(K).all()):
            from spirula.errors import SpirulaError

            raise SpirulaError("TSDF integrate: the camera holds a non-finite value")
        cfg = self.config
        push = dict(
            dim_x=self.dims[0],
            dim_y=self.dims[1],
            dim_z=self.dims[2],
            x_offset=self.x_offset,
            origin_x=self.origin[0],
            origin_y=self.origin[1],
            origin_z=self.origin[2],
            voxel_size=self.voxel_size,
            truncation=self.truncation,
            fx=K[0, 0],
            fy=K[1, 1],
            cx=K[0, 2],
            cy=K[1, 2],
            width=int(width),
            height=int(height),
            image_offset=int(index) * int(width) * int(height),
            alpha_surface=cfg.alpha_surface,
            alpha_empty=cfg.alpha_empty,
            carve_weight=cfg.carve_weight,
        )
        for r in range(3):
            for c in range(3):
                push["r%d%d" % (r, c)] = vm[r, c]
            push["t%d" % r] = vm[r, 3]
        rec.dispatch(
            "tsdf_integrate",
            Threads(self.n),
            dict(depth=depth, alpha=alpha, color=color, tsdf=self.tsdf, weight=self.weight, rgbw=self.rgbw),
            push=push,
        )

    def integrate(self, depth, alpha, color, viewmat, K, index=0, width=None, height=None):
        """Fuse one view now.

        depth, alpha: [H,W] (or [H,W,1]) float32 numpy arrays, or device Buffers of
        [C,H,W] images (then view ``index``; ``width``/``height`` default to the buffer's);
        color: [H,W,3] premultiplied rgb (numpy), or a [C,H,W,3] Buffer.
        viewmat [4,4] world->camera, K [3,3]. Buffers stay on the device (no host copy).
        """
        if isinstance(depth, Buffer):
            H, W = depth.shape[-2:] if len(depth.shape) >= 2 else (height, width)
            W, H = int(width or W), int(height or H)
        else:
            d = np.asarray(depth, np.float32)
            H, W = d.shape[:2]
            depth = self._image("depth", d, (H, W))
            alpha = self._image("alpha", alpha, (H, W))
            color = self._image("color", color, (H, W, 3))
            index = 0
        rec = self.device.recorder(self.name + ".integrate")
        self.record_integrate(rec, depth, alpha, color, viewmat, K, W, H, index)
        rec.finish().run()

    def extract(self) -> tuple:
        """(tsdf [X,Y,Z] f32, weight [X,Y,Z] f32, color [X,Y,Z,3] f32), read back."""
        rgbw = self.device.readback(self.rgbw)
        return self.device.readback(self.tsdf), self.device.readback(self.weight), np.ascontiguousarray(rgbw[..., :3])

    def free(self):
        """Return the volume's buffers to the pool."""
        for b in [self.tsdf, self.weight, self.rgbw] + list(self._staging.values()):
            self.device.pool.free(b)
        self._staging = {}
