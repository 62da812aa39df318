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


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie its parent has not reaped has ended)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def all_gone(pids: Iterable[int], what: str, *, within: float = DEADLINE_S) -> None:
    """Waits until every process of ``pids`` has ended; fails naming ``what`` and those left."""
    pids = list(pids)
    try:
        until(lambda: all(gone(p) for p in pids), what, within=within)
    except AssertionError as e:
        raise AssertionError(f"{e}; still running: {[p for p in pids if not gone(p)]}") from None
