"""A run's memory: the budget, the bytes a splat costs, the most splats that
fit, and room for the splats in every per-splat buffer.

Nothing is allocated for the splat budget: every per-splat buffer is sized
for the splats alive and grows by GROWTH as densification adds more
(docs/design.md §2.5). At start :func:`splat_limit` works out how many splats
the run may hold (what the largest per-splat buffer can bind on the device,
and what fits the memory budget, ``--vram-budget`` or
:data:`DEFAULT_BUDGET_FRACTION` of the device), says so in one line, and
sets the strategy's stop there: MCMC's cap comes down to it, ADC stops
growing at it.
"""

from __future__ import annotations

import os

import numpy as np

from spirula.errors import OutOfMemoryError, UsageError
from spirula.runtime.buffers import GROWTH, fmt_bytes, parse_size

# Intersection buffers hold ISECT_HEADROOM x the most intersections a view has
# needed: the count differs from view to view, and a view past the capacity
# costs its step twice (run, grow, run again). 1.25 keeps the buffers within
# the 1.3x of the live need (docs/design.md, memory); more is grown at 90%.
ISECT_HEADROOM = 1.25
# The default memory budget: this fraction of the device's local memory. The
# rest is for what the pool does not see: the driver, pipelines and
# descriptor pools, Kompute's staging buffers, a display on the same GPU, and
# the one buffer that exists twice while it grows.
DEFAULT_BUDGET_FRACTION = 0.85
# Streamed images stay decoded in host memory when they take at most this fraction of the
# memory available; past it each view is decoded from its file at its step.
HOST_IMAGE_FRACTION = 0.5


def memory_budget(vram_budget, device) -> int | None:
    """The memory budget in bytes: ``vram_budget`` (--vram-budget), else
    DEFAULT_BUDGET_FRACTION of the device's local memory (None when the
    device does not say)."""
    info = device.info
    local = getattr(info, "device_local_bytes", 0) if info is not None else 0
    if vram_budget is not None:
        budget = parse_size(vram_budget, "--vram-budget ")
        if local and budget > local:
            raise UsageError(
                "--vram-budget %s: more than the %s of memory %s has (give at most %s)"
                % (vram_budget, fmt_bytes(local), info.name, fmt_bytes(local))
            )
        return budget
    return int(local * DEFAULT_BUDGET_FRACTION) if local else None


def splat_row_bytes(model, stats, strategy, sizes) -> dict:
    """Bytes per splat of every per-splat buffer, by name, from the buffers'
    own layouts: the model, the statistics, the strategy's scratch and every
    training rasterizer's per-view buffers (``sizes``: the image-size groups)."""
    rows = dict(model.row_bytes())
    for stat in stats:
        rows[stat.name] = stat.dtype.itemsize
    rows.update(strategy.row_bytes())
    for group in sizes.values():
        rows.update({"%s.%s" % (group.raster.name, k): v for k, v in group.raster.row_bytes().items()})
    return rows


def splat_bytes(cfg, rows: dict, model, sizes, isects_per_splat: float) -> float:
    """Device bytes one more splat costs within the budget: every per-splat buffer
    (``rows``), its intersections at ``isects_per_splat`` in every image size's
    rasterizer, and the room of the buffer that exists twice while it grows."""
    isect_bytes = max(g.raster.isect_bytes() for g in sizes.values())
    isect = isect_bytes * ISECT_HEADROOM * isects_per_splat * len(sizes)
    # one buffer exists twice while it grows; ADC writes one group at a time
    model_rows = model.row_bytes()
    largest_group = max(sum(model_rows[b.name] for b in group.buffers()) for group in model.groups())
    transient = max(rows.values()) if cfg.strategy.name == "mcmc" else largest_group + 12
    return sum(rows.values()) + isect + transient


def fixed_bytes(pool) -> int:
    """Device bytes the pool holds that do not scale with the splats (images, renders, ...)."""
    return sum(b.capacity for b in pool.buffers.values() if b.category not in ("splat", "splat x img"))


