"""What a training setting is (its spec), kept in its dataclass field's
metadata, and the check of a value against it. (Environment variables are
spirula/settings.py's.)

    cap_max: int = setting(1_000_000, "MCMC splat budget", flag="--cap-max", ge=1)

A :class:`Spec` says what the help text says, the option of ``spirula
train`` if the setting has one (every setting is reachable with ``--set
NAME=VALUE`` under its field's name), the values it accepts (the field's type
annotation, ``choices``, the bounds ``ge``/``gt``/``le``/``lt``) and whether
it may change on ``--resume``. The train command's options are generated from
it (spirula/cli/train.py, as Brush derives its CLI from its config), and
:func:`check` / :func:`validate` refuse a value outside it with one line
naming the setting and what it accepts (:class:`SettingError`, exit status 2).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing

from spirula.errors import UsageError

KEY = "spirula"  # the metadata key of a field's Spec
INT_LIMIT = 1 << 63  # an integer setting is a signed 64-bit one


class SettingError(UsageError, ValueError):
    """A setting given a value it does not accept: one line naming it and what
    it accepts (exit status 2). Also a ValueError, as TrainConfig's checks were."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """A setting's description (module docstring).

    ``flag``: the ``spirula train`` option (``--cap-max``), None when the
    setting is reached with ``--set`` only; ``negatable``: a boolean option
    has a ``--no-`` form too (``--compact/--no-compact``); ``metavar`` and
    ``default_help`` (the help's ``[default: ...]`` when the value alone does
    not say it, e.g. None meaning "85% of the device's memory") shape the
    option's help. ``choices``, ``ge``, ``gt``, ``le``, ``lt``: the values
    accepted besides the field's type. ``resumable``: the setting may change
    when a run continues (``spirula train --resume RUN``); False where the
    checkpoint depends on it (``--resume`` refuses a change with one line:
    spirula/train/run_folder.py)."""

    help: str
    flag: str | None = None
    negatable: bool = False
    metavar: str | None = None
    default_help: str | None = None
    choices: tuple | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    resumable: bool = True


def setting(default=dataclasses.MISSING, help: str = "", *, default_factory=dataclasses.MISSING, **kw):
    """A dataclass field whose metadata is ``Spec(help, **kw)``."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={KEY: Spec(help, **kw)})


def spec_fields(cls) -> dict:
    """``{name: (field, Spec)}`` of the fields of dataclass ``cls`` (or an
    instance) that carry a Spec, in field order."""
    return _spec_fields(cls if isinstance(cls, type) else type(cls))


@functools.cache
def _spec_fields(cls: type) -> dict:
    return {f.name: (f, f.metadata[KEY]) for f in dataclasses.fields(cls) if KEY in f.metadata}


def value_type(cls, name: str) -> tuple:
    """(the type a value of field ``name`` of ``cls`` has, whether None is
    allowed), from the field's annotation: ``int``, ``float``, ``bool``,
    ``str``, or the class itself (a nested dataclass)."""
    return _value_type(cls if isinstance(cls, type) else type(cls), name)


@functools.cache
def _value_type(cls: type, name: str) -> tuple:
    hint = typing.get_type_hints(cls)[name]
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else ()
    if not args:
        return hint, False
    kinds = [a for a in args if a is not type(None)]
    return (kinds[0] if len(kinds) == 1 else tuple(kinds)), type(None) in args


def accepted(kind, s: Spec, optional: bool) -> str:
    """What a setting accepts, in words: ``an integer from 0 to 3``, ``a number > 0``."""
    if s.choices is not None:
        text = "one of " + ", ".join(map(str, s.choices))
    elif kind is bool:
        text = "true or false"
    else:
        text = {int: "an integer", float: "a number", str: "a string"}.get(kind, "a value")
        if s.ge is not None and s.le is not None:
            text += " from %s to %s" % (_num(s.ge), _num(s.le))
        else:
            low = "> %s" % _num(s.gt) if s.gt is not None else ">= %s" % _num(s.ge) if s.ge is not None else None
            high = "< %s" % _num(s.lt) if s.lt is not None else "<= %s" % _num(s.le) if s.le is not None else None
            bounds = [b for b in (low, high) if b]
            text += " " + " and ".join(bounds) if bounds else ""
    return text + (", or null" if optional else "")


def _num(x) -> str:
    return "%d" % x if float(x).is_integer() and abs(x) < 1e15 else "%g" % x


def label(name: str, s: Spec, value) -> str:
    """How a value given to a setting is named in an error: ``--sh-degree 4``, ``flatten_weight=-1``."""
    shown = json.dumps(value) if isinstance(value, (str, bool)) or value is None else str(value)
    return "%s %s" % (s.flag, shown) if s.flag else "%s=%s" % (name, shown)


def check(cls, name: str, value):
    """``value`` for field ``name`` of dataclass ``cls`` (class or instance) as
    stored (an integer given to a number becomes a float, an integral float
    given to an integer an int), or a :class:`SettingError` naming the setting
    and what it accepts."""
    s = spec_fields(cls)[name][1]
    kind, optional = value_type(cls, name)
    stored = _stored(kind, s, optional, value)
    if stored is _BAD:
        raise SettingError("%s: expected %s" % (label(name, s, value), accepted(kind, s, optional)))
    return stored


_BAD = object()


def _stored(kind, s: Spec, optional: bool, value):
    """``value`` as a setting of ``kind`` stores it, or _BAD."""
    if value is None:
        return None if optional else _BAD
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and not math.isfinite(value):
        return _BAD  # NaN and infinities: no setting takes them
    if kind is bool:
        if not isinstance(value, bool):
            return _BAD
    elif kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not -INT_LIMIT <= value < INT_LIMIT:
            return _BAD  # an integer a 64-bit one holds (config.json, numpy)
    elif kind is float:
        if not number:
            return _BAD
        value = float(value)
    elif kind is str:
        if number:
            value = str(value)  # --set vram_budget=8000000000: the JSON number as its text
        if not isinstance(value, str):
            return _BAD
    if s.choices is not None and value not in s.choices:
        return _BAD
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and not (
            (s.ge is None or value >= s.ge)
            and (s.gt is None or value > s.gt)
            and (s.le is None or value <= s.le)
            and (s.lt is None or value < s.lt)
        )
    ):
        return _BAD
    return value


def validate(obj):
    """Check every Spec field of dataclass instance ``obj`` (:func:`check`),
    storing each value as checked. Nested dataclasses validate themselves."""
    for name in spec_fields(obj):
        value = getattr(obj, name)
        if dataclasses.is_dataclass(value):
            continue
        checked = check(obj, name, value)
        if checked is not value:
            object.__setattr__(obj, name, checked)
    return obj
