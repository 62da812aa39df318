"""Markers that @autotuned calls leave in the lowered program.

Each call runs its kernel under ``jax.named_scope("jaxtune[<kernel id>#<digest>]")``: the
kernel id names every op of the kernel in StableHLO locations and in compiled HLO's
``op_name`` (so profiles attribute time to it), while the key and config stay out of the
program, behind a 10-character digest that this process maps back to them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from typing import Any

__all__ = ["Mark", "lookup", "mark", "parse"]

_PATTERN = re.compile(r"jaxtune\[(?P<kernel>[^\]#]+)#(?P<digest>[0-9a-f]{10})\]")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mark:
    """What a marker stands for: the kernel, its key and config, and the call's abstract
    arguments (enough to tune that call again)."""

    kernel: str
    key: str
    config: dict[str, Any]
    source: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    owner: Any = dataclasses.field(default=None, compare=False)


_MARKS: dict[str, Mark] = {}
_LOCK = threading.Lock()


def mark(m: Mark) -> str:
    """Registers ``m`` and returns the scope name to run the kernel under."""
    from ._tuning.space import config_id

    digest = hashlib.sha256(f"{m.kernel}|{m.key}|{config_id(m.config)}".encode()).hexdigest()
    digest = digest[:10]
    with _LOCK:
        _MARKS[digest] = m
    return f"jaxtune[{m.kernel}#{digest}]"


def parse(name_stack: str) -> list[tuple[str, str, int]]:
    """Every marker in a name stack: ``(kernel id, digest, end offset)``, outermost first."""
    return [(x["kernel"], x["digest"], x.end()) for x in _PATTERN.finditer(name_stack)]


def lookup(digest: str) -> Mark | None:
    """The mark behind a digest, when this process made it."""
    with _LOCK:
        return _MARKS.get(digest)
