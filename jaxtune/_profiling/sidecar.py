"""A capture's sidecar: what the capture knew about the program it traced
(:class:`~jaxtune._core.vocabulary.CaptureInfo`), kept beside its trace (:data:`INFO_FILE`)
so that reading the same trace later (``jaxtune report DIR``) attributes it the same way.

A sidecar is one record, :class:`_Sidecar` (the capture info's fields, then the capture's
``iterations``), written and read back whole by :mod:`jaxtune._core.typed`: every field is
checked against its annotation (a kernel as a
:class:`~jaxtune._core.vocabulary.PallasKernel`, a recorded call as a
:class:`~jaxtune._core.vocabulary.RecordedCall`, an ``hlo`` entry as its pair, ...) before
the analysis sees any of it. A sidecar of the wrong shape (edited by hand, or written by
another jaxtune) is a :class:`SidecarError` that names the value, and the report goes on
without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
from typing import Annotated, Any

from .._core import typed
from .._core.codec import DecodeError, atomic_write, packb, read_bounded, unpackb
from .._core.vocabulary import CaptureInfo, RecordedCall
from .._core.xspace.tracefile import find_trace
from .._isolation.frames import without_environ

__all__ = ["FAILED_FILE", "INFO_FILE", "SidecarError", "read_sidecar", "recall", "remember"]

#: Beside a trace that jaxtune captured: what the capture knew (HLO op names, costs, hints).
INFO_FILE = "jaxtune-info.msgpack"
#: What a capture that ``JAXTUNE_PROFILE=1`` started and that failed leaves in its folder
#: instead of ``report.json``: the warning the program printed (``jaxtune profile`` reads
#: it, without importing the capture and JAX with it).
FAILED_FILE = "error.txt"


class SidecarError(ValueError):
    """A capture's sidecar (:data:`INFO_FILE`) holds a value of a kind the report does not
    read (edited by hand, or written by another jaxtune). Raised where the sidecar is read,
    before any analysis, so that a fault in the analysis is never blamed on it."""


def _count(value: int) -> bool:
    return value >= 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Sidecar(CaptureInfo):
    """The sidecar's one record: the capture info's fields (its version among them), then
    how many calls the capture traced (after them, as sidecars have always been written)."""

    iterations: Annotated[int, typed.Check(_count, "a count")] = 0

    @classmethod
    def of(cls, info: CaptureInfo, iterations: int) -> _Sidecar:
        return cls(**_fields_of(info), iterations=iterations)

    def info(self) -> CaptureInfo:
        """The capture info it holds."""
        return CaptureInfo(**_fields_of(self))


def _fields_of(info: CaptureInfo) -> dict[str, Any]:
    return {f.name: getattr(info, f.name) for f in dataclasses.fields(CaptureInfo)}


def remember(path: str | os.PathLike[str], info: CaptureInfo, iterations: int) -> None:
    """Keeps ``info`` and the capture's iteration count in the trace folder ``path``
    (never an error: a sidecar that cannot be written is a lost hint)."""
    folder = pathlib.Path(path)
    if folder.is_dir():
        with contextlib.suppress(OSError, TypeError, ValueError):
            atomic_write(folder / INFO_FILE, packb(typed.encode(_Sidecar.of(info, iterations))))


def recall(path: str | os.PathLike[str], iterations: int) -> tuple[CaptureInfo, int, str | None]:
    """What the capture of the trace at ``path`` knew (its :data:`INFO_FILE`): beside the
    trace file or in a folder above it, so a capture's root, its ``step-N/`` and its
    ``step-N/trace/`` all find the same one; and why a sidecar found is of no use (a
    field of the wrong kind, :class:`SidecarError`), if it is not."""
    for sidecar in _sidecars(path):
        try:  # written by jaxtune, but a damaged one is only a lost hint
            raw = unpackb(read_bounded(sidecar))
        except (DecodeError, OSError):
            return CaptureInfo(), iterations, None
        try:
            info, stored = read_sidecar(raw)
        except SidecarError as e:
            return CaptureInfo(), iterations, str(e)
        return info, iterations or stored, None
    return CaptureInfo(), iterations, None


def read_sidecar(raw: Any) -> tuple[CaptureInfo, int]:
    """The capture info and iteration count a decoded sidecar holds, each value the
    analysis reads checked for its kind.

    Raises:
        SidecarError: a value of the wrong kind; the message names it.
    """
    try:
        sidecar = typed.decode(_Sidecar, raw, "")
    except typed.MismatchError as e:
        raise SidecarError(f"capture info's {e}" if e.where else f"capture info: {e}") from None
    info = sidecar.info()
    info = dataclasses.replace(info, calls=tuple(_call_without_environ(c) for c in info.calls))
    for where, config in _configs(info):
        if config is not None and not all(_is_plain(v) for v in config.values()):
            raise SidecarError(f"{where}: expected a config of plain values, got {config!r:.60}")
    return info, sidecar.iterations


def _call_without_environ(call: RecordedCall) -> RecordedCall:
    """A recorded call without the variables of the process that recorded it, which
    sidecars of older jaxtunes kept in its request: a replay never reads them, and a report
    written from this sidecar must not copy them."""
    if call.request is not None and "environ" in call.request:
        return dataclasses.replace(call, request=without_environ(call.request))
    return call


def _configs(info: CaptureInfo) -> list[tuple[str, Any]]:
    """Each config the sidecar holds, with where it sits."""
    ran = [(f"configs[{name!r}].config", r.config) for name, r in info.configs.items()]
    return ran + [(f"calls[{i}].config", call.config) for i, call in enumerate(info.calls)]


def _is_plain(value: Any, depth: int = 0) -> bool:
    """A value as JSON writes it: text, a number, a bool, ``None``, or a list of them."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    return (
        depth < 8
        and isinstance(value, list | tuple)
        and all(_is_plain(v, depth + 1) for v in value)
    )


def _sidecars(path: str | os.PathLike[str]) -> list[pathlib.Path]:
    """Where the capture of the trace at ``path`` kept what it knew, nearest first: the
    folders from the trace file up to ``path`` and a few above it."""
    here = pathlib.Path(path)
    try:
        start = find_trace(here).parent
    except (OSError, ValueError):
        start = here
    folders = [start, *start.parents]
    depth = folders.index(here) + 1 if here in folders else 1
    return [f / INFO_FILE for f in folders[: depth + 5] if (f / INFO_FILE).is_file()]
