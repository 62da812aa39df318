"""Where a sweep's time goes: seconds per phase and calls per config, kept where the work
happens (the child for the process runner) and added up by the parent.

Phases (seconds of wall-clock time, except ``compile_threads``):

- ``start``: waiting for the child process to be ready, and for the kernel's module to be
  imported there, ahead of need or when the sweep begins (0 when both were done ahead);
- ``transfer``: the call's arguments reaching the child and being decoded there;
- ``inputs``: making the values the configs run on and starting their copies to the
  device: the program's own, an ``inputs=`` builder's, values made up where the sweep has
  only shapes (a copy still under way when the first config runs ends in ``warmup``);
- ``compile_threads``: the configs' compile times added up (the threads overlap each other
  and the runs below, so this is no share of the wall time);
- ``lowering``: the seconds spent tracing and lowering the configs, one at a time (part of
  ``compile_threads``, the serial part: Python work that holds the GIL);
- ``lowering_kept``: the part of ``lowering`` spent loading programs a previous sweep kept
  (:mod:`.program_store`): all of it when a second sweep traced nothing again;
- ``lowering_wait``: the part of ``compile_wait`` spent waiting for the lowering processes
  (:mod:`.lowering_pool`) to lower the next config (present whenever they were started);
- ``lowering_paced``: the seconds the lowering thread waited for a compiling thread to take
  up a config, two per thread already lowered (:data:`.compile.LOWERED_AHEAD`);
- ``compile_wait``: time nothing could run because the next config was still compiling;
- ``warmup``: each config's first call (its output is kept for the check);
- ``check``: comparing outputs with the reference config's;
- ``first_pass``: the first pass (one config at a time, early dropping; a device timer's
  captures of a visit's configs included);
- ``rounds``: the interleaved rounds, second looks included;
- ``screen`` (a device timer only): the part of ``first_pass`` spent timing configs by
  the wall clock with no trace, their calls in flight, to keep the long ones out of the
  captures (:mod:`.first_pass`);
- ``heap`` (a device timer on a TPU only): the part of ``first_pass`` spent growing the
  sweep thread's malloc heap before its first capture, which that capture's stop would
  otherwise grow far more slowly (:meth:`.measure.Stopwatch.ready`, :mod:`.heap`);
- ``captures`` (a device timer only): the part of ``first_pass`` and ``rounds`` spent
  starting, stopping and reading the timer's traces;
- ``capture_stop`` and ``capture_read`` (a device timer only): the parts of ``captures``
  spent stopping the traces and reading them;
- ``device`` (a device timer only): what the calls timed in those traces took on the
  device, the measure of what the timing phases cost over the work they time;
- ``other``: the rest of the sweep's wall time (``total`` less the wall-time phases,
  :data:`WALL_PHASES`): requests and answers, the parent's bookkeeping;
- ``total``: the sweep's wall time as its caller waited for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator, Mapping

__all__ = ["PHASES", "WALL_PHASES", "Account", "Breakdown", "breakdown_text"]

#: Every phase, in the order a sweep goes through them.
PHASES = (
    "start",
    "transfer",
    "inputs",
    "compile_threads",
    "lowering",
    "lowering_kept",
    "lowering_wait",
    "lowering_paced",
    "compile_wait",
    "warmup",
    "check",
    "first_pass",
    "rounds",
    "screen",
    "heap",
    "captures",
    "capture_stop",
    "capture_read",
    "device",
    "other",
    "total",
)
#: The phases that are shares of the wall time (they add up to ``total``).
WALL_PHASES = (
    "start",
    "transfer",
    "inputs",
    "compile_wait",
    "warmup",
    "check",
    "first_pass",
    "rounds",
)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Account:
    """Where some of a sweep's time went: seconds per phase and calls per config (by id),
    what a :class:`Breakdown` hands over (a child answers each request with its own,
    :class:`~.requests.Answered`)."""

    phases: Mapping[str, float] = dataclasses.field(default_factory=dict)
    calls: Mapping[str, int] = dataclasses.field(default_factory=dict)


class Breakdown:
    """Seconds per phase and calls per config, safe to add to from several threads.

    :meth:`take` hands over what was added since the last take (a child answers each
    request with its :class:`Account`); :meth:`merge` adds such an account.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.phases: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def add(self, phase: str, seconds: float) -> None:
        """Adds ``seconds`` to ``phase``."""
        with self._lock:
            self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    def count(self, cid: str, calls: int = 1) -> None:
        """Counts ``calls`` calls of config ``cid``."""
        with self._lock:
            self.calls[cid] = self.calls.get(cid, 0) + calls

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Adds the time the block takes to ``phase``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - start)

    def take(self) -> Account:
        """What was added since the last take, and starts afresh."""
        with self._lock:
            out = Account(phases=self.phases, calls=self.calls)
            self.phases, self.calls = {}, {}
        return out

    def merge(self, account: Account) -> None:
        """Adds an account :meth:`take` gave (here or in a child)."""
        for phase, seconds in account.phases.items():
            self.add(phase, seconds)
        for cid, n in account.calls.items():
            self.count(cid, n)

    def finish(self, total_s: float) -> dict[str, float]:
        """The phases of a sweep that took ``total_s``, ``other`` and ``total`` included."""
        with self._lock:
            phases = dict(self.phases)
        known = sum(phases.get(p, 0.0) for p in WALL_PHASES)
        phases["other"] = max(0.0, total_s - known)
        phases["total"] = total_s
        return {p: round(phases[p], 4) for p in (*PHASES, *sorted(phases)) if p in phases}


def breakdown_text(phases: Mapping[str, float]) -> str:
    """A sweep's phases for people: ``total 12.3 s: start 0.0, transfer 0.1, ...``."""
    if not phases:
        return ""
    parts = [f"{p.replace('_', ' ')} {phases[p]:.2f}" for p in PHASES if p in phases]
    parts += [f"{p} {v:.2f}" for p, v in phases.items() if p not in PHASES]
    return "time (s): " + ", ".join(parts)
