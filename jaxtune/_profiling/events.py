"""Trace -> executed HLO ops of the first device plane, totalled by owner (kernel or XLA op)
while the events are walked: no per-event object is kept, so a 3 M-event trace is read in
one pass over each line it needs.

Where the ops are:
- CPU: host plane ``/host:CPU``, lines ``tf_XLA*`` (XLA's thread pool) and the calling
  thread's (``python``), one event per executed thunk with stats
  ``hlo_op``/``hlo_module``/``program_id``/``run_id``; the op's name stack comes from the
  compiled HLO's metadata: the capture's HLO text, or the HLO protos the trace carries
  (:mod:`.hlo`).
- TPU: planes ``/device:TPU:N``, line ``XLA Ops``; the event metadata carries ``tf_op`` (the
  name stack), ``hlo_category``, ``flops``, ``bytes_accessed``, ``program_id``. Per-event
  stats of an ``XLA Ops`` event are not read (XProf keeps an op's facts on its metadata).
- GPU: planes ``/device:GPU:N``, kernel events with ``hlo_op``/``hlo_module`` (and, when
  given, ``tf_op``).

Nested events (a while loop and its body) count their exclusive time, so nothing is
counted twice. An op XLA added without metadata (a copy in a loop body), and a program a
callback ran from inside another program's op, belong to the op that runs them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._core.xspace import xplane as _xplane
from .._program import markers as _markers
from . import hlo as _hlo
from . import timeline as _timeline
from .totals import TIMELINE_SPANS, Accumulator, OpKind, Totals, walk_columns, walk_items

__all__ = [
    "Walk",
    "device_plane",
    "metadata_kinds",
    "op_name_of",
    "program_ids",
    "walk",
]

Owner = _markers.Owner


@dataclasses.dataclass(slots=True)
class Walk:
    """What walking a plane's op lines gave: each owner's totals, the timeline (bars
    ``(start ps, end ps, owner, spans)`` in start order, ps since the first op line's
    timestamp, at most :data:`TIMELINE_SPANS` over the whole run: :mod:`.timeline`), all
    device op time, and how many op events there were. ``joined_ps``: spans of one owner
    closer than this were drawn as one bar (0: none were)."""

    plane: _xplane.Plane
    owners: dict[Owner, Totals]
    spans: list[tuple[int, int, Owner, int]]
    total_ps: int
    events: int
    joined_ps: int = 0


def _tpu(plane: _xplane.Plane) -> bool:
    return plane.name.startswith("/device:TPU:")


def device_plane(space: _xplane.Space) -> _xplane.Plane | None:
    """The first TPU or GPU plane, else the host's ``/host:CPU`` plane."""
    names = space.plane_names
    device = next((n for n in names if n.startswith(("/device:TPU:", "/device:GPU:"))), None)
    name = device or ("/host:CPU" if "/host:CPU" in names else None)
    return space.plane(name) if name is not None else None


def _op_lines(plane: _xplane.Plane) -> list[_xplane.LineHead]:
    if _tpu(plane):
        return [line for line in plane.lines if line.name == "XLA Ops"]
    # On CPU a thunk runs on XLA's pool (``tf_XLA*`` lines) or on the thread that called
    # the program (its ``python`` line): every line, and of each only the events of ops.
    return list(plane.lines)


