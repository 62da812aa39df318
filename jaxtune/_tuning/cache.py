"""The on-disk cache: one msgpack file per (device kind, kernel), plus read-only layers.

``<cache dir>/<device-kind-slug>/<kernel-id-slug>.msgpack``. Writers take a file lock,
re-read, merge and replace atomically, so concurrent processes lose nothing. An unreadable
file is moved aside (``*.corrupt-<time>``), reported once, and read as empty. A file from a
newer schema is left alone: read as empty, and never overwritten.
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
from .._codec import atomic_write, packb, unpackb
from .._errors import CacheError, JaxtuneWarning
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
    """A cache directory: reads memoized per file version, writes locked and atomic."""

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.root = pathlib.Path(root)
        self.read_only = read_only
        self._memo: dict[pathlib.Path, tuple[tuple[int, int], dict[str, Entry]]] = {}
        self._reported: set[pathlib.Path] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CacheStore({str(self.root)!r}{', read_only=True' if self.read_only else ''})"

    def path_for(self, device_kind: str, kernel: str) -> pathlib.Path:
        """The file that holds ``kernel``'s entries for ``device_kind``."""
        return self.root / slug(device_kind) / f"{slug(kernel)}.msgpack"

    def files(self) -> list[pathlib.Path]:
        """Every cache file under the root."""
        return sorted(self.root.glob("*/*.msgpack")) if self.root.is_dir() else []

    def _decode(self, path: pathlib.Path, data: bytes) -> dict[str, Entry]:
        doc = unpackb(data)
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise ValueError("not a jaxtune cache file")
        schema = doc.get("schema")
        if not isinstance(schema, int):
            raise ValueError("schema version missing")
        if schema > SCHEMA_VERSION:
            raise _FutureSchemaError(schema)
        return {key: Entry.from_dict(e) for key, e in doc["entries"].items()}

    def _read_file(self, path: pathlib.Path) -> dict[str, Entry]:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return {}
        version = (stat.st_mtime_ns, stat.st_size)
        memo = self._memo.get(path)
        if memo is not None and memo[0] == version:
            return memo[1]
        try:
            entries = self._decode(path, path.read_bytes())
        except _FutureSchemaError as e:
            self._report(
                path,
                f"jaxtune cache file {path} was written by a newer jaxtune (schema {e.schema}, "
                f"this one reads {SCHEMA_VERSION}); it is ignored and left untouched. Upgrade "
                "jaxtune or point JAXTUNE_CACHE_DIR elsewhere.",
            )
            return {}
        except FileNotFoundError:
            return {}
        except Exception as e:
            self._quarantine(path, e)
            return {}
        self._memo[path] = (version, entries)
        return entries

    def _report(self, path: pathlib.Path, message: str) -> None:
        if path not in self._reported:
            self._reported.add(path)
            warnings.warn(message, JaxtuneWarning, stacklevel=4)

    def _quarantine(self, path: pathlib.Path, error: Exception) -> None:
        if self.read_only:
            self._report(path, f"jaxtune cache file {path} is unreadable ({error}); ignored.")
            return
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            os.replace(path, aside)
        except OSError:
            aside = path
        self._report(
            path,
            f"jaxtune cache file {path} is unreadable ({type(error).__name__}: {error}); moved "
            f"to {aside.name} and treated as empty. Tuned configs in it must be tuned again.",
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
        with open(path.with_name(path.name + ".lock"), "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _update(
        self, path: pathlib.Path, change: Callable[[dict[str, Entry]], dict[str, Entry]]
    ) -> None:
        if self.read_only:
            raise CacheError(f"{self} is read-only (a packaged cache); nothing was written.")
        with self._lock, self._locked(path):
            current: dict[str, Entry] = {}
            if path.exists():
                try:
                    current = self._decode(path, path.read_bytes())
                except _FutureSchemaError as e:
                    raise CacheError(
                        f"refusing to overwrite {path}: it was written by a newer jaxtune "
                        f"(schema {e.schema}, this one writes {SCHEMA_VERSION}). Upgrade "
                        "jaxtune or set JAXTUNE_CACHE_DIR to another directory."
                    ) from None
                except Exception as e:
                    self._quarantine(path, e)
            updated = change(dict(current))
            if not updated:
                path.unlink(missing_ok=True)
                self._memo.pop(path, None)
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
            self._memo.pop(path, None)

    def write(self, entries: Iterable[Entry]) -> None:
        """Adds or replaces entries, merging with what other processes wrote meanwhile.

        Raises:
            CacheError: the store is read-only, or a file comes from a newer schema.
        """
        groups: dict[pathlib.Path, list[Entry]] = {}
        for e in entries:
            groups.setdefault(self.path_for(e.device_kind, e.kernel), []).append(e)
        for path, group in groups.items():
            additions = {e.key: e for e in group}
            self._update(path, functools.partial(_with, additions=additions))

    def remove(self, keep: Callable[[Entry], bool]) -> int:
        """Drops every entry for which ``keep`` is false; returns how many were dropped."""
        dropped = 0
        for path in self.files():
            entries = self._read_file(path)
            gone = [k for k, e in entries.items() if not keep(e)]
            if gone:
                dropped += len(gone)
                self._update(path, functools.partial(_without, gone=frozenset(gone)))
        return dropped

    def clear(self) -> int:
        """Removes every cache file; returns how many entries they held."""
        return self.remove(lambda e: False)


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


def unregister_caches() -> None:
    """Forgets every registered packaged cache (for tests)."""
    with _REGISTRY_LOCK:
        _LAYERS.clear()


def layers() -> list[CacheStore | TuningResult]:
    """The registered packaged caches, in lookup order."""
    with _REGISTRY_LOCK:
        return list(_LAYERS)