def host_available_bytes() -> int:
    """Host memory available now (Linux: /proc/meminfo's MemAvailable; elsewhere
    the free pages, else unbounded)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def stream_images(cfg, device, budget, rows: dict, model, sizes, isects_per_splat: float, total: int, ring: int):
    """Whether the training images are streamed (spirula/train/step.py ImageSize):
    ``cfg.stream_images`` when set; else when ``total`` bytes of packed images
    on the GPU would take room the splats need: MCMC's cap (or what the
    largest buffer binds, if fewer) at :func:`splat_bytes` each does not fit
    beside them, or (ADC, which has no cap) they would take more than half of
    what the budget leaves beside the buffers already made. Streamed, the ring
    (``ring`` bytes) must fit beside the buffers already made (the starting
    splats among them), or a one-line :class:`OutOfMemoryError` says so."""
    if budget is None and cfg.stream_images is None:
        return False
    room = (budget or 0) - fixed_bytes(device.pool)
    per_splat = splat_bytes(cfg, rows, model, sizes, isects_per_splat)
    streamed = cfg.stream_images
    if streamed is None:
        if cfg.strategy.name == "mcmc":
            info = device.info
            by_range = (info.max_storage_buffer_range if info is not None else 1 << 62) // max(rows.values())
            want = min(cfg.strategy.cap_max, by_range) * per_splat
        else:
            want = room / 2
        streamed = total > ring and total + want > room
    held = device.pool.total_capacity()
    if streamed and budget is not None and ring > budget - held:
        raise OutOfMemoryError(
            "%s %s holds not even the streamed images' ring (%s) beside the %s starting splats and the"
            " rasterizer's buffers (%s); raise it or lower --downscale"
            % (
                "--vram-budget" if cfg.vram_budget is not None else "the memory budget",
                fmt_bytes(budget),
                fmt_bytes(ring),
                f"{model.n:,}",
                fmt_bytes(held),
            )
        )
    return bool(streamed)


def splat_limit(cfg, device, budget, rows: dict, model, sizes, isects_per_splat: float, strategy, say) -> int:
    """The most splats this run may hold: what every per-splat buffer (``rows``,
    :func:`splat_row_bytes`) can bind (device limit) and what fits ``budget``
    with intersections at ``isects_per_splat``; MCMC's cap and ADC's growth
    stop there (``strategy``'s), with one line each (``say``) when it binds."""
    info = device.info
    deg = "SH degree %d" % cfg.sh_degree
    mcmc = cfg.strategy.name == "mcmc"
    limit, why = 1 << 62, None
    rng = info.max_storage_buffer_range if info is not None else 1 << 62
    name, row = max(rows.items(), key=lambda kv: kv[1])
    by_range = rng // row
    if by_range < limit:
        limit = by_range
        why = "buffer %s binds at most %s on %s" % (name, fmt_bytes(rng), info.name)
    if budget is not None:
        per_splat = splat_bytes(cfg, rows, model, sizes, isects_per_splat)
        fixed = fixed_bytes(device.pool)
        fit = max(int((budget - fixed) // per_splat), 0)
        source = (
            "--vram-budget"
            if cfg.vram_budget is not None
            else "%d%% of %s's %s"
            % (round(100 * DEFAULT_BUDGET_FRACTION), info.name, fmt_bytes(info.device_local_bytes))
        )
        say(
            "memory budget %s (%s): %s splats fit at %s (%s a splat)"
            % (fmt_bytes(budget), source, f"{fit:,}", deg, fmt_bytes(int(per_splat)))
        )
        if fit < limit:
            limit = fit
            why = "the memory budget %s holds %s splats at %s" % (fmt_bytes(budget), f"{fit:,}", deg)
    limit = max(limit, model.n)
    if mcmc:
        cap_max = cfg.strategy.cap_max
        if limit < cap_max:
            say("splat cap lowered to %s: %s" % (f"{limit:,}", why))
        strategy.cap = min(cap_max, limit)
    else:
        strategy.limit = limit
        strategy.limit_reason = why
    strategy.say = say
    return limit


def fit_splat_buffers(device, model, stats, sizes, limit: int | None = None):
    """Room in the statistics and every view (``sizes``: the image-size groups)
    for ``model``'s splats (grown by GROWTH past their capacity, within the
    splat ``limit``), shaped for the live count."""
    pool, n = device.pool, model.n
    room = max(model.capacity, min(int(np.ceil(n * GROWTH)), n if limit is None else limit), n)
    for stat in stats:
        item = stat.dtype.itemsize
        if stat.capacity < item * n or stat.capacity > item * room * GROWTH:
            pool.reserve(stat, item * max(room, stat.shape[0]), keep=True)
            pool.resize(stat, (n,), keep=True)
            device.fill(stat, 0)
        else:
            pool.resize(stat, (n,), keep=True)
    for group in sizes.values():
        group.raster.reserve(n, room=room)
