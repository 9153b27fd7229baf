"""Every environment variable Spirula reads, in one place.

Each setting is read when its function is called, not at import: the CLI
sets two before a device opens (``--profile``: :func:`set_profile`,
``--device``: :func:`set_device`), and tests set them with
``monkeypatch.setenv``. No other module of ``spirula/`` touches
``os.environ`` (tests/test_settings.py checks that). A switch is on when set
to anything but nothing or ``0``.

docs/development.md, "Environment variables", holds :func:`markdown`'s
tables: :data:`SETTINGS` (what the product reads) and :data:`ELSEWHERE` (what
the tests, benchmarks and scripts read on their own). tests/test_settings.py
checks the page against them; ``python -m spirula.settings docs/development.md``
writes them there.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from spirula.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Setting:
    """One environment variable: its name (and other names it is read under),
    what it takes, what unset means, what it does and for whom (``user``;
    ``developer``: debugging and measuring; ``tests``)."""

    name: str
    values: str
    default: str
    doc: str
    use: str
    aliases: tuple = ()

    def raw(self) -> str | None:
        """The variable's text, None when unset (the first of its names that is set)."""
        for name in (self.name, *self.aliases):
            value = os.environ.get(name)
            if value is not None:
                return value
        return None

    def switch(self, default: bool = False) -> bool:
        """On when any of its names is set to anything but nothing or ``0``;
        ``default`` when none is set."""
        values = [os.environ.get(name) for name in (self.name, *self.aliases)]
        values = [v for v in values if v is not None]
        return any(v not in ("", "0") for v in values) if values else default

    def path(self) -> Path | None:
        """The folder or file it names, None when unset or empty."""
        value = self.raw()
        return Path(value) if value else None


SETTINGS: list = []


def _setting(name, values, default, doc, use, aliases=()) -> Setting:
    s = Setting(name, values, default, doc, use, tuple(aliases))
    SETTINGS.append(s)
    return s


# -- what a user sets ---------------------------------------------------------------
PROFILE = _setting(
    "SS_PROFILE",
    "`1`",
    "off",
    "The profiler: GPU time by kernel, the timing breakdown and the VRAM report on stderr at exit"
    " (docs/profiler.md); `--profile` sets it. `SPIRULA_PROFILE` is another name for it (either on turns it on).",
    "user",
    aliases=("SPIRULA_PROFILE",),
)
DEVICE = _setting(
    "SPIRULA_DEVICE",
    "an index",
    "the backend's default",
    "The device every command opens, of the chosen backend (`spirula devices`); `--device` sets it.",
    "user",
)
CACHE_DIR = _setting(
    "SPIRULA_CACHE_DIR",
    "a folder",
    "`$XDG_CACHE_HOME/spirula`",
    "Where rebuildable things live: compiled kernels (`spirv/`), the driver's pipelines (`pipelines/`),"
    " frames and SfM (`captures/`), the demo scene.",
    "user",
)
XDG_CACHE_HOME = _setting(
    "XDG_CACHE_HOME",
    "a folder",
    "`~/.cache`",
    "The XDG cache folder: `spirula/` in it unless SPIRULA_CACHE_DIR is set; downscaled images of a"
    " read-only dataset go to its `spirula/datasets/` in any case.",
    "user",
)
CAPTURE_CACHE = _setting(
    "SPIRULA_CAPTURE_CACHE",
    "a folder",
    "`$SPIRULA_CACHE_DIR/captures`",
    "Frames and SfM results of `spirula train VIDEO|PHOTOS` (large: put them on a big disk; docs/capture.md).",
    "user",
)
CUDA_LIB = _setting(
    "SPIRULA_CUDA_LIB",
    "a file",
    "the wheel's `spirula/_lib/libspirula_cuda.so`, else `build/libspirula_cuda.so` of the checkout",
    "The CUDA backend's library (docs/cuda.md).",
    "user",
)
MEMORY_LIMIT = _setting(
    "SPIRULA_MEMORY_LIMIT",
    "a size: `512MiB`, `2GiB`, `8GB`, bytes",
    "the GPU's memory",
    "Caps the buffer pool, to run as a smaller GPU would (with `--vram-budget` the smaller wins;"
    " docs/training.md, the soak test).",
    "user, tests",
)
DISPLAY = _setting(
    "DISPLAY",
    "an X11 display",
    "none",
    "`spirula view` and `train --viewer` open a window only where this or WAYLAND_DISPLAY is set (Linux, BSD).",
    "user",
)
WAYLAND_DISPLAY = _setting("WAYLAND_DISPLAY", "a Wayland display", "none", "As DISPLAY, for Wayland.", "user")
RAY_USAGE_STATS = _setting(
    "RAY_USAGE_STATS_ENABLED",
    "`0`, `1`",
    "`0`",
    "Ray's own switch; `--partition` sets it to 0 when unset, so a local Ray runs offline (docs/partition.md).",
    "user",
)
RAY_COLOR_PREFIX = _setting(
    "RAY_COLOR_PREFIX",
    "`0`, `1`",
    "Ray's colours",
    "Ray's own switch; `--partition` sets it to 0 when stderr is not a terminal, so the tasks' lines"
    " Ray prints (`--verbose`) carry no colour codes into a file or pipe (docs/partition.md).",
    "user",
)

