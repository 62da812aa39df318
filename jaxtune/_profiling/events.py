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

import array
import dataclasses
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import _markers
from . import xplane as _xplane

__all__ = ["OpKind", "Totals", "Walk", "device_plane", "metadata_kinds", "program_ids", "walk"]

Owner = _markers.Owner

#: At most this many spans of a profile's timeline are kept (the first ones in time).
TIMELINE_SPANS = 2000


@dataclasses.dataclass(frozen=True, slots=True)
class OpKind:
    """What the events of one executed HLO op share."""

    op: str
    module: str
    name_stack: str
    target: str | None
    flops: float | None
    bytes_accessed: float | None
    program: int | None


@dataclasses.dataclass(slots=True)
class Totals:
    """One owner's events, totalled: exclusive time, its calls as the trace shows them
    (runs of consecutive top-level events of one kernel; every event of a plain XLA op is
    a run of its own), XLA's flops and bytes, and the program runs it appeared in."""

    total_ps: int = 0
    events: int = 0
    runs: int = 0
    run_min: int | None = None
    run_max: int | None = None
    current: int = 0
    first_op: str = ""
    target: str | None = None
    all_targets: bool = True
    flops: float = 0.0
    bytes_accessed: float = 0.0
    program_runs: set[tuple[int | None, int]] = dataclasses.field(default_factory=set)
    runless: bool = False


@dataclasses.dataclass(slots=True)
class Walk:
    """What walking a plane's op lines gave: each owner's totals, the timeline (top-level
    spans ``(start ps, end ps, owner)``, the first :data:`TIMELINE_SPANS`), all device op
    time, and how many op events there were."""

    plane: _xplane.Plane
    owners: dict[Owner, Totals]
    spans: list[tuple[int, int, Owner]]
    total_ps: int
    events: int


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
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


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
            op = meta.name
        if not op:
            return None
        op = str(op)
        program = _int_or_none(stat("program_id"))
        known = (
            self.programs.get(program, self.hlo).get(op)
            if program is not None
            else self.hlo.get(op)
        )
        target = stat("custom_call_target") or (known[1] if known else None)
        return OpKind(
            op=op,
            module=str(stat("hlo_module", "")),
            name_stack=str(stat("tf_op") or (known[0] if known else "")),
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
            *(
                (k, v)
                for k, v in stats.items()
                if k in ("hlo_op", "program_id", "tf_op", "custom_call_target", "hlo_module")
                or k in ("flops", "bytes_accessed")
            ),
        )
        try:
            hash(key)
        except TypeError:
            return self.of(metadata_id, stats)
        if key not in self.memo:
            self.memo[key] = self.of(metadata_id, stats)
        return self.memo[key]


_BIG = 1 << 62


def _kind(ev: Any, kinds: _Kinds, names: dict[int, str]) -> tuple[OpKind | None, int | None]:
    """An event's kind, and its ``run_id``, from its own stats and its metadata's."""
    if not len(ev.stats):
        return kinds.by_metadata(ev.metadata_id), None
    stats = _xplane.stats_of(ev.stats, names)
    return kinds.by_stats(ev.metadata_id, stats), _int_or_none(stats.get("run_id"))


