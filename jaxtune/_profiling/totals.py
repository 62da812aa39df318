"""Per-owner totals of a plane's op lines, taken while the events are walked: no per-event
object is kept. :func:`walk_items` walks any line (nesting, exclusive times, host-thread
order); :func:`walk_columns` does the same in array operations for a line with no event
inside another (a TPU's ``XLA Ops`` line, millions of events), from
:func:`jaxtune._core.xspace.xplane.event_columns`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from .._program import markers as _markers
from .timeline import MAX_BARS, spans_of

__all__ = [
    "TIMELINE_SPANS",
    "Accumulator",
    "OpKind",
    "Totals",
    "walk_columns",
    "walk_items",
]

Owner = _markers.Owner

#: At most this many bars of a profile's timeline are kept, over the whole run
#: (:mod:`.timeline`).
TIMELINE_SPANS = MAX_BARS

_BIG = 1 << 62


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
    a run of its own), XLA's flops and bytes, and the program runs it appeared in.
    ``first`` is the kind of the first op that went to it (for a plain XLA op, the op:
    its name stack and program), or of its first Pallas custom call where it has one.
    ``kernel_calls``: its events of Pallas custom calls (on a device plane one event is
    one call, also when two calls run back to back)."""

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
    first: OpKind | None = None
    kernel_calls: int = 0


class Accumulator:
    """Per-owner totals of the lines walked so far, in lists indexed by owner number; and
    per *key* (a kind of event: its metadata id on a TPU, its interned kind elsewhere)
    the owner it goes to and how many events went there (for XLA's flops and bytes)."""

    def __init__(
        self, kind_of: Callable[[Any], OpKind | None], owner_of: Callable[[OpKind], Owner]
    ) -> None:
        self.kind_of, self.owner_of = kind_of, owner_of
        self.owners: list[Owner] = []
        self.number: dict[Owner, int] = {}
        self.slot: dict[Any, int] = {}  # key -> slot (-1: not an op)
        self.slot_kind: list[OpKind] = []
        self.slot_owner: list[int] = []
        self.count_of: list[int] = []  # events of the slot that went to its own owner
        # per owner
        self.total: list[int] = []
        self.current: list[int] = []
        self.runs: list[int] = []
        self.run_min: list[int] = []
        self.run_max: list[int] = []
        self.xla: list[bool] = []
        self.first: list[OpKind] = []
        self.extra: list[list[Any]] = []  # [events, flops, bytes, target, all targets]
        self.program_runs: list[set[tuple[int | None, int]]] = []
        self.runless: list[bool] = []
        # The line's spans (:mod:`.timeline`): tuples from an event walk, arrays from a
        # column walk.
        self.spans: list[tuple[int, int, int]] = []
        self.span_arrays: list[Any] = []

    def span_table(self) -> Any:
        """The spans of the line walked last: ``(start, end, owner, count)`` rows."""
        return np.concatenate([spans_of(self.spans), *self.span_arrays])

    def owner_number(self, owner: Owner, first: OpKind) -> int:
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
            self.xla.append(owner.kind == "xla")
            self.first.append(first)
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
        o = self.owner_number(self.owner_of(kind), kind)
        pallas = _markers.PALLAS_TARGETS
        if kind.target in pallas and self.first[o].target not in pallas:
            # A kernel's row is its call, not a copy XLA added for it that ran first.
            self.first[o] = kind
        self.slot_owner.append(o)
        self.count_of.append(0)
        return n

    def new_run(self, o: int) -> None:
        """Owner ``o`` starts a run: the one before it is folded into its extremes."""
        if self.runs[o]:
            c = self.current[o]
            self.run_min[o] = min(self.run_min[o], c)
            self.run_max[o] = max(self.run_max[o], c)
        self.runs[o] += 1
        self.current[o] = 0

    def note_run(self, o: int, program: int | None, run: int | None) -> None:
        """An event of owner ``o`` in this run of its program (``None``: unknown)."""
        if run is None:
            self.runless[o] = True
        else:
            self.program_runs[o].add((program, run))

    def count(self, o: int, sl: int, kind: OpKind) -> None:
        """One more event of slot ``sl`` went to owner ``o``."""
        if o == self.slot_owner[sl]:
            self.count_of[sl] += 1
        else:
            ex = self.extra[o]
            ex[0] += 1
            ex[1] += kind.flops or 0.0
            ex[2] += kind.bytes_accessed or 0.0

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
                first_op=self.first[o].op,
                target=ex[3],
                all_targets=ex[4],
                flops=ex[1],
                bytes_accessed=ex[2],
                program_runs=self.program_runs[o],
                runless=self.runless[o],
                first=self.first[o],
            )
        for sl, kind in enumerate(self.slot_kind):
            n = self.count_of[sl]
            if not n:
                continue
            t = out[self.owners[self.slot_owner[sl]]]
            t.events += n
            t.flops += (kind.flops or 0.0) * n
            t.bytes_accessed += (kind.bytes_accessed or 0.0) * n
            t.target = t.target or kind.target
            t.all_targets = t.all_targets and bool(kind.target)
            if kind.target in _markers.PALLAS_TARGETS:
                t.kernel_calls += n
        return out


