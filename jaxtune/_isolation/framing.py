"""Length-prefixed msgpack frames over a pipe or socket: a frame is its msgpack part's length
(4 bytes, big-endian), the msgpack part, then the bytes of each :class:`Raw` value it holds,
written from where they lie and read straight into their own buffers.

Plain data only, without JAX, so that a process that must not import JAX (a ``jaxtune``
command reading a trace, the Mosaic counter's parent) can talk to a child;
:mod:`.wire` encodes arrays and other values into what these frames carry.
"""

from __future__ import annotations

import os
import select
import socket
import stat
import struct
import threading
import time
from typing import Any

import msgpack
import numpy as np

from .._core.codec import DecodeError, packb, unpackb

__all__ = ["FrameReader", "Raw", "frame_parts", "write_frame"]

_HEADER = struct.Struct(">I")
_SIZE = struct.Struct(">Q")
_MAX_FRAME = 1 << 31
#: The msgpack extension code of an array's bytes that follow the msgpack part.
_RAW = 64


class Raw:
    """Bytes that travel after a frame's msgpack part, written from where they lie."""

    __slots__ = ("view",)

    def __init__(self, view: memoryview) -> None:
        self.view = view


def frame_parts(message: Any) -> list[memoryview]:
    """One frame's bytes as they go out: the length and msgpack part, then each
    :class:`Raw` value's bytes from where they lie (nothing copied)."""
    raws: list[memoryview] = []

    def hook(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value.view)
            return _ext_raw(value.view.nbytes)
        if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 1:
            # A raw part as a reader gave it back (a recording's value set sent on).
            raws.append(memoryview(np.ascontiguousarray(value).data).cast("B"))
            return _ext_raw(value.nbytes)
        return NotImplemented

    payload = packb(message, hook=hook)
    return [memoryview(_HEADER.pack(len(payload)) + payload), *raws]


def write_frame(fd: int, message: Any) -> None:
    """Writes one frame (4-byte big-endian length, msgpack, then the :class:`Raw` values'
    bytes) to a pipe or file."""
    parts = frame_parts(message)
    # Threads of one process share a pipe (the child's compile threads report events): a
    # frame's parts must not interleave with another frame's.
    with _WRITING:
        for part in parts:
            data = part
            while data:
                written = os.write(fd, data)
                data = data[written:]


_WRITING = threading.Lock()


def _ext_raw(size: int) -> Any:
    return msgpack.ExtType(_RAW, _SIZE.pack(size))


def _read_exactly(fd: int, view: memoryview) -> None:
    """Fills ``view`` from ``fd``: from a socket in one call that waits for every byte with
    the GIL released (``MSG_WAITALL``), from a pipe a buffer-full at a time."""
    sock = socket.socket(fileno=fd) if stat.S_ISSOCK(os.fstat(fd).st_mode) else None
    try:
        if sock is not None:
            sock.settimeout(None)  # blocking, whatever the default timeout of this process
        taken = 0
        while taken < len(view):
            rest = view[taken:]
            got = sock.recv_into(rest, 0, socket.MSG_WAITALL) if sock else os.readv(fd, [rest])
            if not got:
                raise EOFError("the other end closed the channel in the middle of a frame")
            taken += got
    finally:
        if sock is not None:
            sock.detach()  # the fd stays open: it is the reader's


class FrameReader:
    """Reads frames from a pipe or socket, with a timeout per call (for the frame's msgpack part: once
    that has arrived, the bytes after it are read to their end)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        #: Buffers of the last frame's arrays still to be read (after ``defer=True``).
        self.pending: list[np.ndarray] = []

    def _fill(self, want: int, deadline: float | None) -> bool:
        while len(self.buffer) < want:
            if deadline is not None:
                # Past the deadline this still polls once, so ``timeout=0`` reads what waits.
                remaining = max(0.0, deadline - time.monotonic())
                ready, _, _ = select.select([self.fd], [], [], remaining)
                if not ready:
                    return False
            chunk = os.read(self.fd, max(65536, want - len(self.buffer)))
            if not chunk:
                raise EOFError("the other end closed the pipe")
            self.buffer += chunk
        return True

    def _fill_into(self, target: np.ndarray) -> None:
        view = target.data  # a writable memoryview of the array's bytes
        taken = min(len(self.buffer), len(view))
        view[:taken] = self.buffer[:taken]
        del self.buffer[:taken]
        if taken < len(view):
            _read_exactly(self.fd, view[taken:])

    def idle(self, wait: float = 0.0) -> bool:
        """Whether no bytes of a next frame have arrived yet, nor arrive within ``wait``
        seconds."""
        return not self.buffer and not select.select([self.fd], [], [], wait)[0]

    def finish(self) -> None:
        """Reads the bytes of the arrays the last frame announced (``read(defer=True)``
        returned it before they arrived); a no-op when there are none."""
        pending, self.pending = self.pending, []
        for target in pending:
            self._fill_into(target)

    def read(self, timeout: float | None = None, *, defer: bool = False) -> Any:
        """The next message; ``None`` when ``timeout`` seconds pass first. With ``defer``,
        the message comes back as soon as its msgpack part is read, its arrays' buffers
        still empty until :meth:`finish` (work can start on their shapes meanwhile).

        Raises:
            EOFError: the writer is gone.
            DecodeError: the bytes are not a jaxtune frame.
        """
        self.finish()
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._fill(_HEADER.size, deadline):
            return None
        (length,) = _HEADER.unpack(self.buffer[: _HEADER.size])
        if length > _MAX_FRAME:
            raise EOFError(f"frame of {length} bytes is not a jaxtune frame")
        if not self._fill(_HEADER.size + length, deadline):
            return None
        payload = bytes(self.buffer[_HEADER.size : _HEADER.size + length])
        del self.buffer[: _HEADER.size + length]
        raws: list[np.ndarray] = []
        room = [_MAX_FRAME]

        def hook(code: int, data: bytes) -> Any:
            if code != _RAW:
                return NotImplemented
            if len(data) != _SIZE.size or _SIZE.unpack(data)[0] > room[0]:
                raise DecodeError("an array's size in a frame is not a jaxtune size")
            size = _SIZE.unpack(data)[0]
            room[0] -= size
            raws.append(np.empty(size, np.uint8))  # not zeroed: the bytes overwrite it
            return raws[-1]

        message = unpackb(payload, hook=hook)
        self.pending = raws
        if not defer:
            self.finish()
        return message
