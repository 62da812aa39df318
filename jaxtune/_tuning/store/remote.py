"""The shared store (``JAXTUNE_REMOTE_CACHE``): tuned entries that a team's machines share
through an object store (``s3://``, ``gs://``) or a directory on a shared filesystem.

Layout::

    <store>/<device-kind-slug>/<kernel-id-slug>/<object>.msgpack

Each object is a cache file in the local cache's codec (:mod:`.layout`: msgpack, never
pickle, so reading one runs no code) holding entries of one kernel on one device kind.

Object stores have no file locks, so no object is ever changed once written (per-writer
objects, merged on read). A publisher writes a new object, under a name nobody else uses
(time, host, process, random), holding its new entries and every entry of the objects it
read; only after that write succeeded does it delete the objects it read whole. A reader
merges every object of a kernel (per identity, the entry tuned last). Whatever the
interleaving of publishers and readers, and wherever one is killed, an entry whose publish
returned is in an object at every moment: an object is deleted only when each of its
entries is in one written before. A reader that finds an object gone (a publisher deleted
it after writing their union) lists again.

Every operation runs in a daemon thread under one deadline (``JAXTUNE_REMOTE_TIMEOUT``),
so a store that hangs costs at most that long; the client library's own timeouts and
retries are set to fit in it. Making the client (credentials, the service's model) is
done once, before the first operation, under a deadline of its own. The client is fsspec (with s3fs or gcsfs), the ``remote``
extra: ``pip install 'jaxtune[remote]'``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from ..._core.codec import MAX_FILE_BYTES, DecodeError
from ..._core.errors import CacheError, describe
from ..._core.vocabulary import Entry
from .cache import slug
from .layout import EntryTable, FutureSchemaError, Ident, blob, encode, ident, parse

__all__ = [
    "MISSING_EXTRA",
    "FsspecObjects",
    "Objects",
    "SharedStore",
    "SharedStoreError",
    "merge",
    "object_name",
]

T = TypeVar("T")

MISSING_EXTRA = (
    "JAXTUNE_REMOTE_CACHE={url} needs the `remote` extra, which is not installed here "
    "({why}): pip install 'jaxtune[remote]' (fsspec, with s3fs for s3:// and gcsfs for "
    "gs://). Until then this process uses the user cache only."
)


class SharedStoreError(CacheError):
    """The shared store could not be used: unreachable, too slow, access denied, or its
    client library missing (``denied``: the store refused this process's credentials)."""

    def __init__(self, message: str, *, denied: bool = False, missing: bool = False) -> None:
        super().__init__(message)
        self.denied = denied
        self.missing = missing


class Objects(Protocol):
    """The few operations the store needs from a client: list, read, write, delete."""

    url: str

    def connect(self) -> None:
        """Makes the client (it may read credentials); nothing when it is made already."""
        ...

    def listing(self, folder: str) -> dict[str, int]:
        """The objects directly in ``folder`` (a path below the store's root): name ->
        size; empty when the folder does not exist."""
        ...

    def walk(self) -> dict[str, int]:
        """Every object under the root, by path relative to it: path -> size."""
        ...

    def get(self, path: str) -> bytes:
        """The bytes of one object (``FileNotFoundError`` when it is gone)."""
        ...

    def put(self, path: str, data: bytes) -> None:
        """Writes one object whole: a reader sees all of it or nothing."""
        ...

    def delete(self, paths: list[str]) -> None:
        """Deletes objects (those already gone are no error)."""
        ...


def _s3_options(timeout: float) -> dict[str, Any]:
    # botocore's own timeouts and retries fit inside the deadline of the operation.
    config = {
        "connect_timeout": timeout,
        "read_timeout": timeout,
        "retries": {"max_attempts": 2, "mode": "standard"},
    }
    return {"config_kwargs": config}


class FsspecObjects:
    """:class:`Objects` through fsspec: ``s3://`` (s3fs), ``gs://`` (gcsfs), or a local or
    shared directory (fsspec's local filesystem; a write goes to a hidden temporary name
    first and is renamed into place, so readers never see half of it).

    Building it imports the client library only; :meth:`connect` makes the client, which
    may read credentials (a metadata server) and loads the service's model (about a second
    for S3 on a small machine), so the store runs it under a deadline of its own.

    Raises:
        SharedStoreError: fsspec, or the protocol's library, is not installed (``missing``).
    """

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        scheme, sep, rest = url.partition("://")
        self.scheme = "file" if not sep else scheme
        self.local = self.scheme == "file"
        self.root = os.path.abspath(rest if sep else url) if self.local else rest.rstrip("/")
        self.options: dict[str, Any] = {"skip_instance_cache": True}
        if self.local:
            self.options["auto_mkdir"] = True
        else:
            self.options["use_listings_cache"] = False
        if self.scheme == "s3":
            self.options.update(_s3_options(timeout))
        try:
            fsspec = importlib.import_module("fsspec")
            self._class = fsspec.get_filesystem_class(self.scheme)
        except ImportError as e:
            raise SharedStoreError(
                MISSING_EXTRA.format(url=url, why=describe(e)), missing=True
            ) from e
        self._fs: Any = None

    def connect(self) -> None:
        """Makes the client (once)."""
        if self._fs is not None:
            return
        fs = self._class(**self.options)
        if self.scheme == "s3":
            fs.retries = 2  # s3fs's own retry loop, on top of botocore's
            fs.connect()  # the aiobotocore client: credentials and the service model
        self._fs = fs

    @property
    def fs(self) -> Any:
        """The fsspec filesystem (made by :meth:`connect`)."""
        if self._fs is None:
            self.connect()
        return self._fs

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def _relative(self, path: str) -> str:
        """``path`` (as the client lists it) relative to the root."""
        root = self.root.rstrip("/")
        if not self.local:  # object stores list "bucket/key", with or without a slash
            path, root = path.lstrip("/"), root.lstrip("/")
        path = path.rstrip("/")
        return path[len(root) + 1 :] if path.startswith(root + "/") else path

    def listing(self, folder: str) -> dict[str, int]:
        """See :meth:`Objects.listing`."""
        try:
            found = self.fs.ls(self._path(folder), detail=True)
        except FileNotFoundError:  # nothing published yet
            return {}
        out: dict[str, int] = {}
        for info in found:
            name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            if info.get("type") == "file" and _is_object(name):
                out[name] = int(info.get("size") or 0)
        return out

    def walk(self) -> dict[str, int]:
        """See :meth:`Objects.walk`."""
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:  # nothing published yet
            return {}
        out: dict[str, int] = {}
        for path, info in found.items():
            relative = self._relative(str(path))
            if relative.count("/") == 2 and _is_object(relative.rsplit("/", 1)[-1]):
                out[relative] = int(info.get("size") or 0)
        return out

    def get(self, path: str) -> bytes:
        """See :meth:`Objects.get`."""
        return bytes(self.fs.cat_file(self._path(path)))

    def put(self, path: str, data: bytes) -> None:
        """See :meth:`Objects.put`."""
        target = self._path(path)
        if not self.local:
            self.fs.pipe_file(target, data)
            return
        folder, name = target.rsplit("/", 1)
        temporary = f"{folder}/.{name}.{secrets.token_hex(4)}.tmp"
        self.fs.pipe_file(temporary, data)
        try:
            os.replace(temporary, target)
        except BaseException:
            self.fs.rm_file(temporary)
            raise

    def delete(self, paths: list[str]) -> None:
        """See :meth:`Objects.delete`."""
        targets = [self._path(p) for p in paths]
        if not self.local:
            self.fs.rm(targets)  # one request for many (S3's DeleteObjects)
            return
        for target in targets:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)


