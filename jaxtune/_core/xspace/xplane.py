"""Reading ``.xplane.pb`` traces (the XSpace protobuf) with the ``protobuf`` package, on the
schema of :mod:`.schema`. ``jax.profiler.ProfileData`` does not expose the stats stored on
*event metadata* (``flops``, ``bytes_accessed``, ``hlo_category``, ``tf_op`` on TPU and GPU
traces), and quantizes start times at epoch scale, so jaxtune reads the protobuf itself.

A trace is decoded only as far as the report reads it: :func:`load` splits the space into
planes; a plane's metadata and stats are decoded when it is asked for (:meth:`Space.plane`);
its lines are named without decoding their events (:attr:`Plane.lines`), and a line's events
are decoded when it is walked (:meth:`Plane.events`), one line at a time, and not kept;
or only their offsets, durations and metadata ids, as arrays (:meth:`Plane.columns`).
"""

from __future__ import annotations

import array
import dataclasses
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError as _PbDecodeError

from ..errors import describe
from . import schema as _schema
from .tracefile import read_trace

__all__ = [
    "HLO_PROTO_STATS",
    "MALFORMED",
    "DecodeError",
    "EventMetadata",
    "LineHead",
    "Plane",
    "Space",
    "event_columns",
    "load",
    "parse",
    "text",
]


class DecodeError(ValueError):
    """The bytes are not a well-formed message."""


#: What reading damaged input can raise besides DecodeError (a value of the wrong type).
MALFORMED = (IndexError, KeyError, TypeError, ValueError, OverflowError, RecursionError)

#: Stat names under which a trace's metadata plane holds a program's serialized HloProto.
HLO_PROTO_STATS = ("Hlo Proto", "hlo_proto")


def text(value: bytes) -> str:
    """A string field (damaged UTF-8 replaced, never an error)."""
    return value.decode("utf-8", errors="replace")


def decode(cls: Any, data: bytes, what: str) -> Any:
    """``cls.FromString(data)``, any failure a :class:`DecodeError` naming ``what``."""
    try:
        return cls.FromString(data)
    except (_PbDecodeError, *MALFORMED, MemoryError) as e:
        raise DecodeError(f"malformed {what} ({describe(e)})") from e


def stat_value(stat: Any, names: dict[int, str]) -> Any:
    """The value of an XStat: a number, a string (a ``ref_value`` is the name it refers
    to), bytes, or ``None`` when it holds none."""
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(stat, kind)
    if kind == "str_value":
        return text(value)
    if kind == "ref_value":
        return names.get(value, value)
    return value


def stats_of(stats: Iterable[Any], names: dict[int, str]) -> dict[str, Any]:
    """XStats -> ``{stat name: value}`` (an unnamed stat by its metadata id)."""
    out: dict[str, Any] = {}
    for s in stats:
        mid = s.metadata_id
        out[names.get(mid, str(mid))] = stat_value(s, names)
    return out


#: At most this many leading events without an offset (a writer that leaves a zero out)
#: are looked at one by one before the columns of a line are taken whole.
_LEADING_ZEROS = 64


def event_columns(data: bytes) -> Any:
    """``(n, 3)`` int64 array of the offsets, durations and metadata ids of a serialized
    XLine's events (their stats not read; an event's missing field reads 0, as upb reads
    it).

    The columns come from :data:`~.schema.LineColumns`, the events merged into one message,
    when that is exact: as many values of each field as events (counted apart), but for
    leading events that leave a zero offset out; else event by event. (One event holding
    a field twice and another lacking it would pass the counts and shift a column: no
    writer does that; a trace made to is read, as any hostile input, bounded and running
    no code.)

    Raises:
        DecodeError: the bytes are not a well-formed XLine.
    """
    cols = _merged_columns(data)
    if cols is not None:
        return cols
    buf = array.array("q")
    add = buf.append
    for ev in decode(_schema.LineLite, data, "XLine").events:
        add(ev.offset_ps)
        add(ev.duration_ps)
        add(ev.metadata_id)
    return np.frombuffer(buf, dtype=np.int64).reshape(-1, 3)


def _merged_columns(data: bytes) -> Any:
    """:func:`event_columns` from the merged events, or ``None`` where they would not
    line up (an event lacking a field, or holding one twice) or do not decode."""
    try:
        events = _schema.LineEvents.FromString(data).events
        n = len(events)
        head = [events[i] for i in range(min(n, _LEADING_ZEROS))]
        del events
        merged = _schema.LineColumns.FromString(data).events
    except (_PbDecodeError, *MALFORMED, MemoryError):
        return None  # the event-by-event decoding says what is wrong
    mid, off, dur = merged.metadata_id, merged.offset_ps, merged.duration_ps
    lacking = n - len(off)  # events without an offset: the leading ones, or none
    if len(merged.num_occurrences) or len(mid) != n or len(dur) != n:
        return None
    if not 0 <= lacking <= len(head):
        return None
    try:
        if any(_schema.EventLite.FromString(h).HasField("offset_ps") for h in head[:lacking]):
            return None
    except (_PbDecodeError, *MALFORMED, MemoryError):
        return None
    cols = np.zeros((n, 3), dtype=np.int64)
    if n:
        cols[lacking:, 0] = off
        cols[:, 1] = dur
        cols[:, 2] = mid
    return cols


@dataclasses.dataclass(slots=True)
class EventMetadata:
    """What events of one kind share: the name (an HLO op, a kernel) and its stats."""

    id: int
    name: str = ""
    display_name: str = ""
    stats: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class LineHead:
    """A timeline (a thread, ``XLA Ops``, a CUDA stream), without its events."""

    index: int
    id: int
    name: str
    display_name: str
    timestamp_ns: int