class _Acc:
    """Per-owner totals of the lines walked so far, in lists indexed by owner number; and
    per *key* (a kind of event: its metadata id on a TPU, its interned kind elsewhere)
    the owner it goes to and how many events went there (for XLA's flops and bytes)."""

    def __init__(self, kind_of: Callable[[Any], OpKind | None], owner_of: Any) -> None:
        self.kind_of, self.owner_of = kind_of, owner_of
        self.owners: list[Owner] = []
        self.number: dict[Owner, int] = {}
        self.slot: dict[Any, int] = {}  # key -> slot (-1: not an op)
        self.slot_kind: list[OpKind] = []
        self.slot_owner: list[int] = []
        self.count: list[int] = []  # events of the slot that went to its own owner
        # per owner
        self.total: list[int] = []
        self.current: list[int] = []
        self.runs: list[int] = []
        self.run_min: list[int] = []
        self.run_max: list[int] = []
        self.xla: list[bool] = []
        self.first_op: list[str] = []
        self.extra: list[list[Any]] = []  # [events, flops, bytes, target, all targets]
        self.program_runs: list[set[tuple[int | None, int]]] = []
        self.runless: list[bool] = []
        self.spans: list[tuple[int, int, int]] = []

    def owner_number(self, owner: Owner, first_op: str) -> int:
        n = self.number.get(owner)
        if n is None:
            n = self.number[owner] = len(self.owners)
            self.owners.append(owner)
            for lst, v in (
                (self.total, 0),
                (self.current, 0),
                (self.runs, 0),
                (self.run_min, _BIG),
                (self.run_max, -1),
            ):
                lst.append(v)
            self.xla.append(owner[0] == "xla")
            self.first_op.append(first_op)
            self.extra.append([0, 0.0, 0.0, None, True])
            self.program_runs.append(set())
            self.runless.append(False)
        return n

    def new_slot(self, key: Any) -> int:
        kind = self.kind_of(key)
        if kind is None:
            self.slot[key] = -1
            return -1
        n = self.slot[key] = len(self.slot_kind)
        self.slot_kind.append(kind)
        self.slot_owner.append(self.owner_number(self.owner_of(kind), kind.op))
        self.count.append(0)
        return n

    def totals(self) -> dict[Owner, Totals]:
        """Each owner's :class:`Totals`."""
        out: dict[Owner, Totals] = {}
        for o, owner in enumerate(self.owners):
            ex = self.extra[o]
            runs = self.runs[o]
            if runs:  # the last run of each owner
                c = self.current[o]
                self.run_min[o] = min(self.run_min[o], c)
                self.run_max[o] = max(self.run_max[o], c)
            out[owner] = Totals(
                total_ps=max(self.total[o], 0),
                events=ex[0],
                runs=runs,
                run_min=self.run_min[o] if runs else None,
                run_max=self.run_max[o] if runs else None,
                first_op=self.first_op[o],
                target=ex[3],
                all_targets=ex[4],
                flops=ex[1],
                bytes_accessed=ex[2],
                program_runs=self.program_runs[o],
                runless=self.runless[o],
            )
        for sl, kind in enumerate(self.slot_kind):
            n = self.count[sl]
            if not n:
                continue
            t = out[self.owners[self.slot_owner[sl]]]
            t.events += n
            t.flops += (kind.flops or 0.0) * n
            t.bytes_accessed += (kind.bytes_accessed or 0.0) * n
            t.target = t.target or kind.target
            t.all_targets = t.all_targets and bool(kind.target)
        return out


def _line(items: Any, acc: _Acc) -> bool:
    """Walks one line's events ``(start ps, duration ps, key, run id)`` in start order into
    ``acc``; ``False`` (having added nothing) when they come out of order.

    The hot loop of the reader. An event that starts after every earlier one ended is
    top-level: its time goes to its key's owner, and it continues that owner's run when the
    event before it was the same owner's (a plain XLA op's events are runs of their own).
    An event inside another takes its time from its parent (exclusive times), and goes to
    its parent's owner when it has no name stack or belongs to another program.
    """
    slot, slot_owner, count, kinds = acc.slot, acc.slot_owner, acc.count, acc.slot_kind
    total, current, runs, run_min, run_max = (
        acc.total,
        acc.current,
        acc.runs,
        acc.run_min,
        acc.run_max,
    )
    xla, program_runs, runless = acc.xla, acc.program_runs, acc.runless
    spans = acc.spans
    # Undo log: the line is walked into fresh lists when it comes out of order.
    start_state = _snapshot(acc)
    last = end = -_BIG
    prev = -1
    top_o = top_sl = -1
    top_d = top_taken = 0
    inner: list[list[int]] = []  # deeper open events: [end, slot, owner, duration, taken]
    span_o = -1
    span_full = len(spans) >= TIMELINE_SPANS
    for start, d, key, run in items:
        if start < last:
            _restore(acc, start_state)
            return False
        last = start
        try:
            sl = slot[key]
        except KeyError:
            sl = acc.new_slot(key)
        if sl < 0:
            continue
        if d < 0:
            d = 0
        if start >= end:
            o = slot_owner[sl]
            total[o] += d
            count[sl] += 1
            if o != prev or xla[o]:
                if runs[o]:
                    c = current[o]
                    if c < run_min[o]:
                        run_min[o] = c
                    if c > run_max[o]:
                        run_max[o] = c
                runs[o] += 1
                current[o] = d
                prev = o
            else:
                current[o] += d
            end = start + d
            top_o, top_sl, top_d, top_taken = o, sl, d, 0
            if inner:
                inner.clear()
            if run is None:
                runless[o] = True
            else:
                program_runs[o].add((kinds[sl].program, run))
            if not span_full:
                if o == span_o and not xla[o]:
                    s0, s1, _ = spans[-1]
                    spans[-1] = (s0, end if end > s1 else s1, o)
                else:
                    spans.append((start, end, o))
                    span_o = o
                    span_full = len(spans) >= TIMELINE_SPANS
            continue
        # Inside another event (rare on a device; loops and callbacks on a host).
        while inner and inner[-1][0] <= start:
            inner.pop()
        kind = kinds[sl]
        if inner:
            parent = inner[-1]
            p_sl, p_o, left = parent[1], parent[2], parent[3] - parent[4]
        else:
            parent = None
            p_sl, p_o, left = top_sl, top_o, top_d - top_taken
        p_program = kinds[p_sl].program
        own = not kind.name_stack or p_program != kind.program
        o = p_o if own else slot_owner[sl]
        taken = d if d < left else left
        if parent is not None:
            parent[4] += taken
        else:
            top_taken += taken
        total[p_o] -= taken
        current[p_o] -= taken
        total[o] += d
        if o == slot_owner[sl]:
            count[sl] += 1
        else:
            ex = acc.extra[o]
            ex[0] += 1
            ex[1] += kind.flops or 0.0
            ex[2] += kind.bytes_accessed or 0.0
        if o != p_o:
            if xla[o] or o != prev:
                if runs[o]:
                    c = current[o]
                    run_min[o] = min(run_min[o], c)
                    run_max[o] = max(run_max[o], c)
                runs[o] += 1
                current[o] = 0
            prev = o
        current[o] += d
        if p_program == kind.program:
            if run is None:
                runless[o] = True
            else:
                program_runs[o].add((kind.program, run))
        inner.append([start + d, sl, o, d, 0])
        if start + d > end:
            end = start + d
    return True


