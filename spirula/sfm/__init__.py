"""From images to a COLMAP dataset: structure from motion (pycolmap), its quality gate, masks.

:func:`~spirula.sfm.colmap.run_sfm` is the entry point (``spirula sfm``);
docs/sfm.md describes the stages, the gate and masks.
"""

from spirula.sfm.colmap import SfmError, SfmResult, run_sfm
from spirula.sfm.masks import Masker

__all__ = ["Masker", "SfmError", "SfmResult", "run_sfm"]
