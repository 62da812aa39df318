"""Calls in flight: a device timer's calls started back to back, a few waited for at a time.

A device timer reads each call's time from the trace, so it need not wait for each call
before starting the next. On a TPU v5e a call waited for costs about 0.5 ms of the host's
time over the device's (a 0.8 us kernel: 544 us a call waited for one at a time, 107 us
started back to back; a 719 us kernel: 1303 against 748 us; ``tools/tpu/probe_capture.py``,
2026-12-06), more than many kernels take, and the chip sits idle meanwhile. Started back to
back, the calls queue on the device and the host's waits overlap its work.
"""

from __future__ import annotations

import collections
from typing import Any, Protocol, runtime_checkable

import jax

__all__ = ["IN_FLIGHT", "IN_FLIGHT_BYTES", "InFlight", "Startable"]

#: The most calls started and not yet waited for.
IN_FLIGHT = 8
#: The most bytes of outputs kept by the calls in flight (a large kernel's outputs would
#: otherwise fill the device's memory): fewer calls in flight where each call's outputs are
#: larger than an eighth of this.
IN_FLIGHT_BYTES = 1 << 30


@runtime_checkable
class Startable(Protocol):
    """A run whose call can be started without waiting (a compiled config's
    :class:`~.compile.Run`): calling it starts one call and waits for its outputs."""

    def __call__(self) -> Any: ...

    def start(self) -> Any:
        """Starts one call; its outputs, perhaps not computed yet."""
        ...

    def wait(self, out: Any) -> Any:
        """Waits until a call's outputs are computed (raising what the call raised)."""
        ...


class InFlight:
    """Calls started back to back with at most :data:`IN_FLIGHT` (and
    :data:`IN_FLIGHT_BYTES` of outputs) not waited for, the oldest waited for first. Each
    call is started for a key (the config it belongs to); what a call raises when waited
    for is kept as that key's failure (:meth:`drain`), what it raises when started is
    raised at once."""

    def __init__(self) -> None:
        self._pending: collections.deque[tuple[Any, Startable, Any]] = collections.deque()
        self._depth: int | None = None
        self.failed: dict[Any, Exception] = {}

    def call(self, key: Any, run: Startable) -> None:
        """Starts one call of ``run`` for ``key``, waiting for the oldest calls first
        while too many are in flight."""
        out = run.start()
        if self._depth is None:
            self._depth = _depth(out)
        self._pending.append((key, run, out))
        while len(self._pending) > self._depth:
            self._wait_oldest()

    def drain(self) -> dict[Any, Exception]:
        """Waits for every call in flight; each key's first failure."""
        while self._pending:
            self._wait_oldest()
        return self.failed

    def _wait_oldest(self) -> None:
        key, run, out = self._pending.popleft()
        try:
            run.wait(out)
        except Exception as e:  # the call's own failure: its key's
            self.failed.setdefault(key, e)


def _depth(out: Any) -> int:
    """How many calls may be in flight, given one call's outputs."""
    nbytes = sum(getattr(x, "nbytes", 0) for x in jax.tree.leaves(out))
    return max(1, min(IN_FLIGHT, IN_FLIGHT_BYTES // max(int(nbytes), 1)))
