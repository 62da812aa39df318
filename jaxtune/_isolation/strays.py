"""Processes a child left behind: what its kernels started, even those that left its
process group and session (a daemon that double-forked with ``setsid``).

Each child carries a token in its environment (:data:`TOKEN`), which every process it
starts inherits; ending a child ends every process that carries its token (found through
``/proc``, where there is one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid

__all__ = ["TOKEN", "kill_tagged", "new_token"]

#: The environment variable that marks a child's processes.
TOKEN = "JAXTUNE_CHILD_TOKEN"


def new_token() -> str:
    """A token for a new child."""
    return uuid.uuid4().hex


def kill_tagged(token: str) -> int:
    """Kills every process (but this one) whose environment holds ``token``; returns how
    many. Without ``/proc`` (not Linux) it finds none."""
    needle = f"{TOKEN}={token}".encode()
    killed = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        if needle in environ:
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
    return killed
