"""What a process does with the shared store (``JAXTUNE_REMOTE_CACHE``, :mod:`.remote`).

A miss in the user cache reads the store through: the first time this process looks up a
kernel on a device kind, the store's entries of that kernel are copied into the user cache
(one read, bounded by ``JAXTUNE_REMOTE_TIMEOUT``); later lookups, hits or misses, are
served by the user cache alone. A sweep publishes its new entry. A store that is down,
slow or refuses access costs one warning and at most one timeout: this process then makes
no further request to it, so a lookup inside ``jax.jit`` never waits on the network twice.
A store that refuses only writes (read-only credentials) is still read.

Multi-host: only the process that writes the cache reads and publishes; the callers ask
``jaxtune._distributed`` (process 0 decides every config, the others adopt it).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable

from ..._core import settings as _settings
from ..._core.errors import CacheError, JaxtuneWarning
from ..._core.errors import warn as _warn
from ..._core.vocabulary import Entry
from ..state import TUNING_STATE
from .cache import user_cache
from .remote import SharedStore, SharedStoreError

__all__ = ["current", "publish", "read_through"]

_LOCK = threading.RLock()


@dataclasses.dataclass(slots=True)
class _Known:
    """What this process knows of the shared stores it used."""

    #: The store per (URL, timeout).
    stores: dict[tuple[str, float], SharedStore] = dataclasses.field(default_factory=dict)
    #: Stores this process gave up on (URL -> why): no request is made to them again.
    down: dict[str, str] = dataclasses.field(default_factory=dict)
    #: Stores that refused a publish (URL -> why): still read, never written again.
    no_publish: dict[str, str] = dataclasses.field(default_factory=dict)
    #: (URL, folder) warned about: a stray object where a kernel's folder belongs.
    strays: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    #: (URL, device kind, kernel) already read through by this process.
    read: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)


_KNOWN = TUNING_STATE.keep(
    "shared store", _Known, "every store this process used, gave up on or read through", lock=_LOCK
)

_MSG_DOWN = (
    "jaxtune cannot use the shared store: {why}. This process goes on without it and makes "
    "no further request to it: lookups use the user cache, packaged caches and defaults; "
    "entries it tunes stay in the user cache (`jaxtune cache push` publishes them later). "
    "{check}`jaxtune cache pull` tries the store again and raises its error."
)

#: What to check, by the kind of store that failed (an absent directory says it itself).
_CHECK_REMOTE = "Check the store's URL, the network and the credentials; "
_CHECK_DIRECTORY = (
    "Check that the directory is there (mounted) and that this user may read and write it; "
)

_MSG_STRAY = (
    "jaxtune cannot publish to the shared store {url}: {path} {why}. The entries of that "
    "folder stay in the user cache (`jaxtune cache push` publishes them once it is "
    "removed); every other kernel is still read from and published to the store."
)

_MSG_NO_PUBLISH = (
    "jaxtune cannot publish to the shared store: {why}. This process still reads it, but "
    "publishes nothing more to it: entries it tunes stay in the user cache. Give these "
    "credentials write access to the store (then `jaxtune cache push`), or keep them "
    "read-only on purpose."
)


def current() -> SharedStore | None:
    """The shared store of ``JAXTUNE_REMOTE_CACHE``, or ``None`` when it is unset, this
    process gave up on it, or its client library is missing (one warning naming the
    extra)."""
    settings = _settings.settings()
    url = settings.remote_cache
    if not url:
        return None
    with _LOCK:
        if url in _KNOWN.down:
            return None
        store = _KNOWN.stores.get((url, settings.remote_timeout))
        if store is None:
            try:
                store = SharedStore(url, settings.remote_timeout)
            except SharedStoreError as e:
                _give_up(url, e)
                return None
            _KNOWN.stores[url, settings.remote_timeout] = store
        return store


def _give_up(url: str, e: SharedStoreError) -> None:
    with _LOCK:
        if url in _KNOWN.down:
            return
        _KNOWN.down[url] = str(e)
    if e.missing:
        text = str(e)
    else:
        local = "://" not in url  # the setting makes a directory an absolute path
        check = "" if e.absent else _CHECK_DIRECTORY if local else _CHECK_REMOTE
        text = _MSG_DOWN.format(why=e, check=check)
    _warn(text, JaxtuneWarning, stacklevel=4)


def read_through(kernel: str, device_kind: str) -> bool:
    """Copies the shared store's entries of ``kernel`` on ``device_kind`` into the user
    cache, the first time this process asks (an entry of the user cache tuned later than
    the store's stays); returns whether the store had any."""
    store = current()
    if store is None:
        return False
    memo = (store.url, device_kind, kernel)
    # One read per kernel, even when threads trace it at the same time; the others wait
    # until the entries are in the user cache.
    with _LOCK:
        if memo in _KNOWN.read:
            return False
        _KNOWN.read.add(memo)
        try:
            found = list(store.read(device_kind, kernel).values())
        except SharedStoreError as e:
            _give_up(store.url, e)
            return False
        if not found:
            return False
        cache = user_cache()
        try:
            cache.merge(found, keep_newer=True)
        except CacheError:
            newer = [e for e in found if _newer_than_cached(e)]
            cache.save(newer)  # kept in this process, with one warning naming the fix
    return True


def _newer_than_cached(entry: Entry) -> bool:
    mine = user_cache().lookup(
        entry.kernel, entry.device_kind, entry.key, version=entry.kernel_version
    )
    return mine is None or mine.created < entry.created


def publish(entries: Iterable[Entry]) -> bool:
    """Publishes ``entries`` (just tuned) to the shared store; returns whether they were
    stored there. A failure is one warning, after which this process stops asking; a
    stray object where a kernel's folder belongs is one warning naming it, and only that
    folder is skipped."""
    store = current()
    if store is None:
        return False
    with _LOCK:
        if store.url in _KNOWN.no_publish:
            return False
    entries = list(entries)
    try:
        store.publish(entries)
    except SharedStoreError as e:
        if not e.denied:
            _give_up(store.url, e)
            return False
        with _LOCK:
            if store.url in _KNOWN.no_publish:
                return False
            _KNOWN.no_publish[store.url] = str(e)
        _warn(_MSG_NO_PUBLISH.format(why=e), JaxtuneWarning, stacklevel=3)
        return False
    # The stray objects that kept these entries out (a file where a folder belongs).
    folders = {store.folder(e.device_kind, e.kernel) + "/" for e in entries}
    strays = {
        path: why
        for path, why in list(store.unwritable.items())
        if any(f.startswith(path + "/") for f in folders)
    }
    for path, why in strays.items():
        with _LOCK:
            if (store.url, path) in _KNOWN.strays:
                continue
            _KNOWN.strays.add((store.url, path))
        _warn(_MSG_STRAY.format(url=store.url, path=path, why=why), JaxtuneWarning, stacklevel=3)
    return not strays
