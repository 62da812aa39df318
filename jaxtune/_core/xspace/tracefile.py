"""Finding and reading a trace file safely: the newest ``.xplane.pb`` of a directory, never
a FIFO or device (which would block or never end), never more than a size limit."""

from __future__ import annotations

import os
import pathlib
import stat

from ..codec import read_bounded

__all__ = ["MAX_TRACE_BYTES", "find_trace", "read_trace"]

#: Largest trace file :func:`read_trace` reads.
MAX_TRACE_BYTES = 4 << 30


def find_trace(path: str | os.PathLike[str]) -> pathlib.Path:
    """The ``.xplane.pb`` at ``path``, or the newest one below a trace directory.

    Raises:
        FileNotFoundError: no ``.xplane.pb`` is there.
    """
    p = pathlib.Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise FileNotFoundError(
            f"{p} is neither a trace directory nor an .xplane.pb file"
            + (" (it is a FIFO, device or socket)" if p.exists() else " (it does not exist)")
        )
    found = sorted(
        (f for f in p.glob("**/*.xplane.pb") if _regular(f)), key=lambda f: f.stat().st_mtime
    )
    if not found:
        raise FileNotFoundError(
            f"no .xplane.pb under {p}; give a trace directory written by jax.profiler.trace "
            "or jaxtune, or the .xplane.pb file itself"
        )
    return found[-1]


def _regular(path: pathlib.Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def read_trace(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the trace :func:`find_trace` finds.

    Raises:
        FileNotFoundError: no trace is there.
        OSError: it cannot be read, is not a regular file, or is larger than
            :data:`MAX_TRACE_BYTES`.
    """
    return read_bounded(find_trace(path), limit=MAX_TRACE_BYTES)
