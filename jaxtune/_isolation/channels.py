"""The descriptors between a parent and its child: the request channel (a Unix socket
pair, else a pipe) and pipes widened where the OS allows."""

from __future__ import annotations

import contextlib
import os
import socket

__all__ = ["GO", "close_all", "request_channel", "widen"]

#: The one byte a parent writes on the request channel, before any frame, to a child started
#: on hold (:meth:`.process.ChildPool.hold`): it may start its backend now. The only frame
#: such a child can be sent instead (``close()``'s ``Exit``) starts with its length, four
#: bytes big-endian, so with a zero: the child then ends.
GO = b"\x01"


def close_all(*fds: int) -> None:
    """Closes each descriptor, ignoring those already closed."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def request_channel() -> tuple[int, int]:
    """The request channel's two ends: a Unix socket pair, since a socket can take a
    request's arrays in one call that waits for all their bytes without holding the GIL
    (from a pipe, each read returns at most a buffer-full and must win the GIL back from
    the child's compile threads: 4 MB arrived ~30 ms later that way); a pipe where there
    are no Unix sockets."""
    try:
        ends = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    except (AttributeError, OSError):
        read, write = os.pipe()
        widen(write)
        return read, write
    return ends[0].detach(), ends[1].detach()


def widen(fd: int) -> None:
    """Gives a pipe a 1 MiB buffer where the OS allows (Linux), so that a request carrying
    arrays crosses in a few writes instead of one per 64 KiB."""
    with contextlib.suppress(OSError, AttributeError, ImportError):
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
