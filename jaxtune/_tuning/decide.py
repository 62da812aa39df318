"""Deciding a sweep's winner so that noise cannot flip it.

The leaders (configs near the best) are re-timed in interleaved rounds, every leader once
a round. Two leaders are compared round by round (a paired test: noise that slows the
whole machine for a moment slows both), with Wilcoxon's signed-rank test on the per-round
time ratios: a config displaces the earliest leader only when it is faster in a way the
rounds make significant and by more than ``tie_within``. Leaders that stay inseparable
from the winner are a tie, won by the earliest of them in the space, so repeated sweeps
store the same config. :func:`paired_verdict` also says when more rounds could no longer
change the outcome (no challenger could still become significantly faster, or each is
already shown, at level :data:`SETTLE_ALPHA`, not to be faster by more than
``tie_within``), so the re-timing stops as soon as it is settled.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._errors import TuningFailedError
from .result import Failure, Measurement
from .search import Searched
from .space import config_id
from .timing import Timing, TimingOptions

__all__ = ["SweepOutcome", "Verdict", "finish", "leaders", "paired_verdict", "unresolved"]

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


@functools.cache
def _signed_rank_tail(n: int) -> tuple[float, ...]:
    """``P(W >= w)`` for ``w = 0 .. n(n+1)/2``, where ``W`` is the signed-rank statistic of
    ``n`` differences whose signs are fair coins (the exact null distribution)."""
    top = n * (n + 1) // 2
    counts = [1] + [0] * top
    for rank in range(1, n + 1):
        for w in range(top, rank - 1, -1):
            counts[w] += counts[w - rank]
    tail, acc = [0.0] * (top + 1), 0
    for w in range(top, -1, -1):
        acc += counts[w]
        tail[w] = acc / 2**n
    return tuple(tail)


def _ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties sharing their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _faster_p(logs: Sequence[float]) -> float:
    """One-sided p-value that the paired log-ratios ``logs`` (challenger over incumbent)
    lean negative, i.e. that the challenger is faster (1.0 with no usable round)."""
    nonzero = [d for d in logs if d != 0.0]
    if not nonzero:
        return 1.0
    ranks = _ranks([abs(d) for d in nonzero])
    w = sum(r for r, d in zip(ranks, nonzero, strict=True) if d < 0)
    return _signed_rank_tail(len(nonzero))[math.floor(w + 1e-9)]


def _could_become_faster(logs: Sequence[float], alpha: float, max_rounds: int) -> bool:
    """Whether rounds still to come could make the challenger significantly faster: the
    best case for it, every new round faster and larger than all before."""
    nonzero = [d for d in logs if d != 0.0]
    ranks = _ranks([abs(d) for d in nonzero])
    w = sum(r for r, d in zip(ranks, nonzero, strict=True) if d < 0)
    n = len(nonzero)
    for more in range(0, max_rounds - len(logs) + 1):
        total = n + more
        best = w + sum(range(n + 1, total + 1))
        if total and _signed_rank_tail(total)[math.floor(best + 1e-9)] <= alpha:
            return True
    return False


#: Level of the test that ends the rounds early for a challenger that is, with this
#: confidence, not faster than the winner by more than ``tie_within`` (it could not win).
SETTLE_ALPHA = 0.05


def _open_question(logs: Sequence[float], alpha: float, tie_within: float, max_rounds: int) -> bool:
    """Whether more rounds could still show the challenger (per-round log-ratios ``logs``)
    faster by more than ``tie_within``: it could still become significantly faster, and
    the rounds so far do not already show, at level :data:`SETTLE_ALPHA`, that its time is
    above ``1 / (1 + tie_within)`` of the other's."""
    if not _could_become_faster(logs, alpha, max_rounds):
        return False
    margin = math.log1p(tie_within)
    return _faster_p([-(d + margin) for d in logs]) > SETTLE_ALPHA


#: Level at which a challenger *leans* faster: with p at most this, and faster by more than
#: ``tie_within`` in the median round, its question stays open up to ``lean_rounds``.
LEAN_ALPHA = 0.05


def _leans(logs: Sequence[float], tie_within: float) -> bool:
    """Whether the rounds lean towards the challenger being faster by more than
    ``tie_within`` without showing it at the test's own level yet."""
    if not logs or _faster_p(logs) > LEAN_ALPHA:
        return False
    return math.exp(statistics.median(logs)) * (1 + tie_within) < 1