# -- what a developer sets: debugging, measuring ----------------------------------------
SHADER_DIR = _setting(
    "SPIRULA_SHADER_DIR",
    "a folder",
    "`shaders/` of the checkout; in a wheel, its precompiled `spirula/_spirv/`",
    "The `*.comp` sources the kernels compile from with glslang (an edited copy: the selftest's tests);"
    " set, a wheel's precompiled kernels are not used.",
    "developer",
)
RASTER_CHUNK = _setting(
    "SPIRULA_RASTER_CHUNK",
    "a positive multiple of 256",
    "1024",
    "rasterize_bwd's chunk: the tile-list entries one backward workgroup walks (benchmark sweeps;"
    " docs/design.md §2.4).",
    "developer, tests",
)
PIPELINE_CACHE = _setting(
    "SPIRULA_PIPELINE_CACHE",
    "`0`",
    "on",
    "`0` (or empty) keeps no compiled pipelines on disk between runs (`$SPIRULA_CACHE_DIR/pipelines/`).",
    "developer",
)
NO_BUFFER_ROBUSTNESS = _setting(
    "SPIRULA_NO_BUFFER_ROBUSTNESS",
    "`0`, `kernels`",
    "`kernels` on NVIDIA, `0` elsewhere",
    "Vulkan: `kernels` compiles the kernels whose shader says `#pragma spirula_no_bounds_checks`"
    " (rasterize_bwd) without the driver's buffer bounds checks, where the device has"
    " VK_EXT_pipeline_robustness; `0` keeps the checks everywhere (docs/design.md, buffer robustness).",
    "developer",
)
NO_FLOAT_ATOMICS = _setting(
    "SPIRULA_NO_FLOAT_ATOMICS",
    "`1`",
    "off",
    "Vulkan: the kernels' compare-and-swap loops instead of native float atomicAdd (`ATOMIC_FLOAT=0`),"
    " as on a device without them (the validation tests run both).",
    "developer, tests",
)
BARRIER_ALL = _setting(
    "SPIRULA_BARRIER_ALL",
    "`1`",
    "off",
    "A barrier before every dispatch of a recorded sequence, not only where a kernel reads or"
    " overwrites an earlier one's output (debugging a suspected race).",
    "developer",
)
POISON_BUFFERS = _setting(
    "SPIRULA_POISON_BUFFERS",
    "`1`",
    "off",
    "Every new pool buffer starts as NaN, so a kernel that relies on zeroed memory fails (tests/conftest.py sets it).",
    "tests",
)


@dataclasses.dataclass(frozen=True)
class Elsewhere:
    """A variable the tests, benchmarks or scripts read themselves (the product does not)."""

    name: str
    where: str
    doc: str


