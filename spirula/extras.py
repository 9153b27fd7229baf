"""Spirula's optional parts, and the pip extra that installs each.

``pip install spirula`` brings what training needs; the heavier parts come with
an extra (pyproject.toml): ``sfm`` (pycolmap, PyAV), ``mesh``, ``view``, ``ray``,
or ``all``. A command checks for its modules first (:func:`need`), and a missing
one is a one-line :class:`MissingExtraError` (exit 2) naming the extra to install;
the CLI turns an import of such a module that no check caught into the same line
(:func:`from_import_error`).
"""

from __future__ import annotations

import importlib.util

from spirula.errors import UsageError

# extra -> the modules it installs (import names), as pyproject.toml's optional-dependencies
EXTRAS = {
    "sfm": ("pycolmap", "av"),
    "mesh": ("skimage", "trimesh", "xatlas", "fast_simplification"),
    "view": ("glfw", "moderngl", "viser"),
    "ray": ("ray",),
}
EXTRA_OF = {module: extra for extra, modules in EXTRAS.items() for module in modules}


class MissingExtraError(UsageError):
    """A command needs a module of an extra that is not installed (exit 2)."""


def _message(what: str, extras) -> str:
    extras = sorted(set(extras))
    return "%s needs the %s extra%s: pip install 'spirula[%s]'" % (
        what,
        " and ".join(extras),
        "s" if len(extras) > 1 else "",
        ",".join(extras),
    )


def need(what: str, *modules: str):
    """A :class:`MissingExtraError` unless each of ``modules`` (import names
    of :data:`EXTRAS`) is installed; ``what``: the command, for the message
    (``spirula sfm``). Nothing is imported."""
    gone = [m for m in modules if importlib.util.find_spec(m) is None]
    if gone:
        raise MissingExtraError(_message(what, [EXTRA_OF[m] for m in gone]))


def from_import_error(exc: ImportError, what: str = "this command") -> MissingExtraError | None:
    """The one-line error for an ImportError of an extra's module; None for any other."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if name not in EXTRA_OF:
        return None
    return MissingExtraError(_message(what, [EXTRA_OF[name]]))