def _number(value: Any) -> float | None:
    """A finite number (XLA's flops, bytes), or ``None`` for anything else: text, a bool,
    NaN or infinity (a trace's values of the wrong kind are read as absent)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def program_ids(plane: _xplane.Plane | None) -> set[int]:
    """The programs (``program_id``) whose ops ran on the plane."""
    if plane is None:
        return set()
    found = {
        pid
        for m in plane.event_metadata.values()
        if (pid := _int_or_none(m.stats.get("program_id"))) is not None
    }
    if _tpu(plane):
        return found
    names = plane.stat_names
    wanted = {k for k, v in names.items() if v == "program_id"}
    for line in _op_lines(plane):
        for ev in plane.events(line):
            for s in ev.stats:
                if s.metadata_id in wanted:
                    pid = _int_or_none(_xplane.stat_value(s, names))
                    if pid is not None:
                        found.add(pid)
    return found


#: Stats that hold an op's name stack, as XLA and XProf write them: ``tf_op`` (XLA's, on
#: a TPU op's event metadata and a GPU kernel's event), ``tf_op_name`` (XProf's framework op
#: name); ``long_name`` is XProf's long form of the op (its HLO text, with the name stack in
#: ``metadata={op_name=...}``), or the name stack itself in other tools' exports.
NAME_STACK_STATS = ("tf_op", "tf_op_name")
LONG_NAME_STAT = "long_name"

#: The stats that make two events of one metadata different kinds of op.
_KIND_STATS = frozenset(
    (
        "hlo_op",
        "program_id",
        *NAME_STACK_STATS,
        LONG_NAME_STAT,
        "custom_call_target",
        "hlo_module",
        "flops",
        "bytes_accessed",
    )
)


def op_name_of(tf_op: str) -> str:
    """The name stack in XLA's ``tf_op`` stat, which writes ``<op name>:<op type>`` (a
    TPU op reads ``jit(f)/jit(attention)/pallas_call:``, JAX giving no op type); a value
    without that suffix is the name stack itself.

    >>> op_name_of("jit(loss)/jvp(jit(f))/pallas_call:")
    'jit(loss)/jvp(jit(f))/pallas_call'
    """
    head, colon, tail = tf_op.rpartition(":")
    if colon and not any(c in tail for c in "/()[]"):
        return head
    return tf_op


def _name_stack(
    stat: Callable[[str], Any], meta: _xplane.EventMetadata | None
) -> tuple[str, str | None]:
    """An op's name stack and custom-call target as the trace says them: the first of
    :data:`NAME_STACK_STATS`, else what its long name holds (the ``long_name`` stat, or on a
    TPU the metadata's name when it has a display name, as XProf reads it); ``""`` and
    ``None`` where it says nothing."""
    for name in NAME_STACK_STATS:
        value = stat(name)
        if value:
            return op_name_of(str(value)), None
    long = stat(LONG_NAME_STAT)
    if not long and meta is not None and meta.display_name:
        long = meta.name
    if not long:
        return "", None
    facts = _hlo.expression_facts(str(long))
    if facts is None:  # not HLO text: the name stack itself
        return ("" if meta is not None and long == meta.name else str(long)), None
    return facts


class _Kinds:
    """Event -> its :class:`OpKind` (memoized), from its stats, else its metadata's."""

    def __init__(
        self,
        plane: _xplane.Plane,
        hlo: Mapping[str, tuple[str, str | None]],
        programs: Mapping[int, Mapping[str, tuple[str, str | None]]],
    ) -> None:
        self.plane, self.hlo, self.programs = plane, hlo, programs
        self.tpu = _tpu(plane)
        self.memo: dict[Any, OpKind | None] = {}

    def of(self, metadata_id: int, stats: Mapping[str, Any] | None) -> OpKind | None:
        meta = self.plane.metadata(metadata_id)

        def stat(name: str, default: Any = None) -> Any:
            if stats and name in stats:
                return stats[name]
            return meta.stats.get(name, default)

        op = stat("hlo_op")
        if op is None and self.tpu:
            # XProf's reading: the display name is the op, the name its long form.
            op = meta.display_name or meta.name
        if not op:
            return None
        op = str(op)
        program = _int_or_none(stat("program_id"))
        known = (
            self.programs.get(program, self.hlo).get(op)
            if program is not None
            else self.hlo.get(op)
        )
        stack, target = _name_stack(stat, meta if self.tpu else None)
        target = stat("custom_call_target") or target or (known[1] if known else None)
        return OpKind(
            op=op,
            module=str(stat("hlo_module", "")),
            name_stack=stack or (known[0] if known else ""),
            target=str(target) if target else None,
            flops=_number(stat("flops")),
            bytes_accessed=_number(stat("bytes_accessed")),
            program=program,
        )

    def by_metadata(self, metadata_id: int) -> OpKind | None:
        key = metadata_id
        if key not in self.memo:
            self.memo[key] = self.of(metadata_id, None)
        return self.memo[key]

    def by_stats(self, metadata_id: int, stats: dict[str, Any]) -> OpKind | None:
        key = (
            metadata_id,
            *((k, v) for k, v in stats.items() if k in _KIND_STATS),
        )
        try:
            hash(key)
        except TypeError:
            return self.of(metadata_id, stats)
        if key not in self.memo:
            self.memo[key] = self.of(metadata_id, stats)
        return self.memo[key]


def _kind(ev: Any, kinds: _Kinds, names: dict[int, str]) -> tuple[OpKind | None, int | None]:
    """An event's kind, and its ``run_id``, from its own stats and its metadata's."""
    if not len(ev.stats):
        return kinds.by_metadata(ev.metadata_id), None
    stats = _xplane.stats_of(ev.stats, names)
    return kinds.by_stats(ev.metadata_id, stats), _int_or_none(stats.get("run_id"))


def metadata_kinds(
    plane: _xplane.Plane,
    hlo: Mapping[str, tuple[str, str | None]] | None = None,
    programs: Mapping[int, Mapping[str, tuple[str, str | None]]] | None = None,
) -> Callable[[int], OpKind | None]:
    """``metadata id -> OpKind`` of a TPU plane's op events (``None``: not an op)."""
    return _Kinds(plane, hlo or {}, programs or {}).by_metadata


def walk(
    plane: _xplane.Plane,
    owner_of: Callable[[OpKind], Owner],
    hlo: Mapping[str, tuple[str, str | None]] | None = None,
    programs: Mapping[int, Mapping[str, tuple[str, str | None]]] | None = None,
    *,
    release: bool = True,
) -> Walk:
    """Every executed HLO op of the plane's op lines, totalled by ``owner_of(kind)``;
    ``release``: a TPU op line is read for the last time (its bytes go once decoded).

    ``hlo`` maps an HLO instruction name to ``(op_name, custom-call target)``;
    ``programs`` does so per program id (instruction names repeat across programs), and
    wins for the events that name their program.
    """
    kinds = _Kinds(plane, hlo or {}, programs or {})
    interned: list[OpKind | None] = []
    # A TPU event's kind is its metadata's; elsewhere its own stats count (interned).
    acc = Accumulator(kinds.by_metadata if kinds.tpu else interned.__getitem__, owner_of)
    lines = _op_lines(plane)
    walked = [_walk_line(plane, line, kinds, acc, interned, release) for line in lines]
    line_spans = [bars for bars, _ in walked]
    owners = acc.totals()
    # Each line's spans from the first line's timestamp: epoch-scale timestamps in ps do
    # not fit int64, their differences do.
    origin = min((line.timestamp_ns for line in lines), default=0)
    for line, bars in zip(lines, line_spans, strict=True):
        bars[:, :2] += (line.timestamp_ns - origin) * 1000
    every = np.concatenate([_timeline.spans_of([]), *line_spans])
    bars, gap = _timeline.joined(every, TIMELINE_SPANS)
    gap = max([gap, *(g for _, g in walked)])
    spans = [(s, e, acc.owners[o], n) for s, e, o, n in bars.tolist()]
    total = sum(t.total_ps for t in owners.values())
    count = sum(t.events for t in owners.values())
    return Walk(
        plane=plane,
        owners=owners,
        spans=spans,
        total_ps=max(total, 0),
        events=count,
        joined_ps=gap,
    )


def _walk_line(
    plane: _xplane.Plane,
    line: _xplane.LineHead,
    kinds: _Kinds,
    acc: Accumulator,
    interned: list[OpKind | None],
    release: bool,
) -> tuple[Any, int]:
    """Walks one op line into ``acc``; its timeline spans (``(start, end, owner, count)``
    rows, ps from the line's timestamp), thinned as the whole timeline would be when the
    line alone has more than :data:`TIMELINE_SPANS`, and the gap that thinning joined."""
    acc.spans, acc.span_arrays = [], []
    items: list[tuple[int, int, Any, int | None]] | None = None
    if kinds.tpu:
        cols = plane.columns(line, drop=release)
        if not walk_columns(cols, acc):
            items = list(zip(*cols.T.tolist(), itertools.repeat(None)))
    else:
        ids: dict[OpKind, int] = {}
        items = []
        for ev in plane.events(line):
            kind, run = _kind(ev, kinds, plane.stat_names)
            if kind is not None:
                if kind not in ids:
                    ids[kind] = len(interned)
                    interned.append(kind)
                items.append((ev.offset_ps, ev.duration_ps, ids[kind], run))
    if items is not None and not walk_items(items, acc):
        # Host threads may write a parent after its children: by start, parents first.
        items.sort(key=lambda p: (p[0], -p[1]))
        walk_items(items, acc)
    return _timeline.joined(acc.span_table(), TIMELINE_SPANS)