ELSEWHERE = (
    Elsewhere(
        "SPIRULA_REQUIRE_VALIDATION_LAYER",
        "tests/conftest.py",
        "`1`: a missing Khronos validation layer fails the validation tests instead of skipping them (CI sets it).",
    ),
    Elsewhere(
        "SPIRULA_PARITY_REPORT",
        "tests/kernel_cases.py",
        "`1`: print what each kernel and CUDA parity check saw (with `-s`).",
    ),
    Elsewhere("NVCC", "scripts/build_cuda.sh, tests/test_cuda_*.py", "The CUDA compiler (else `nvcc` on PATH)."),
    Elsewhere("SPIRULA_CUDA_ARCHS", "scripts/build_cuda.sh", "The SASS targets (default `75 80 86 89 90`)."),
    Elsewhere("SPIRULA_CUDA_JOBS", "scripts/build_cuda.sh", "Parallel compiles (default: the number of cores)."),
    Elsewhere(
        "WHEEL_PYTHON",
        "scripts/build_wheel.sh, scripts/wheel_check.sh",
        "The CPython `make wheel` builds for and `make wheel-check` checks (default `.venv/bin/python`).",
    ),
    Elsewhere(
        "SPIRULA_WHEEL_CUDA",
        "scripts/build_wheel.sh",
        "`0`: the wheel without the CUDA backend (default: with it where nvcc built it).",
    ),
    Elsewhere(
        "SPIRULA_WHEEL_CHECK_STEPS",
        "scripts/wheel_check.sh",
        "The demo training's steps in `make wheel-check` (default 200).",
    ),
    Elsewhere(
        "SPIRULA_BROWSER_TESTS",
        "scripts/install_system_deps.sh",
        "`1`: also install chromium for the web viewer's browser tests (as `--browser-tests`).",
    ),
    Elsewhere("SPIRULA_BENCH_FULL", "benchmarks/conftest.py", "`1`: the full-size benchmarks (as `--bench-full`)."),
    Elsewhere(
        "SPIRULA_BENCH_TREE",
        "benchmarks/test_train_bench.py",
        "The checkout whose `spirula` the training benchmark runs (default: this one).",
    ),
    Elsewhere(
        "SPIRULA_BENCH_SCENES",
        "benchmarks/test_train_bench.py",
        "Where the generated benchmark scenes are kept (default `/tmp/spirula-bench-scenes`).",
    ),
    Elsewhere("PIPELINE_STATS_IR", "benchmarks/pipeline_stats.c", "Set by benchmarks/pipeline_stats.py's `--ir`."),
    Elsewhere(
        "PIPELINE_STATS_ROBUSTNESS",
        "benchmarks/pipeline_stats.c",
        "Set by benchmarks/pipeline_stats.py's `--no-robustness` (`0`).",
    ),
)


# -- the settings, one function each ------------------------------------------------------
def profile() -> bool:
    """SS_PROFILE (or SPIRULA_PROFILE): whether the profiler is on."""
    return PROFILE.switch()


def set_profile():
    """Turn the profiler on for this process (``--profile``), before any device opens."""
    os.environ[PROFILE.name] = "1"


def device() -> str | None:
    """SPIRULA_DEVICE's text (the device index; checked where it is used), None when unset or empty."""
    return DEVICE.raw() or None


def set_device(index):
    """The device every command opens (``--device``), before any opens."""
    os.environ[DEVICE.name] = str(index)


def cache_dir() -> Path | None:
    """SPIRULA_CACHE_DIR, None when unset or empty."""
    return CACHE_DIR.path()


def xdg_cache_home() -> Path:
    """XDG_CACHE_HOME, else ``~/.cache``."""
    return XDG_CACHE_HOME.path() or Path.home() / ".cache"


def capture_cache() -> Path | None:
    """SPIRULA_CAPTURE_CACHE, None when unset or empty."""
    return CAPTURE_CACHE.path()


def cuda_lib() -> Path | None:
    """SPIRULA_CUDA_LIB, None when unset or empty."""
    return CUDA_LIB.path()


def memory_limit() -> str:
    """SPIRULA_MEMORY_LIMIT's text, stripped ('' when unset; parsed by spirula.runtime.buffers)."""
    return (MEMORY_LIMIT.raw() or "").strip()


