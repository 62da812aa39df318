"""Parent side. Following one sweep request in a child: what is compiling or running, which
config to blame when the child dies or hangs (how it was lost is read by
:class:`jaxtune._isolation.service.Crash`), and how an ``error`` frame becomes an exception."""

from __future__ import annotations

import time
from typing import NoReturn

from ..._core.vocabulary import Failure, Measurement, config_id
from ..._isolation.frames import (
    CompileFinished,
    CompileStarted,
    ConfigResult,
    ErrorReply,
    Event,
    Request,
    RoundStarted,
    RunFinished,
    RunStarted,
)
from .requests import Measure, Retime, SweepFields

__all__ = ["GRACE", "InFlight", "raise_child_error"]

Result = Measurement | Failure

#: Extra seconds past a config's timeout before the child is killed (the child itself
#: reports a soft timeout first when the slow step returns).
GRACE = 2.0


class InFlight:
    """What one request to a child has in flight: configs compiling, the config running,
    and the results received so far."""

    def __init__(self, message: Request[SweepFields]) -> None:
        work = message.fields.work
        todo = work.todo if work is not None else []
        if isinstance(work, Retime):
            todo = todo + work.second
        self.by_id = {config_id(c): dict(c) for c in todo}
        if isinstance(work, Measure) and work.reference:
            self.by_id.setdefault(config_id(work.reference), dict(work.reference))
        self.got: dict[str, Result] = {}
        self.compiling: dict[str, float] = {}
        #: The child's thread that compiles each config, and the one that runs the config
        #: running (their ``threading.get_ident()``).
        self.threads: dict[str, int] = {}
        self.run_thread: int | None = None
        self.running: tuple[str, float] | None = None
        #: The configs of a round timed in passes, while it runs (one of them is running).
        self.round: list[str] = []
        #: When the child last said anything (``None``: nothing yet).
        self.heard: float | None = None

    def due(self, timeout_s: float) -> float:
        """When (a :func:`time.monotonic` time) the oldest step in flight outlives its
        limit; with none in flight (importing the kernel's module, receiving the arguments,
        between configs), when the child will have been silent that long."""
        heard = time.monotonic() if self.heard is None else self.heard
        starts = list(self.compiling.values()) + ([self.running[1]] if self.running else [])
        return min(starts or [heard]) + timeout_s + GRACE

    def event(self, event: Event) -> Result | None:
        """Follows one event; returns the result it carries, if any."""
        self.heard = time.monotonic()
        match event:
            case CompileStarted(cid=cid, thread=thread):
                self.compiling[cid] = time.monotonic()
                self.threads[cid] = thread
            case CompileFinished(cid=cid):
                self.compiling.pop(cid, None)
            case RunStarted(cid=cid, thread=thread):
                self.running = (cid, time.monotonic())
                self.run_thread = thread
            case RoundStarted(cids=cids):
                self.running = (cids[0], time.monotonic())
                self.round = list(cids)
            case RunFinished():
                self.running, self.round = None, []
            case ConfigResult(cid=cid, result=result):
                self.running, self.round = None, []
                self.got[cid] = result
                return result
        return None

    def suspects(
        self, *, hung: bool, timeout_s: float, crashed_thread: int | None = None
    ) -> list[str]:
        """The configs that may have killed or hung the child: the one running and those
        compiling meanwhile (a hang: those past their limit). A crash in the thread that
        was compiling one of them (``crashed_thread``, from the child's fatal-error
        report) is that config's alone."""
        if not hung and crashed_thread is not None:
            mine = [c for c in self.compiling if self.threads.get(c) == crashed_thread]
            if self.running is not None and not self.round and self.run_thread == crashed_thread:
                mine.append(self.running[0])
            if len(mine) == 1:
                return mine
        steps = dict(self.compiling)
        if self.running is not None:
            for cid in self.round or [self.running[0]]:
                steps[cid] = self.running[1]
        if hung:
            now = time.monotonic()
            late = [c for c, t in steps.items() if now - t >= timeout_s]
            return late or list(steps)
        return list(steps)


def raise_child_error(answer: ErrorReply, default: type[Exception]) -> NoReturn:
    """Raises the error an answer reports (:meth:`~jaxtune._isolation.frames.ErrorReply.exception`):
    ``NotTransportable`` (the caller falls back inline), the jaxtune error of its kind,
    else ``default``."""
    raise answer.exception(default)
