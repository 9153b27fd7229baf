"""Splats in the formats people share them in (docs/export.md): write one
(:func:`write_splats`) and read any back (:func:`read_splats`), each format in
its own module, numpy and Pillow only.

========  ==================  ===========================================
format    file                module
========  ==================  ===========================================
ply       ``.ply``            spirula.data.ply (the 3DGS splat.ply)
spz       ``.spz``            spz.py: Niantic's SPZ, version 3 (gzip)
sog       ``.sog``            sog.py: PlayCanvas's SOG v2 (ZIP of WebP)
ply-compressed ``.compressed.ply`` compressed_ply.py: SuperSplat's chunks
splat     ``.splat``          splat.py: antimatter15's 32 bytes a splat
gltf      ``.glb``            gltf.py: glTF 2.0 + KHR_gaussian_splatting
gltf-spz  ``.spz.glb``        gltf.py: the same + ..._compression_spz_2
html      ``.html``           html.py: one page with a viewer and the splats
========  ==================  ===========================================
"""

from __future__ import annotations

from pathlib import Path

from spirula.errors import DatasetError, UsageError
from spirula.export.common import splats_of

FORMATS = ("spz", "sog", "ply-compressed", "splat", "gltf", "gltf-spz", "ply", "html")
SUFFIX = {
    "spz": ".spz",
    "sog": ".sog",
    "ply-compressed": ".compressed.ply",
    "splat": ".splat",
    "gltf": ".glb",
    "gltf-spz": ".spz.glb",  # a .glb: read by its suffix as gltf, the extension tells them apart
    "ply": ".ply",
    "html": ".html",
}
# what each format keeps of the SH: None all (up to degree 3), 0 the base colour only
MAX_SH = {"splat": 0}
READABLE = (".ply", ".spz", ".sog", ".splat", ".glb")


def is_splat_file(path) -> bool:
    """Whether ``path`` names a file :func:`read_splats` reads (by its suffix, or a SOG meta.json)."""
    path = Path(path)
    return path.is_file() and (path.suffix.lower() in READABLE or path.name == "meta.json")


def format_of(path) -> str:
    """The format of a splat file, from its name (and, for .ply, its header)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".ply":
        from spirula.export.compressed_ply import is_compressed_ply

        return "ply-compressed" if is_compressed_ply(path) else "ply"
    if path.name == "meta.json":
        return "sog"
    for fmt, s in SUFFIX.items():
        if suffix == s:
            return fmt
    raise DatasetError("%s: not a splat file (one of %s, or a SOG meta.json)" % (path, ", ".join(READABLE)))


def read_splats(path, allow_empty: bool = True) -> dict:
    """The splats of any readable file, as :func:`spirula.data.ply.read_splat_ply`
    gives them (PLY axes, raw log-scales and logits). A bad file is one
    :class:`DatasetError` line naming it."""
    path = Path(path)
    if not path.exists():
        raise DatasetError("%s: missing" % path)
    fmt = format_of(path)
    if fmt == "ply":
        from spirula.data.ply import read_splat_ply

        return read_splat_ply(path, allow_empty=allow_empty)
    try:
        p = _module(fmt).read(path)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise DatasetError("%s: not a readable %s file (%s: %s)" % (path, fmt, type(exc).__name__, exc)) from None
    if len(p["means"]) == 0 and not allow_empty:
        raise DatasetError("%s: the splat file holds no splats" % path)
    return p


def _module(fmt: str):
    from spirula.export import compressed_ply, gltf, sog, splat, spz

    return {"spz": spz, "sog": sog, "ply-compressed": compressed_ply, "splat": splat, "gltf": gltf}[fmt]


def write_splats(path, splats: dict, fmt: str, sh_degree: int | None = None, title: str | None = None) -> Path:
    """Write ``splats`` (a splat dict) as ``fmt`` to ``path``, whole or not at
    all; ``sh_degree`` cuts the SH (formats that keep less cut it themselves)."""
    if fmt not in FORMATS:
        raise UsageError("--format %s: one of %s" % (fmt, ", ".join(FORMATS)))
    p = splats_of(splats, sh_degree)
    if fmt in MAX_SH and p["sh_degree"] > MAX_SH[fmt]:
        p = splats_of(p, MAX_SH[fmt])
    if fmt == "ply":
        from spirula.data.ply import write_splat_ply

        write_splat_ply(path, p["means"], p["quats"], p["log_scales"], p["opacity_logits"], p["sh_coeffs"])
        return Path(path)
    if fmt == "gltf-spz":
        from spirula.export import gltf

        return gltf.write(path, p, compression="spz")
    if fmt == "html":
        from spirula.export import html

        return html.write(path, p, title=title or Path(path).stem)
    return _module(fmt).write(path, p)