def display() -> bool:
    """Whether an X11 or Wayland display is set."""
    return bool(DISPLAY.raw() or WAYLAND_DISPLAY.raw())


def quiet_ray(colour: bool = True):
    """RAY_USAGE_STATS_ENABLED=0 unless set: Ray then sends no usage statistics;
    without ``colour`` (stderr is no terminal), RAY_COLOR_PREFIX=0: Ray prints
    the tasks' lines without ANSI colour codes."""
    os.environ.setdefault(RAY_USAGE_STATS.name, "0")
    if not colour:
        os.environ[RAY_COLOR_PREFIX.name] = "0"


def shader_dir() -> Path | None:
    """SPIRULA_SHADER_DIR, None when unset or empty."""
    return SHADER_DIR.path()


def raster_chunk() -> str:
    """SPIRULA_RASTER_CHUNK's text, stripped ('' when unset; checked by spirula.render.rasterizer)."""
    return (RASTER_CHUNK.raw() or "").strip()


def pipeline_cache() -> bool:
    """Whether compiled pipelines are kept on disk (SPIRULA_PIPELINE_CACHE unset, or set but not to 0 or nothing)."""
    return PIPELINE_CACHE.switch(default=True)


def buffer_robustness():
    """SPIRULA_NO_BUFFER_ROBUSTNESS: True for ``0`` (the driver's checks
    everywhere), ``"kernels"`` for ``kernels``, None when unset or empty (the
    device's default); any other value is a one-line UsageError."""
    value = NO_BUFFER_ROBUSTNESS.raw()
    if not value:
        return None
    if value == "0":
        return True
    if value == "kernels":
        return "kernels"
    raise UsageError("%s=%r: expected 0 or kernels" % (NO_BUFFER_ROBUSTNESS.name, value))


def float_atomics() -> bool:
    """False when SPIRULA_NO_FLOAT_ATOMICS is on (the compare-and-swap variant forced)."""
    return not NO_FLOAT_ATOMICS.switch()


def barrier_all() -> bool:
    """SPIRULA_BARRIER_ALL: a barrier before every dispatch."""
    return BARRIER_ALL.switch()


def poison_buffers() -> bool:
    """SPIRULA_POISON_BUFFERS: new pool buffers start as NaN."""
    return POISON_BUFFERS.switch()


# -- the tables of docs/development.md ---------------------------------------------------
BEGIN = "<!-- settings: generated by `python -m spirula.settings docs/development.md`; do not edit -->"
END = "<!-- end of settings -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The two tables of docs/development.md, "Environment variables" (between :data:`BEGIN` and :data:`END`)."""
    lines = [
        "| variable | values | unset | what it does | for |",
        "|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        name = " ".join("`%s`" % n for n in (s.name, *s.aliases))
        lines.append("| %s | %s | %s | %s | %s |" % (name, _cell(s.values), _cell(s.default), _cell(s.doc), s.use))
    lines += [
        "",
        "Read by the tests, benchmarks and scripts themselves, not by `spirula`:",
        "",
        "| variable | read by | what it does |",
        "|---|---|---|",
    ]
    for e in ELSEWHERE:
        lines.append("| `%s` | %s | %s |" % (e.name, e.where, _cell(e.doc)))
    return "\n".join(lines) + "\n"


def with_tables(page: str) -> str:
    """``page`` with the text between :data:`BEGIN` and :data:`END` replaced by :func:`markdown`."""
    head, sep, rest = page.partition(BEGIN + "\n")
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise ValueError("the page has no %r ... %r block" % (BEGIN, END))
    return head + BEGIN + "\n\n" + markdown() + "\n" + END + tail


def names() -> set:
    """Every variable name of both tables."""
    return {n for s in SETTINGS for n in (s.name, *s.aliases)} | {e.name for e in ELSEWHERE}


if __name__ == "__main__":  # python -m spirula.settings [PAGE]: print the tables, or write them into PAGE
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
        path.write_text(with_tables(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        sys.stdout.write(markdown())
