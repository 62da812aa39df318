"""How jaxtune writes its data: msgpack for every file and frame (cache files, TuningResult
files, the frames between parent and child).

msgpack only, so reading never runs code. Three extension types carry config values that
plain msgpack cannot: tuples (so they come back as tuples), enums from an allow-list
(:data:`ENUMS`, by name: ``jax.lax.Precision.HIGHEST``) and dtypes (``np.dtype``, numpy and
ml_dtypes scalar types, ``jnp.float32``; by dtype name). Decoding is bounded: nesting deeper
than :data:`MAX_DEPTH`, containers or strings larger than the input itself, and unknown
extension types are refused, so a hostile file cannot exhaust the stack or the memory of the
process that reads it, nor name a class to build.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import os
import pathlib
import re
import secrets
import stat
import threading
from collections.abc import Callable, Mapping
from typing import Any

import msgpack
import numpy as np

__all__ = [
    "ENUMS",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "DecodeError",
    "UnsafeFileError",
    "atomic_write",
    "packb",
    "read_bounded",
    "storable",
    "unpackb",
]

#: Deepest nesting of tuples (the extension type) that :func:`unpackb` accepts.
MAX_DEPTH = 32

#: Largest file :func:`read_bounded` reads by default (a cache file holds far less).
MAX_FILE_BYTES = 64 << 20

#: Enums that may be stored, by the public name they are read back from.
ENUMS: dict[str, tuple[str, str]] = {"jax.lax.Precision": ("jax.lax", "Precision")}

_TUPLE = 1
_ENUM = 2
_DTYPE = 3
_SCALAR_TYPE = 4
_DEPTH = threading.local()
_DTYPE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
_DTYPE_KINDS = "biufcV"  # ml_dtypes types (bfloat16, float8_*) are kind V


class DecodeError(ValueError):
    """Bytes that are not jaxtune msgpack (malformed, too deep or too large)."""


class UnsafeFileError(OSError):
    """A path that :func:`read_bounded` refuses: a symlink (when not followed), a FIFO,
    device or directory, or a file larger than the limit."""


def _enum_name(obj: enum.Enum) -> str | None:
    for name, (module, attr) in ENUMS.items():
        owner = type(obj)
        if owner.__name__ == attr and owner.__module__.split(".")[0] == module.split(".")[0]:
            return name
    return None


def _scalar_type(obj: Any) -> tuple[str, str] | None:
    """``("numpy" | "jax.numpy", dtype name)`` for a scalar type such as ``jnp.float32``."""
    if isinstance(obj, type) and issubclass(obj, np.generic):
        return "numpy", np.dtype(obj).name
    dtype = getattr(obj, "dtype", None)
    if type(obj).__name__ == "_ScalarMeta" and isinstance(dtype, np.dtype):
        return "jax.numpy", dtype.name
    return None


def storable(value: Any) -> bool:
    """Whether a config value survives :func:`packb` and :func:`unpackb` as itself.

    Examples:
        >>> storable((128, "x")), storable([1]), storable(np.dtype("float32"))
        (True, False, True)
    """
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    if isinstance(value, tuple):
        return all(storable(v) for v in value)
    if isinstance(value, enum.Enum):
        return _enum_name(value) is not None
    if isinstance(value, np.dtype):
        return value.kind in _DTYPE_KINDS
    return _scalar_type(value) is not None


def _encode(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return msgpack.ExtType(_TUPLE, packb(list(obj)))
    if isinstance(obj, enum.Enum) and _enum_name(obj) is not None:
        return msgpack.ExtType(_ENUM, packb([_enum_name(obj), obj.name]))
    if isinstance(obj, np.dtype) and obj.kind in _DTYPE_KINDS:
        return msgpack.ExtType(_DTYPE, obj.name.encode())
    scalar = _scalar_type(obj)
    if scalar is not None:
        return msgpack.ExtType(_SCALAR_TYPE, packb(list(scalar)))
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
        "bool, int, float, str, bytes, jax.lax.Precision, dtypes, or tuples, lists and "
        "str-keyed dicts of them"
    )


def _dtype_named(name: Any) -> np.dtype[Any]:
    if not isinstance(name, str) or not _DTYPE_NAME.fullmatch(name):
        raise DecodeError(f"{name!r} is not a dtype name")
    try:
        dtype = np.dtype(name)
    except TypeError:
        import ml_dtypes

        found = getattr(ml_dtypes, name, None)
        if not (isinstance(found, type) and issubclass(found, np.generic)):
            raise DecodeError(f"{name!r} is not a dtype name") from None
        dtype = np.dtype(found)
    if dtype.kind not in _DTYPE_KINDS:
        raise DecodeError(f"{name!r} is not a numeric dtype")
    return dtype


def _small(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, max_str_len=64, max_array_len=2, max_ext_len=0)


def _enum_value(data: bytes) -> enum.Enum:
    pair = _small(data)
    if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in ENUMS):
        raise DecodeError(f"enum {pair!r} is not one of {sorted(ENUMS)}")
    module, attr = ENUMS[pair[0]]
    owner = getattr(importlib.import_module(module), attr)
    if not isinstance(pair[1], str) or pair[1] not in owner.__members__:
        raise DecodeError(f"{pair[1]!r} is not a member of {pair[0]}")
    member: enum.Enum = owner.__members__[pair[1]]
    return member


def _scalar_type_value(data: bytes) -> Any:
    pair = _small(data)
    if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in ("numpy", "jax.numpy")):
        raise DecodeError(f"scalar type {pair!r} is not a numpy or jax.numpy type")
    dtype = _dtype_named(pair[1])
    if pair[0] == "numpy":
        return dtype.type
    jnp = importlib.import_module("jax.numpy")
    found = getattr(jnp, dtype.name, None)
    if found is None:
        raise DecodeError(f"jax.numpy has no scalar type {dtype.name!r}")
    return found


def _ext(code: int, data: bytes) -> Any:
    if code == _ENUM:
        return _enum_value(data)
    if code == _DTYPE:
        return _dtype_named(data.decode("ascii", errors="replace"))
    if code == _SCALAR_TYPE:
        return _scalar_type_value(data)
    if code != _TUPLE:
        raise DecodeError(f"unknown msgpack extension type {code}")
    depth = getattr(_DEPTH, "value", 0)
    if depth >= MAX_DEPTH:
        raise DecodeError(f"values nested deeper than {MAX_DEPTH} levels")
    _DEPTH.value = depth + 1
    try:
        return tuple(_unpack(data))
    finally:
        _DEPTH.value = depth


def packb(obj: Any, *, hook: Callable[[Any], Any] | None = None) -> bytes:
    """msgpack bytes of plain data; tuples survive the round trip. ``hook`` encodes the
    values it knows (outside tuples) and returns ``NotImplemented`` for the others.

    Raises:
        TypeError: ``obj`` holds a value msgpack cannot carry (the message names it).
    """

    def default(value: Any) -> Any:
        got = NotImplemented if hook is None else hook(value)
        return _encode(value) if got is NotImplemented else got

    data: bytes = msgpack.packb(obj, default=default, strict_types=True, use_bin_type=True)
    return data


def _unpack(data: bytes, hook: Callable[[int, bytes], Any] | None = None) -> Any:
    limit = max(len(data), 16)

    def ext(code: int, payload: bytes) -> Any:
        got = NotImplemented if hook is None else hook(code, payload)
        return _ext(code, payload) if got is NotImplemented else got

    return msgpack.unpackb(
        data,
        ext_hook=ext,
        raw=False,
        strict_map_key=False,
        max_str_len=limit,
        max_bin_len=limit,
        max_array_len=limit,
        max_map_len=limit,
        max_ext_len=limit,
    )


def unpackb(data: bytes, *, hook: Callable[[int, bytes], Any] | None = None) -> Any:
    """Inverse of :func:`packb`; never runs code. ``hook`` decodes the extension types it
    knows (outside tuples) and returns ``NotImplemented`` for the others.

    Raises:
        DecodeError: the bytes are not msgpack, hold trailing data, or nest too deeply.
    """
    try:
        return _unpack(bytes(data), hook)
    except DecodeError:
        raise
    except Exception as e:  # any failure to decode hostile bytes is a DecodeError
        raise DecodeError(f"{type(e).__name__}: {e}") from e


def atomic_write(target: pathlib.Path, data: bytes, *, mode: int | None = None) -> None:
    """Writes ``data`` to a temporary file beside ``target``, then renames it over, so a
    reader sees the old file or the new one, never a part. ``mode``: the new file's
    permissions (default: what the process's umask gives a new file, applied by the OS
    when the temporary is created; the umask itself is never changed)."""
    fd, tmp = _temporary_beside(target)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _temporary_beside(target: pathlib.Path) -> tuple[int, str]:
    """A new file ``.<name>.XXXXXXXX.tmp`` beside ``target`` (created exclusively, never
    through a symlink, with mode 0o666 less the umask) and its descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def read_bounded(
    path: pathlib.Path, *, limit: int = MAX_FILE_BYTES, follow_symlinks: bool = True
) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, without ever blocking on a
    FIFO or device, nor following a symlink unless ``follow_symlinks``.

    Raises:
        UnsafeFileError: the path is not a regular file or is larger than ``limit``.
        OSError: the file cannot be opened or read (missing, no permission, ...).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if not follow_symlinks and os.path.islink(path):
            raise UnsafeFileError(f"{path} is a symlink; jaxtune does not follow it") from e
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{path} is not a regular file (a FIFO, device or directory)")
        if info.st_size > limit:
            raise UnsafeFileError(f"{path} holds {info.st_size} bytes, over the {limit} limit")
        os.set_blocking(fd, True)
        chunks = []
        size = 0
        while size <= limit:
            # The whole file in one read (no copies to join) unless it grows while read.
            want = max(info.st_size + 1 - size, 1 << 20)
            chunk = os.read(fd, min(want, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnsafeFileError(f"{path} grew past the {limit} byte limit while being read")
    return data
