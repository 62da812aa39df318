"""A saved profile's files (:meth:`~.report.Profile.save`), each one record written and
read by :mod:`jaxtune._core.typed`:

- ``report.json``: :class:`ReportDocument` (``schema`` 1), the report's rows as
  :class:`~.attribution.KernelStat` and the rest of the profile, in JSON;
  ``jaxtune tune --from-profile`` reads back what it ranks by, each kernel row as a
  :class:`ReportKernel` (:func:`read_report`).
- ``report.calls.msgpack`` (:data:`CALLS_SUFFIX`): :class:`SavedCalls`, the autotuned calls
  the profile saw, with the format's version ``v``. Version 1, which jaxtune wrote before
  the version was kept, was the bare list of the calls: it reads as before
  (:func:`read_calls`).

A file of the wrong shape is a :class:`~jaxtune._core.typed.MismatchError` (a
``ValueError``) naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping
from typing import Any, ClassVar

from .._core import roofline as _roofline
from .._core import typed
from .._core.codec import packb, read_bounded, unpackb
from .._core.vocabulary import RecordedCall
from .attribution import KernelStat, ScopeStat
from .intrakernel import IntraKernel
from .timeline import TimelineSpan

__all__ = [
    "CALLS_SUFFIX",
    "ReportDocument",
    "ReportKernel",
    "SavedCalls",
    "SavedReport",
    "calls_bytes",
    "read_calls",
    "read_report",
    "report_json",
]

#: Beside ``report.json``: the autotuned calls of the profile, in msgpack (tuples survive).
CALLS_SUFFIX = ".calls.msgpack"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReportDocument:
    """``report.json``, a stable JSON document (``schema`` 1): a :class:`~.report.Profile`'s
    fields and rows (:meth:`~.report.Profile.to_json` says what each holds), and
    ``autotuned_kernels``, each autotuned kernel over everything it ran."""

    schema: int = 1
    platform: str
    device_kind: str
    iterations: int
    step_us: float
    total_us: float
    logdir: str | None
    flags: Mapping[str, str | None]
    missing_flags: tuple[str, ...]
    llo: Mapping[str, Any] | None
    notes: tuple[str, ...]
    timings: Mapping[str, float]
    kernels: tuple[KernelStat, ...]
    autotuned_kernels: tuple[KernelStat, ...]
    ops: tuple[KernelStat, ...]
    scopes: tuple[ScopeStat, ...]
    timeline: tuple[TimelineSpan, ...]
    timeline_joined_us: float
    peak: _roofline.Peak | None
    warnings: tuple[str, ...]
    intrakernel: tuple[IntraKernel, ...]


def report_json(document: ReportDocument) -> str:
    """``document`` as ``report.json`` holds it (keys sorted, indented)."""
    return json.dumps(typed.encode(document), indent=2, sort_keys=True)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReportKernel:
    """What ``jaxtune tune --from-profile`` reads of one kernel row of a report (a
    :class:`~.attribution.KernelStat` as ``report.json`` keeps it): its name, the jaxtune
    kernel it is (``None`` for a raw Pallas kernel) and its share of device time (``None``:
    none measured)."""

    name: str
    kernel_id: str | None = None
    share: float | None = None

    @classmethod
    def of(cls, stat: KernelStat) -> ReportKernel:
        """The row a saved report would hold for ``stat``."""
        return cls(name=stat.name, kernel_id=stat.kernel_id, share=stat.share)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SavedReport:
    """What ``jaxtune tune --from-profile`` reads of a ``report.json``: its kernel rows (the
    rest of the document, :class:`ReportDocument`, it leaves alone)."""

    kernels: tuple[ReportKernel, ...]


def read_report(path: pathlib.Path) -> SavedReport:
    """The kernel rows of the ``report.json`` at ``path`` (a regular file only, read
    bounded: a FIFO named ``report.json`` must not block).

    Raises:
        OSError: it cannot be read.
        ValueError: it is no JSON, or no report (a ``MismatchError`` naming the field).
    """
    report: SavedReport = typed.decode(SavedReport, json.loads(read_bounded(path)), "")
    return report


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SavedCalls:
    """``report.calls.msgpack``: each autotuned call a profile saw, with what it takes to
    tune it (``jaxtune tune --from-profile`` replays them). Version 1 was the bare list of
    the calls."""

    WIRE_VERSION: ClassVar = 2

    calls: tuple[RecordedCall, ...] = ()


def calls_bytes(calls: tuple[RecordedCall, ...]) -> bytes:
    """``calls`` as ``report.calls.msgpack`` holds them."""
    return packb(typed.encode(SavedCalls(calls=calls)))


def read_calls(path: pathlib.Path) -> tuple[RecordedCall, ...]:
    """The recorded calls the ``.calls.msgpack`` at ``path`` holds, of any version.

    Raises:
        OSError: it cannot be read.
        ValueError: it is no msgpack, or holds something else (the message names the
            file, the call and its field).
    """
    raw = unpackb(read_bounded(path))
    if type(raw) is list:  # version 1: the bare list
        raw = {typed.VERSION_KEY: 1, "calls": raw}
    saved: SavedCalls = typed.decode(SavedCalls, raw, "", within=str(path))
    return saved.calls
