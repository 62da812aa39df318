"""Waiting on other processes in tests: on a condition the test can observe (a file written
whole, a whole line of a log, a process gone), never on how long something usually takes.

A deadline only bounds a failure: on a busy machine a pass takes longer, never fails. A
file another process waits for is written whole (a temporary file renamed over the name,
:func:`write_whole`; the programs tests write in another interpreter do the same inline),
since a reader may look at any moment between ``open`` and the write.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

#: How long a test waits for another process before it fails: far past what a loaded
#: 2-core machine takes, so only something that never happens reaches it.
DEADLINE_S = 120.0


def until(condition: Callable[[], T], what: str, *, within: float = DEADLINE_S) -> T:
    """Polls ``condition`` until it returns something true, and returns that; fails the test
    naming ``what`` it waited for if ``within`` seconds pass first."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {within:g} s for {what}")
        time.sleep(0.05)


def write_whole(path: str | os.PathLike[str], text: str) -> None:
    """Writes ``text`` to ``path`` so that a reader sees all of it or no file at all."""
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    pathlib.Path(tmp).write_text(text)
    os.replace(tmp, path)


def whole_lines(path: str | os.PathLike[str]) -> list[str]:
    """The lines other processes have finished appending to ``path`` (a line still being
    written has no newline yet and is left out); none while the file does not exist."""
    try:
        text = pathlib.Path(path).read_text()
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command's name (state first), or ``None``
    where there is no such process."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), which tells it from a later
    process given the same pid; ``None`` where there is none."""
    fields = _stat(pid)
    return fields[19] if fields else None


def gone(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` has ended (a zombie its parent has not reaped has ended);
    with ``started`` (:func:`_started` read while it ran), a process that now has its pid
    but started at another time is a later one, and ``pid`` has ended."""
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return True
    return started is not None and fields[19] != started


def _describe(pid: int) -> str:
    """What a test that waited in vain needs to know of a process still running: its
    state, parent, process group, session and command line."""
    fields = _stat(pid)
    if fields is None:
        return f"{pid} (gone)"
    try:
        cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        cmd = "?"
    state, ppid, pgrp, session = fields[:4]
    return f"{pid} (state {state}, parent {ppid}, group {pgrp}, session {session}: {cmd[:200]})"


def all_gone(pids: Iterable[int], what: str, *, within: float = DEADLINE_S) -> None:
    """Waits until every process of ``pids`` has ended; fails naming ``what`` and those
    left, with their state, parent, group and command line. A pid the system gave to a
    later process meanwhile counts as ended (a busy machine reuses pids)."""
    started = {p: _started(p) for p in pids}
    try:
        until(lambda: all(gone(p, t) for p, t in started.items()), what, within=within)
    except AssertionError as e:
        left = [_describe(p) for p, t in started.items() if not gone(p, t)]
        raise AssertionError(f"{e}; still running: {left}") from None
