"""Deciding a sweep's winner so that noise cannot flip it.

The leaders (configs near the best) are re-timed interleaved until their medians'
confidence intervals separate (:func:`unresolved` says which still overlap); configs that
stay inseparable are a tie, won by the earliest of them in the space, so repeated sweeps
store the same config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
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


def unresolved(timings: Mapping[str, Timing]) -> list[str]:
    """The fastest config and every config whose confidence interval overlaps its own."""
    best = min(timings, key=lambda cid: timings[cid].median_us)
    low, high = timings[best].interval
    close = [
        cid
        for cid, t in timings.items()
        if cid != best and t.interval[0] <= high and low <= t.interval[1]
    ]
    return [best, *close] if close else []


def leaders(results: Mapping[str, Result], options: TimingOptions) -> list[Config]:
    """The configs within ``leader_window`` of the best or whose confidence interval
    overlaps the best one's (at most ``leaders`` of them, fastest first), or nothing when
    fewer than two qualify."""
    live = [m for m in results.values() if isinstance(m, Measurement) and not m.dropped]
    if len(live) < 2:
        return []
    best = min(live, key=lambda m: m.median_us)
    front = sorted(
        (
            m
            for m in live
            if m.median_us <= best.median_us * options.leader_window or m.overlaps(best)
        ),
        key=lambda m: m.median_us,
    )[: options.leaders]
    return [dict(m.config) for m in front] if len(front) >= 2 else []


def finish(
    plan: Any, results: Mapping[str, Result], searched: Searched | None = None
) -> SweepOutcome:
    """The outcome from every measured config's result. The winner is the fastest median,
    unless its confidence interval overlaps others' (a tie): then the earliest of the tied
    configs in the space wins, so repeated sweeps store the same config.

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
    fastest = min(ok, key=lambda m: m.median_us)
    tied = [m for m in ok if m is fastest or m.overlaps(fastest)]
    return SweepOutcome(
        measurements=tuple(measured),
        best=tied[0],
        default=results[config_id(plan.default)],
        searched=searched,
        tie=len(tied) > 1,
    )