class Plane:
    """A device or the host: its metadata and stats, and its lines, whose events are decoded
    when walked (:meth:`events`)."""

    def __init__(self, data: bytes) -> None:
        index = decode(_schema.PlaneIndex, data, "XPlane")
        self.id: int = index.id
        self.name: str = text(index.name)
        self.stat_names: dict[int, str] = {k: text(v.name) for k, v in index.stat_metadata.items()}
        self.stats: dict[str, Any] = stats_of(index.stats, self.stat_names)
        self.event_metadata: dict[int, EventMetadata] = {}
        for key, m in index.event_metadata.items():
            self.event_metadata[key] = EventMetadata(
                id=m.id or key,
                name=text(m.name),
                display_name=text(m.display_name),
                stats=stats_of(m.stats, self.stat_names),
            )
        self._lines: list[bytes] = list(index.lines)
        self._columns: dict[int, Any] = {}
        del index
        self.lines: tuple[LineHead, ...] = tuple(
            self._head(i, decode(_schema.LineHead, b, "XLine")) for i, b in enumerate(self._lines)
        )

    @staticmethod
    def _head(i: int, h: Any) -> LineHead:
        return LineHead(
            index=i,
            id=h.id,
            name=text(h.name),
            display_name=text(h.display_name),
            timestamp_ns=h.timestamp_ns,
        )

    def events(self, line: LineHead, *, lite: bool = False, drop: bool = False) -> Sequence[Any]:
        """The events of ``line`` (XEvent messages: ``metadata_id``, ``offset_ps``,
        ``duration_ps``, and unless ``lite`` their ``stats``), decoded now; walk them and
        drop them. ``drop``: the line is read for the last time (its bytes are let go)."""
        schema = _schema.LineLite if lite else _schema.Line
        data = self._lines[line.index]
        if drop:
            self._lines[line.index] = b""
        return decode(schema, data, "XLine").events

    def columns(self, line: LineHead, *, drop: bool = False) -> Any:
        """:func:`event_columns` of ``line``, decoded once while the line is kept (two
        readers of one line, such as the op walk and the intra-kernel analysis, share
        them); ``drop``: the line is read for the last time (its bytes and columns are let
        go)."""
        cols = self._columns.pop(line.index, None) if drop else self._columns.get(line.index)
        if cols is None:
            cols = event_columns(self._lines[line.index])
            if not drop:
                self._columns[line.index] = cols
        if drop:
            self._lines[line.index] = b""
        return cols

    def metadata(self, metadata_id: int) -> EventMetadata:
        """The event metadata of that id (an empty one, named for the id, when the plane
        lacks it)."""
        found = self.event_metadata.get(metadata_id)
        if found is None:
            found = self.event_metadata[metadata_id] = EventMetadata(
                id=metadata_id, name=f"<metadata {metadata_id}>"
            )
        return found


class Space:
    """A whole trace: its planes by name (decoded when asked for), errors and warnings."""

    def __init__(self, data: bytes) -> None:
        index = decode(_schema.SpaceIndex, data, "XSpace")
        self.errors: list[str] = [text(e) for e in index.errors]
        self.warnings: list[str] = [text(w) for w in index.warnings]
        self.hostnames: list[str] = [text(h) for h in index.hostnames]
        planes = list(index.planes)
        del index
        self._raw: list[bytes | None] = list(planes)
        self.plane_names: list[str] = [
            text(decode(_schema.PlaneName, p, "XPlane").name) for p in planes
        ]
        del planes
        self._planes: dict[int, Plane] = {}

    def planes(self, names: Iterable[str] | None = None) -> list[Plane]:
        """The planes (those named ``names``, when given), decoded."""
        wanted = None if names is None else set(names)
        return [
            self._plane(i) for i, n in enumerate(self.plane_names) if wanted is None or n in wanted
        ]

    def _plane(self, i: int) -> Plane:
        if i not in self._planes:
            raw = self._raw[i]
            assert raw is not None
            self._planes[i] = Plane(raw)
            self._raw[i] = None  # the plane's bytes now live in its lines
        return self._planes[i]

    def plane(self, name: str) -> Plane | None:
        """The first plane called ``name``, if any."""
        for i, n in enumerate(self.plane_names):
            if n == name:
                return self._plane(i)
        return None

    def hlo_protos(self) -> dict[str, bytes]:
        """Serialized HLO protos by program name (``jit_step(8)`` on CPU), from the
        ``/host:metadata`` plane."""
        return {name: proto for _, name, proto in self.hlo_programs()}

    def hlo_programs(self) -> list[tuple[int | None, str, bytes]]:
        """``(program id, name, serialized HloProto)`` of every compiled program the
        ``/host:metadata`` plane describes (its event metadata carry them as ``Hlo Proto``
        stats, ``hlo_proto`` in some writers); op events name their program by the same
        ``program_id``."""
        meta = self.plane("/host:metadata")
        if meta is None:
            return []
        out = []
        for m in meta.event_metadata.values():
            proto = next((m.stats[k] for k in HLO_PROTO_STATS if k in m.stats), None)
            if isinstance(proto, bytes):
                pid = m.stats.get("program_id")
                out.append((pid if isinstance(pid, int) else None, m.name, proto))
        return out


def parse(data: bytes) -> Space:
    """Splits a serialized XSpace into its planes (see :class:`Space`).

    Raises:
        DecodeError: the bytes are not a well-formed XSpace.
    """
    return Space(bytes(data))


def load(path: str | os.PathLike[str]) -> Space:
    """Reads and splits a trace file or the newest trace below a directory (see
    :func:`~.tracefile.read_trace`).

    Raises:
        FileNotFoundError: no trace is there.
        OSError: the trace cannot be read, is not a regular file, or is too large.
        DecodeError: the bytes are not a well-formed XSpace.
    """
    return Space(read_trace(path))