def _columns(events: Any) -> Any:
    """``(n, 3)`` int64 array of the events' offsets, durations and metadata ids: the one
    pass over a TPU line's events that touches each of them."""
    buf = array.array("q")
    add = buf.append
    for ev in events:
        add(ev.offset_ps)
        add(ev.duration_ps)
        add(ev.metadata_id)
    return np.frombuffer(buf, dtype=np.int64).reshape(-1, 3)


def _slots(mid: Any, acc: _Acc) -> Any:
    """Each event's slot in ``acc``, from its metadata id (a table look-up when the ids are
    small, as writers number them)."""

    def slot_of(k: int) -> int:
        return acc.slot[k] if k in acc.slot else acc.new_slot(k)

    low, high = int(mid.min()), int(mid.max())
    if low >= 0 and high < 1 << 22:
        present = np.flatnonzero(np.bincount(mid, minlength=high + 1)).tolist()
        table = np.full(high + 1, -1, dtype=np.int64)
        table[present] = [slot_of(k) for k in present]
        return table[mid]
    ids, inverse = np.unique(mid, return_inverse=True)
    return np.array([slot_of(k) for k in ids.tolist()], dtype=np.int64)[inverse]


def _line_columns(cols: Any, acc: _Acc) -> bool:
    """What :func:`_line` does, for a line with no event inside another, in start order
    (a TPU's ``XLA Ops`` line), in array operations; ``False`` (having added nothing) for
    any other line. Totals are summed in float64: exact below 2^53 ps (2.5 hours)."""
    n = len(cols)
    if n == 0:
        return True
    start, mid = cols[:, 0], cols[:, 2]
    dur = np.maximum(cols[:, 1], 0)
    end = start + dur
    if n > 1 and not bool(np.all(start[1:] >= np.maximum.accumulate(end)[:-1])):
        return False  # out of order, or nested
    slot = _slots(mid, acc)
    keep = slot >= 0
    if not bool(np.all(keep)):
        slot, start, dur, end = slot[keep], start[keep], dur[keep], end[keep]
    if len(slot) == 0:
        return True
    nslots, nowners = len(acc.slot_kind), len(acc.owners)
    own = np.asarray(acc.slot_owner, dtype=np.int64)[slot]
    for sl, c in enumerate(np.bincount(slot, minlength=nslots).tolist()):
        acc.count[sl] += c
    for o, t in enumerate(np.bincount(own, weights=dur, minlength=nowners).tolist()):
        acc.total[o] += round(t)
    xla = np.asarray(acc.xla, dtype=bool)
    new = np.empty(len(own), dtype=bool)
    new[0] = True
    new[1:] = (own[1:] != own[:-1]) | xla[own[1:]]
    run_id = np.cumsum(new) - 1
    run_sum = np.rint(np.bincount(run_id, weights=dur)).astype(np.int64)
    first = np.flatnonzero(new)
    run_owner = own[first]
    lo = np.full(nowners, _BIG, dtype=np.int64)
    hi = np.full(nowners, -1, dtype=np.int64)
    np.minimum.at(lo, run_owner, run_sum)
    np.maximum.at(hi, run_owner, run_sum)
    last = np.zeros(nowners, dtype=np.int64)
    last[run_owner] = run_sum  # the last run of each owner (fancy assignment: last wins)
    counts = np.bincount(run_owner, minlength=nowners).tolist()
    for o in np.flatnonzero(counts).tolist():
        acc.runs[o] += counts[o]
        acc.run_min[o] = min(acc.run_min[o], int(lo[o]))
        acc.run_max[o] = max(acc.run_max[o], int(hi[o]))
        acc.current[o] = int(last[o])
        acc.runless[o] = True
    room = TIMELINE_SPANS - len(acc.spans)
    if room > 0:
        heads = first[: room + 1].tolist()
        bounds = [*heads[1:], len(own)] if len(heads) <= room else heads[1:]
        for h, after in zip(heads, bounds, strict=False):
            acc.spans.append((int(start[h]), int(end[after - 1]), int(own[h])))
    return True


