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
#: otherwise fill the device's memory): fewer calls in flight where the outputs are large.
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
    :data:`IN_FLIGHT_BYTES` of outputs, but always one) not waited for, the oldest waited
    for first. Each
    call is started for a key (the config it belongs to); what a call raises when waited
    for is kept as that key's failure (:meth:`drain`), what it raises when started is
    raised at once."""

    def __init__(self) -> None:
        self._pending: collections.deque[tuple[Any, Startable, Any, int]] = collections.deque()
        self._bytes = 0
        self.failed: dict[Any, Exception] = {}

    def call(self, key: Any, run: Startable) -> None:
        """Starts one call of ``run`` for ``key``, then waits for the oldest calls while
        too many (or too many bytes of outputs) are in flight, the newest left running."""
        out = run.start()
        nbytes = sum(int(getattr(x, "nbytes", 0)) for x in jax.tree.leaves(out))
        self._pending.append((key, run, out, nbytes))
        self._bytes += nbytes
        while len(self._pending) > 1 and (
            len(self._pending) > IN_FLIGHT or self._bytes > IN_FLIGHT_BYTES
        ):
            self._wait_oldest()

    def drain(self) -> dict[Any, Exception]:
        """Waits for every call in flight; each key's first failure."""
        while self._pending:
            self._wait_oldest()
        return self.failed

    def _wait_oldest(self) -> None:
        key, run, out, nbytes = self._pending.popleft()
        self._bytes -= nbytes
        try:
            run.wait(out)
        except Exception as e:  # the call's own failure: its key's
            self.failed.setdefault(key, e)
