"""From a video or a folder of photos to a dataset: frames (frames.py, PyAV),
structure from motion (colmap.py, pycolmap), its quality gate, masks, and
the cached pipeline ``spirula train VIDEO|PHOTOS`` runs (pipeline.py).

:func:`~spirula.sfm.colmap.run_sfm` is the entry point (``spirula sfm``);
docs/sfm.md describes the stages, the gate and masks.
"""

from spirula.sfm.colmap import SfmError, SfmResult, run_sfm
from spirula.sfm.masks import Masker

__all__ = ["Masker", "SfmError", "SfmResult", "run_sfm"]
