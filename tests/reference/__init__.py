"""The float64 numpy reference the tests check the kernels against lives in
the package, ``spirula/reference/`` (``spirula selftest`` uses it too); this
package makes ``reference.<module>`` the same module objects, so tests import
and monkeypatch one source of truth."""

import importlib
import sys

for _name in ("adam", "densify", "intersect", "loss", "projection", "rasterize", "render", "tsdf"):
    sys.modules[__name__ + "." + _name] = globals()[_name] = importlib.import_module("spirula.reference." + _name)