class _Walker:
    """The walk of one line: the events still open, outermost first (``[end, slot,
    owner, duration, time its children took]``), the owner last seen, the span drawn."""

    __slots__ = ("acc", "prev", "span_o", "stack")

    def __init__(self, acc: Accumulator) -> None:
        self.acc = acc
        self.stack: list[list[int]] = []
        self.prev = -1
        self.span_o = -1

    def event(self, start: int, d: int, sl: int, run: int | None) -> None:
        acc, stack = self.acc, self.stack
        while stack and stack[-1][0] <= start:
            stack.pop()
        kind = acc.slot_kind[sl]
        parent = stack[-1] if stack else None
        o = acc.slot_owner[sl]
        same_program = True
        if parent is not None:
            p_owner = parent[2]
            same_program = acc.slot_kind[parent[1]].program == kind.program
            if not same_program or (not kind.name_stack and not acc.xla[p_owner]):
                # A program run from inside an op; an op without metadata inside a kernel's
                # (a plain XLA op's is an instruction of its own, with a row of its own).
                o = p_owner
            taken = min(d, parent[3] - parent[4])  # the parent loses the child's time
            parent[4] += taken
            acc.total[p_owner] -= taken
            acc.current[p_owner] -= taken
        acc.total[o] += d
        acc.count(o, sl, kind)
        if parent is None or o != parent[2]:
            if acc.xla[o] or o != self.prev:
                acc.new_run(o)
            self.prev = o
        acc.current[o] += d
        if same_program:
            acc.note_run(o, kind.program, run)
        if parent is None:
            self.span(start, start + d, o)
        stack.append([start + d, sl, o, d, 0])

    def span(self, start: int, end: int, o: int) -> None:
        """A top-level event: it extends the span before it when that is the same owner's
        and it starts before that one ended, else starts a span (never across a gap)."""
        spans = self.acc.spans
        if o == self.span_o and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]), o)
        else:
            spans.append((start, end, o))
            self.span_o = o


def walk_items(items: Any, acc: Accumulator) -> bool:
    """Walks one line's events ``(start ps, duration ps, key, run id)`` in start order into
    ``acc``; ``False`` (having added nothing) when they come out of order.

    An event that starts after every earlier one ended is top-level: its time goes to its
    key's owner, and it continues that owner's run when the event before it was the same
    owner's (a plain XLA op's events are runs of their own). An event inside another takes
    its time from its parent (exclusive times), and goes to its parent's owner when it
    belongs to another program, or has no name stack and its parent is a kernel's.
    """
    state = _snapshot(acc)
    walker = _Walker(acc)
    last = -_BIG
    for start, d, key, run in items:
        if start < last:
            _restore(acc, state)
            return False
        last = start
        sl = acc.slot.get(key)
        if sl is None:
            sl = acc.new_slot(key)
        if sl >= 0:
            walker.event(start, max(d, 0), sl, run)
    return True


