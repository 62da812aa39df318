"""Units for the text tables: one unit per column chosen by magnitude (:func:`.text.table`
aligns the columns).

Shared by the tuning tables (``jaxtune cache list``, ``TuningResult.table``) and the
profile tables (``jaxtune report``), so a column never mixes ``957.0 ms`` with
``33516.7 us``.

Examples:
    >>> unit, fmt = time_column([957_000.0, 33_516.7])
    >>> unit, fmt(957_000.0), fmt(33_516.7)
    ('ms', '957.0', '33.5')
    >>> unit, fmt = time_column([1_170_000.0, 166.2])
    >>> unit, fmt(1_170_000.0), fmt(166.2)
    ('s', '1.17', '0.000166')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "RATE_UNITS",
    "TIME_UNITS",
    "column",
    "count",
    "duration",
    "rate_column",
    "time_column",
]

#: Time units from µs, largest first.
TIME_UNITS: tuple[tuple[str, float], ...] = (("s", 1e6), ("ms", 1e3), ("us", 1.0))
#: Rate prefixes from one per second, largest first.
RATE_UNITS: tuple[tuple[str, float], ...] = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("", 1.0))


def column(
    values: Iterable[float | None], units: Sequence[tuple[str, float]]
) -> tuple[str, Callable[[float | None], str]]:
    """``(unit, format)`` for one column: the largest unit that the column's largest value
    reaches, so every cell of the column is in the same unit. Values below one unit keep
    three significant digits (``0.000166`` s beside ``1.17`` s, not ``0.000``); ``None``
    formats as ``-``."""
    largest = max((abs(v) for v in values if v), default=0.0)
    name, scale = next(((n, s) for n, s in units if largest >= s), units[-1])

    def fmt(value: float | None) -> str:
        if value is None:
            return "-"
        scaled = value / scale
        if abs(scaled) >= 1 or scaled == 0:
            digits = 1 if abs(scaled) >= 10 or scaled == 0 else 2
        else:  # three significant digits
            digits = min(9, 2 - math.floor(math.log10(abs(scaled))))
        return f"{scaled:.{digits}f}"

    return name, fmt


def time_column(values_us: Iterable[float | None]) -> tuple[str, Callable[[float | None], str]]:
    """A column of times given in µs, in s, ms or us."""
    return column(values_us, TIME_UNITS)


def rate_column(values: Iterable[float | None]) -> tuple[str, Callable[[float | None], str]]:
    """A column of per-second rates, with a T/G/M prefix for the whole column."""
    return column(values, RATE_UNITS)


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``"1 entry"``, ``"2 entries"``, ``"0 files"``.

    Examples:
        >>> count(1, "entry", "entries"), count(2, "entry", "entries"), count(0, "file")
        ('1 entry', '2 entries', '0 files')
    """
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def duration(us: float) -> str:
    """One time in the unit that fits it: ``2.78 s``, ``88.3 ms``, ``957.0 us``.

    Examples:
        >>> duration(2_775_487.2), duration(88_345.8), duration(0.5)
        ('2.78 s', '88.3 ms', '0.500 us')
    """
    unit, fmt = time_column([us])
    return f"{fmt(us)} {unit}"
