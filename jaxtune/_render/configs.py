"""Configs for people: knobs in the order the kernel's author wrote them (not sorted, as
the cache's ``config_id`` is), and which knobs vary across a sweep and which are fixed.

Examples:
    >>> sweep = [{"block_q": 128, "block_k": 256, "stages": 2},
    ...          {"block_q": 256, "block_k": 256, "stages": 2}]
    >>> varying, fixed = knobs(sweep)
    >>> varying, fixed
    (['block_q'], {'block_k': 256, 'stages': 2})
    >>> text(sweep[1]), text(sweep[1], varying)
    ('block_q=256, block_k=256, stages=2', 'block_q=256')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["fixed_text", "knobs", "text"]


def text(config: Mapping[str, Any], only: Sequence[str] | None = None) -> str:
    """``block_q=128, block_k=256``: the config's knobs in its own order (the order of the
    tuning space, as the author wrote it); ``only``: just these knobs, in that order."""
    names = list(config) if only is None else [k for k in only if k in config]
    return ", ".join(f"{k}={config[k]!r}" for k in names)


def knobs(configs: Iterable[Mapping[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """``(knobs that vary, {knob: value} of those that do not)`` across ``configs``, each
    in the order the knobs first appear."""
    values: dict[str, set[str]] = {}
    first: dict[str, Any] = {}
    seen: dict[str, int] = {}
    count = 0
    for config in configs:
        count += 1
        for name, value in config.items():
            values.setdefault(name, set()).add(repr(value))
            first.setdefault(name, value)
            seen[name] = seen.get(name, 0) + 1
    # A knob some configs lack varies too (a list-of-dicts space).
    varying = [n for n in values if len(values[n]) > 1 or seen[n] < count]
    fixed = {n: first[n] for n in values if n not in varying}
    return varying, fixed


def fixed_text(fixed: Mapping[str, Any]) -> str:
    """``fixed: block_b=1, stages=2``, or ``""`` when every knob varies."""
    return f"fixed: {text(fixed)}" if fixed else ""
