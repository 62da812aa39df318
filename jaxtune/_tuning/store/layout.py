"""The layout of one cache file, and its entries decoded one at a time.

An entry's identity in a file is its kernel version (``version=`` of the decorator, ``""``
without one) and its key (:data:`Ident`): entries of different kernel versions coexist, so
no write of one version can replace another's. Two layouts are written:

Schema 2, when every entry of the file has one kernel version (the common case; jaxtune
before kernel versions coexisted reads and writes these files as before)::

    {"schema": 2, "format": "jaxtune.cache", "kernel": ..., "device_kind": ...,
     "kernel_version": <the version of every entry>,
     "entries": {key: <msgpack bytes of Entry.to_dict()>}}

Schema 3, when entries of several kernel versions share the file (an older jaxtune leaves
it alone as newer, so it can never drop one of the versions)::

    {"schema": 3, "format": "jaxtune.cache", "kernel": ..., "device_kind": ...,
     "kernel_versions": {version: {key: <msgpack bytes of Entry.to_dict()>}}}

A schema 2 file without ``kernel_version`` (written by an earlier jaxtune) holds at most one
entry per key, of any version: its entries' versions are read from the entries themselves,
when they are decoded (:data:`ANY_VERSION`), and the next write stores them by version.

A read decodes the outer map only (key -> bytes), so loading a file costs little more than
reading it; an entry is decoded and checked (:mod:`jaxtune._core.typed`, with the checks of
:mod:`jaxtune._core.entry_schema`) the first time it is asked for, and remembered
(:class:`EntryTable`). A malformed entry is found then, not when
the file is read. Schema 1 (read, never written) held each entry as a map in the file;
those are checked on first use the same way, and stored as bytes when the file is next
written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..._core import typed
from ..._core.codec import DecodeError, packb, unpackb
from ..._core.errors import CacheError
from ..._core.vocabulary import Entry

__all__ = [
    "ANY_VERSION",
    "CACHE_FORMAT",
    "CACHE_SCHEMA",
    "XLA_DIR",
    "EntryTable",
    "FutureSchemaError",
    "Ident",
    "RawIdent",
    "blob",
    "blobs",
    "decode",
    "encode",
    "ident",
    "newest",
    "parse",
]

CACHE_FORMAT = "jaxtune.cache"
#: The folder under a cache directory where sweeps keep their compiled programs (JAX's
#: persistent compilation cache: :mod:`jaxtune._tuning.sweep.compile_cache`).
XLA_DIR = "xla"

#: Version of the cache file layout: 1, each entry a map; 2, each entry its own msgpack
#: bytes; 3, entries of several kernel versions in one file. Files of a later version are
#: read as empty and never overwritten.
CACHE_SCHEMA = 3

#: The identity of an entry in a cache file: (kernel version, key).
Ident = tuple[str, str]

#: The version part of an entry's identity in a file written before kernel versions
#: coexisted (schema 1, or schema 2 without ``kernel_version``): the entry itself says it.
ANY_VERSION = None

#: An identity as read from a file: (kernel version, or ANY_VERSION, key).
RawIdent = tuple[str | None, str]


def ident(entry: Entry) -> Ident:
    """The identity of ``entry`` in its cache file: (kernel version, key)."""
    return (entry.kernel_version, entry.key)


def newest(entries: Iterable[Entry]) -> Entry | None:
    """The entry tuned last (``created``; the last of equals), or ``None`` when empty:
    what a lookup that names no kernel version gets among an entry's versions."""
    best: Entry | None = None
    for entry in entries:
        if best is None or entry.created >= best.created:
            best = entry
    return best


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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _File:
    """A cache file's outer map, read by :mod:`jaxtune._core.typed` once its ``format``
    and ``schema`` were checked (:func:`parse`: only the fields its schema holds are read,
    as before); its entries stay raw (bytes, or maps in schema 1), decoded one at a time.
    Schemas 1 and 2 hold ``entries`` (schema 2 with the ``kernel_version`` they share,
    ``None`` where an earlier jaxtune wrote none), schema 3 ``kernel_versions``."""

    format: str = CACHE_FORMAT
    schema: int
    kernel: str = ""
    device_kind: str = ""
    kernel_version: str | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    entries: Mapping[str, Any] | None = dataclasses.field(default=None, metadata=typed.OMIT_DEFAULT)
    kernel_versions: Mapping[str, Mapping[str, Any]] | None = dataclasses.field(
        default=None, metadata=typed.OMIT_DEFAULT
    )


#: The fields of each schema's outer map that a read takes (the others are left alone), by
#: schema (a tuple: nothing to change).
_READ = ((), ("entries",), ("entries", "kernel_version"), ("kernel_versions",))


