"""The defaults of depth fusion (spirula/mesh/tsdf.py, cameras.py, fuse.py), in one place.

Lengths in voxels are multiplied by the voxel size; the rest are plain numbers.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class FusionConfig:
    # -- volume -----------------------------------------------------------------------------
    # voxels along the longest axis of the volume (``--resolution``)
    resolution: int = 256
    # truncation band of the signed distance, in voxels: wide enough that each voxel near the
    # surface is seen within the band from several views (KinectFusion-style fusion uses 3-5)
    truncation_voxels: float = 4.0
    # the volume's box (spirula/mesh/cameras.py scene_bounds): these percentiles per axis of
    # what the rasterizer draws of each splat (its mean -/+ its support radius), robust to
    # floaters; then ``margin_voxels`` more on each side (fuse.py volume_grid)
    bounds_percentiles: tuple = (0.5, 99.5)
    # a flat scene's box is at least this fraction of its longest side deep
    min_thickness: float = 0.1
    # the most bytes one slab of the volume may use on the GPU (tsdf, weight and rgbw: 24 bytes
    # a voxel); a volume past this (or past the device's storage buffer range) is fused in
    # slabs along x, each rendered and fused on its own (spirula/mesh/fuse.py)
    slab_budget_bytes: int = 2 << 30

    # -- the kernel (shaders/tsdf_integrate.comp) ---------------------------------------------
    # a pixel is a surface observation where alpha exceeds this; the median depth is defined
    # exactly where T fell to 0.5, i.e. alpha >= 0.5
    alpha_surface: float = 0.5
    # a pixel whose alpha is below this sees nothing: every voxel along its ray is free space
    alpha_empty: float = 0.05
    # the weight of one free-space observation (a surface observation weighs 1): low, so a
    # view grazing a silhouette does not erode a surface other views see, but enough that
    # floaters and background seen by a few views only are carved away
    carve_weight: float = 0.5

    # -- cameras (spirula/mesh/cameras.py) ------------------------------------------------------
    # virtual cameras on a Fibonacci sphere around the splats
    n_virtual_cameras: int = 64
    # their distance from the centre, in radii of the scene's bounding sphere; the field of
    # view is then fitted so the whole sphere (plus ``fov_margin``) is in every image
    camera_distance: float = 2.5
    fov_margin: float = 1.05
    # the longest side of every rendered image, pixels (virtual cameras are square; dataset
    # cameras are scaled down to it, never up)
    render_size: int = 512

    @property
    def margin_voxels(self) -> int:
        """Voxels around the splats' box on each side (fuse.py volume_grid): the truncation
        band, so a voxel just outside the outermost surface still averages a full band of
        observations, plus one, the marching cube straddling that surface."""
        return int(math.ceil(self.truncation_voxels)) + 1


DEFAULT = FusionConfig()
