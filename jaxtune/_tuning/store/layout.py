"""The layout of one cache file, and its entries decoded one at a time.

Schema 2, written now::

    {"schema": 2, "format": "jaxtune.cache", "kernel": ..., "device_kind": ...,
     "entries": {key: <msgpack bytes of Entry.to_dict()>}}

A read decodes the outer map only (key -> bytes), so loading a file costs little more than
reading it; an entry is decoded and checked against :mod:`.schema` the first time it is
asked for, and remembered (:class:`EntryTable`). A malformed entry is found then, not when
the file is read. Schema 1 (read, never written) held each entry as a map in the file;
those are checked on first use the same way, and stored as bytes when the file is next
written. An older jaxtune refuses a schema 2 file as newer and never overwrites it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..._core.codec import DecodeError, packb, unpackb
from ..._core.errors import CacheError
from ..._core.vocabulary import Entry

__all__ = [
    "CACHE_FORMAT",
    "CACHE_SCHEMA",
    "EntryTable",
    "FutureSchemaError",
    "blob",
    "blobs",
    "decode",
    "encode",
    "parse",
]

CACHE_FORMAT = "jaxtune.cache"

#: Version of the cache file layout: 1, each entry a map; 2, each entry its own msgpack
#: bytes. Files of a later version are read as empty and never overwritten.
CACHE_SCHEMA = 2


class FutureSchemaError(Exception):
    """A cache file written by a newer jaxtune (``schema`` names its version)."""

    def __init__(self, schema: int) -> None:
        super().__init__(schema)
        self.schema = schema

    def message(self, path: os.PathLike[str]) -> str:
        """What a reader of ``path`` reports."""
        return (
            f"jaxtune cache file {path} was written by a newer jaxtune (schema {self.schema}, "
            f"this one reads {CACHE_SCHEMA}); it is ignored and left untouched. Upgrade "
            "jaxtune or point JAXTUNE_CACHE_DIR elsewhere."
        )


def parse(data: bytes) -> dict[str, Any]:
    """The entries of a cache file by key, each still raw (bytes, or a map in schema 1).

    Raises:
        DecodeError: not msgpack, or not shaped like a jaxtune cache file.
        FutureSchemaError: written by a newer jaxtune.
    """
    doc = unpackb(data)
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
        raise DecodeError("not a jaxtune cache file (the 'format' field is missing)")
    schema = doc.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise DecodeError("the 'schema' field is missing or not an int")
    if schema > CACHE_SCHEMA:
        raise FutureSchemaError(schema)
    if schema < 1:
        raise DecodeError(f"schema {schema} is no jaxtune cache schema (1 to {CACHE_SCHEMA})")
    entries = doc.get("entries")
    if not isinstance(entries, dict) or not all(isinstance(k, str) for k in entries):
        raise DecodeError("the 'entries' field is not a dict keyed by str")
    return entries


def blob(entry: Entry) -> bytes:
    """The stored form of one entry."""
    return packb(entry.to_dict())


def blobs(raw: Mapping[str, Any], *, drop: Mapping[str, Any]) -> dict[str, bytes]:
    """Raw entries as stored bytes, less those in ``drop`` (key -> raw value found
    malformed) whose value is still the same; a schema 1 map is packed as it was read."""
    out: dict[str, bytes] = {}
    for key, value in raw.items():
        if key in drop and drop[key] == value:
            continue
        if isinstance(value, bytes):
            out[key] = value
            continue
        try:
            out[key] = packb(value)
        except TypeError:
            continue  # never read back from msgpack: not an entry either
    return out


def encode(kernel: str, device_kind: str, entries: Mapping[str, bytes]) -> bytes:
    """A whole cache file holding ``entries`` (key -> :func:`blob`)."""
    return packb(
        {
            "schema": CACHE_SCHEMA,
            "format": CACHE_FORMAT,
            "kernel": kernel,
            "device_kind": device_kind,
            "entries": dict(entries),
        }
    )


def decode(key: str, raw: Any) -> Entry:
    """The entry stored under ``key`` (its bytes, or a schema 1 map), checked.

    Raises:
        CacheError: the value is not msgpack, a field is missing or has the wrong type, or
            the entry's own key is not ``key`` (the message says which).
    """
    if isinstance(raw, bytes):
        try:
            raw = unpackb(raw)
        except DecodeError as e:
            raise CacheError(f"entry: not readable msgpack ({e}).") from None
    entry = Entry.from_dict(raw)
    if entry.key != key:
        raise CacheError(f"entry: stored under {key!r} but its key is {entry.key!r}.")
    return entry


class EntryTable:
    """One version of one cache file: entries by key, each decoded on first use and kept.

    ``malformed`` maps each key found malformed so far to why.
    """

    __slots__ = ("_all", "_decoded", "malformed", "raw")

    def __init__(self, raw: dict[str, Any], previous: EntryTable | None = None) -> None:
        self.raw = raw
        self.malformed: dict[str, str] = {}
        self._decoded: dict[str, Entry] = {}
        self._all: dict[str, Entry] | None = None
        if previous is not None:  # entries another writer left as they were stay decoded
            for key, entry in previous._decoded.items():
                if raw.get(key) == previous.raw[key]:
                    self._decoded[key] = entry

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def complete(self) -> bool:
        """Whether every entry has been decoded (or found malformed)."""
        return self._all is not None

    def get(self, key: str) -> Entry | None:
        """The entry under ``key``; ``None`` when there is none or it is malformed."""
        entry = self._decoded.get(key)
        if entry is not None or key not in self.raw or key in self.malformed:
            return entry
        try:
            entry = decode(key, self.raw[key])
        except CacheError as e:
            self.malformed[key] = str(e)
            return None
        self._decoded[key] = entry
        return entry

    def all(self) -> dict[str, Entry]:
        """Every well-formed entry by key, in the file's order (decodes the rest)."""
        if self._all is None:
            found = {key: self.get(key) for key in self.raw}
            self._all = {key: e for key, e in found.items() if e is not None}
        return self._all

    def malformed_raw(self) -> dict[str, Any]:
        """The raw value of each entry found malformed, by key."""
        return {key: self.raw[key] for key in self.malformed}