def _is_object(name: str) -> bool:
    return name.endswith(".msgpack") and not name.startswith(".")


def object_name() -> str:
    """A name no other writer uses: the time first (so names sort by age), then the host,
    the process and randomness."""
    host = slug(socket.gethostname())[:24]
    return f"{time.time_ns():016x}-{host}-{os.getpid()}-{secrets.token_hex(4)}.msgpack"


def merge(tables: Iterable[Mapping[Ident, Entry]]) -> dict[Ident, Entry]:
    """One table from several: per identity (kernel version, key), the entry tuned last
    (``created``; on a tie, the later table's)."""
    out: dict[Ident, Entry] = {}
    for table in tables:
        for where, entry in table.items():
            old = out.get(where)
            if old is None or entry.created >= old.created:
                out[where] = entry
    return out


class _GoneError(Exception):
    """An object listed a moment ago was deleted (a publisher merged it into a new one)."""


#: How often a read lists a kernel's folder again when an object it listed is gone.
_RELISTS = 3


class SharedStore:
    """A shared store at ``url``, every operation bounded by ``timeout`` seconds.

    Objects are immutable, so each one is fetched and decoded at most once per store
    object; the next read of a kernel fetches only the objects it has not seen.

    Raises:
        SharedStoreError: (from the constructor) the client library is missing.
    """

    def __init__(self, url: str, timeout: float, objects: Objects | None = None) -> None:
        self.url = url
        self.timeout = timeout
        self.objects = objects if objects is not None else FsspecObjects(url, timeout)
        self._connected = False
        self._seen: dict[str, dict[Ident, Entry] | None] = {}
        self._lock = threading.Lock()
        #: Objects found unreadable (not decodable, newer schema, too large): never deleted.
        self.unreadable: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"SharedStore({self.url!r}, timeout={self.timeout:g})"

    # -- bounded operations ------------------------------------------------------------

    def _bounded(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` in a daemon thread, given at most ``timeout`` seconds (the first
        operation also makes the client, under a deadline of its own).

        Raises:
            SharedStoreError: it raised, or did not return in time (it is then left to
                finish or fail in its thread; nothing waits for it, not even exit).
        """
        if not self._connected:
            self._connected = True  # once: a failure here is the store's failure
            self._run("connecting", self.objects.connect)
        return self._run(what, fn)

    def _run(self, what: str, fn: Callable[[], T]) -> T:
        box: list[Any] = []
        done = threading.Event()

        def run() -> None:
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed to the caller, whatever it is
                box.append((False, e))
            finally:
                done.set()

        threading.Thread(target=run, name="jaxtune-shared-store", daemon=True).start()
        if not done.wait(self.timeout):
            raise SharedStoreError(
                f"the shared store {self.url} did not answer within {self.timeout:g} s "
                f"(JAXTUNE_REMOTE_TIMEOUT) while {what}"
            )
        ok, value = box[0]
        if ok:
            return value
        raise _failure(self.url, what, value) from value

    # -- reading -----------------------------------------------------------------------

    def _folder(self, device_kind: str, kernel: str) -> str:
        return f"{slug(device_kind)}/{slug(kernel)}"

    def _object(self, folder: str, name: str, size: int) -> dict[Ident, Entry] | None:
        """The entries of one object, fetched once (``None``: unreadable, never deleted).

        Raises:
            _GoneError: it was deleted since it was listed.
        """
        path = f"{folder}/{name}"
        with self._lock:
            if path in self._seen:
                return self._seen[path]
        table: dict[Ident, Entry] | None = None
        if size > MAX_FILE_BYTES:
            self.unreadable[path] = f"larger than {MAX_FILE_BYTES} bytes"
        else:
            try:
                data = self.objects.get(path)
            except FileNotFoundError:
                raise _GoneError(path) from None
            try:
                table = _entries_of(folder, parse(data))
            except (DecodeError, FutureSchemaError) as e:
                why = f"schema {e.schema}, newer" if isinstance(e, FutureSchemaError) else str(e)
                self.unreadable[path] = why
        with self._lock:
            self._seen[path] = table
        return table

    def _read_folder(self, folder: str) -> tuple[dict[Ident, Entry], list[str], bool]:
        """``(entries, objects read whole, complete)`` of one kernel's folder: complete
        when every object listed was read (or found unreadable)."""
        for _ in range(_RELISTS):
            names = self.objects.listing(folder)
            tables: list[dict[Ident, Entry]] = []
            whole: list[str] = []
            try:
                for name in sorted(names):
                    table = self._object(folder, name, names[name])
                    if table is not None:
                        tables.append(table)
                        whole.append(f"{folder}/{name}")
            except _GoneError:
                continue
            return merge(tables), whole, True
        return merge(tables), whole, False

    def read(self, device_kind: str, kernel: str) -> dict[Ident, Entry]:
        """Every entry the store holds for ``kernel`` on ``device_kind``, by identity.

        Raises:
            SharedStoreError: unreachable, too slow or denied.
        """
        folder = self._folder(device_kind, kernel)
        return self._bounded(f"reading {folder}", functools.partial(self._entries, folder))

    def _entries(self, folder: str) -> dict[Ident, Entry]:
        return self._read_folder(folder)[0]

    def read_all(self, kernels: Iterable[str] = ()) -> list[Entry]:
        """Every entry the store holds (only of ``kernels``, when given); one deadline for
        the listing and one for each kernel's folder.

        Raises:
            SharedStoreError: unreachable, too slow or denied.
        """
        found = self._bounded("listing the store", self.objects.walk)
        folders = sorted({path.rsplit("/", 1)[0] for path in found})
        wanted = {slug(k) for k in kernels}
        out: list[Entry] = []
        for folder in folders:
            if wanted and folder.split("/", 1)[1] not in wanted:
                continue
            entries = self._bounded(f"reading {folder}", functools.partial(self._entries, folder))
            out.extend(entries.values())
        return out

    # -- publishing --------------------------------------------------------------------

    def _publish_folder(self, folder: str, new: dict[Ident, Entry]) -> int:
        held, whole, complete = self._read_folder(folder)
        merged = merge([held, new])
        fresh = [
            w
            for w, e in new.items()
            if merged[w] is e and (w not in held or blob(held[w]) != blob(e))
        ]
        if not fresh:
            return 0
        first = next(iter(merged.values()))
        data = encode(first.kernel, first.device_kind, {w: blob(e) for w, e in merged.items()})
        self.objects.put(f"{folder}/{object_name()}", data)
        if complete and whole:
            try:
                self.objects.delete(whole)
            except Exception:  # left for the next publisher: keeping them loses nothing
                pass
            else:
                with self._lock:
                    for path in whole:
                        self._seen.pop(path, None)
        return len(fresh)

    def publish(self, entries: Iterable[Entry]) -> int:
        """Adds ``entries`` to the store, never losing what other writers publish at the
        same time; returns how many it added or replaced (an entry the store already holds,
        or holds tuned later, is not written again). When it returns, they are stored.

        Raises:
            SharedStoreError: unreachable, too slow or denied (nothing is acknowledged).
        """
        groups: dict[str, dict[Ident, Entry]] = {}
        for entry in entries:
            groups.setdefault(self._folder(entry.device_kind, entry.kernel), {})[ident(entry)] = (
                entry
            )
        added = 0
        for folder, new in groups.items():
            added += self._bounded(
                f"publishing to {folder}",
                functools.partial(self._publish_folder, folder, new),
            )
        return added


def _entries_of(folder: str, raw: dict[Any, Any]) -> dict[Ident, Entry]:
    """The well-formed entries of one object that belong in ``folder`` (an entry of
    another kernel or device kind is skipped: a name never decides where data goes)."""
    entries = EntryTable(raw).all()
    return {
        where: e
        for where, e in entries.items()
        if f"{slug(e.device_kind)}/{slug(e.kernel)}" == folder
    }


_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden", "403")


def _failure(url: str, what: str, e: BaseException) -> SharedStoreError:
    """The error of an operation that raised ``e``: denied (credentials refused, no
    permission) or failed (unreachable, an error of the store or of the client)."""
    text = describe(e)
    denied = isinstance(e, PermissionError) or any(word in text for word in _DENIED)
    verb = "refused access" if denied else "failed"
    return SharedStoreError(f"the shared store {url} {verb} while {what}: {text}", denied=denied)