def _owners(mid: Any, acc: Accumulator) -> Any:
    """Each event's owner number in ``acc`` (-1: not an op), from its metadata id, counting
    each slot's events (a table look-up when the ids are small, as writers number them)."""

    def slot_of(k: int) -> int:
        return acc.slot[k] if k in acc.slot else acc.new_slot(k)

    low, high = int(mid.min()), int(mid.max())
    if low >= 0 and high < 1 << 22:
        index, counts = mid, np.bincount(mid, minlength=high + 1)
        ids = np.flatnonzero(counts)
    else:
        ids, index, counts = np.unique(mid, return_inverse=True, return_counts=True)
    owner_table = np.full(len(counts), -1, dtype=np.int64)
    for i, k in zip(np.flatnonzero(counts).tolist(), ids.tolist(), strict=True):
        sl = slot_of(k)
        if sl >= 0:
            acc.count_of[sl] += int(counts[i])
            owner_table[i] = acc.slot_owner[sl]
    return owner_table[index]


def walk_columns(cols: Any, acc: Accumulator) -> bool:
    """What :func:`walk_items` does, for a line with no event inside another, in start order
    (a TPU's ``XLA Ops`` line), in array operations; ``False`` (having added nothing) for
    any other line. Totals are summed in float64: exact below 2^53 ps (2.5 hours); a run's
    time in int64."""
    n = len(cols)
    if n == 0:
        return True
    start, mid = cols[:, 0], cols[:, 2]
    dur = np.maximum(cols[:, 1], 0)
    end = start + dur
    # Each event starting after the one before it ended: then the ends never decrease, so
    # no event starts inside any earlier one.
    if n > 1 and not bool(np.all(start[1:] >= end[:-1])):
        return False  # out of order, or nested
    own = _owners(mid, acc)
    keep = own >= 0
    if not bool(np.all(keep)):
        own, start, dur, end = own[keep], start[keep], dur[keep], end[keep]
    if len(own) == 0:
        return True
    nowners = len(acc.owners)
    for o, t in enumerate(np.bincount(own, weights=dur, minlength=nowners).tolist()):
        acc.total[o] += round(t)
    xla = np.asarray(acc.xla, dtype=bool)
    new = np.empty(len(own), dtype=bool)
    new[0] = True
    np.not_equal(own[1:], own[:-1], out=new[1:])
    new[1:] |= xla[own[1:]]
    first = np.flatnonzero(new)
    if len(first) < len(own):
        run_sum, run_owner = np.add.reduceat(dur, first), own[first]
    else:  # every event a run of its own (XLA ops only)
        run_sum, run_owner = dur, own
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
    # A span: events of one owner each starting where the one before it ended.
    span = np.empty(len(own), dtype=bool)
    span[0] = True
    span[1:] = (own[1:] != own[:-1]) | (start[1:] > end[:-1])
    heads = np.flatnonzero(span)
    spans = np.ones((len(heads), 4), dtype=np.int64)
    spans[:, 0] = start[heads]
    spans[:, 1] = end[np.r_[heads[1:], len(own)] - 1]
    spans[:, 2] = own[heads]
    acc.span_arrays.append(spans)
    return True


def _snapshot(acc: Accumulator) -> tuple[Any, ...]:
    return (
        (len(acc.spans), len(acc.span_arrays)),
        list(acc.total),
        list(acc.current),
        list(acc.runs),
        list(acc.run_min),
        list(acc.run_max),
        list(acc.count_of),
        [list(e) for e in acc.extra],
        [set(p) for p in acc.program_runs],
        list(acc.runless),
    )


def _restore(acc: Accumulator, state: tuple[Any, ...]) -> None:
    n = len(state[1])
    del acc.spans[state[0][0] :]
    del acc.span_arrays[state[0][1] :]
    for name, saved in zip(
        ("total", "current", "runs", "run_min", "run_max"), state[1:6], strict=True
    ):
        getattr(acc, name)[:n] = saved
    for sl in range(len(acc.count_of)):
        acc.count_of[sl] = state[6][sl] if sl < len(state[6]) else 0
    acc.extra[: len(state[7])] = state[7]
    acc.program_runs[: len(state[8])] = state[8]
    acc.runless[: len(state[9])] = state[9]
    for o in range(n, len(acc.owners)):  # owners first seen on this line start empty
        acc.total[o] = acc.current[o] = acc.runs[o] = 0
        acc.run_min[o], acc.run_max[o] = _BIG, -1
        acc.extra[o] = [0, 0.0, 0.0, None, True]
        acc.program_runs[o] = set()
        acc.runless[o] = False
