"""The on-disk cache: one msgpack file per (device kind, kernel), plus read-only layers.

``<cache dir>/<device-kind-slug>/<kernel-id-slug>.msgpack``. Writers take a file lock,
re-read, merge and replace atomically, so concurrent processes lose nothing. A file that
cannot be decoded is moved aside (``*.corrupt-<time>``) under the lock, reported once, and
read as empty; a malformed entry is skipped with one warning; a symlink, FIFO, unreadable
or oversized file is reported and ignored, never followed, opened or moved. A file from a
newer schema is left alone: read as empty, and never overwritten. A write that fails keeps
the entries in the process (:meth:`CacheStore.keep`) with a warning naming the fix.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import pathlib
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .. import _config
from .._codec import DecodeError, atomic_write, packb, read_bounded, unpackb
from .._errors import CacheError, JaxtuneWarning
from .cachefs import Version, file_version, fix_for, open_lock
from .eager import bump_generation
from .result import SCHEMA_VERSION, Entry, TuningResult

__all__ = ["CacheStore", "layers", "register_cache", "slug", "user_cache"]

_FORMAT = "jaxtune.cache"


def slug(name: str) -> str:
    """A safe file name for ``name``: readable, never leaving its directory, collision-free.

    Examples:
        >>> slug("examples.matmul")
        'examples.matmul'
        >>> slug("../../etc/passwd").startswith("etc-passwd-")
        True
    """
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-.")
    cleaned = re.sub(r"\.{2,}", ".", cleaned)[:80] or "unnamed"
    if cleaned != name:
        cleaned += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return cleaned


class CacheStore:
    """A cache directory: reads memoized per file version, writes locked and atomic.

    Nothing in the directory is trusted: files are opened without following symlinks, only
    regular files of at most :data:`~jaxtune._codec.MAX_FILE_BYTES` are read, every entry is
    checked against :mod:`.schema`, and a malformed entry is skipped with one warning.
    """

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.root = pathlib.Path(root)
        self.read_only = read_only
        self._memo: dict[pathlib.Path, tuple[Version, dict[str, Entry]]] = {}
        self._unsaved: dict[pathlib.Path, dict[str, Entry]] = {}
        self._reported: set[tuple[pathlib.Path, str]] = set()
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"CacheStore({str(self.root)!r}{', read_only=True' if self.read_only else ''})"

    def path_for(self, device_kind: str, kernel: str) -> pathlib.Path:
        """The file that holds ``kernel``'s entries for ``device_kind``."""
        return self.root / slug(device_kind) / f"{slug(kernel)}.msgpack"

    def files(self) -> list[pathlib.Path]:
        """Every cache file under the root (a directory that cannot be listed is reported)."""
        found: list[pathlib.Path] = []
        try:
            kinds = [d.path for d in os.scandir(self.root) if d.is_dir(follow_symlinks=False)]
            for kind in kinds:
                found.extend(pathlib.Path(kind, f.name) for f in os.scandir(kind))
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as e:
            self._report(
                self.root,
                f"jaxtune cannot list the cache directory: {e}. {fix_for(e, self.root / '-')}",
                kind="list",
            )
        return sorted(p for p in found if p.name.endswith(".msgpack"))

    def _entries(self, path: pathlib.Path, doc: dict[str, Any]) -> dict[str, Entry]:
        entries: dict[str, Entry] = {}
        bad: list[str] = []
        for key, record in doc["entries"].items():
            try:
                entries[key] = Entry.from_dict(record)
            except CacheError as e:
                bad.append(f"{key!r}: {e}")
        if bad:
            self._report(
                path,
                f"jaxtune cache file {path}: {len(bad)} of {len(doc['entries'])} entries are "
                f"malformed and skipped (first: {bad[0]}). The other entries are used; the "
                "skipped ones are dropped the next time this file is written.",
                kind="entries",
            )
        return entries

    def _read_file(self, path: pathlib.Path) -> dict[str, Entry]:
        """Entries of one file merged with those this process could not save."""
        return {**self._read_disk(path), **self._unsaved.get(path, {})}

    def _read_disk(self, path: pathlib.Path) -> dict[str, Entry]:
        try:
            version = file_version(path)
            memo = self._memo.get(path)
            if memo is not None and memo[0] == version:
                return memo[1]
            doc = _parse(read_bounded(path, follow_symlinks=False))
        except FileNotFoundError:
            return {}
        except _FutureSchemaError as e:
            self._report(path, _future_message(path, e.schema))
            return {}
        except DecodeError as e:
            self._quarantine(path, version, e)
            return {}
        except OSError as e:
            self._report(
                path, f"jaxtune cannot read the cache file {path}: {e}. {fix_for(e, path)}"
            )
            return {}
        entries = self._entries(path, doc)
        self._memo[path] = (version, entries)
        return entries

    def _report(self, path: pathlib.Path, message: str, *, kind: str = "file") -> None:
        if (path, kind) not in self._reported:
            self._reported.add((path, kind))
            warnings.warn(message, JaxtuneWarning, stacklevel=5)

    def _quarantine(self, path: pathlib.Path, version: Version, error: Exception) -> None:
        """Moves an undecodable file aside, under the file lock, unless a writer replaced
        it since it was read (then the next read sees the writer's file)."""
        if self.read_only:
            self._report(path, f"jaxtune cache file {path} is unreadable ({error}); ignored.")
            return
        try:
            with self._locked(path):
                self._move_aside(path, version, error)
        except OSError as e:
            self._report(
                path,
                f"jaxtune cache file {path} is unreadable ({error}) and could not be moved "
                f"aside ({e}); it is ignored. {fix_for(e, path)}",
            )

    def _move_aside(self, path: pathlib.Path, version: Version, error: Exception) -> None:
        """Renames an undecodable file to ``*.corrupt-<time>``; the file lock is held."""
        try:
            if file_version(path) != version:
                return
        except FileNotFoundError:
            return
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        os.replace(path, aside)
        self._memo.pop(path, None)
        self._report(
            path,
            f"jaxtune cache file {path} is unreadable ({error}); moved to {aside.name} and "
            "treated as empty. Tuned configs in it must be tuned again.",
        )

    def read(self, device_kind: str, kernel: str) -> dict[str, Entry]:
        """Every entry of ``kernel`` on ``device_kind``, by key."""
        with self._lock:
            return self._read_file(self.path_for(device_kind, kernel))

    def lookup(self, kernel: str, device_kind: str, key: str) -> Entry | None:
        """The entry for exactly this key, or ``None``."""
        return self.read(device_kind, kernel).get(key)

    def entries_for(self, kernel: str, device_kind: str) -> list[Entry]:
        """Every entry of one kernel on one device kind."""
        return list(self.read(device_kind, kernel).values())

    def all_entries(self) -> list[Entry]:
        """Every readable entry under the root."""
        out: list[Entry] = []
        with self._lock:
            for path in self.files():
                out.extend(self._read_file(path).values())
        return out

    @contextmanager
    def _locked(self, path: pathlib.Path) -> Iterator[None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_lock(path.with_name(path.name + ".lock"))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _current(self, path: pathlib.Path) -> dict[str, Entry]:
        """What the file holds now; the file lock is held."""
        try:
            version = file_version(path)
            doc = _parse(read_bounded(path, follow_symlinks=False))
        except FileNotFoundError:
            return {}
        except _FutureSchemaError as e:
            raise CacheError(
                f"refusing to overwrite {path}: it was written by a newer jaxtune "
                f"(schema {e.schema}, this one writes {SCHEMA_VERSION}). Upgrade "
                "jaxtune or set JAXTUNE_CACHE_DIR to another directory."
            ) from None
        except DecodeError as e:
            self._move_aside(path, version, e)
            return {}
        return self._entries(path, doc)

    def _update(
        self, path: pathlib.Path, change: Callable[[dict[str, Entry]], dict[str, Entry]]
    ) -> None:
        if self.read_only:
            raise CacheError(f"{self} is read-only (a packaged cache); nothing was written.")
        try:
            with self._lock, self._locked(path):
                updated = change(self._current(path))
                self._memo.pop(path, None)
                # Kernels traced before (the eager jits' traces included) choose again.
                bump_generation()
                if not updated:
                    path.unlink(missing_ok=True)
                    return
                first = next(iter(updated.values()))
                doc: dict[str, Any] = {
                    "schema": SCHEMA_VERSION,
                    "format": _FORMAT,
                    "kernel": first.kernel,
                    "device_kind": first.device_kind,
                    "entries": {k: e.to_dict() for k, e in updated.items()},
                }
                atomic_write(path, packb(doc))
        except OSError as e:
            raise CacheError(f"jaxtune could not write {path}: {e}. {fix_for(e, path)}") from e

    def write(self, entries: Iterable[Entry]) -> None:
        """Adds or replaces entries, merging with what other processes wrote meanwhile.

        Raises:
            CacheError: the store is read-only, a file comes from a newer schema, or the
                directory cannot be written (the message names the path and the fix).
        """
        groups: dict[pathlib.Path, list[Entry]] = {}
        for e in entries:
            groups.setdefault(self.path_for(e.device_kind, e.kernel), []).append(e)
        for path, group in groups.items():
            additions = {e.key: e for e in group}
            self._update(path, functools.partial(_with, additions=additions))
            with self._lock:
                unsaved = self._unsaved.get(path, {})
                for key in additions:
                    unsaved.pop(key, None)

    def keep(self, entries: Iterable[Entry]) -> bool:
        """Writes ``entries``; when that fails, warns once (path and fix) and keeps them in
        this process, where lookups still find them. Returns whether they reached the disk."""
        entries = list(entries)
        try:
            self.write(entries)
        except CacheError as e:
            with self._lock:
                for entry in entries:
                    path = self.path_for(entry.device_kind, entry.kernel)
                    self._unsaved.setdefault(path, {})[entry.key] = entry
                    bump_generation()
                    self._report(
                        path,
                        f"{e} The tuned result is used in this process but is not saved.",
                        kind="write",
                    )
            return False
        return True

    def remove(self, keep: Callable[[Entry], bool]) -> int:
        """Drops every entry for which ``keep`` is false; returns how many were dropped."""
        dropped = 0
        for path in self.files():
            with self._lock:
                entries = self._read_disk(path)
            gone = [k for k, e in entries.items() if not keep(e)]
            if gone:
                dropped += len(gone)
                self._update(path, functools.partial(_without, gone=frozenset(gone)))
        return dropped

    def clear(self) -> int:
        """Removes every cache file; returns how many entries they held."""
        return self.remove(lambda e: False)


def _parse(data: bytes) -> dict[str, Any]:
    """The checked top level of a cache file.

    Raises:
        DecodeError: not msgpack, or not shaped like a jaxtune cache file.
        _FutureSchemaError: written by a newer jaxtune.
    """
    doc = unpackb(data)
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise DecodeError("not a jaxtune cache file (the 'format' field is missing)")
    schema = doc.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise DecodeError("the 'schema' field is missing or not an int")
    if schema > SCHEMA_VERSION:
        raise _FutureSchemaError(schema)
    entries = doc.get("entries")
    if not isinstance(entries, dict) or not all(isinstance(k, str) for k in entries):
        raise DecodeError("the 'entries' field is not a dict keyed by str")
    return doc


def _future_message(path: pathlib.Path, schema: int) -> str:
    return (
        f"jaxtune cache file {path} was written by a newer jaxtune (schema {schema}, "
        f"this one reads {SCHEMA_VERSION}); it is ignored and left untouched. Upgrade "
        "jaxtune or point JAXTUNE_CACHE_DIR elsewhere."
    )


def _with(current: dict[str, Entry], *, additions: dict[str, Entry]) -> dict[str, Entry]:
    return {**current, **additions}


def _without(current: dict[str, Entry], *, gone: frozenset[str]) -> dict[str, Entry]:
    return {k: e for k, e in current.items() if k not in gone}


class _FutureSchemaError(Exception):
    def __init__(self, schema: int) -> None:
        super().__init__(schema)
        self.schema = schema


_STORES: dict[pathlib.Path, CacheStore] = {}
_LAYERS: list[CacheStore | TuningResult] = []
_REGISTRY_LOCK = threading.Lock()


def user_cache() -> CacheStore:
    """The store at ``JAXTUNE_CACHE_DIR`` (one object per directory, so reads are memoized)."""
    root = _config.settings().cache_dir
    with _REGISTRY_LOCK:
        store = _STORES.get(root)
        if store is None:
            store = _STORES[root] = CacheStore(root)
        return store


def register_cache(path: str | os.PathLike[str]) -> None:
    """Registers a read-only packaged cache that kernel libraries ship with their code.

    ``path`` is a cache directory (the layout of ``JAXTUNE_CACHE_DIR``, as written by
    ``jaxtune cache export --dir``) or a file written by ``TuningResult.save``. Packaged
    caches are consulted after the user cache, in registration order.

    Raises:
        CacheError: the path does not exist or the file is not a TuningResult.

    Examples:
        >>> import jaxtune, pathlib
        >>> here = pathlib.Path("mylib")  # doctest: +SKIP
        >>> jaxtune.register_cache(here / "tuned")  # doctest: +SKIP
    """
    p = pathlib.Path(path)
    if p.is_dir():
        layer: CacheStore | TuningResult = CacheStore(p, read_only=True)
    elif p.is_file():
        layer = TuningResult.load(p)
    else:
        raise CacheError(f"register_cache: {p} does not exist; expected a directory or a file.")
    with _REGISTRY_LOCK:
        _LAYERS.append(layer)
    bump_generation()


def unregister_caches() -> None:
    """Forgets every registered packaged cache (for tests)."""
    with _REGISTRY_LOCK:
        _LAYERS.clear()
    bump_generation()


def layers() -> list[CacheStore | TuningResult]:
    """The registered packaged caches, in lookup order."""
    with _REGISTRY_LOCK:
        return list(_LAYERS)
