"""Numbers the host shares with the kernels, read from the shaders.

The host sizes buffers and dispatches by constants the kernels define: the
tile (``const uint TILE = 16u;`` in ``shaders/include/raster.glsl``), the
radix sort's keys per workgroup (``SORT_BLOCK``, ``include/radix.glsl``), the
scan's values per workgroup (``BLOCK``, ``prefix_sum.comp``), the floats of
a camera record (``#define CAMERA_FLOATS 32u``, ``include/camera.glsl``).
Each is written once, in GLSL, and read here (as ``StepParams``' layout is,
spirula/contract/std430.py): the file preprocessed without glslang
(spirula/contract/preprocess.py), then its ``const`` declarations and
object-like ``#define``\\ s whose value is arithmetic on numbers and earlier
constants are evaluated (uint and int as Python ints, float as a Python float
of the literal, as the host wrote them).
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from pathlib import Path

from spirula.contract.kernel import shader_dir
from spirula.contract.preprocess import Preprocessor
from spirula.errors import ShaderCompileError

_RE_CONST = re.compile(r"\bconst\s+(uint|int|float)\s+(\w+)\s*=\s*([^;]+);")
_RE_NUMBER = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+\.\d*(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?|\.\d+)[uUfF]?\b")
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}


def _evaluate(expr: str, known: dict, integer: bool):
    """``expr`` (GLSL arithmetic on literals and ``known`` names) as a number,
    None when it is anything else (a function call, an unknown name)."""
    text = _RE_NUMBER.sub(lambda m: str(int(m.group(1), 0)) if m.group(1)[:2] in ("0x", "0X") else m.group(1), expr)
    if integer:
        text = text.replace("/", "//")

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name) and node.id in known:
            return known[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](value(node.left), value(node.right))
        raise ValueError(expr)

    try:
        result = value(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None
    return int(result) if integer else float(result)


def _is_float(m) -> bool:
    literal = m.group(0)
    if literal[:2] in ("0x", "0X"):
        return False
    return literal[-1] in "fF" or any(c in literal for c in ".eE")


def shader_constants(path: str) -> dict:
    """``{name: value}`` of the numeric constants of ``shaders/<path>``
    (``include/raster.glsl``, ``prefix_sum.comp``), its includes' among them.
    A name declared twice with different values (a local ``const``) is left out."""
    return dict(_read(str(shader_dir()), path))


@functools.cache
def _read(root: str, path: str) -> tuple:
    source = Path(root) / path
    if not source.is_file():
        raise ShaderCompileError("no shader file %s" % source)
    pre = Preprocessor({}, [Path(root) / "include"])
    lines = pre.run(source)
    known, twice = {}, set()

    def add(name, value):
        if value is None:
            return
        if name in known and known[name] != value:
            twice.add(name)
        known.setdefault(name, value)

    for name, (params, body) in pre.macros.items():
        if params is None and body:  # object-like: a float when a literal is one
            add(name, _evaluate(body, known, integer=not any(_is_float(m) for m in _RE_NUMBER.finditer(body))))
    for kind, name, expr in _RE_CONST.findall("\n".join(lines)):
        add(name, _evaluate(expr, known, integer=kind != "float"))
    return tuple((k, v) for k, v in known.items() if k not in twice)


def shader_constant(path: str, name: str):
    """The constant ``name`` of ``shaders/<path>`` (:func:`shader_constants`),
    a ShaderCompileError when the file does not define it as a number."""
    values = shader_constants(path)
    if name not in values:
        raise ShaderCompileError("shaders/%s: no numeric constant %s" % (path, name))
    return values[name]