def parse(data: bytes) -> dict[RawIdent, Any]:
    """The entries of a cache file by identity, each still raw (bytes, or a map in schema
    1); the version is :data:`ANY_VERSION` where the file does not say it.

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
    held = "kernel_versions" if schema == 3 else "entries"
    if held not in doc:
        raise DecodeError(f"the '{held}' field is missing")
    read = {name: doc[name] for name in _READ[schema] if name in doc}
    try:
        file = typed.decode(_File, {"schema": schema, **read}, "cache file")
    except typed.MismatchError as e:
        raise DecodeError(str(e)) from None
    if file.kernel_versions is not None:
        return {
            (version, key): raw
            for version, entries in file.kernel_versions.items()
            for key, raw in entries.items()
        }
    assert file.entries is not None  # checked above: schemas 1 and 2 hold them
    return {(file.kernel_version, key): raw for key, raw in file.entries.items()}


def blob(entry: Entry) -> bytes:
    """The stored form of one entry."""
    return packb(entry.to_dict())


def _version_in(raw: Any) -> str:
    """The kernel version an entry's raw form names (``""`` when it names none or cannot
    be read: such an entry is found malformed when it is decoded)."""
    if isinstance(raw, bytes):
        try:
            raw = unpackb(raw)
        except DecodeError:
            return ""
    version = raw.get("kernel_version", "") if isinstance(raw, dict) else ""
    return version if isinstance(version, str) else ""


def blobs(
    raw: Mapping[RawIdent, Any],
    *,
    drop: Mapping[RawIdent, Any],
    decoded: Mapping[RawIdent, Entry] | None = None,
) -> dict[Ident, bytes]:
    """Raw entries as stored bytes by identity, less those in ``drop`` (identity -> raw
    value found malformed) whose value is still the same; a schema 1 map is packed as it
    was read. An entry of an older file is stored under the version it names (``decoded``:
    the entries already decoded, which need no second look)."""
    out: dict[Ident, bytes] = {}
    for (version, key), value in raw.items():
        if (version, key) in drop and drop[version, key] == value:
            continue
        if version is ANY_VERSION:
            known = (decoded or {}).get((version, key))
            version = known.kernel_version if known is not None else _version_in(value)
        if isinstance(value, bytes):
            out[version, key] = value
            continue
        try:
            out[version, key] = packb(value)
        except TypeError:
            continue  # never read back from msgpack: not an entry either
    return out


def encode(kernel: str, device_kind: str, entries: Mapping[Ident, bytes]) -> bytes:
    """A whole cache file holding ``entries`` (identity -> :func:`blob`): schema 2 when
    they share one kernel version, else schema 3."""
    versions: dict[str, dict[str, bytes]] = {}
    for (version, key), data in entries.items():
        versions.setdefault(version, {})[key] = data
    if len(versions) <= 1:
        ((version, by_key),) = versions.items() or [("", {})]
        file = _File(
            schema=2, kernel=kernel, device_kind=device_kind, kernel_version=version, entries=by_key
        )
    else:
        file = _File(schema=3, kernel=kernel, device_kind=device_kind, kernel_versions=versions)
    return packb(typed.encode(file))


def decode(where: RawIdent, raw: Any) -> Entry:
    """The entry stored under ``where`` (its bytes, or a schema 1 map), checked.

    Raises:
        CacheError: the value is not msgpack, a field is missing or has the wrong type, or
            the entry's own key or kernel version is not the one it is stored under (the
            message says which).
    """
    version, key = where
    if isinstance(raw, bytes):
        try:
            raw = unpackb(raw)
        except DecodeError as e:
            raise CacheError(f"entry: not readable msgpack ({e}).") from None
    entry = Entry.from_dict(raw)
    if entry.key != key:
        raise CacheError(f"entry: stored under {key!r} but its key is {entry.key!r}.")
    if version is not ANY_VERSION and entry.kernel_version != version:
        raise CacheError(
            f"entry: stored under kernel version {version!r} but its kernel_version is "
            f"{entry.kernel_version!r}."
        )
    return entry


class EntryTable:
    """One version of one cache file: entries by identity, each decoded on first use and
    kept.

    ``malformed`` maps each identity found malformed so far to why.
    """

    __slots__ = ("_all", "_decoded", "_keys", "malformed", "raw")

    def __init__(self, raw: dict[RawIdent, Any], previous: EntryTable | None = None) -> None:
        self.raw = raw
        self.malformed: dict[RawIdent, str] = {}
        self._decoded: dict[RawIdent, Entry] = {}
        self._all: dict[Ident, Entry] | None = None
        self._keys: dict[str, list[RawIdent]] | None = None
        if previous is not None:  # entries another writer left as they were stay decoded
            for where, entry in previous._decoded.items():
                if raw.get(where) == previous.raw[where]:
                    self._decoded[where] = entry

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def complete(self) -> bool:
        """Whether every entry has been decoded (or found malformed)."""
        return self._all is not None

    @property
    def decoded(self) -> Mapping[RawIdent, Entry]:
        """The entries decoded so far, by the identity they are stored under."""
        return self._decoded

    def _entry(self, where: RawIdent) -> Entry | None:
        entry = self._decoded.get(where)
        if entry is not None or where not in self.raw or where in self.malformed:
            return entry
        try:
            entry = decode(where, self.raw[where])
        except CacheError as e:
            self.malformed[where] = str(e)
            return None
        self._decoded[where] = entry
        return entry

    def get(self, key: str, version: str | None = None) -> Entry | None:
        """The entry of kernel version ``version`` under ``key`` (``None``: the newest of
        its versions); ``None`` when there is none or it is malformed."""
        if version is not None:
            entry = self._entry((version, key))
            if entry is None:
                entry = self._entry((ANY_VERSION, key))
            return entry if entry is not None and entry.kernel_version == version else None
        if self._keys is None:
            self._keys = {}
            for where in self.raw:
                self._keys.setdefault(where[1], []).append(where)
        return newest(e for w in self._keys.get(key, ()) if (e := self._entry(w)) is not None)

    def all(self) -> dict[Ident, Entry]:
        """Every well-formed entry by identity, in the file's order (decodes the rest)."""
        if self._all is None:
            found = [self._entry(where) for where in self.raw]
            self._all = {ident(e): e for e in found if e is not None}
        return self._all

    def malformed_raw(self) -> dict[RawIdent, Any]:
        """The raw value of each entry found malformed, by identity."""
        return {where: self.raw[where] for where in self.malformed}
