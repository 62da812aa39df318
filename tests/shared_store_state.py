"""What a process remembers of the shared store (``jaxtune._tuning.store.shared``), for tests
and benchmarks that play a fresh process, and the requests it makes, counted."""

from __future__ import annotations

import collections

import pytest

from jaxtune._tuning.state import TUNING_STATE
from jaxtune._tuning.store import shared as _shared
from jaxtune._tuning.store.remote import SharedStore


def forget() -> None:
    """Forgets every store, failure and read of this process, as a fresh process starts."""
    TUNING_STATE.reset("shared store")


def count_requests(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """From now on, the requests made through the stores this process uses
    (``shared.current()``: a read or a publish of one kernel, a listing; connecting is
    none), by store URL."""
    counts: collections.Counter[str] = collections.Counter()
    run = SharedStore._run

    def counted(self: SharedStore, what: str, fn):  # type: ignore[no-untyped-def]
        if what != "connecting" and any(s is self for s in _shared._KNOWN.stores.values()):
            counts[self.url] += 1
        return run(self, what, fn)

    monkeypatch.setattr(SharedStore, "_run", counted)
    return counts
