"""Inside a TPU kernel: the lines ``--xla_xprof_enable_custom_call_tracing=true`` adds to
a ``/device:TPU:N`` plane, per kernel.

XProf's names: ``Pallas Primitives``, ``LLO Ops`` and ``Source Lines`` hold regions inside
a kernel; per-unit lanes ``LLO Instructions``, ``SALU Instructions``, ``VALU
Instructions``, ``EUP Instructions``, ``XLU Instructions``, ``VLD Instructions``, ``VST
Instructions``, ``MXU0 Instructions``, ... (any ``* Instructions`` line) hold what each unit
ran. Their events carry stats such as ``pallas_primitive``, ``source_info``,
``bundle_number``. Kernel-level events stay on ``XLA Ops``: the kernel rows never count
these lines (:mod:`.events` reads ``XLA Ops`` alone).

What is measured and what is estimated: only trace points are measured. An ``LLO Ops``
event with a duration is a measured region; events without one (instants between two trace
points) share the gap between the measured regions around them evenly, as XProf spreads
them, and are marked estimates. So a kernel call's spans cover it exactly: their durations
add up to the kernel's. An instruction event that carries ``cycles`` but no duration lasts
``cycles / tensor_core_freq_hz`` (the frequency the plane records; never a built-in one).

An intra-kernel event outside every kernel event means the kernel's Begin/End events were
lost (an overflowing custom-call trace drops them first): :mod:`.drops` says so.

Times are picoseconds from the ``XLA Ops`` line's start: a real line's ``timestamp_ns``
counts from the UNIX epoch (~1.7e18 ns, ~1.7e21 ps: past int64), so no absolute time is
formed. A line's distance from ``XLA Ops`` is a Python int; an event whose time from it is
past int64 lies outside every kernel event.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._core import typed
from .._core.xspace import xplane as _xplane
from .._program.markers import Owner

__all__ = [
    "INTRA_LINES",
    "UNIT_LINE",
    "IntraKernel",
    "IntraSpan",
    "has_intra_lines",
    "intra_kernel",
]

#: Region lines inside a kernel.
INTRA_LINES = ("Pallas Primitives", "LLO Ops", "Source Lines")
#: A per-unit lane.
UNIT_LINE = re.compile(r"^.+ Instructions$")
#: Rows kept per kernel in the top lists.
TOP = 10
#: Spans kept of a kernel's first call.
MAX_SPANS = 500

_LO, _HI = -(1 << 63), (1 << 63) - 1


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IntraSpan:
    """One stretch of a kernel call (µs from the call's start); ``estimate`` when it lies
    between trace points and was spread evenly, as XProf does."""

    name: str
    start_us: float
    duration_us: float
    estimate: bool


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IntraKernel:
    """What custom-call tracing shows inside one kernel over the trace: its calls and
    device time (from ``XLA Ops``), time by unit (each ``* Instructions`` lane's events),
    the top Pallas primitives and source lines by time, and the spans of its first call
    (``spans`` from ``LLO Ops``; ``unit_spans`` each unit lane's events, an event timed
    from its ``cycles`` marked an estimate)."""

    name: str
    kernel_id: str | None
    calls: int
    total_us: float
    units: Mapping[str, float]
    primitives: tuple[tuple[str, float], ...]
    sources: tuple[tuple[str, float], ...]
    spans: tuple[IntraSpan, ...]
    unit_spans: Mapping[str, tuple[IntraSpan, ...]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """What ``report.json`` keeps of it (:mod:`jaxtune._core.typed`)."""
        out: dict[str, Any] = typed.encode(self)
        return out

    def summary(self) -> list[str]:
        """A few text lines: time by unit, top primitives and source lines."""
        label = f"{self.kernel_id}:{self.name}" if self.kernel_id else self.name
        lines = [f"inside {label} ({self.calls} calls, {self.total_us:.1f} us):"]
        if self.units:
            shown = ", ".join(f"{u} {t:.1f} us" for u, t in self.units.items())
            lines.append(f"  by unit: {shown}")
        for title, rows in (("primitives", self.primitives), ("source lines", self.sources)):
            if rows:
                lines.append(f"  top {title}: " + ", ".join(f"{n} {t:.1f} us" for n, t in rows))
        estimated = sum(s.duration_us for s in self.spans if s.estimate)
        if self.spans:
            lines.append(
                f"  first call: {len(self.spans)} spans, {estimated:.2f} us of them estimated "
                "(between trace points, spread evenly)"
            )
        return lines


@dataclasses.dataclass(slots=True)
class _Event:
    start: int
    end: int
    name: str
    estimate: bool = False


def _cycles_ps(cycles: Any, freq: Any) -> int | None:
    """``cycles / freq`` in ps, or ``None`` when either is not a finite positive number."""
    if isinstance(cycles, bool) or not isinstance(cycles, (int, float)):
        return None
    if isinstance(freq, bool) or not isinstance(freq, (int, float)) or not freq > 0:
        return None
    ps = cycles / freq * 1e12
    return round(ps) if math.isfinite(ps) and ps >= 0 else None


def _named_events(
    plane: _xplane.Plane, line: _xplane.LineHead, key: str, shift: int
) -> list[_Event]:
    """A region line's events (ps from ``XLA Ops``: ``shift`` is the line's distance from
    it), named by their ``key`` stat (or their metadata's name); an event with ``cycles``
    but no duration lasts cycles / the plane's TensorCore frequency."""
    freq = plane.stats.get("tensor_core_freq_hz")
    out = []
    for ev in plane.events(line):
        stats = _xplane.stats_of(ev.stats, plane.stat_names) if len(ev.stats) else {}
        meta = plane.metadata(ev.metadata_id)
        name = stats.get(key) or meta.stats.get(key) or meta.display_name or meta.name
        duration = max(ev.duration_ps, 0)
        modelled = False
        if not duration:
            from_cycles = _cycles_ps(stats.get("cycles"), freq)
            if from_cycles is not None:
                duration, modelled = from_cycles, True  # from cycles, not a trace point
        start = shift + ev.offset_ps
        out.append(_Event(start=start, end=start + duration, name=str(name), estimate=modelled))
    out.sort(key=lambda e: e.start)
    return out


@dataclasses.dataclass(slots=True)
class _Kernel:
    calls: int = 0
    total_ps: int = 0
    units: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    primitives: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    sources: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    first: tuple[int, int] | None = None
    first_regions: list[_Event] = dataclasses.field(default_factory=list)
    first_units: dict[str, list[_Event]] = dataclasses.field(default_factory=dict)


def spans_of(start: int, end: int, regions: list[_Event]) -> list[IntraSpan]:
    """The spans of one kernel call ``[start, end)`` (ps) from its ``LLO Ops`` events:
    each measured region as it is; the instants between two measured regions (or the
    call's edges) share that gap evenly (estimates); a gap with none is one estimated
    ``(between trace points)`` span. The spans' durations add up to the call's."""
    inside = sorted((r for r in regions if start <= r.start < end), key=lambda r: r.start)
    spans: list[IntraSpan] = []
    at = start
    pending: list[_Event] = []

    def fill(until: int) -> None:
        nonlocal at
        gap = max(until - at, 0)
        if gap and not pending:
            spans.append(_span("(between trace points)", at, gap, start, estimate=True))
        elif pending:
            share = gap / len(pending)
            for i, r in enumerate(pending):
                spans.append(_span(r.name, at + i * share, share, start, estimate=True))
        pending.clear()
        at = max(at, until)

    for r in inside:
        if r.end > r.start:
            fill(r.start)
            measured_end = min(r.end, end)
            spans.append(_span(r.name, at, measured_end - at, start, estimate=False))
            at = measured_end
        else:
            pending.append(r)
    fill(end)
    return spans[:MAX_SPANS]


def _span(name: str, at: float, duration: float, origin: int, *, estimate: bool) -> IntraSpan:
    return IntraSpan(
        name=name,
        start_us=(at - origin) * 1e-6,
        duration_us=duration * 1e-6,
        estimate=estimate,
    )


def has_intra_lines(plane: _xplane.Plane) -> bool:
    """Whether the plane holds custom-call tracing lines."""
    return any(ln.name in INTRA_LINES or UNIT_LINE.match(ln.name) for ln in plane.lines)


@dataclasses.dataclass(slots=True)
class _Calls:
    """The ``XLA Ops`` events by start (starts and ends, ps from the line's start, int64),
    each one's kernel (an index into ``owners``, -1 for plain XLA ops), and the kernels in
    the order of their first call."""

    start: Any
    end: Any
    kernel: Any
    owners: list[Owner]
    kernels: list[_Kernel]


def _calls(
    plane: _xplane.Plane, ops_line: _xplane.LineHead, owner_of: Callable[[int], Owner | None]
) -> _Calls:
    """Each kernel's calls, device time and first call, from the ``XLA Ops`` columns."""
    cols = plane.columns(ops_line)
    start, dur, mid = cols[:, 0], np.maximum(cols[:, 1], 0), cols[:, 2]
    order = np.argsort(start, kind="stable")
    start, dur, mid = start[order], dur[order], mid[order]
    # An end past int64 (a damaged duration) is clipped there, never wrapped around.
    end = start + np.minimum(dur, _HI - np.maximum(start, 0))
    kinds, inverse = np.unique(mid, return_inverse=True)
    inverse = inverse.reshape(-1)
    owner_by_kind = [owner_of(int(m)) for m in kinds.tolist()]
    is_kind_kernel = np.array(
        [o is not None and o.kind != "xla" for o in owner_by_kind], dtype=bool
    ).reshape(-1)
    is_kernel = is_kind_kernel[inverse] if len(kinds) else np.zeros(0, dtype=bool)
    # Kernels numbered in the order of their first call (kinds of one owner share it).
    calls_at = np.flatnonzero(is_kernel)
    kind_at = inverse[calls_at]
    _, first = np.unique(kind_at, return_index=True)
    owner_ids: dict[Owner, int] = {}
    kind_kernel = np.full(len(kinds), -1, dtype=np.int64)
    for pos in np.sort(first).tolist():
        kind = int(kind_at[pos])
        owner = owner_by_kind[kind]
        if owner is not None:  # always: only a kernel's kinds are called
            kind_kernel[kind] = owner_ids.setdefault(owner, len(owner_ids))
    kernel = np.where(is_kernel, kind_kernel[inverse], -1) if len(kinds) else inverse
    owners = list(owner_ids)
    kernels = [_Kernel() for _ in owners]
    inside = kernel >= 0
    if inside.any():
        counts = np.bincount(kernel[inside], minlength=len(owners))
        totals = np.zeros(len(owners), dtype=np.int64)
        np.add.at(totals, kernel[inside], dur[inside])
        _, first_call = np.unique(kernel[inside], return_index=True)
        calls_at = np.flatnonzero(inside)[first_call]
        for n, k in enumerate(kernels):
            k.calls, k.total_ps = int(counts[n]), int(totals[n])
            k.first = (int(start[calls_at[n]]), int(end[calls_at[n]]))
    return _Calls(start=start, end=end, kernel=kernel, owners=owners, kernels=kernels)


def _line_events(
    plane: _xplane.Plane, line: _xplane.LineHead, key: str, shift: int
) -> tuple[Any, Any, list[str], Any] | None:
    """An intra-kernel line's events sorted by start: starts and ends (ps from ``XLA Ops``,
    int64), names, and which durations were modelled from ``cycles`` (estimates). An event
    is named by its ``key`` stat (or its metadata's); an event with ``cycles`` but no
    duration lasts cycles / the plane's TensorCore frequency. ``None`` when the starts do
    not fit int64 (then :func:`_named_events` reads the line in Python ints)."""
    cols = plane.columns(line)
    offset, duration, mid = cols[:, 0], np.maximum(cols[:, 1], 0), cols[:, 2]
    bound = 1 << 62
    if not -bound <= shift <= bound or (len(offset) and np.abs(offset).max() > bound):
        return None
    start = offset + shift
    modelled = np.zeros(len(start), dtype=bool)
    kinds, inverse = np.unique(mid, return_inverse=True)
    inverse = inverse.reshape(-1)
    metas = [plane.metadata(int(m)) for m in kinds.tolist()]
    kind_names = [str(m.stats.get(key) or m.display_name or m.name) for m in metas]
    names: list[str] | None = None
    zero = np.flatnonzero(duration == 0)
    if key or len(zero):
        # Per-event stats: a name in the key stat, or the cycles of an event without a
        # duration. Only those events are looked at one by one.
        events = plane.events(line)
        freq = plane.stats.get("tensor_core_freq_hz")
        if key:
            names = [kind_names[i] for i in inverse.tolist()]
            for i, ev in enumerate(events):
                if len(ev.stats):
                    own = _xplane.stats_of(ev.stats, plane.stat_names).get(key)
                    if own:
                        names[i] = str(own)
        for i in zero.tolist():
            ev = events[i]
            if len(ev.stats):
                cycles = _xplane.stats_of(ev.stats, plane.stat_names).get("cycles")
                from_cycles = _cycles_ps(cycles, freq)
                if from_cycles is not None:
                    duration[i], modelled[i] = from_cycles, True
    order = np.argsort(start, kind="stable")
    start, duration, modelled = start[order], duration[order], modelled[order]
    end = start + np.minimum(duration, _HI - np.maximum(start, 0))
    if names is None:
        table = np.array([*kind_names, ""], dtype=object)
        ordered = table[inverse[order]].tolist() if len(kinds) else []
    else:
        ordered = [names[i] for i in order.tolist()]
    return start, end, ordered, modelled


def _read_line(
    calls: _Calls, plane: _xplane.Plane, line: _xplane.LineHead, key: str, shift: int
) -> int:
    """Adds one intra-kernel line's events to their kernels; returns how many lie outside
    every ``XLA Ops`` event."""
    read = _line_events(plane, line, key, shift)
    if read is None:  # starts past int64: event by event, in Python ints
        events = _named_events(plane, line, key, shift)
        orphans = 0
        for ev, i in zip(events, _around(calls.start, calls.end, events), strict=True):
            if i < 0:
                orphans += 1
            elif calls.kernel[i] >= 0:
                _add(calls.kernels[int(calls.kernel[i])], line.name, ev)
        return orphans
    start, end, names, modelled = read
    if not len(start):
        return 0
    index = np.searchsorted(calls.start, start, side="right") - 1
    around_end = calls.end[np.maximum(index, 0)] if len(calls.start) else np.full_like(start, _LO)
    inside = (index >= 0) & (start < around_end)
    orphans = int((~inside).sum())
    kernel = np.where(inside, calls.kernel[np.maximum(index, 0)] if len(calls.start) else -1, -1)
    ours = np.flatnonzero(kernel >= 0)
    if not len(ours):
        return orphans
    length = end - start
    which = kernel[ours]
    unit = bool(UNIT_LINE.match(line.name))
    if unit or line.name in ("Pallas Primitives", "Source Lines"):
        if unit:
            totals = np.zeros(len(calls.kernels), dtype=np.int64)
            np.add.at(totals, which, length[ours])
            for n in np.flatnonzero(totals).tolist():
                calls.kernels[n].units[line.name] += int(totals[n])
        else:
            table, codes = np.unique(np.array(names, dtype=object)[ours], return_inverse=True)
            pair = which * len(table) + codes.reshape(-1)
            sums = np.zeros(len(calls.kernels) * len(table), dtype=np.int64)
            np.add.at(sums, pair, length[ours])
            for flat in np.flatnonzero(sums).tolist():
                n, name = divmod(flat, len(table))
                counter = (
                    calls.kernels[n].primitives
                    if line.name == "Pallas Primitives"
                    else calls.kernels[n].sources
                )
                counter[str(table[name])] += int(sums[flat])
            return orphans
    # Spans of each kernel's first call: that call's events on region and unit lines.
    first_start = np.array([k.first[0] if k.first else _HI for k in calls.kernels], np.int64)
    first_end = np.array([k.first[1] if k.first else _LO for k in calls.kernels], np.int64)
    in_first = ours[(start[ours] >= first_start[which]) & (start[ours] < first_end[which])]
    for i in in_first.tolist():
        k = calls.kernels[int(kernel[i])]
        ev = _Event(start=int(start[i]), end=int(end[i]), name=names[i], estimate=bool(modelled[i]))
        if unit:
            kept = k.first_units.setdefault(line.name, [])
            if len(kept) < MAX_SPANS:
                kept.append(ev)
        else:
            k.first_regions.append(ev)
    return orphans


def _around(start: Any, end: Any, events: list[_Event]) -> list[int]:
    """For each event, the index of the ``XLA Ops`` event around its start (``start`` and
    ``end`` sorted by start), or -1 when none is."""
    at = np.array([min(max(e.start, _LO), _HI) for e in events], dtype=np.int64)
    index = np.searchsorted(start, at, side="right") - 1
    ends = end[np.maximum(index, 0)].tolist() if len(start) else [_LO] * len(events)
    return [
        i if i >= 0 and _LO <= e.start < around else -1
        for e, i, around in zip(events, index.tolist(), ends, strict=True)
    ]


def _add(k: _Kernel, line: str, ev: _Event) -> None:
    """An intra-kernel event of kernel ``k``, on ``line``."""
    length = ev.end - ev.start
    in_first = k.first is not None and k.first[0] <= ev.start < k.first[1]
    if UNIT_LINE.match(line):
        k.units[line] += length
        if in_first and len(k.first_units.setdefault(line, [])) < MAX_SPANS:
            k.first_units[line].append(ev)
    elif line == "Pallas Primitives":
        k.primitives[ev.name] += length
    elif line == "Source Lines":
        k.sources[ev.name] += length
    elif in_first:
        k.first_regions.append(ev)


def intra_kernel(
    plane: _xplane.Plane, owner_of: Callable[[int], Owner | None]
) -> tuple[list[IntraKernel], int]:
    """Per kernel of a TPU plane, what its custom-call tracing lines show; and how many
    intra-kernel events lie outside every kernel event (lost Begin/End). ``owner_of`` maps
    an ``XLA Ops`` metadata id to its owner (``None``: not an op). ``([], 0)`` without
    such lines. The events are read as columns (numpy), per-event stats only where an
    event's name or duration depends on them."""
    intra = [ln for ln in plane.lines if ln.name in INTRA_LINES or UNIT_LINE.match(ln.name)]
    ops_line = next((ln for ln in plane.lines if ln.name == "XLA Ops"), None)
    if not intra or ops_line is None:
        return [], 0
    calls = _calls(plane, ops_line, owner_of)
    orphans = 0
    keys = {"Pallas Primitives": "pallas_primitive", "Source Lines": "source_info"}
    for line in intra:
        # The line's distance from XLA Ops, in Python ints: epoch-scale timestamps in ps
        # do not fit int64, their differences do.
        shift = (line.timestamp_ns - ops_line.timestamp_ns) * 1000
        orphans += _read_line(calls, plane, line, keys.get(line.name, ""), shift)
    out = [_result(owner, k) for owner, k in zip(calls.owners, calls.kernels, strict=True)]
    kept = [k for k in out if k is not None]
    kept.sort(key=lambda k: -k.total_us)
    return kept, orphans


def _result(owner: Owner, k: _Kernel) -> IntraKernel | None:
    if not (k.units or k.primitives or k.sources or k.first_regions):
        return None
    spans = spans_of(*k.first, k.first_regions) if k.first and k.first_regions else []
    return IntraKernel(
        name=owner.label,
        kernel_id=owner.kernel_id,
        calls=k.calls,
        total_us=k.total_ps * 1e-6,
        units={u: t * 1e-6 for u, t in sorted(k.units.items())},
        primitives=tuple((n, t * 1e-6) for n, t in k.primitives.most_common(TOP)),
        sources=tuple((n, t * 1e-6) for n, t in k.sources.most_common(TOP)),
        spans=tuple(spans),
        unit_spans={
            unit: tuple(
                _span(e.name, e.start, e.end - e.start, k.first[0], estimate=e.estimate)
                for e in events
            )
            for unit, events in sorted(k.first_units.items())
            if k.first is not None
        },
    )