def _log_ratios(challenger: Sequence[float], incumbent: Sequence[float]) -> list[float]:
    """Per-round log time ratios over the rounds both ran (leaders drop out, never join)."""
    return [math.log(a / b) for a, b in zip(challenger, incumbent, strict=False) if a > 0 < b]


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of paired re-timing: the ``winner``, the leaders ``tied`` with it (the
    winner included, space order), those significantly ``slower`` than it, whether
    further rounds could change the winner (``settled``) and, if so, through which
    leaders (``undecided``)."""

    winner: str
    tied: tuple[str, ...]
    slower: tuple[str, ...]
    settled: bool
    #: The leaders whose rounds to come could still change the winner (the winner and
    #: these are all that need more rounds).
    undecided: tuple[str, ...] = ()


def paired_verdict(
    rounds: Mapping[str, Sequence[float]],
    order: Sequence[str],
    *,
    alpha: float,
    tie_within: float,
    max_rounds: int,
    lean_rounds: int | None = None,
) -> Verdict:
    """Decides between leaders from their per-round times (``rounds[cid][i]``: round
    ``i``); ``order`` lists them earliest in the space first.

    The earliest leader holds the lead until another beats it: faster with one-sided
    signed-rank p <= ``alpha`` over the rounds both ran, and by more than ``tie_within``
    in the median round. Leaders neither faster nor slower than the holder in that sense
    are tied with it; the earliest of the tied wins. Rounds could change the outcome up to
    ``max_rounds``, or up to ``lean_rounds`` (default: ``max_rounds``) for a pair whose
    rounds lean one way (p <= :data:`LEAN_ALPHA` and faster by more than ``tie_within``
    in the median round): a config faster in 8 of 9 noisy rounds gets the rounds it needs.
    """
    lean_cap = max(max_rounds, lean_rounds or 0)

    def open_question(logs: list[float]) -> bool:
        cap = lean_cap if _leans(logs, tie_within) else max_rounds
        return _open_question(logs, alpha, tie_within, cap)

    def beats(a: str, b: str) -> bool:
        logs = _log_ratios(rounds[a], rounds[b])
        if not logs or _faster_p(logs) > alpha:
            return False
        return math.exp(statistics.median(logs)) * (1 + tie_within) < 1

    holder = order[0]
    for _ in order:
        challengers = [c for c in order if c != holder and beats(c, holder)]
        if not challengers:
            break
        holder = min(
            challengers, key=lambda c: statistics.median(_log_ratios(rounds[c], rounds[holder]))
        )
    others = [c for c in order if c != holder]
    slower = tuple(c for c in others if beats(holder, c))
    open_ = [c for c in others if c not in slower]
    tied = tuple(c for c in order if c == holder or c in open_)

    def undecided(c: str) -> bool:
        # Rounds to come matter only where they could change the winner: ``c`` could
        # still beat the holder, or ``c`` wins the tie now and could still lose to it.
        there = _log_ratios(rounds[c], rounds[holder])
        if open_question(there):
            return True
        earlier = order.index(c) < order.index(holder)
        return earlier and open_question([-d for d in there])

    still = tuple(c for c in open_ if undecided(c))
    return Verdict(winner=tied[0], tied=tied, slower=slower, settled=not still, undecided=still)


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
    """The configs whose fastest sample is within ``leader_window`` of the best one's, or
    whose confidence interval overlaps the best one's (at most ``leaders`` of them, fastest
    first), with the earliest config of ``space`` within ``tie_window`` of the best always
    included so that a tie can go to it; nothing when fewer than two qualify."""
    live = [m for m in results.values() if isinstance(m, Measurement) and not m.dropped]
    if len(live) < 2:
        return []
    # The first pass is short: a config's fastest sample ranks it better than its median
    # when noise only ever slows calls down (another process, a slow mode of the machine).
    best = min(live, key=lambda m: m.min_us)
    near = sorted(
        (m for m in live if m.min_us <= best.min_us * options.leader_window or m.overlaps(best)),
        key=lambda m: m.min_us,
    )
    front = near[: options.leaders]
    rank = {config_id(c): i for i, c in enumerate(space)}
    # The earliest config competes whenever it is plausibly as fast (a tie goes to it, and
    # one noisy first pass must not keep it out): within ``tie_window`` of the best.
    plausible = best.min_us * options.tie_window
    in_space = [m for m in live if config_id(m.config) in rank and m.min_us <= plausible]
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
    if len(leaders_) > 1 and all(m.rounds_us for m in leaders_):
        tied = _paired_tie(plan, leaders_)
    else:
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


def _paired_tie(plan: Any, leaders_: Sequence[Measurement]) -> list[Measurement]:
    """The winner and the leaders tied with it, winner first, from the paired rounds."""
    by_id = {config_id(m.config): m for m in leaders_}
    options = plan.options
    verdict = paired_verdict(
        {cid: m.rounds_us for cid, m in by_id.items()},
        in_space_order(by_id, plan.configs),
        alpha=options.alpha,
        tie_within=options.tie_within,
        max_rounds=options.max_rounds,
        lean_rounds=options.lean_rounds,
    )
    return [by_id[cid] for cid in verdict.tied]


def in_space_order(cids: Collection[str], space: Sequence[Config]) -> list[str]:
    """``cids`` ordered as their configs come in ``space`` (others last, as given)."""
    rank = {config_id(c): i for i, c in enumerate(space)}
    return sorted(cids, key=lambda cid: rank.get(cid, len(rank)))
