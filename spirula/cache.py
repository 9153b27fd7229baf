"""Where Spirula keeps what it can rebuild: ``$SPIRULA_CACHE_DIR``, else
``$XDG_CACHE_HOME/spirula``, else ``~/.cache/spirula``. Each user of it has a
folder there: ``spirv/`` (compiled kernels), ``pipelines/`` (the driver's
compiled pipelines), ``captures/`` (frames and SfM), the demo scene."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    env = os.environ.get("SPIRULA_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spirula"
