"""A compact reader for ``.xplane.pb`` traces (the XSpace protobuf), with no dependency.
``jax.profiler.ProfileData`` does not expose the stats stored on *event metadata*
(``flops``, ``bytes_accessed``, ``hlo_category``, ``tf_op`` on TPU and GPU traces), so
jaxtune decodes the protobuf wire format itself, for the schema it needs:

    XSpace   planes=1 errors=2 warnings=3 hostnames=4
    XPlane   id=1 name=2 lines=3 event_metadata=4 (map) stat_metadata=5 (map) stats=6
    XLine    id=1 name=2 timestamp_ns=3 events=4 duration_ps=9 display_name=11
    XEvent   metadata_id=1 offset_ps=2 duration_ps=3 stats=4 num_occurrences=5
    XStat    metadata_id=1 double=2 uint64=3 int64=4 str=5 bytes=6 ref=7
    XEventMetadata  id=1 name=2 metadata=3 display_name=4 stats=5
    XStatMetadata   id=1 name=2
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import Any

from .protowire import DecodeError
from .protowire import fields as _fields
from .protowire import signed as _signed
from .protowire import text as _text
from .protowire import varint as _varint
from .tracefile import read_trace

__all__ = [
    "HLO_PROTO_STATS",
    "MALFORMED",
    "DecodeError",
    "Event",
    "EventMetadata",
    "Line",
    "Plane",
    "Space",
    "load",
    "parse",
]


def _stat(buf: bytes, start: int, end: int) -> tuple[int, Any, bool]:
    """``(metadata id, value, is_ref)`` of one XStat."""
    # Fast path: a one-byte metadata id followed by an integer value (most event stats).
    if end - start >= 4 and buf[start] == 0x08 and buf[start + 1] < 0x80:
        kind = buf[start + 2]
        if kind in (0x18, 0x20, 0x38):  # uint64, int64, ref
            number, pos = _varint(buf, start + 3)
            if pos == end:
                return buf[start + 1], _signed(number) if kind == 0x20 else number, kind == 0x38
    mid = 0
    value: Any = None
    is_ref = False
    for field, wire, v in _fields(buf, start, end):
        if field == 1:
            mid = v
        elif field == 2 and wire == 1:
            value = struct.unpack("<d", v)[0]
        elif field == 3:
            value = v
        elif field == 4:
            value = _signed(v)
        elif field == 5:
            value = _text(buf, v)
        elif field == 6:
            value = bytes(buf[v[0] : v[1]])
        elif field == 7:
            value, is_ref = v, True
    return mid, value, is_ref


@dataclasses.dataclass(slots=True)
class EventMetadata:
    """What events of one kind share: the name (an HLO op, a kernel) and its stats."""

    id: int
    name: str = ""
    display_name: str = ""
    stats: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class Event:
    """One timed event; ``stats`` are the event's own, ``metadata`` holds the shared ones."""

    metadata: EventMetadata
    offset_ps: int
    duration_ps: int
    stats: dict[str, Any]

    @property
    def name(self) -> str:
        return self.metadata.name

    def stat(self, name: str, default: Any = None) -> Any:
        """An event stat, else the event metadata's stat of that name."""
        if name in self.stats:
            return self.stats[name]
        return self.metadata.stats.get(name, default)


@dataclasses.dataclass(slots=True)
class Line:
    """A timeline (a thread, ``XLA Ops``, a CUDA stream)."""

    id: int
    name: str
    display_name: str
    timestamp_ns: int
    events: list[Event]


@dataclasses.dataclass(slots=True)
class Plane:
    """A device or the host: its lines, event metadata and plane-level stats."""

    id: int
    name: str
    lines: list[Line]
    event_metadata: dict[int, EventMetadata]
    stats: dict[str, Any]


@dataclasses.dataclass(slots=True)
class Space:
    """A whole trace."""

    planes: list[Plane]
    errors: list[str]
    warnings: list[str]
    hostnames: list[str]

    def plane(self, name: str) -> Plane | None:
        """The plane called ``name``, if any."""
        return next((p for p in self.planes if p.name == name), None)

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


#: Stat names under which a trace's metadata plane holds a program's serialized HloProto.
HLO_PROTO_STATS = ("Hlo Proto", "hlo_proto")


