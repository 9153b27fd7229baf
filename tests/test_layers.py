"""Imports point down and never go round in a circle (docs/architecture.md, "Layers").

The layer order is read from docs/architecture.md, the imports from every
``spirula/**/*.py`` with ``ast``: an ``import`` or ``from ... import`` at the
top of a file counts as much as one inside a function (both run, sooner or
later). An import is resolved to the module it names (``from spirula.backends
import vulkan`` is ``spirula.backends.vulkan``; ``from spirula.data import
load_dataset`` is the package ``spirula.data``); the parent packages that
Python runs on the way are not counted. Dynamic imports (``importlib``) are
not seen. The checks are plain functions of a source tree, so they can be
pointed at another checkout."""

import ast
import re
from pathlib import Path

from conftest import ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"
ROOT_UNITS = {"__init__", "__main__"}  # spirula/__init__.py and spirula/__main__.py


def read_layers(text: str) -> list:
    """The layers of the fenced block after "Layers, lowest first:", each a list
    of names (the words before the first run of two spaces on its line)."""
    m = re.search(r"^Layers, lowest first:\s*\n+```[a-z]*\n(.*?)^```", text, re.M | re.S)
    assert m, "docs/architecture.md has no fenced block after 'Layers, lowest first:'"
    return [
        re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split() for line in m.group(1).splitlines() if line.strip()
    ]


def modules(root: Path) -> dict:
    """``{dotted name: path}`` of every module of ``root/spirula`` (a package by its ``__init__.py``)."""
    out = {}
    for path in sorted((root / "spirula").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def unit(module: str) -> str:
    """The name a module has in the layer list: its first part under ``spirula``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _resolve(name: str, known: dict):
    """The longest known module that ``name`` starts with, or None outside spirula."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(root: Path) -> dict:
    """``{module: [(imported module, line)]}`` for every module of ``root/spirula``."""
    known = modules(root)
    out = {}
    for mod, path in known.items():
        is_package = path.name == "__init__.py"
        found = {}  # (imported module, line) -> None: in order, once
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if is_package else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    prefix = ".".join(base + ([node.module] if node.module else []))
                else:
                    prefix = node.module or ""
                names = [prefix + "." + a.name if prefix + "." + a.name in known else prefix for a in node.names]
            else:
                continue
            for name in names:
                target = _resolve(name, known) if name.split(".")[0] == "spirula" else None
                if target is not None and target != mod:
                    found[(target, node.lineno)] = None
        out[mod] = list(found)
    return out


def upward_imports(root: Path, layers: list) -> list:
    """Each import of a higher layer, or of another package of the same line, as one line of text."""
    rank = {name: i for i, line in enumerate(layers) for name in line}
    bad = []
    for mod, found in imports(root).items():
        src = unit(mod)
        for target, lineno in found:
            dst = unit(target)
            if dst == src:
                continue
            where = "%s:%d imports %s" % (modules(root)[mod].relative_to(root), lineno, target)
            if rank[dst] > rank[src]:
                bad.append("%s (%s is above %s)" % (where, dst, src))
            elif rank[dst] == rank[src]:
                bad.append("%s (%s and %s share a layer)" % (where, dst, src))
    return bad


def circles(root: Path) -> list:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph = {mod: sorted({t for t, _ in found}) for mod, found in imports(root).items()}
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_layer_list_names_every_package_and_module_of_spirula_once():
    layers = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    names = [n for line in layers for n in line]
    units = {unit(m) for m in modules(ROOT)}
    assert len(names) == len(set(names)), "named twice: %s" % sorted({n for n in names if names.count(n) > 1})
    assert units <= set(names), "not in the layer list of docs/architecture.md: %s" % sorted(units - set(names))
    assert set(names) <= units | ROOT_UNITS, "in the layer list, not in spirula/: %s" % sorted(set(names) - units)


def test_every_import_points_down():
    layers = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    bad = upward_imports(ROOT, layers)
    assert not bad, "imports against the layers of docs/architecture.md:\n" + "\n".join(bad)


def test_no_modules_import_each_other_in_a_circle():
    found = circles(ROOT)
    assert not found, "circles of imports:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_only_the_selftest_imports_the_reference():
    """The product takes no number from the reference (the mesh code's constants come
    from render/rasterizer.py); the selftest checks the kernels against it."""
    bad = [
        "%s imports %s" % (mod, target)
        for mod, found in imports(ROOT).items()
        for target, _ in found
        if unit(target) == "reference" and unit(mod) not in ("reference", "selftest")
    ]
    assert not bad, bad


def test_the_walk_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """The checks themselves, on a small tree: an upward import inside a function
    and a circle through a relative import are both found."""
    pkg = tmp_path / "spirula"
    for rel, text in {
        "__init__.py": "",
        "errors.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from spirula.high import b\n",
        "high/__init__.py": "",
        "high/b.py": "from . import c\n",
        "high/c.py": "import spirula.high.b\nfrom spirula import errors\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    layers = [["errors"], ["low"], ["high"], ["__init__"]]
    assert upward_imports(tmp_path, layers) == ["spirula/low/a.py:2 imports spirula.high.b (high is above low)"]
    assert circles(tmp_path) == [["spirula.high.b", "spirula.high.c"]]
