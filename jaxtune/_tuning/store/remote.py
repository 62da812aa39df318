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
    "gs://). Without it, lookups use the user cache only."
)


class SharedStoreError(CacheError):
    """The shared store could not be used: unreachable, too slow, access denied, its
    directory absent, or its client library missing (``denied``: the store refused this
    process's credentials; ``absent``: a directory store's root does not exist)."""

    def __init__(
        self, message: str, *, denied: bool = False, missing: bool = False, absent: bool = False
    ) -> None:
        super().__init__(message)
        self.denied = denied
        self.missing = missing
        self.absent = absent


class StrayObjectError(Exception):
    """One object of the store (or a folder where objects belong) cannot be used, the rest
    of the store can: a plain file where a kernel's folder belongs, an object this user
    cannot read. Raised by :class:`Objects` methods; the store skips that object or folder
    and reports it (:attr:`SharedStore.unreadable`, :attr:`SharedStore.unwritable`)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


#: Why a directory store is an error rather than an empty store when its root is absent.
MSG_ABSENT = (
    "the shared store {url} does not exist (no such directory). jaxtune never creates a "
    "store's root, so that a typo or an unmounted filesystem is never taken for an empty "
    "store: create it (mkdir -p {url}) or correct JAXTUNE_REMOTE_CACHE (or the --store "
    "of jaxtune cache push/pull)"
)


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
        """The bytes of one object (``FileNotFoundError`` when it is gone,
        :class:`StrayObjectError` when this object alone cannot be read)."""
        ...

    def put(self, path: str, data: bytes) -> None:
        """Writes one object whole: a reader sees all of it or nothing
        (:class:`StrayObjectError` when its folder cannot hold objects)."""
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
        # A local store's folders are made by put, level by level, never its root.
        self.options: dict[str, Any] = {"skip_instance_cache": True}
        if not self.local:
            self.options["use_listings_cache"] = False
        if self.scheme == "s3":
            self.options.update(_s3_options(timeout))
        # An absent directory is said first: it needs no client to see, and it is the
        # likelier mistake (a typo, an unmounted filesystem) than a missing extra.
        self._check_root()
        try:
            fsspec = importlib.import_module("fsspec")
            self._class = fsspec.get_filesystem_class(self.scheme)
        except ImportError as e:
            raise SharedStoreError(
                MISSING_EXTRA.format(url=url, why=describe(e)), missing=True
            ) from e
        self._fs: Any = None

    def connect(self) -> None:
        """Makes the client (once); a directory store's root must exist.

        Raises:
            SharedStoreError: the store is a directory that does not exist (``absent``).
        """
        if self._fs is not None:
            return
        fs = self._class(**self.options)
        if self.scheme == "s3":
            fs.retries = 2  # s3fs's own retry loop, on top of botocore's
            fs.connect()  # the aiobotocore client: credentials and the service model
        self._check_root()
        self._fs = fs

    def _check_root(self) -> None:
        """A directory store's root is there (an object store has no folders to check)."""
        if self.local and not os.path.isdir(self.root):
            raise SharedStoreError(MSG_ABSENT.format(url=self.url), absent=True)

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
        path = self._path(folder)
        try:
            found = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):  # nothing published yet, or a stray
            self._check_root()
            return {}
        out: dict[str, int] = {}
        for info in found:
            name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
            here = str(info["name"]).rstrip("/") != path.rstrip("/")  # not a file at path
            if here and info.get("type") == "file" and _is_object(name):
                out[name] = int(info.get("size") or 0)
        return out

    def walk(self) -> dict[str, int]:
        """See :meth:`Objects.walk`."""
        self._check_root()
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
        if not self.local:
            return bytes(self.fs.cat_file(self._path(path)))
        try:
            return bytes(self.fs.cat_file(self._path(path)))
        except FileNotFoundError:
            raise
        except OSError as e:  # this object only: mode 000, a directory, a FIFO's error
            raise StrayObjectError(path, describe(e)) from e

    def _folders(self, path: str) -> None:
        """Makes the folders of the object ``path`` below the root, one level at a time,
        never the root itself.

        Raises:
            SharedStoreError: the root is gone (``absent``).
            StrayObjectError: something other than a folder stands where one belongs.
        """
        self._check_root()
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            relative = "/".join(parts[:depth])
            folder = self._path(relative)
            try:
                os.mkdir(folder)
            except FileExistsError:
                if not os.path.isdir(folder) or os.path.islink(folder):
                    raise StrayObjectError(
                        relative,
                        "is not a folder, where the store keeps a folder of objects: remove it",
                    ) from None
            except FileNotFoundError:  # the root deleted since it was checked
                self._check_root()
                raise

    def put(self, path: str, data: bytes) -> None:
        """See :meth:`Objects.put`."""
        target = self._path(path)
        if not self.local:
            self.fs.pipe_file(target, data)
            return
        self._folders(path)
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
        #: Objects found unreadable (not decodable, newer schema, too large, refused by
        #: the filesystem): never deleted.
        self.unreadable: dict[str, str] = {}
        #: Folders no object could be written to (a stray file where one belongs) -> why;
        #: their entries were not published, every other folder's were.
        self.unwritable: dict[str, str] = {}

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
        if isinstance(value, (SharedStoreError, StrayObjectError)):
            raise value  # already says what is wrong, and with which part of the store
        raise _failure(self.url, what, value) from value

    def reach(self) -> None:
        """Makes the client, under its deadline, once: a store that cannot be used at all
        (a directory store that does not exist, a client that cannot be made) says so now.

        Raises:
            SharedStoreError: it cannot be used.
        """
        self._bounded("connecting", lambda: None)

    # -- reading -----------------------------------------------------------------------

    def folder(self, device_kind: str, kernel: str) -> str:
        """The folder of ``kernel``'s objects on ``device_kind``, below the root."""
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
                table = _entries_of(folder, parse(data))
            except FileNotFoundError:
                raise _GoneError(path) from None
            except StrayObjectError as e:
                self.unreadable[path] = e.why
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
        folder = self.folder(device_kind, kernel)
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
        or holds tuned later, is not written again). When it returns, they are stored, but
        for those of a folder that cannot hold objects (a stray file where it belongs:
        skipped, and named in :attr:`unwritable`).

        Raises:
            SharedStoreError: unreachable, too slow or denied (nothing is acknowledged).
        """
        groups: dict[str, dict[Ident, Entry]] = {}
        for entry in entries:
            groups.setdefault(self.folder(entry.device_kind, entry.kernel), {})[ident(entry)] = (
                entry
            )
        added = 0
        for folder, new in groups.items():
            try:
                added += self._bounded(
                    f"publishing to {folder}",
                    functools.partial(self._publish_folder, folder, new),
                )
            except StrayObjectError as e:  # that folder only: the others are published
                self.unwritable[e.path] = e.why
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
