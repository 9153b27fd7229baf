"""Where Spirula keeps what it can rebuild: ``$SPIRULA_CACHE_DIR``, else
``$XDG_CACHE_HOME/spirula``, else ``~/.cache/spirula``. Each user of it has a
folder there: ``spirv/`` (compiled kernels), ``pipelines/`` (the driver's
compiled pipelines), ``captures/`` (frames and SfM), the demo scene."""

from __future__ import annotations

from pathlib import Path

from spirula import settings


def cache_home() -> Path:
    return settings.cache_dir() or settings.xdg_cache_home() / "spirula"