def _snapshot(acc: _Acc) -> tuple[Any, ...]:
    return (
        len(acc.spans),
        list(acc.total),
        list(acc.current),
        list(acc.runs),
        list(acc.run_min),
        list(acc.run_max),
        list(acc.count),
        [list(e) for e in acc.extra],
        [set(p) for p in acc.program_runs],
        list(acc.runless),
    )


def _restore(acc: _Acc, state: tuple[Any, ...]) -> None:
    n = len(state[1])
    del acc.spans[state[0] :]
    for name, saved in zip(
        ("total", "current", "runs", "run_min", "run_max"), state[1:6], strict=True
    ):
        getattr(acc, name)[:n] = saved
    for sl in range(len(acc.count)):
        acc.count[sl] = state[6][sl] if sl < len(state[6]) else 0
    acc.extra[: len(state[7])] = state[7]
    acc.program_runs[: len(state[8])] = state[8]
    acc.runless[: len(state[9])] = state[9]
    for o in range(n, len(acc.owners)):  # owners first seen on this line start empty
        acc.total[o] = acc.current[o] = acc.runs[o] = 0
        acc.run_min[o], acc.run_max[o] = _BIG, -1
        acc.extra[o] = [0, 0.0, 0.0, None, True]
        acc.program_runs[o] = set()
        acc.runless[o] = False


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
    names = plane.stat_names
    interned: list[OpKind | None] = []
    ids: dict[OpKind | None, int] = {}

    def intern(kind: OpKind | None) -> int:
        if kind not in ids:
            ids[kind] = len(interned)
            interned.append(kind)
        return ids[kind]

    # A TPU event's kind is its metadata's; elsewhere its own stats count (interned).
    acc = _Acc(kinds.by_metadata if kinds.tpu else interned.__getitem__, owner_of)
    total_events = 0
    line_spans: list[list[tuple[int, int, int]]] = []
    for line in _op_lines(plane):
        base = line.timestamp_ns * 1000
        items: list[tuple[int, int, Any, int | None]] | None
        if kinds.tpu:
            # Read once: the line's bytes and its decoded events go as soon as read.
            cols = _columns(plane.events(line, lite=True, drop=release))
            acc.spans = []
            done = _line_columns(cols, acc)
            items = None if done else list(zip(*cols.T.tolist(), itertools.repeat(None)))
            del cols
        else:
            items = []
            for ev in plane.events(line):
                kind, run = _kind(ev, kinds, names)
                if kind is not None:
                    items.append((ev.offset_ps, ev.duration_ps, intern(kind), run))
        acc.spans = acc.spans if kinds.tpu else []
        if items is not None and not _line(items, acc):
            # Host threads may write a parent after its children: by start, parents first.
            items.sort(key=lambda p: (p[0], -p[1]))
            _line(items, acc)
        del items
        line_spans.append([(s + base, e + base, o) for s, e, o in acc.spans])
    owners = acc.totals()
    for t in owners.values():
        total_events += t.events
    spans: list[tuple[int, int, Owner]] = []
    merged = sorted((s for ss in line_spans for s in ss), key=lambda s: s[0])
    for start, end, o in merged if len(line_spans) > 1 else (line_spans[0] if line_spans else []):
        owner = acc.owners[o]
        if spans and spans[-1][2] == owner and owner[0] != "xla":
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]), owner)
        elif len(spans) < TIMELINE_SPANS:
            spans.append((start, end, owner))
    total = sum(t.total_ps for t in owners.values())
    return Walk(
        plane=plane, owners=owners, spans=spans, total_ps=max(total, 0), events=total_events
    )
