"""TuningResult files (``jaxtune cache export``, ``TuningResult.save``) read and written as
lists of entries, every kernel version kept.

A :class:`~jaxtune._tuning.result.TuningResult` maps (kernel, device kind, key) to one
entry, so it holds one kernel version of each key. The cache's commands (``export``,
``import``, ``merge``) and a shipped file (:mod:`.packaged`) read the same files here as a
list, where entries of several kernel versions of one key coexist; of two entries with one
:func:`identity`, the later in the file wins. The layout is TuningResult's
(``{"schema": 1, "format": "jaxtune.TuningResult", "entries": [<Entry.to_dict()>...]}``),
so ``TuningResult.load`` reads these files too (keeping one version of each key).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterable
from typing import Any

from ..._core import typed
from ..._core.codec import DecodeError, atomic_write, packb, read_bounded, unpackb
from ..._core.errors import CacheError
from ..._core.vocabulary import Entry

__all__ = [
    "RESULT_FORMAT",
    "SCHEMA_VERSION",
    "EntryKey",
    "dumps",
    "identity",
    "load",
    "records",
    "save",
]

RESULT_FORMAT = "jaxtune.TuningResult"
#: The layout version of a TuningResult file.
SCHEMA_VERSION = 1

#: An entry's identity across files: kernel, device kind, kernel version, key.
EntryKey = tuple[str, str, str, str]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _File:
    """A TuningResult file, read by :mod:`jaxtune._core.typed` once its ``format`` and
    ``schema`` were checked (:func:`records`); its entries stay raw maps, each checked as
    an :class:`~jaxtune._core.vocabulary.Entry` by whoever loads them."""

    schema: int = SCHEMA_VERSION
    format: str = RESULT_FORMAT
    entries: list[Any]


def identity(entry: Entry) -> EntryKey:
    """What makes an entry one: kernel, device kind, kernel version and key."""
    return (entry.kernel, entry.device_kind, entry.kernel_version, entry.key)


def records(data: bytes) -> list[Any]:
    """The raw entries of a TuningResult file's bytes (each unchecked).

    Raises:
        CacheError: the bytes are not a jaxtune TuningResult, or come from a newer schema.
    """
    if not data:
        raise CacheError("not a jaxtune TuningResult: the file is empty.")
    try:
        doc = unpackb(data)
    except DecodeError as e:
        raise CacheError(f"not a jaxtune TuningResult (msgpack decode failed: {e}).") from e
    if isinstance(doc, dict) and doc.get("format") == "jaxtune.cache":
        raise CacheError(
            "not a jaxtune TuningResult: it is one file of a cache directory; give the "
            "directory (its device-kind folders and all), or a file written by "
            "`jaxtune cache export`."
        )
    if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT:
        raise CacheError("not a jaxtune TuningResult: the 'format' field is missing.")
    schema = doc.get("schema", 0)
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise CacheError("not a jaxtune TuningResult: 'schema' should be an int.")
    if schema > SCHEMA_VERSION:
        raise CacheError(
            f"this TuningResult has schema {schema}, newer than this jaxtune understands "
            f"({SCHEMA_VERSION}); upgrade jaxtune to read it."
        )
    try:
        return typed.decode(_File, doc, "TuningResult").entries
    except typed.MismatchError:
        raise CacheError("not a jaxtune TuningResult: 'entries' should be a list.") from None


def load(path: str | os.PathLike[str]) -> list[Entry]:
    """Every entry of a TuningResult file, each kernel version kept (of two entries with
    one identity, the later), all checked: one malformed entry refuses the whole file.

    Raises:
        CacheError: the file cannot be read, is not a TuningResult, or holds a malformed
            entry (the message names the file; nothing was loaded).
    """
    try:
        data = read_bounded(pathlib.Path(path))
    except OSError as e:
        raise CacheError(f"cannot read the TuningResult file {path}: {e}") from e
    try:
        raw = records(data)
        try:
            entries = [Entry.from_dict(r) for r in raw]
        except CacheError as e:
            raise CacheError(f"malformed TuningResult entry ({e}); nothing was loaded.") from e
    except CacheError as e:
        raise CacheError(f"the TuningResult file {path}: {e}") from e
    return list({identity(e): e for e in entries}.values())


def dumps(entries: Iterable[Entry]) -> bytes:
    """A TuningResult file holding ``entries``, every kernel version kept."""
    unique = {identity(e): e for e in entries}
    return packb(typed.encode(_File(entries=[e.to_dict() for e in unique.values()])))


def save(path: str | os.PathLike[str], entries: Iterable[Entry]) -> pathlib.Path:
    """Writes :func:`dumps` of ``entries`` to ``path`` atomically; returns the path."""
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, dumps(entries))
    return target
