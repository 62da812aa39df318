"""A profile's timeline: when each kernel (and XLA op) ran, as bars a chart can draw.

A *span* is a stretch of time one owner ran without a gap: consecutive top-level events of
one kernel that touch. Spans are never joined across a gap that the chart could show: a
kernel that ran in each of three steps is three bars, never one bar over the steps between
(and over the kernels that ran there). A trace of millions of events has more spans than a
chart can draw; then spans of one owner closer than :attr:`.report.Profile.timeline_joined_us` (a step of
:data:`RESOLUTION` over the whole run, doubled until at most :data:`MAX_BARS` bars remain)
are drawn as one bar, evenly over the whole run, never only its first stretch, and each bar
counts the spans it stands for, so the page says how many spans it drew of how many.

Times are picoseconds in int64 arrays relative to the first op line's timestamp (a real
trace's timestamps are since the UNIX epoch, beyond int64 in picoseconds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["MAX_BARS", "RESOLUTION", "TimelineSpan", "join", "joined", "spans_of"]

#: At most this many bars are kept for a profile's timeline.
MAX_BARS = 4000
#: The finest gap that joins spans when there are too many: the run's length over this
#: (about a pixel of a chart 2,000 pixels wide).
RESOLUTION = 2000


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TimelineSpan:
    """One bar of the timeline: one kernel (or XLA op) running, µs from the trace's first
    op, duration in µs; ``spans``: how many spans of the trace it stands for (1 unless the
    timeline was thinned: then spans of one owner closer than the profile's
    ``timeline_joined_us`` are one bar)."""

    name: str
    kind: str
    start_us: float
    duration_us: float
    spans: int = 1


def spans_of(rows: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """``(start, end, owner, count)`` rows (count 1) of ``(start, end, owner)`` tuples."""
    out = np.ones((len(rows), 4), dtype=np.int64)
    if rows:
        out[:, :3] = np.asarray(rows, dtype=np.int64)
    return out


def join(bars: np.ndarray, gap: int) -> np.ndarray:
    """``bars`` (``start, end, owner, count`` rows) with each owner's bars less than
    ``gap`` apart (touching or overlapping, for ``gap`` 0) made one, counts added; sorted
    by start."""
    if len(bars) == 0:
        return bars.reshape(0, 4)
    columns = [np.ascontiguousarray(bars[:, i]) for i in range(4)]
    if bool(np.all(columns[0][1:] >= columns[0][:-1])):  # by start already (a walk's spans)
        owners = columns[2]
        small = len(owners) and owners.min() >= 0 and owners.max() < 1 << 16
        # Few owners: a 16-bit key, which numpy's stable sort sorts by radix.
        order = np.argsort(owners.astype(np.uint16) if small else owners, kind="stable")
    else:
        order = np.lexsort((columns[0], columns[2]))
    # Contiguous columns: gathering rows of the (n, 4) array and working on its strided
    # columns costs several times more on millions of spans.
    start, end, owner, count = (c[order] for c in columns)
    reach = end.copy()
    # The furthest end so far within each owner: a later bar joins when it starts before
    # that reach plus the gap.
    for_owner = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    for lo, hi in zip(for_owner, [*for_owner[1:], len(start)], strict=True):
        reach[lo:hi] = np.maximum.accumulate(end[lo:hi])
    new = np.empty(len(start), dtype=bool)
    new[0] = True
    new[1:] = (owner[1:] != owner[:-1]) | (start[1:] > reach[:-1] + gap)
    heads = np.flatnonzero(new)
    by_start = np.argsort(start[heads], kind="stable")
    picked = heads[by_start]
    out = np.empty((len(heads), 4), dtype=np.int64)
    out[:, 0] = start[picked]
    out[:, 1] = np.maximum.reduceat(end, heads)[by_start]
    out[:, 2] = owner[picked]
    out[:, 3] = np.add.reduceat(count, heads)[by_start]
    return out


def joined(bars: np.ndarray, most: int = MAX_BARS) -> tuple[np.ndarray, int]:
    """``(bars, gap)``: spans that touch joined, then, while more than ``most`` remain,
    spans of one owner closer than ``gap`` ps (the run over :data:`RESOLUTION`, doubled
    each time) joined; ``gap`` is 0 when nothing had to be."""
    bars = join(bars, 0)
    if len(bars) <= most:
        return bars, 0
    run = int(bars[:, 1].max() - bars[:, 0].min())
    gap = max(run // RESOLUTION, 1)
    while True:
        thinner = join(bars, gap)
        if len(thinner) <= most:
            return thinner, gap
        bars, gap = thinner, gap * 2
