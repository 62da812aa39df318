"""The on-disk cache: one msgpack file per (device kind, kernel), plus read-only layers.

``<cache dir>/<device-kind-slug>/<kernel-id-slug>.msgpack``. Writers take a file lock,
re-read, merge and replace atomically, so concurrent processes lose nothing. A file that
cannot be decoded is reported once and read as empty; it is moved aside
(``*.corrupt-<time>``) under the lock, by a reader only when the lock is free at once (a
read never waits for a writer), else by the next writer. A symlink, FIFO, unreadable or
oversized file is reported and ignored, never followed, opened or moved. A file from a newer schema is left alone: read as empty,
and never overwritten. A write that fails keeps the entries in the process
(:meth:`CacheStore.save`) with a warning naming the fix.

Reading a file decodes only its outer map; each entry is decoded and checked when first
looked up (:mod:`.layout`), so a malformed entry is skipped with one warning then, and
dropped the next time this process writes the file.

An entry's identity in a file is its kernel version and key (:mod:`.layout`): a write
replaces the entry of the same version only, so entries of different kernel versions
(two versions of a library sharing a cache directory, an import of another version's
export) coexist. A lookup names the version it wants.

Packaged caches (:func:`register_cache`) are read-only layers: a directory with the cache
layout, or a shipped TuningResult file read on first use (:mod:`.packaged`). Registering
one never raises: a path that cannot be used is reported in one warning and ignored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import pathlib
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..._core import settings as _settings
from ..._core.codec import DecodeError, atomic_write, read_bounded
from ..._core.errors import CacheError, JaxtuneWarning
from ..._core.errors import warn as _warn
from ..._core.files import (
    NOT_A_DIRECTORY,
    LockHeldError,
    Version,
    file_version,
    fix_for,
    locked,
)
from ..._core.vocabulary import Entry
from ..state import TUNING_STATE
from .layout import (
    CACHE_SCHEMA,
    EntryTable,
    FutureSchemaError,
    Ident,
    RawIdent,
    blob,
    blobs,
    decode,
    encode,
    ident,
    newest,
    parse,
)
from .packaged import PackagedFile, ignored

__all__ = [
    "CacheStore",
    "Conflict",
    "Layer",
    "Merged",
    "layers",
    "on_change",
    "open_layer",
    "register_cache",
    "slug",
    "user_cache",
]

_LISTENERS: list[Callable[[], None]] = TUNING_STATE.keep(
    "cache listeners",
    list,
    "called with no arguments whenever a cache layer changes in this process (on_change)",
    never_reset="hooks registered at import",
)


def on_change(listener: Callable[[], None]) -> None:
    """Registers ``listener``, called whenever a cache layer changes in this process (an
    entry written or kept unsaved, a layer registered or forgotten): the eager jits of
    autotuned kernels start afresh on it (:mod:`.eager`), so the store itself needs no JAX."""
    _LISTENERS.append(listener)


def _changed() -> None:
    """Tells every :func:`on_change` listener that a cache layer changed."""
    for listener in list(_LISTENERS):
        listener()


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
    regular files of at most :data:`~jaxtune._core.codec.MAX_FILE_BYTES` are read, every entry is
    checked against :mod:`jaxtune._core.entry_schema` when first used, and a malformed entry is skipped with
    one warning.
    """

    def __init__(self, root: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.root = pathlib.Path(root)
        self.read_only = read_only
        self._memo: dict[pathlib.Path, tuple[Version, EntryTable]] = {}
        self._paths: dict[tuple[str, str], pathlib.Path] = {}
        self._unsaved: dict[pathlib.Path, dict[Ident, Entry]] = {}
        self._reported: set[tuple[pathlib.Path, str]] = set()
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"CacheStore({str(self.root)!r}{', read_only=True' if self.read_only else ''})"

    @property
    def source(self) -> pathlib.Path:
        """The directory this store reads."""
        return self.root

    def path_for(self, device_kind: str, kernel: str) -> pathlib.Path:
        """The file that holds ``kernel``'s entries for ``device_kind``."""
        path = self._paths.get((device_kind, kernel))
        if path is None:
            path = self.root / slug(device_kind) / f"{slug(kernel)}.msgpack"
            self._paths[device_kind, kernel] = path
        return path

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

    def _table(self, path: pathlib.Path) -> EntryTable | None:
        """The memoized entries of the file as it is now; the store's lock is held."""
        memo = self._memo.get(path)
        try:
            version = file_version(path)
            if memo is not None and memo[0] == version:
                return memo[1]
            raw = parse(read_bounded(path, follow_symlinks=False))
        except FileNotFoundError:
            return None
        except FutureSchemaError as e:
            self._report(path, e.message(path))
            return None
        except DecodeError as e:
            self._quarantine(path, version, e)
            return None
        except NotADirectoryError:  # the cache directory is a file, or below one
            self._report(self.root, NOT_A_DIRECTORY.format(root=self.root), kind="root")
            return None
        except OSError as e:
            self._report(
                path, f"jaxtune cannot read the cache file {path}: {e}. {fix_for(e, path)}"
            )
            return None
        table = EntryTable(raw, None if memo is None else memo[1])
        self._memo[path] = (version, table)
        return table

    def _decoded(self, path: pathlib.Path) -> dict[Ident, Entry]:
        """Every well-formed entry on disk; the store's lock is held."""
        table = self._table(path)
        if table is None:
            return {}
        entries = table.all()
        self._check(path, table)
        return entries

    def _check(self, path: pathlib.Path, table: EntryTable) -> None:
        """Reports the malformed entries found so far in ``table``, once per file."""
        if not table.malformed or (path, "entries") in self._reported:
            return
        (version, key), why = next(iter(table.malformed.items()))
        if version:
            key = f"{key} (kernel version {version!r})"
        if table.complete:
            found = f"{len(table.malformed)} of {len(table)} entries are malformed"
        else:
            found = f"an entry is malformed ({len(table)} in the file, each checked when used)"
        self._report(
            path,
            f"jaxtune cache file {path}: {found} and skipped (first: {key!r}: {why}). The "
            "other entries are used; the skipped ones are dropped the next time this process "
            "writes this file.",
            kind="entries",
        )

    def _report(self, path: pathlib.Path, message: str, *, kind: str = "file") -> None:
        if (path, kind) not in self._reported:
            self._reported.add((path, kind))
            _warn(message, JaxtuneWarning, stacklevel=5)

    def _quarantine(self, path: pathlib.Path, version: Version, error: Exception) -> None:
        """Moves an undecodable file aside, under the file lock, unless a writer replaced
        it since it was read (then the next read sees the writer's file). A read never
        waits for a writer: when another process holds the lock, the file is left to the
        next writer (which moves it aside under the lock) and read as empty meanwhile."""
        if self.read_only:
            self._report(path, f"jaxtune cache file {path} is unreadable ({error}); ignored.")
            return
        try:
            with self._locked(path, wait=False):
                self._move_aside(path, version, error)
        except LockHeldError as e:
            self._report(
                path,
                f"jaxtune cache file {path} is unreadable ({error}); it is read as empty and "
                f"left in place: {e.holder} holds its lock {e.lock}, and a read does not "
                "wait for a writer. The next write of this file moves it aside.",
            )
            # Read as empty until the file changes: no re-read, no new try for the lock.
            self._memo[path] = (version, EntryTable({}))
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

    def _every(self, path: pathlib.Path) -> dict[Ident, Entry]:
        """Every entry of one file, every kernel version, with those kept unsaved; the
        store's lock is held."""
        return {**self._decoded(path), **self._unsaved.get(path, {})}

    def read(
        self, device_kind: str, kernel: str, *, version: str | None = None
    ) -> dict[str, Entry]:
        """The entries of ``kernel`` on ``device_kind`` by key (decodes them all): those of
        kernel version ``version``, or (``None``) the newest version of each key."""
        path = self.path_for(device_kind, kernel)
        with self._lock:
            every = self._every(path)
        if version is not None:
            return {key: e for (v, key), e in every.items() if v == version}
        by_key: dict[str, list[Entry]] = {}
        for (_, key), entry in every.items():
            by_key.setdefault(key, []).append(entry)
        return {key: newest(found) for key, found in by_key.items()}  # type: ignore[misc]

    def lookup(
        self, kernel: str, device_kind: str, key: str, *, version: str | None = None
    ) -> Entry | None:
        """The entry for exactly this key, of kernel version ``version`` (``None``: the
        newest of its versions), or ``None`` (decodes this entry only)."""
        path = self.path_for(device_kind, kernel)
        with self._lock:
            unsaved = self._unsaved.get(path, {})
            if version is not None and (version, key) in unsaved:
                return unsaved[version, key]
            table = self._table(path)
            entry = None if table is None else table.get(key, version)
            if table is not None and table.malformed:
                self._check(path, table)
            if version is None and unsaved:
                mine = [e for (_, k), e in unsaved.items() if k == key]
                return newest([*mine, entry] if entry is not None else mine)
            return entry

    def entries_for(self, kernel: str, device_kind: str) -> list[Entry]:
        """Every entry of one kernel on one device kind, every kernel version."""
        path = self.path_for(device_kind, kernel)
        with self._lock:
            return list(self._every(path).values())

    def all_entries(self) -> list[Entry]:
        """Every readable entry under the root, every kernel version."""
        out: list[Entry] = []
        with self._lock:
            for path in self.files():
                out.extend(self._every(path).values())
        return out

    @contextlib.contextmanager
    def _locked(self, path: pathlib.Path, *, wait: bool = True) -> Iterator[None]:
        """Holds the file's lock (see :func:`~jaxtune._core.files.locked`), waiting at most
        ``JAXTUNE_LOCK_TIMEOUT`` seconds for it, or not at all (``wait`` False)."""
        with locked(path, _settings.settings().lock_timeout if wait else 0.0):
            yield

    def _current(self, path: pathlib.Path) -> dict[Ident, bytes]:
        """What the file holds now, as stored bytes by identity, less the entries this
        process found malformed; the file lock and the store's lock are held."""
        try:
            version = file_version(path)
            raw = parse(read_bounded(path, follow_symlinks=False))
        except FileNotFoundError:
            return {}
        except FutureSchemaError as e:
            raise CacheError(
                f"refusing to overwrite {path}: it was written by a newer jaxtune "
                f"(schema {e.schema}, this one writes {CACHE_SCHEMA}). Upgrade "
                "jaxtune or set JAXTUNE_CACHE_DIR to another directory."
            ) from None
        except DecodeError as e:
            self._move_aside(path, version, e)
            return {}
        memo = self._memo.get(path)
        if memo is None:
            return blobs(raw, drop={})
        return blobs(raw, drop=memo[1].malformed_raw(), decoded=memo[1].decoded)

    def _update(
        self,
        path: pathlib.Path,
        names: tuple[str, str],
        change: Callable[[dict[Ident, bytes]], dict[Ident, bytes]],
    ) -> None:
        """Applies ``change`` to the file's entries under its lock; ``names``: the kernel
        and device kind the file is for."""
        if self.read_only:
            raise CacheError(f"{self} is read-only (a packaged cache); nothing was written.")
        try:
            with self._lock, self._locked(path):
                updated = change(self._current(path))
                memo = self._memo.pop(path, None)
                # Eager calls of kernels traced before choose again.
                _changed()
                if not updated:
                    path.unlink(missing_ok=True)
                    return
                atomic_write(path, encode(*names, updated))
                # Nobody else writes while the lock is held: what was just written is current.
                with contextlib.suppress(OSError):
                    raw: dict[RawIdent, Any] = {w: data for w, data in updated.items()}
                    table = EntryTable(raw, None if memo is None else memo[1])
                    self._memo[path] = (file_version(path), table)
        except OSError as e:
            raise CacheError(f"jaxtune could not write {path}: {e}. {fix_for(e, path)}") from e

    def write(self, entries: Iterable[Entry]) -> None:
        """Adds or replaces entries (each replaces only the entry of its own kernel
        version and key), merging with what other processes wrote meanwhile.

        Raises:
            CacheError: the store is read-only, a file comes from a newer schema, or the
                directory cannot be written (the message names the path and the fix).
        """
        self._merge(entries, report=None, keep_newer=False)

    def merge(self, entries: Iterable[Entry], *, keep_newer: bool = False) -> Merged:
        """Like :meth:`write`, and says what became of each entry: new, the same as the
        cache's, or in conflict with the cache's entry of the same identity (the file's
        replaced it; with ``keep_newer``, the one tuned later stays). The decision is made
        under the file's lock, against what the file holds then.

        Raises:
            CacheError: as :meth:`write`.
        """
        merged = Merged()
        self._merge(entries, report=merged, keep_newer=keep_newer)
        return merged

    def _merge(self, entries: Iterable[Entry], *, report: Merged | None, keep_newer: bool) -> None:
        groups: dict[pathlib.Path, list[Entry]] = {}
        for e in entries:
            groups.setdefault(self.path_for(e.device_kind, e.kernel), []).append(e)
        for path, group in groups.items():
            additions = {ident(e): e for e in group}
            names = (group[0].kernel, group[0].device_kind)
            change = functools.partial(
                _with, additions=additions, report=report, keep_newer=keep_newer
            )
            self._update(path, names, change)
            with self._lock:
                unsaved = self._unsaved.get(path, {})
                for where in additions:
                    unsaved.pop(where, None)

    def save(self, entries: Iterable[Entry]) -> bool:
        """Writes ``entries``; when that fails, warns once (path and fix) and keeps them in
        this process, where lookups still find them. Returns whether they reached the disk."""
        entries = list(entries)
        try:
            self.write(entries)
        except CacheError as e:
            with self._lock:
                for entry in entries:
                    path = self.path_for(entry.device_kind, entry.kernel)
                    self._unsaved.setdefault(path, {})[ident(entry)] = entry
                    _changed()
                    self._report(
                        path,
                        f"{e} The tuned result is used in this process but is not saved.",
                        kind="write",
                    )
            return False
        return True

    def remove(self, keep: Callable[[Entry], bool]) -> int:
        """Drops every entry for which ``keep`` is false (every kernel version is asked);
        returns how many were dropped."""
        dropped = 0
        for path in self.files():
            with self._lock:
                entries = self._decoded(path)
            gone = [where for where, e in entries.items() if not keep(e)]
            if gone:
                dropped += len(gone)
                names = (entries[gone[0]].kernel, entries[gone[0]].device_kind)
                self._update(path, names, functools.partial(_without, gone=frozenset(gone)))
        return dropped

    def clear(self) -> int:
        """Removes every cache file; returns how many entries they held."""
        return self.remove(lambda e: False)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Conflict:
    """An entry that met one of the same identity (kernel, device kind, kernel version,
    key) in the cache: ``incoming`` replaced ``current``, or (``kept``) did not because
    ``current`` was tuned later. ``current`` is ``None`` when the cache's was malformed."""

    incoming: Entry
    current: Entry | None
    kept: bool


@dataclasses.dataclass(slots=True)
class Merged:
    """What a :meth:`CacheStore.merge` did: how many entries were new, how many equal to
    the cache's, and each conflict."""

    new: int = 0
    unchanged: int = 0
    conflicts: list[Conflict] = dataclasses.field(default_factory=list)

    @property
    def replaced(self) -> list[Conflict]:
        """The conflicts where the incoming entry replaced the cache's."""
        return [c for c in self.conflicts if not c.kept]

    @property
    def kept(self) -> list[Conflict]:
        """The conflicts where the cache's (newer) entry stayed."""
        return [c for c in self.conflicts if c.kept]


def _with(
    current: dict[Ident, bytes],
    *,
    additions: dict[Ident, Entry],
    report: Merged | None,
    keep_newer: bool,
) -> dict[Ident, bytes]:
    updated = dict(current)
    for where, entry in additions.items():
        data = blob(entry)
        old = current.get(where)
        if report is not None and old is not None:
            if old == data:
                report.unchanged += 1
                continue
            try:
                mine: Entry | None = decode(where, old)
            except CacheError:
                mine = None
            kept = keep_newer and mine is not None and mine.created > entry.created
            report.conflicts.append(Conflict(incoming=entry, current=mine, kept=kept))
            if kept:
                continue
        elif report is not None:
            report.new += 1
        updated[where] = data
    return updated


def _without(current: dict[Ident, bytes], *, gone: frozenset[Ident]) -> dict[Ident, bytes]:
    return {k: b for k, b in current.items() if k not in gone}


#: A read-only packaged layer: a directory with the cache layout, or a shipped file.
Layer = CacheStore | PackagedFile

_REGISTRY_LOCK = threading.Lock()
_STORES: dict[pathlib.Path, CacheStore] = TUNING_STATE.keep(
    "user caches",
    dict,
    "the user cache's store per directory (its reads memoized)",
    lock=_REGISTRY_LOCK,
)
_LAYERS: list[Layer] = TUNING_STATE.keep(
    "registered layers",
    list,
    "the packaged caches registered in this process",
    never_reset="'packaged caches' puts them back",
)


@TUNING_STATE.resets(
    "packaged caches", "forgets every packaged cache registered, and tells the listeners"
)
def _forget_packaged() -> None:
    with _REGISTRY_LOCK:
        _LAYERS.clear()
    _changed()


def user_cache() -> CacheStore:
    """The store at ``JAXTUNE_CACHE_DIR`` (one object per directory, so reads are memoized)."""
    root = _settings.settings().cache_dir
    with _REGISTRY_LOCK:
        store = _STORES.get(root)
        if store is None:
            store = _STORES[root] = CacheStore(root)
        return store


def open_layer(path: str | os.PathLike[str]) -> Layer | None:
    """The read-only layer at ``path`` (a cache directory, or a TuningResult file read on
    first use), or ``None`` after one warning naming it and why it cannot be one. Reads
    no file: a file's problems are found, and reported, when a lookup first reaches it."""
    p = pathlib.Path(path)
    try:
        info = os.stat(p)
    except FileNotFoundError:
        why = "it does not exist (expected a cache directory or a file)."
    except OSError as e:
        why = f"it cannot be read ({e})."
    else:
        if stat.S_ISDIR(info.st_mode):
            return CacheStore(p, read_only=True)
        if stat.S_ISREG(info.st_mode):
            return PackagedFile(p)
        why = "it is not a regular file or directory (a FIFO, device or socket)."
    _warn(ignored(p, why), JaxtuneWarning, stacklevel=3)
    return None


def register_cache(path: str | os.PathLike[str]) -> None:
    """Registers a read-only packaged cache that kernel libraries ship with their code.

    ``path`` is a cache directory (the layout of ``JAXTUNE_CACHE_DIR``, as written by
    ``jaxtune cache export --dir``) or a file written by ``jaxtune cache export`` /
    ``TuningResult.save``. Packaged caches are consulted after the user cache, in
    registration order. Registering reads nothing: a file is read when a lookup first
    reaches it, so importing the library costs no time.

    Never raises, so a library's ``import`` never fails for its users: a path that does not
    exist (or is neither a file nor a directory) is reported now in one
    ``JaxtuneWarning`` and ignored; a file that is empty, damaged or from a newer jaxtune
    is reported in one warning when it is first read, and holds no entries.

    Examples:
        >>> import jaxtune, pathlib
        >>> here = pathlib.Path("mylib")  # doctest: +SKIP
        >>> jaxtune.register_cache(here / "tuned")  # doctest: +SKIP
    """
    layer = open_layer(path)
    if layer is None:
        return
    with _REGISTRY_LOCK:
        _LAYERS.append(layer)
    _changed()


def layers() -> list[Layer]:
    """The registered packaged caches, in lookup order."""
    with _REGISTRY_LOCK:
        return list(_LAYERS)
