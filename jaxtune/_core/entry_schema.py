"""The typed schema of a stored entry and of a measurement, checked on every read.

Cache files, TuningResult files and the child's answers all come back through
:func:`check_entry` / :func:`check_measurement` before an :class:`~.vocabulary.Entry` is built,
so a file that decodes but holds a wrong type (``config: 5``, ``time_us: "fast"``) is named
field by field instead of surfacing later as a ``TypeError`` in the user's call. Unknown
fields are allowed (a newer jaxtune of the same schema may add some) and ignored.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from .codec import storable
from .errors import CacheError

__all__ = [
    "DECISIONS",
    "ENTRY_FIELDS",
    "FAILURE_STAGES",
    "Field",
    "check_entry",
    "check_measurement",
]

#: Where a failed config failed (``Failure.stage``).
FAILURE_STAGES = frozenset({"compile", "run", "check", "timeout", "crash"})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Field:
    """One field of a stored record: its name, its type test and how to describe it."""

    name: str
    accepts: Callable[[Any], bool]
    expected: str
    required: bool = True


def _str(v: Any) -> bool:
    return isinstance(v, str)


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


def _times(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(_number(x) and x >= 0 for x in v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _flag(v: Any) -> bool:
    return isinstance(v, bool)


def _config(v: Any) -> bool:
    return _mapping(v) and all(isinstance(k, str) and storable(x) for k, x in v.items())


def _versions(v: Any) -> bool:
    return _mapping(v) and all(
        isinstance(k, str) and (x is None or isinstance(x, str)) for k, x in v.items()
    )


def _shape(v: Any) -> bool:
    return (
        isinstance(v, (list, tuple))
        and len(v) == 2
        and isinstance(v[0], str)
        and isinstance(v[1], (list, tuple))
        and all(_count(d) for d in v[1])
    )


def _shapes(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(_shape(s) for s in v)


def _measurements(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(_mapping(m) for m in v)


def _code_parts(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 3 and all(isinstance(x, str) for x in p)
        for p in v
    )


def _stage(v: Any) -> bool:
    return v in FAILURE_STAGES


#: How a sweep's winner was decided (``Entry.decision``; empty: before the field).
DECISIONS = frozenset({"", "clear", "tie", "undecided", "single"})


def _margin(v: Any) -> bool:
    return (
        _mapping(v)
        and _config(v.get("rival"))
        and _number(v.get("ratio"))
        and all(v.get(k) is None or _number(v.get(k)) for k in ("low", "high"))
    )


_CONFIG = "a dict of str to None, bool, int, float, str, bytes, tuples of them, enums or dtypes"
_TIME = "a finite number >= 0 or None"


def _values(v: Any) -> bool:
    """``{"sets": n, "arguments": {name: {"source": str, "summary": [str, ...]}}}``."""
    if not _mapping(v):
        return False
    if not v:
        return True
    arguments = v.get("arguments", {})
    if not (_count(v.get("sets", 1)) and _mapping(arguments)):
        return False
    for name, about in arguments.items():
        if not (isinstance(name, str) and _mapping(about) and _str(about.get("source", ""))):
            return False
        summary = about.get("summary", [])
        if not (isinstance(summary, (list, tuple)) and all(_str(t) for t in summary)):
            return False
    return True


#: The fields of a stored :class:`~.vocabulary.Entry`.
ENTRY_FIELDS: tuple[Field, ...] = (
    Field(name="kernel", accepts=_str, expected="a string"),
    Field(name="device_kind", accepts=_str, expected="a string"),
    Field(name="key", accepts=_str, expected="a string"),
    Field(name="config", accepts=_config, expected=_CONFIG),
    Field(name="time_us", accepts=_time, expected=_TIME),
    Field(name="default_config", accepts=_config, expected=_CONFIG),
    Field(name="default_time_us", accepts=_time, expected=_TIME),
    Field(name="measurements", accepts=_measurements, expected="a list of dicts", required=False),
    Field(name="versions", accepts=_versions, expected="a dict of str to str", required=False),
    Field(name="created", accepts=_number, expected="a number", required=False),
    Field(name="kernel_version", accepts=_str, expected="a string", required=False),
    Field(name="shapes", accepts=_shapes, expected="a list of [dtype, [dims]]", required=False),
    Field(name="statics", accepts=_str, expected="a string", required=False),
    Field(name="search", accepts=_str, expected="a string", required=False),
    Field(name="space_size", accepts=_count, expected="an int >= 0", required=False),
    Field(name="tie", accepts=_flag, expected="a bool", required=False),
    Field(
        name="speedup_range",
        accepts=lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) == 2),
        expected="None or [low, high]",
        required=False,
    ),
    Field(
        name="decision",
        accepts=lambda v: v in DECISIONS,
        expected=f"one of {sorted(DECISIONS)}",
        required=False,
    ),
    Field(
        name="margin",
        accepts=lambda v: v is None or _margin(v),
        expected="None or a dict of rival, ratio, low, high",
        required=False,
    ),
    Field(name="timer", accepts=_str, expected="a string", required=False),
    Field(name="timing", accepts=_str, expected="a string", required=False),
    Field(name="code_digest", accepts=_str, expected="a string", required=False),
    Field(
        name="code_parts",
        accepts=_code_parts,
        expected="a list of [module, qualname, hash] strings",
        required=False,
    ),
    Field(
        name="phases",
        accepts=lambda v: (
            _mapping(v) and all(isinstance(k, str) and _number(x) for k, x in v.items())
        ),
        expected="a dict of str to seconds",
        required=False,
    ),
    Field(
        name="values",
        accepts=_values,
        expected='a dict {"sets": n, "arguments": {name: {"source": str, "summary": [str]}}}',
        required=False,
    ),
)

_MEASUREMENT_FIELDS: tuple[Field, ...] = (
    Field(name="config", accepts=_config, expected=_CONFIG),
    Field(name="median_us", accepts=_time, expected=_TIME),
    Field(name="min_us", accepts=_time, expected=_TIME),
    Field(name="spread", accepts=_number, expected="a finite number"),
    Field(name="samples", accepts=_count, expected="an int >= 0"),
    Field(name="compile_s", accepts=_number, expected="a finite number"),
    Field(name="dropped", accepts=_flag, expected="a bool", required=False),
    Field(name="low_us", accepts=_time, expected=_TIME, required=False),
    Field(name="high_us", accepts=_time, expected=_TIME, required=False),
    Field(name="rounds_us", accepts=_times, expected="a list of times", required=False),
    Field(name="calls", accepts=_count, expected="an int >= 0", required=False),
    Field(name="behind", accepts=_flag, expected="a bool", required=False),
    Field(name="same_as", accepts=_config, expected=_CONFIG, required=False),
)

_FAILURE_FIELDS: tuple[Field, ...] = (
    Field(name="config", accepts=_config, expected=_CONFIG),
    Field(name="stage", accepts=_stage, expected=f"one of {sorted(FAILURE_STAGES)}"),
    Field(name="reason", accepts=_str, expected="a string"),
)


def _check(record: Any, fields: tuple[Field, ...], what: str) -> dict[str, Any]:
    if not _mapping(record):
        raise CacheError(f"{what}: expected a dict, got {type(record).__name__}.")
    out: dict[str, Any] = {}
    for field in fields:
        if field.name not in record:
            if field.required:
                raise CacheError(f"{what}: the field {field.name!r} is missing.")
            continue
        value = record[field.name]
        if not field.accepts(value):
            raise CacheError(
                f"{what}: field {field.name!r} should be {field.expected}, got "
                f"{type(value).__name__} {_short(value)}."
            )
        out[field.name] = value
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_measurement(record: Any) -> tuple[bool, dict[str, Any]]:
    """``(ok, fields)`` of a stored measurement (``ok``: a timing, else a failure).

    Raises:
        CacheError: a field is missing or has the wrong type (the message names it).
    """
    ok = record.get("ok") if _mapping(record) else None
    if not isinstance(ok, bool):
        raise CacheError(f"measurement: field 'ok' should be a bool, got {_short(ok)}.")
    if ok:
        return True, _check(record, _MEASUREMENT_FIELDS, "measurement")
    return False, _check(record, _FAILURE_FIELDS, "failure")


def check_entry(record: Any) -> dict[str, Any]:
    """The known fields of a stored entry, each checked against :data:`ENTRY_FIELDS`.

    Raises:
        CacheError: a field is missing or has the wrong type (the message names it).

    Examples:
        >>> check_entry({"kernel": "k", "device_kind": "cpu", "key": "f32[2]",
        ...              "config": {"b": 1}, "time_us": "fast",
        ...              "default_config": {"b": 1}, "default_time_us": 2.0})
        Traceback (most recent call last):
        ...
        jaxtune.CacheError: entry: field 'time_us' should be a finite number >= 0 or None, got str 'fast'.
    """
    return _check(record, ENTRY_FIELDS, "entry")
