"""Compiled pipelines kept on disk between runs.

Every Kompute algorithm compiles its kernel into a Vulkan pipeline. Spirula's
patched Kompute (third_party/kompute/) compiles all of a manager's algorithms
through one ``VkPipelineCache``, so an algorithm rebuilt for a reallocated
buffer (the intersection buffers grow during training) reuses the compiled
shader instead of compiling it again. This module saves that cache when the
device closes and merges it into the next process's, so a second run on the
same driver starts without compiling its kernels (vkCreateComputePipelines
translates SPIR-V to the GPU's code unless its cache has the pipeline).

File: ``$SPIRULA_CACHE_DIR/pipelines/<key>.bin`` (default
``~/.cache/spirula``), ``key`` naming the device and driver; written
atomically, only when the cache grew. ``SPIRULA_PIPELINE_CACHE=0`` turns it
off. The header of VkPipelineCacheHeaderVersionOne (header size, version,
vendorID, deviceID, pipelineCacheUUID: 32 bytes) is compared with the one the
driver writes now before anything is merged, so data of another driver
version is left unread.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from pathlib import Path

from spirula import settings
from spirula.cache import cache_home

HEADER_BYTES = 32  # VkPipelineCacheHeaderVersionOne


def enabled() -> bool:
    return settings.pipeline_cache()


def supported(mgr) -> bool:
    """Whether this ``kp`` build shares and exports its pipeline cache."""
    return hasattr(mgr, "pipeline_cache_data") and hasattr(mgr, "merge_pipeline_cache_data")


def cache_path(info) -> Path:
    """Where the pipelines of device ``info`` (vkinfo.DeviceInfo) are kept."""
    ident = "|".join((info.name, info.driver, info.device_uuid))
    return cache_home() / "pipelines" / ("%s.bin" % hashlib.sha256(ident.encode()).hexdigest()[:20])


def load(mgr, path: Path) -> int:
    """Merge the pipelines saved at ``path`` into ``mgr``'s cache; returns the
    bytes merged (0: none, or the file is of another driver or unreadable)."""
    try:
        data = path.read_bytes()
    except OSError:
        return 0
    now = mgr.pipeline_cache_data()
    if len(data) <= HEADER_BYTES or len(now) < HEADER_BYTES or data[:HEADER_BYTES] != now[:HEADER_BYTES]:
        return 0
    mgr.merge_pipeline_cache_data(data)
    return len(data)


def save(mgr, path: Path, known: int = 0) -> bool:
    """Write ``mgr``'s cache to ``path`` if it holds more than ``known`` bytes
    (what was loaded); True when written. Never raises: a cache is optional."""
    try:
        data = mgr.pipeline_cache_data()
        if len(data) <= max(known, HEADER_BYTES):
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name("%s.%d.tmp" % (path.name, os.getpid()))
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return True
    except Exception:
        return False


def attach(owner, mgr, info) -> None:
    """Load the saved pipelines into ``mgr`` now and save them again when
    ``owner`` (the device object that holds ``mgr``) is collected or the
    process exits, whichever comes first."""
    if not (enabled() and supported(mgr)):
        return
    path = cache_path(info)
    try:
        known = load(mgr, path)
    except Exception:
        known = 0  # a driver that rejects the data: start from an empty cache
    # the finalizer holds mgr (not owner), so it runs while the manager is alive
    owner._pipeline_cache_saver = weakref.finalize(owner, save, mgr, path, known)