def _stats(buf: bytes, spans: list[tuple[int, int]], names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for start, end in spans:
        mid, value, is_ref = _stat(buf, start, end)
        if is_ref:
            value = names.get(value, value)
        out[names.get(mid, str(mid))] = value
    return out


def _plane(buf: bytes, start: int, end: int) -> Plane:
    pid, name = 0, ""
    line_spans: list[tuple[int, int]] = []
    meta_spans: list[tuple[int, int]] = []
    stat_spans: list[tuple[int, int]] = []
    stat_names: dict[int, str] = {}
    for field, _, v in _fields(buf, start, end):
        if field == 1:
            pid = v
        elif field == 2:
            name = _text(buf, v)
        elif field == 3:
            line_spans.append(v)
        elif field == 4:
            meta_spans.append(v)
        elif field == 5:
            for f, _, entry in _fields(buf, *v):
                if f == 2:
                    sid, sname = 0, ""
                    for g, _, w in _fields(buf, *entry):
                        if g == 1:
                            sid = w
                        elif g == 2:
                            sname = _text(buf, w)
                    stat_names[sid] = sname
        elif field == 6:
            stat_spans.append(v)
    metadata: dict[int, EventMetadata] = {}
    for span in meta_spans:
        for f, _, entry in _fields(buf, *span):
            if f != 2:
                continue
            meta = EventMetadata(id=0)
            meta_stats: list[tuple[int, int]] = []
            for g, _, w in _fields(buf, *entry):
                if g == 1:
                    meta.id = w
                elif g == 2:
                    meta.name = _text(buf, w)
                elif g == 4:
                    meta.display_name = _text(buf, w)
                elif g == 5:
                    meta_stats.append(w)
            meta.stats = _stats(buf, meta_stats, stat_names)
            metadata[meta.id] = meta
    lines = [_line(buf, s, e, metadata, stat_names) for s, e in line_spans]
    return Plane(
        id=pid,
        name=name,
        lines=lines,
        event_metadata=metadata,
        stats=_stats(buf, stat_spans, stat_names),
    )


def _line(
    buf: bytes, start: int, end: int, metadata: dict[int, EventMetadata], names: dict[int, str]
) -> Line:
    line = Line(id=0, name="", display_name="", timestamp_ns=0, events=[])
    append = line.events.append
    pos = start
    while pos < end:
        if buf[pos] == 0x22:  # field 4 (an event), length-delimited: the common case
            length, pos = _varint(buf, pos + 1)
            append(_event(buf, pos, pos + length, metadata, names))
            pos += length
            continue
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            if field == 1:
                line.id = value
            elif field == 3:
                line.timestamp_ns = _signed(value)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if field == 2:
                line.name = _text(buf, (pos, pos + length))
            elif field == 11:
                line.display_name = _text(buf, (pos, pos + length))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise DecodeError(f"unsupported wire type {wire}")
    return line


def _event(
    buf: bytes, start: int, end: int, metadata: dict[int, EventMetadata], names: dict[int, str]
) -> Event:
    # The hot loop of the reader (one call per event): XEvent's field keys fit in one byte,
    # so keys and small varints are decoded inline; anything unusual takes the general path.
    mid = offset = duration = 0
    stat_spans: list[tuple[int, int]] | None = None
    pos = start
    while pos < end:
        key = buf[pos]
        pos += 1
        wire = key & 7
        if key >= 0x80 or wire not in (0, 2):
            return _event_slow(buf, start, end, metadata, names)
        if wire == 0:
            b = buf[pos]
            pos += 1
            value = b & 0x7F
            shift = 7
            while b >= 0x80:
                b = buf[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                shift += 7
            field = key >> 3
            if field == 1:
                mid = value
            elif field == 2:
                offset = value
            elif field == 3:
                duration = value
        else:
            length, pos = _varint(buf, pos)
            if key >> 3 == 4:
                if stat_spans is None:
                    stat_spans = []
                stat_spans.append((pos, pos + length))
            pos += length
    if offset >= 1 << 63:
        offset -= 1 << 64
    return _new_event(buf, metadata, names, mid, offset, duration, stat_spans)


def _new_event(
    buf: bytes,
    metadata: dict[int, EventMetadata],
    names: dict[int, str],
    mid: int,
    offset: int,
    duration: int,
    stat_spans: list[tuple[int, int]] | None,
) -> Event:
    meta = metadata.get(mid)
    if meta is None:
        meta = metadata[mid] = EventMetadata(id=mid, name=f"<metadata {mid}>")
    stats = _stats(buf, stat_spans, names) if stat_spans else {}
    return Event(metadata=meta, offset_ps=offset, duration_ps=duration, stats=stats)


def _event_slow(
    buf: bytes, start: int, end: int, metadata: dict[int, EventMetadata], names: dict[int, str]
) -> Event:
    mid = offset = duration = 0
    stat_spans: list[tuple[int, int]] = []
    for field, _, v in _fields(buf, start, end):
        if field == 1:
            mid = v
        elif field == 2:
            offset = _signed(v)
        elif field == 3:
            duration = _signed(v)
        elif field == 4:
            stat_spans.append(v)
    return _new_event(buf, metadata, names, mid, offset, duration, stat_spans)


def parse(data: bytes) -> Space:
    """Decodes a serialized XSpace.

    Raises:
        DecodeError: the bytes are not a well-formed XSpace.
    """
    try:
        return _parse(bytes(data))
    except DecodeError:
        raise
    except (*MALFORMED, struct.error) as e:
        # Damaged input (a field of the wrong wire type or length), not a bug to surface.
        raise DecodeError(f"malformed XSpace ({type(e).__name__}: {e})") from e


#: What decoding damaged protobuf bytes can raise besides DecodeError.
MALFORMED = (IndexError, KeyError, TypeError, ValueError, OverflowError, RecursionError)


def _parse(data: bytes) -> Space:
    space = Space(planes=[], errors=[], warnings=[], hostnames=[])
    for field, wire, v in _fields(data, 0, len(data)):
        if wire != 2:
            continue
        if field == 1:
            space.planes.append(_plane(data, *v))
        elif field == 2:
            space.errors.append(_text(data, v))
        elif field == 3:
            space.warnings.append(_text(data, v))
        elif field == 4:
            space.hostnames.append(_text(data, v))
    return space


def load(path: str | os.PathLike[str]) -> Space:
    """Reads and decodes a trace file or the newest trace below a directory (see
    :func:`~.tracefile.read_trace`).

    Raises:
        FileNotFoundError: no trace is there.
        OSError: the trace cannot be read, is not a regular file, or is too large.
        DecodeError: the bytes are not a well-formed XSpace.
    """
    return parse(read_trace(path))
