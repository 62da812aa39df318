"""A tuned-config file a kernel library ships, read on first use.

``jaxtune.register_cache(path)`` runs when the library is imported, so it must neither
cost time nor fail: a :class:`PackagedFile` reads nothing until a lookup reaches it. Then
the file is decoded once (its entries indexed by identity, each checked when first looked
up); a file that cannot be used (missing, empty, damaged, from a newer jaxtune) is reported
in one warning naming it and why, and holds no entries. A malformed entry is skipped with
one warning; the others are used.
"""

from __future__ import annotations

import os
import pathlib
import threading
from typing import Any

from ..._core.codec import read_bounded
from ..._core.errors import CacheError, JaxtuneWarning
from ..._core.errors import warn as _warn
from ..._core.vocabulary import Entry
from .layout import Ident, newest
from .result_files import records

__all__ = ["PackagedFile", "ignored"]

#: What a bad shipped file is reported as (``why``: what is wrong with it).
MSG_IGNORED = (
    "jaxtune ignores the packaged cache {path}: {why} Its configs are not used (kernels "
    "fall back to the user cache and their defaults); the library that registered it "
    "(jaxtune.register_cache) should ship a file written by `jaxtune cache export`."
)


def ignored(path: os.PathLike[str] | str, why: str) -> str:
    """The warning for a packaged cache at ``path`` that cannot be used, and why."""
    why = why.strip()
    return MSG_IGNORED.format(path=path, why=why if why.endswith(".") else why + ".")


class PackagedFile:
    """A read-only layer from a TuningResult file, read when first asked for an entry."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)
        self.read_only = True
        self._index: dict[tuple[str, str], dict[Ident, Any]] | None = None
        self._decoded: dict[tuple[str, str, Ident], Entry | None] = {}
        self._reported: set[str] = set()
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"PackagedFile({str(self.path)!r})"

    @property
    def source(self) -> pathlib.Path:
        """The file this layer reads."""
        return self.path

    @property
    def loaded(self) -> bool:
        """Whether the file has been read (it is, at the first lookup)."""
        return self._index is not None

    def _report(self, kind: str, message: str) -> None:
        if kind not in self._reported:
            self._reported.add(kind)
            _warn(message, JaxtuneWarning, stacklevel=5)

    def _groups(self) -> dict[tuple[str, str], dict[Ident, Any]]:
        """The file's raw entries by (kernel, device kind), then identity; the lock is held."""
        if self._index is not None:
            return self._index
        index: dict[tuple[str, str], dict[Ident, Any]] = {}
        try:
            try:
                data = read_bounded(self.path)
            except FileNotFoundError:
                raise CacheError("it no longer exists.") from None
            except OSError as e:
                raise CacheError(f"it cannot be read ({e}).") from None
            raw = records(data)
        except CacheError as e:
            self._report("file", ignored(self.path, str(e)))
            self._index = index
            return index
        odd = 0
        for record in raw:
            names = _names(record)
            if names is None:
                odd += 1
                continue
            kernel, kind, version, key = names
            index.setdefault((kernel, kind), {})[version, key] = record
        if odd:
            self._report(
                "entries",
                f"jaxtune packaged cache {self.path}: {odd} of {len(raw)} entries are not "
                "entries (no kernel, device_kind and key strings) and are skipped; the "
                "others are used.",
            )
        self._index = index
        return index

    def _entry(self, kernel: str, kind: str, where: Ident, record: Any) -> Entry | None:
        """The checked entry of one record (memoized); the lock is held."""
        memo = (kernel, kind, where)
        if memo in self._decoded:
            return self._decoded[memo]
        try:
            entry: Entry | None = Entry.from_dict(record)
        except CacheError as e:
            entry = None
            self._report(
                "entries",
                f"jaxtune packaged cache {self.path}: an entry is malformed and skipped "
                f"({kernel} on {kind}, key {where[1]!r}: {e}); the other entries are used.",
            )
        self._decoded[memo] = entry
        return entry

    def lookup(
        self, kernel: str, device_kind: str, key: str, *, version: str | None = None
    ) -> Entry | None:
        """The entry for exactly this kernel, device kind and key, of kernel version
        ``version`` (``None``: the newest of its versions), or ``None``."""
        with self._lock:
            group = self._groups().get((kernel, device_kind), {})
            if version is not None:
                record = group.get((version, key))
                if record is None:
                    return None
                return self._entry(kernel, device_kind, (version, key), record)
            found = (
                self._entry(kernel, device_kind, where, record)
                for where, record in group.items()
                if where[1] == key
            )
            return newest(e for e in found if e is not None)

    def entries_for(self, kernel: str, device_kind: str) -> list[Entry]:
        """Every entry of one kernel on one device kind, every kernel version."""
        with self._lock:
            group = self._groups().get((kernel, device_kind), {})
            found = (self._entry(kernel, device_kind, w, r) for w, r in group.items())
            return [e for e in found if e is not None]

    def all_entries(self) -> list[Entry]:
        """Every well-formed entry of the file."""
        with self._lock:
            return [
                e for kernel, kind in list(self._groups()) for e in self.entries_for(kernel, kind)
            ]


def _names(record: Any) -> tuple[str, str, str, str] | None:
    """A raw entry's kernel, device kind, kernel version and key, when they are strings."""
    if not isinstance(record, dict):
        return None
    names = (
        record.get("kernel"),
        record.get("device_kind"),
        record.get("kernel_version", ""),
        record.get("key"),
    )
    if not all(isinstance(n, str) for n in names):
        return None
    return names  # type: ignore[return-value]
