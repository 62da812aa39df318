"""Deciding a sweep's winner so that noise cannot flip it.

The leaders (configs near the best) are re-timed interleaved until their medians'
confidence intervals separate (:func:`unresolved` says which still overlap); configs that
stay inseparable are a tie, won by the earliest of them in the space, so repeated sweeps
store the same config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._errors import TuningFailedError
from .result import Failure, Measurement
from .search import Searched
from .space import config_id
from .timing import Timing, TimingOptions

__all__ = ["SweepOutcome", "finish", "leaders", "unresolved"]

Config = dict[str, Any]
Result = Measurement | Failure


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SweepOutcome:
    """Every measured config's measurement or failure (space order), the winner, the
    default, what the search did, and whether the winner tied with faster-looking configs."""

    measurements: tuple[Result, ...]
    best: Measurement
    default: Result
    searched: Searched | None = None
    tie: bool = False


def unresolved(timings: Mapping[str, Timing], tie_within: float = 0.0) -> list[str]:
    """The fastest config and every config whose confidence interval overlaps its own,
    unless their medians are within ``tie_within`` (a tie whatever more samples say)."""
    best = min(timings, key=lambda cid: timings[cid].median_us)
    low, high = timings[best].interval
    close = [
        cid
        for cid, t in timings.items()
        if cid != best
        and t.interval[0] <= high
        and low <= t.interval[1]
        and t.median_us > timings[best].median_us * (1 + tie_within)
    ]
    return [best, *close] if close else []


def leaders(
    results: Mapping[str, Result], options: TimingOptions, space: Sequence[Config] = ()
) -> list[Config]:
    """The configs within ``leader_window`` of the best or whose confidence interval
    overlaps the best one's (at most ``leaders`` of them, fastest first, the earliest of
    them in ``space`` always included so that a tie can go to it), or nothing when fewer
    than two qualify."""
    live = [m for m in results.values() if isinstance(m, Measurement) and not m.dropped]
    if len(live) < 2:
        return []
    best = min(live, key=lambda m: m.median_us)
    near = sorted(
        (
            m
            for m in live
            if m.median_us <= best.median_us * options.leader_window or m.overlaps(best)
        ),
        key=lambda m: m.median_us,
    )
    front = near[: options.leaders]
    rank = {config_id(c): i for i, c in enumerate(space)}
    in_space = [m for m in near if config_id(m.config) in rank]
    if in_space:
        earliest = min(in_space, key=lambda m: rank[config_id(m.config)])
        if earliest not in front:
            front = [*front[: max(1, options.leaders - 1)], earliest]
    return [dict(m.config) for m in front] if len(front) >= 2 else []


def finish(
    plan: Any,
    results: Mapping[str, Result],
    searched: Searched | None = None,
    retimed: Collection[str] = (),
) -> SweepOutcome:
    """The outcome from every measured config's result (``plan`` is the ``SweepPlan``).

    When leaders were ``retimed``, the winner is one of them. It is the fastest median,
    unless other leaders cannot be told apart from it (their medians' confidence intervals
    overlap, or the medians are within the options' ``tie_within``): a tie, won by the earliest of them in the space, so repeated
    sweeps store the same config.

    Raises:
        TuningFailedError: no config of the space produced a usable measurement.
    """
    measured = [results[config_id(c)] for c in plan.configs if config_id(c) in results]
    timed = [m for m in measured if isinstance(m, Measurement)]
    # Dropped configs compete only when all were dropped (by a default outside the space).
    ok = [m for m in timed if not m.dropped] or timed
    if not ok:
        raise TuningFailedError(
            f"every config of {plan.kernel} failed for {plan.key}:\n"
            + "\n".join(
                f"  {config_id(m.config)}: {m.stage}: {m.reason}"
                if isinstance(m, Failure)
                else f"  {config_id(m.config)}: dropped"
                for m in measured
            ),
            failures=measured,
        )
    # Re-timed leaders were the front runners, now timed side by side: the winner is one
    # of them (a config timed once, at another moment, is not comparable with them).
    leaders_ = [m for m in ok if config_id(m.config) in retimed]
    fastest = min(leaders_ or ok, key=lambda m: m.median_us)
    within = fastest.median_us * (1 + plan.options.tie_within)
    tied = [m for m in leaders_ if m.overlaps(fastest) or m.median_us <= within] or [fastest]
    return SweepOutcome(
        measurements=tuple(measured),
        best=tied[0],
        default=results[config_id(plan.default)],
        searched=searched,
        tie=len(tied) > 1,
    )
