"""An in-memory job for tests and benchmarks: threads play the processes of a
``jax.distributed`` job over one :class:`LocalStore`, as jaxtune's agreement sees them.

Install :func:`thread_store` as ``jaxtune._distributed.agree.key_value`` (``monkeypatch``), then
run each "process" inside :func:`as_process`.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator

from jaxtune._distributed import coordination as _coordination
from jaxtune._distributed.coordination import KeyValue, KeyValueTimeoutError

_LOCAL = threading.local()


def thread_store() -> KeyValue | None:
    """The store this thread plays a process over (:func:`as_process`), else the real one."""
    local = getattr(_LOCAL, "store", None)
    return local if local is not None else _coordination.current()


@contextlib.contextmanager
def as_process(store: KeyValue) -> Iterator[None]:
    """Within: this thread agrees over ``store`` (a :meth:`LocalStore.view`)."""
    _LOCAL.store = store
    try:
        yield
    finally:
        _LOCAL.store = None


#: Job numbers, one per store made in this process.
_JOBS = itertools.count(1)


class LocalStore:
    """An in-memory store shared by threads that play the processes of a job;
    :meth:`view` gives one process's handle."""

    def __init__(self, process_count: int) -> None:
        self.process_id = 0
        self.process_count = process_count
        self._values: dict[str, bytes] = {}
        # A new job every time: jaxtune keeps each job's decisions in the process, and an
        # id() is reused once an earlier store is gone (its decisions would be found).
        self.job = next(_JOBS)
        self._changed = threading.Condition()
        self.writes: list[tuple[int, str]] = []

    def view(self, process_id: int) -> LocalStore:
        """This store as process ``process_id`` sees it."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.process_id = process_id
        return other

    def publish(self, key: str, value: bytes) -> bool:
        with self._changed:
            if key in self._values:
                return False
            self._values[key] = value
            self.writes.append((self.process_id, key))
            self._changed.notify_all()
            return True

    def wait(self, key: str, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while key not in self._values:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KeyValueTimeoutError(f"no value under {key} after {timeout_s:g} s")
                self._changed.wait(left)
            return self._values[key]
