"""``jaxtune cache push`` and ``jaxtune cache pull``: explicit syncs between the user cache
and the shared store (``JAXTUNE_REMOTE_CACHE``, or ``--store``).

Unlike lookups, which go on without a store that fails (one warning), these commands
exist to reach the store: a store that is unreachable, too slow or refuses access is an
error naming it (exit status 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .._core import settings as _settings
from .._core.errors import CacheError
from .._core.setting_values import remote as _remote_value
from .._core.vocabulary import Entry
from .._render.units import count as _count
from .._tuning.store import cache as _cache
from .._tuning.store.remote import SharedStore

__all__ = ["ACTIONS", "add_actions", "named"]

Out = Callable[[Any, str], None]

_NO_STORE = (
    "no shared store to {verb}: set JAXTUNE_REMOTE_CACHE (s3://bucket/prefix, "
    "gs://bucket/prefix or a shared directory) or give --store URL."
)


def add_actions(action: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Adds ``push`` and ``pull`` through ``cache``'s own ``action`` helper (which adds
    ``--json``)."""
    for name, help in (
        (
            "push",
            "publish the user cache's entries to the shared store (JAXTUNE_REMOTE_CACHE); "
            "an entry the store holds, or holds tuned later, is not written again",
        ),
        (
            "pull",
            "copy the shared store's entries into the user cache; an entry of the user "
            "cache tuned later than the store's stays",
        ),
    ):
        p = action(name, help)
        p.add_argument(
            "--kernel", action="append", default=[], help="only this kernel id (repeatable)"
        )
        p.add_argument(
            "--store",
            metavar="URL",
            help="this store instead of JAXTUNE_REMOTE_CACHE (s3://..., gs://... or a directory)",
        )


def _shared(args: argparse.Namespace, verb: str) -> SharedStore:
    """The store of ``--store`` or ``JAXTUNE_REMOTE_CACHE``.

    Raises:
        CacheError: none is given, it cannot be used (a directory that does not exist,
            a client that cannot be made), or its client library is missing.
        SettingsError: ``--store`` is not a store URL or directory.
    """
    settings = _settings.settings()
    url = _remote_value("--store")(args.store) if args.store else settings.remote_cache
    if not url:
        raise CacheError(_NO_STORE.format(verb=verb))
    shared = SharedStore(url, settings.remote_timeout)
    shared.reach()  # before anything is read or offered: an absent store is an error
    return shared


def named(entry: Entry) -> dict[str, Any]:
    """An entry's identity, as the JSON documents name it."""
    return {
        "kernel": entry.kernel,
        "device_kind": entry.device_kind,
        "key": entry.key,
        "kernel_version": entry.kernel_version,
    }


def _push(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> int:
    entries = store.all_entries()
    if args.kernel:
        missing = sorted(set(args.kernel) - {e.kernel for e in entries})
        if missing:
            raise CacheError(
                f"the user cache {store.root} has no entry of {', '.join(missing)}; "
                "`jaxtune cache list` shows the kernels it has."
            )
        entries = [e for e in entries if e.kernel in set(args.kernel)]
    shared = _shared(args, "push to")
    published = shared.publish(entries)
    unwritable = dict(sorted(shared.unwritable.items()))
    unwritten = ", or could not write" if unwritable else ""
    lines = [
        f"published {published} of {_count(len(entries), 'entry', 'entries')} from {store.root} "
        f"to {shared.url} "
        f"({len(entries) - published} the store already held, or held tuned later{unwritten})"
    ]
    lines += [f"  could not write to {p}: it {why}" for p, why in unwritable.items()]
    out(
        {
            "store": shared.url,
            "path": str(store.root),
            "entries": len(entries),
            "published": published,
            "skipped": len(entries) - published,
            "unwritable": unwritable,
        },
        "\n".join(lines),
    )
    return 1 if unwritable else 0


def _pull(args: argparse.Namespace, store: _cache.CacheStore, out: Out) -> None:
    shared = _shared(args, "pull from")
    entries = shared.read_all(args.kernel)
    merged = store.merge(entries, keep_newer=True)
    unreadable = dict(sorted(shared.unreadable.items()))
    lines = [
        f"pulled {_count(len(entries), 'entry', 'entries')} from {shared.url} into {store.root}: {merged.new} new, "
        f"{merged.unchanged} unchanged, {len(merged.replaced)} replaced, "
        f"{len(merged.kept)} kept (the user cache's, tuned later)"
    ]
    lines += [f"  skipped the unreadable object {p}: {why}" for p, why in unreadable.items()]
    out(
        {
            "store": shared.url,
            "path": str(store.root),
            "entries": len(entries),
            "new": merged.new,
            "unchanged": merged.unchanged,
            "replaced": [named(c.incoming) for c in merged.replaced],
            "kept": [named(c.incoming) for c in merged.kept],
            "unreadable": unreadable,
        },
        "\n".join(lines),
    )


#: The actions this module adds to ``jaxtune cache``.
ACTIONS: dict[str, Callable[[argparse.Namespace, _cache.CacheStore, Out], int | None]] = {
    "push": _push,
    "pull": _pull,
}
