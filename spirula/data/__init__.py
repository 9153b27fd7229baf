"""Datasets and files: COLMAP, Blender (NeRF-synthetic) and nerfstudio loaders,
image downscales and undistortion, and the 3DGS ``splat.ply``.

>>> scene = load_dataset("data/garden", downscale=4)      # doctest: +SKIP
>>> img = scene.load_image(scene.train[0])                  # [H,W,3] float32
>>> write_splat_ply("splat.ply", means, quats, log_scales, opacity_logits, sh)  # doctest: +SKIP
"""

from spirula.data.dataset import load_dataset
from spirula.data.ply import read_points_ply, read_splat_ply, write_splat_ply
from spirula.data.scene import Frame, Scene

__all__ = ["load_dataset", "Scene", "Frame", "write_splat_ply", "read_splat_ply", "read_points_ply"]
