"""``spirula mesh``: trained splats -> fused TSDF -> surface -> colour -> file (docs/mesh.md).

Stages, each a line on stderr with its time and, but for ``fuse`` (whose GPU
time the profiler's kernel and wait rows hold), a ``stage mesh NAME`` row of
the profiler's timing breakdown (``--profile``):

1. ``load``: the splats of a run folder (``RUN/splat.ply``) or a splat PLY,
   checked (one line naming the file for a missing, empty, non-splat or
   non-finite input);
2. ``fuse``: depth of the splats from the dataset's cameras (``--dataset``,
   else the one recorded in ``RUN/config.json``) or from a sphere of virtual
   cameras, fused into a TSDF volume on the GPU (spirula/mesh/fuse.py,
   cameras.py);
3. ``surface``: marching cubes, cleanup, optional decimation (surface.py);
4. ``colour``: a baked texture or vertex colours (colour.py), from the
   splats' colours or the volume's colour grid;
5. ``export``: GLB, OBJ+MTL+PNG or PLY, atomically (export.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spirula.errors import DatasetError, SpirulaError
from spirula.mesh.export import FORMATS


class MeshOptionError(SpirulaError):
    """A ``spirula mesh`` option out of range: one line, exit status 2."""

    exit_code = 2


COLOURS = ("texture", "vertex")
COLOUR_SOURCES = ("splats", "volume")
RESOLUTION_RANGE = (16, 4096)  # voxels along the volume's longest axis
TEXTURE_RANGE = (64, 16384)  # texels per side: 16384 is the largest texture common GPUs load


@dataclass(frozen=True)
class MeshConfig:
    """The defaults of ``spirula mesh`` (the CLI's options), in one place."""

    # voxels along the longest axis of the fused volume; None: fusion's default
    # (spirula/mesh/fusion_config.py, FusionConfig.resolution)
    resolution: int | None = None
    format: str = "glb"
    colour: str = "texture"  # texture (xatlas atlas, baked) or vertex
    colour_source: str = "splats"  # splats (their base colour) or volume (the fused colour grid)
    texture_size: int = 2048
    simplify: int | None = None  # target faces; None keeps marching cubes' mesh
    # clean_mesh: components below this fraction of the largest one's area are floaters
    min_component_fraction: float = 0.05

    def check(self):
        """Raise MeshOptionError for an option out of range."""
        lo, hi = RESOLUTION_RANGE
        if self.resolution is not None and not lo <= self.resolution <= hi:
            raise MeshOptionError("--resolution %d: must be %d to %d voxels" % (self.resolution, lo, hi))
        lo, hi = TEXTURE_RANGE
        if not lo <= self.texture_size <= hi:
            raise MeshOptionError("--texture-size %d: must be %d to %d texels" % (self.texture_size, lo, hi))
        if self.simplify is not None and self.simplify < 4:
            raise MeshOptionError("--simplify %d: must be at least 4 faces" % self.simplify)
        if self.format not in FORMATS:
            raise MeshOptionError("--format %s: one of %s" % (self.format, ", ".join(FORMATS)))
        if self.colour not in COLOURS:
            raise MeshOptionError("--color %s: one of %s" % (self.colour, ", ".join(COLOURS)))
        if self.colour_source not in COLOUR_SOURCES:
            raise MeshOptionError("--color-from %s: one of %s" % (self.colour_source, ", ".join(COLOUR_SOURCES)))


@dataclass
class MeshInput:
    """What ``spirula mesh`` reads: the splats (spirula.data.read_splat_ply's
    dict, dataset coordinates), their file, the dataset for the cameras (or
    None: virtual cameras) and the default output path's stem."""

    splats: dict
    ply: Path
    dataset: Path | None
    default_output: Path


def load_input(path, dataset=None, log=print) -> MeshInput:
    """Resolve ``RUN_OR_PLY`` and ``--dataset``; read and check the splats."""
    from spirula.export import read_splats

    path = Path(path)
    if not path.exists():
        raise DatasetError("%s: no such run folder or splat PLY" % path)
    recorded = None
    if path.is_dir():
        ply = path / "splat.ply"
        if not ply.is_file():
            raise DatasetError("%s: no splat.ply in this folder (not a finished `spirula train` run?)" % path)
        recorded = _recorded_dataset(path)
        default_output = path / "mesh"
    else:
        ply = path
        default_output = path.with_suffix("")
    splats = read_splats(ply)
    check_splats(splats, ply)
    if dataset is not None:
        dataset = Path(dataset)
        if not dataset.is_dir():
            raise DatasetError("%s: --dataset is not a folder" % dataset)
    elif recorded is not None:
        if recorded.is_dir():
            dataset = recorded
        else:
            log("mesh: the run's dataset %s is gone: virtual cameras around the splats instead" % recorded)
    return MeshInput(splats, ply, dataset, default_output)


def _recorded_dataset(run: Path) -> Path | None:
    """The dataset ``spirula train`` recorded in ``RUN/config.json``, if any.

    The trainer records the path as it was given, so a relative one is relative to the
    folder training ran in, which is not recorded: the path as it stands (this folder),
    else the first folder above the run (``outputs/<run>``: its grandparent, where
    ``spirula train`` ran by default) that holds it."""
    try:
        value = json.loads((run / "config.json").read_text()).get("dataset")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(value, str) or not value:
        return None
    path = Path(value)
    if path.is_absolute() or path.is_dir():
        return path
    for folder in Path(run).resolve().parents:
        if (folder / path).is_dir():
            return folder / path
    return path


def check_splats(splats: dict, path) -> None:
    """DatasetError unless there is at least one splat and every parameter is finite."""
    n = len(splats["means"])
    if n == 0:
        raise DatasetError("%s: no splats (the vertex element is empty)" % path)
    ok = np.ones(n, bool)
    for key in ("means", "quats", "log_scales", "opacity_logits", "sh_coeffs"):
        ok &= np.isfinite(np.asarray(splats[key]).reshape(n, -1)).all(axis=1)
    if not ok.all():
        bad = np.flatnonzero(~ok)
        raise DatasetError(
            "%s: %d of %d splats have non-finite parameters (the first: vertex %d)" % (path, len(bad), n, bad[0])
        )
    from spirula.render.rasterizer import ALPHA_THRESHOLD  # the rasterizer skips fainter splats

    opacity = 1.0 / (1.0 + np.exp(-np.asarray(splats["opacity_logits"], np.float64).reshape(n)))
    if not (opacity >= ALPHA_THRESHOLD).any():
        raise DatasetError(
            "%s: every splat is transparent (opacity below 1/255, at most %.3g): nothing to mesh"
            % (path, opacity.max())
        )
    if not (np.linalg.norm(splats["quats"], axis=1) > 0).all():
        bad = np.flatnonzero(~(np.linalg.norm(splats["quats"], axis=1) > 0))
        raise DatasetError("%s: %d splats have a zero quaternion (the first: vertex %d)" % (path, len(bad), bad[0]))


def output_path(inp: MeshInput, cfg: MeshConfig, output=None) -> Path:
    """``--output`` (its suffix must agree with --format when both are given), else beside the input."""
    if output is None:
        out = inp.default_output.with_name(inp.default_output.name + "." + cfg.format)
        if out == inp.ply:  # a splat .glb: its mesh beside it, not over it
            out = inp.default_output.with_name(inp.default_output.name + ".mesh." + cfg.format)
        return out
    output = Path(output)
    suffix = output.suffix.lstrip(".").lower()
    if suffix != cfg.format:
        raise MeshOptionError(
            "--output %s: the suffix should be .%s for --format %s" % (output, cfg.format, cfg.format)
        )
    return output


def fusion_cameras(splats: dict, dataset: Path | None):
    """The cameras depth is fused from: the dataset's (all its frames) or a
    sphere of virtual cameras around the splats (spirula/mesh/cameras.py)."""
    from spirula.mesh import cameras

    if dataset is None:
        opacities = 1.0 / (1.0 + np.exp(-np.asarray(splats["opacity_logits"], np.float64)))
        support = cameras.splat_support(np.exp(np.asarray(splats["log_scales"], np.float64)), opacities)
        return cameras.sphere_cameras(splats["means"], support=support)
    return cameras.dataset_cameras(dataset)


def run_mesh(device, inp: MeshInput, cfg: MeshConfig, output: Path, log=print) -> dict:
    """Fuse, extract, clean, simplify, colour and export; returns the stage
    times (s) and the mesh's counts."""
    from spirula.mesh.colour import bake_texture, colour_vertices, splat_colour_fn, volume_colour_fn
    from spirula.mesh.export import export_mesh
    from spirula.mesh.surface import clean_mesh, extract_surface, simplify_mesh

    times = {}

    def stage(name, fn, *args, host=True, **kwargs):
        # a host stage is a profiler row; fusion's GPU time is in its kernel and wait rows already
        import contextlib

        from spirula.runtime import profiler

        t0 = time.perf_counter()
        with profiler.stage("mesh " + name) if host else contextlib.nullcontext():
            out = fn(*args, **kwargs)
        times[name] = time.perf_counter() - t0
        return out

    def fuse():
        from spirula.mesh.fuse import fuse_splats

        return fuse_splats(device, inp.splats, fusion_cameras(inp.splats, inp.dataset), cfg.resolution)

    volume = stage("fuse", fuse, host=False)
    shape = tuple(np.asarray(volume.tsdf).shape)
    log(
        "mesh: fuse      %6.1f s  %s voxels of %.4g from %s"
        % (times["fuse"], "x".join(map(str, shape)), volume.voxel_size, inp.dataset or "virtual cameras")
    )
    try:
        raw = stage("surface", extract_surface, volume)
    except SpirulaError as e:  # nothing drawn makes a surface: the input's fault, one line naming it
        why = str(e).removeprefix("mesh: ")
        raise DatasetError("%s: the splats fuse to no surface (%s)" % (inp.ply, why)) from None
    mesh = stage("clean", clean_mesh, raw, cfg.min_component_fraction)
    log(
        "mesh: surface   %6.1f s  %d faces, %d after cleanup"
        % (times["surface"] + times["clean"], len(raw.faces), len(mesh.faces))
    )
    if cfg.simplify is not None:
        mesh = stage("simplify", simplify_mesh, mesh, cfg.simplify)
        log("mesh: simplify  %6.1f s  %d faces" % (times["simplify"], len(mesh.faces)))
    colour_fn = splat_colour_fn(inp.splats) if cfg.colour_source == "splats" else volume_colour_fn(volume)
    if cfg.colour == "texture":
        mesh = stage("colour", bake_texture, mesh, colour_fn, cfg.texture_size)
        what = "%dx%d texture" % (cfg.texture_size, cfg.texture_size)
    else:
        mesh = stage("colour", colour_vertices, mesh, colour_fn)
        what = "vertex colours"
    log("mesh: colour    %6.1f s  %s from the %s" % (times["colour"], what, cfg.colour_source))
    written = stage("export", export_mesh, mesh, output, cfg.format)
    log("mesh: export    %6.1f s  %s" % (times["export"], ", ".join(map(str, written))))
    return dict(times=times, faces=len(mesh.faces), vertices=len(mesh.vertices), files=written)
