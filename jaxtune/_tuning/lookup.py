"""Lookup order for a config: explicit -> scope -> cross-host agreement -> user cache ->
packaged -> nearest -> default.

The agreement (``jaxtune._distributed``) wraps everything after the scopes: with
``jax.distributed`` initialised, process 0 runs the rest of the order and the others adopt
its answer.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import jax

from . import cache as _cache
from .result import Entry, active_scopes

__all__ = ["Choice", "cached_entry", "device_kind", "find_entry", "nearest", "scoped_entry"]

Source = Literal["explicit", "scope", "cache", "packaged", "nearest", "default"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """The config a call uses and where it came from.

    ``source`` is one of ``"explicit"``, ``"scope"``, ``"cache"``, ``"packaged"``,
    ``"nearest"``, ``"default"``; ``entry`` is the cache entry behind it, if any.
    """

    config: Mapping[str, Any]
    source: Source
    key: str
    entry: Entry | None = None


@functools.cache
def device_kind() -> str:
    """The device kind of the default backend (``"cpu"``, ``"TPU v5 lite"``, ``"NVIDIA H100"``)."""
    return str(jax.devices()[0].device_kind)


def _usable(entry: Entry | None, version: str, names: frozenset[str]) -> bool:
    return entry is not None and entry.kernel_version == version and set(entry.config) == names


def find_entry(
    kernel: str, kind: str, key: str, version: str, names: frozenset[str], *, use_caches: bool
) -> tuple[Entry, Source] | None:
    """The first usable exact entry: scopes (innermost first), user cache, packaged caches."""
    scoped = scoped_entry(kernel, kind, key, version, names)
    if scoped is not None:
        return scoped, "scope"
    return cached_entry(kernel, kind, key, version, names) if use_caches else None


def scoped_entry(
    kernel: str, kind: str, key: str, version: str, names: frozenset[str]
) -> Entry | None:
    """The usable entry of the innermost ``with TuningResult`` scope that has one."""
    for scope in reversed(active_scopes()):
        entry = scope.lookup(kernel, kind, key)
        if _usable(entry, version, names):
            return entry
    return None


def cached_entry(
    kernel: str, kind: str, key: str, version: str, names: frozenset[str]
) -> tuple[Entry, Source] | None:
    """The usable entry of the user cache, else of the first packaged cache that has one."""
    entry = _cache.user_cache().lookup(kernel, kind, key)
    if _usable(entry, version, names):
        assert entry is not None
        return entry, "cache"
    for layer in _cache.layers():
        entry = layer.lookup(kernel, kind, key)
        if _usable(entry, version, names):
            assert entry is not None
            return entry, "packaged"
    return None


def candidates(kernel: str, kind: str) -> Iterable[Entry]:
    """Every tuned entry of this kernel on this device kind, user cache first."""
    yield from _cache.user_cache().entries_for(kernel, kind)
    for layer in _cache.layers():
        yield from layer.entries_for(kernel, kind)


def _distance(
    a: Sequence[tuple[str, tuple[int, ...]]], b: Sequence[tuple[str, tuple[int, ...]]]
) -> float | None:
    if len(a) != len(b):
        return None
    total = 0.0
    for (dt_a, sh_a), (dt_b, sh_b) in zip(a, b, strict=True):
        if dt_a != dt_b or len(sh_a) != len(sh_b):
            return None
        total += sum(abs(math.log(max(x, 1) / max(y, 1))) for x, y in zip(sh_a, sh_b, strict=True))
    return total


def nearest(
    kernel: str,
    kind: str,
    version: str,
    names: frozenset[str],
    shapes: Sequence[tuple[str, tuple[int, ...]]],
    statics: str,
    accept: Callable[[Mapping[str, Any]], bool],
) -> Entry | None:
    """The tuned entry whose shapes are closest (sum of |log ratio| over every dimension)
    among entries with the same dtypes, ranks and static arguments whose config ``accept``
    (the kernel's ``prune`` on the current arguments) keeps."""
    best: tuple[float, Entry] | None = None
    for entry in candidates(kernel, kind):
        if not _usable(entry, version, names) or entry.statics != statics:
            continue
        d = _distance(entry.shapes, shapes)
        if d is None or (best is not None and d >= best[0]):
            continue
        try:
            ok = accept(entry.config)
        except Exception:
            ok = False
        if ok:
            best = (d, entry)
    return None if best is None else best[1]


def scope_ids() -> tuple[int, ...]:
    """Identity of the active scopes, for memo keys."""
    return tuple(id(s) for s in active_scopes())
