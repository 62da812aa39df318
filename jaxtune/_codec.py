"""How jaxtune writes its data: msgpack for every file and frame (cache files, TuningResult
files, the frames between parent and child), and aligned text tables for people.

msgpack only, so reading never runs code. Tuples (legal config values) travel as an
extension type so they come back as tuples. Decoding is bounded: nesting deeper than
:data:`MAX_DEPTH` and containers or strings larger than the input itself are refused, so a
hostile file cannot exhaust the stack or the memory of the process that reads it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
import numpy as np

__all__ = ["MAX_DEPTH", "DecodeError", "atomic_write", "packb", "table", "unpackb"]

#: Deepest nesting of tuples (the extension type) that :func:`unpackb` accepts.
MAX_DEPTH = 32

_TUPLE = 1
_DEPTH = threading.local()


class DecodeError(ValueError):
    """Bytes that are not jaxtune msgpack (malformed, too deep or too large)."""


def _encode(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return msgpack.ExtType(_TUPLE, packb(list(obj)))
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    raise TypeError(
        f"cannot store {type(obj).__name__} {obj!r} in a jaxtune file: values must be None, "
        "bool, int, float, str, bytes, or tuples, lists and str-keyed dicts of them"
    )


def _ext(code: int, data: bytes) -> Any:
    if code != _TUPLE:
        return msgpack.ExtType(code, data)
    depth = getattr(_DEPTH, "value", 0)
    if depth >= MAX_DEPTH:
        raise DecodeError(f"values nested deeper than {MAX_DEPTH} levels")
    _DEPTH.value = depth + 1
    try:
        return tuple(_unpack(data))
    finally:
        _DEPTH.value = depth


def packb(obj: Any) -> bytes:
    """msgpack bytes of plain data; tuples survive the round trip.

    Raises:
        TypeError: ``obj`` holds a value msgpack cannot carry (the message names it).
    """
    data: bytes = msgpack.packb(obj, default=_encode, strict_types=True, use_bin_type=True)
    return data


def _unpack(data: bytes) -> Any:
    limit = max(len(data), 16)
    return msgpack.unpackb(
        data,
        ext_hook=_ext,
        raw=False,
        strict_map_key=False,
        max_str_len=limit,
        max_bin_len=limit,
        max_array_len=limit,
        max_map_len=limit,
        max_ext_len=limit,
    )


def unpackb(data: bytes) -> Any:
    """Inverse of :func:`packb`; never runs code.

    Raises:
        DecodeError: the bytes are not msgpack, hold trailing data, or nest too deeply.
    """
    try:
        return _unpack(bytes(data))
    except DecodeError:
        raise
    except (ValueError, TypeError, RecursionError, msgpack.ExtraData) as e:
        raise DecodeError(f"{type(e).__name__}: {e}") from e


def atomic_write(target: pathlib.Path, data: bytes, *, mode: int | None = None) -> None:
    """Writes ``data`` to a temporary file beside ``target``, then renames it over, so a
    reader sees the old file or the new one, never a part. ``mode``: the new file's
    permissions (default: what the process's umask gives a new file)."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _umask_mode() if mode is None else mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An aligned text table: the header, a rule, then one line per row.

    Examples:
        >>> print(table(("kernel", "us"), [("matmul", "12.5")]))
        kernel  us
        ------  ----
        matmul  12.5
    """
    everything = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(r[i]) for r in everything) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in everything
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
