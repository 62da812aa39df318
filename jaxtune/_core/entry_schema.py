"""What a stored entry's fields must hold beyond their types: the checks its annotations
carry (:class:`~.typed.Check`), and how a refused record is reported.

Cache files, TuningResult files and the child's answers are all read by
:mod:`jaxtune._core.typed` from :class:`~.vocabulary.Entry`'s annotations, these checks
among them, so a file that decodes but holds a wrong value (``config: 5``, ``time_us:
"fast"``, ``time_us: nan``) is named field by field (:func:`stored_error`) instead of
surfacing later as a ``TypeError`` in the user's call. Unknown fields are allowed (a newer
jaxtune of the same schema may add some) and ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .codec import storable
from .typed import Check, MismatchError

__all__ = [
    "CONFIG",
    "COUNT",
    "DECISION",
    "DECISIONS",
    "FAILURE_STAGES",
    "MARGIN",
    "NUMBER",
    "PHASES",
    "TIME",
    "TIMES",
    "stored_error",
]

#: Where a failed config failed (``Failure.stage``).
FAILURE_STAGES = frozenset({"compile", "run", "check", "timeout", "crash"})

#: How a sweep's winner was decided (``Entry.decision``; empty: before the field).
DECISIONS = frozenset({"", "clear", "tie", "undecided", "single"})


def _mapping(v: Any) -> bool:
    return type(v) is dict or isinstance(v, Mapping)  # the ABC check is slow; dicts are common


def _number(v: Any) -> bool:
    kind = type(v)
    if kind is float:
        return math.isfinite(v)
    if kind is int:  # msgpack ints fit in 64 bits, so they are finite as floats
        return True
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _time(v: Any) -> bool:
    return v is None or (_number(v) and v >= 0)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _config(v: Any) -> bool:
    return _mapping(v) and all(isinstance(k, str) and storable(x) for k, x in v.items())


def _margin(v: Any) -> bool:
    return v is None or (
        _mapping(v)
        and _config(v.get("rival"))
        and _number(v.get("ratio"))
        and all(v.get(k) is None or _number(v.get(k)) for k in ("low", "high"))
    )


#: A config: str keys, values the codec stores as themselves.
CONFIG = Check(
    _config,
    "a dict of str to None, bool, int, float, str, bytes, tuples of them, enums or dtypes",
)
#: A time in µs, or unknown.
TIME = Check(_time, "a finite number >= 0 or None")
#: Times in µs (a config's rounds).
TIMES = Check(lambda v: all(_number(x) and x >= 0 for x in v), "a list of times")
NUMBER = Check(_number, "a finite number")
COUNT = Check(_count, "an int >= 0")
DECISION = Check(lambda v: v in DECISIONS, f"one of {sorted(DECISIONS)}")
MARGIN = Check(_margin, "None or a dict of rival, ratio, low, high")
PHASES = Check(lambda v: all(_number(x) for x in v.values()), "a dict of str to seconds")

#: The codec's names of plain types, as a message about a stored field says them.
_KINDS = {"bool": "a bool", "str": "a string", "int": "an int", "float": "a number"}


def stored_error(e: MismatchError, what: str) -> str:
    """The message of a stored ``what`` (``entry``, ``measurement``) that ``e`` refused:
    the field, where it sits when nested, what it should be and what it held.

    Examples:
        >>> from jaxtune._core import typed
        >>> from jaxtune._core.vocabulary import Entry
        >>> try:
        ...     typed.decode(Entry, {"kernel": "k", "device_kind": "cpu", "key": "f32[2]",
        ...                          "config": {"b": 1}, "time_us": "fast",
        ...                          "default_config": {"b": 1}, "default_time_us": 2.0}, "")
        ... except typed.MismatchError as e:
        ...     print(stored_error(e, "entry"))
        entry: field 'time_us' should be a finite number >= 0 or None, got str 'fast'.
    """
    field, where = e.field, e.where
    at = f" (at {where})" if where and where != field else ""
    if e.expected and field:
        expected = _KINDS.get(e.expected, e.expected)
        return f"{what}: field {field!r} should be {expected}, got {e.got}{at}."
    if e.detail == "missing" and field:
        return f"{what}: the field {field!r} is missing{at}."
    if e.expected and not where:  # the record itself is no map
        return f"{what}: expected a dict, got {e.got}."
    return f"{what}: {e}."
