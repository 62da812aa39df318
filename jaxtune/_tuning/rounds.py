"""Interleaved rounds: the configs that may win are timed side by side, one turn each per
round in a rotated order, until the paired test (:func:`~.decide.paired_verdict`) says
no further round could change the winner.

A burst of machine noise during one config's turn then cannot decide the winner: the
winner is decided from each round's times (``rounds_us`` of each measurement).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .decide import in_space_order, paired_verdict
from .result import Failure, Measurement
from .space import config_id
from .timing import Timing, TimingOptions

__all__ = ["interleaved", "measurement"]

Config = dict[str, Any]
Result = Measurement | Failure


def interleaved(
    configs: Sequence[Config],
    *,
    timed: Callable[[Config], Timing | Failure],
    compile_s: Mapping[str, float],
    space: Sequence[Config],
    options: TimingOptions,
) -> dict[str, Result]:
    """Times ``configs`` (``timed(config)``: one round's samples of a compiled config, or
    its failure) in interleaved rounds: at least ``rounds``, then more until the winner is
    settled or ``max_rounds`` is reached (``lean_rounds`` while a challenger leans faster). A config that can no longer change the winner
    leaves the rounds early; one that fails in a round (an exception, a step over the time
    limit) is a failure. ``space`` orders the configs for the tie rule."""
    by_id = {config_id(c): c for c in configs}
    order = in_space_order(list(by_id), space)
    fresh = {cid: Timing(samples_us=()) for cid in by_id}
    rounds: dict[str, list[float]] = {cid: [] for cid in by_id}
    failed: dict[str, Failure] = {}
    active = list(by_id)
    for done in range(1, max(options.rounds, options.max_rounds, options.lean_rounds) + 1):
        if not active:
            break
        turn = (done - 1) % len(active)
        for cid in active[turn:] + active[:turn]:
            got = timed(by_id[cid])
            if isinstance(got, Failure):
                failed[cid] = got
                continue
            fresh[cid] = fresh[cid] + got
            rounds[cid].append(got.min_us)  # noise slows calls, never speeds them
        active = [cid for cid in active if cid not in failed]
        if done >= options.rounds and len(active) > 1:
            verdict = paired_verdict(
                {cid: rounds[cid] for cid in active},
                [cid for cid in order if cid in active],
                alpha=options.alpha,
                tie_within=options.tie_within,
                max_rounds=options.max_rounds,
                lean_rounds=options.lean_rounds,
            )
            if verdict.settled:
                break
            # Only the holder and the leaders that could still unseat it go on.
            keep = {verdict.winner, *verdict.undecided}
            active = [cid for cid in active if cid in keep]
        if len(active) < 2:
            break
    return {
        cid: failed.get(cid)
        or measurement(by_id[cid], fresh[cid], compile_s.get(cid, 0.0), tuple(rounds[cid]))
        for cid in by_id
    }


def measurement(
    config: Mapping[str, Any],
    timing: Timing,
    compile_s: float,
    rounds_us: tuple[float, ...] = (),
) -> Measurement:
    """A :class:`Measurement` from a timing (and, for configs timed in rounds, their
    per-round times)."""
    return Measurement(
        rounds_us=rounds_us,
        config=dict(config),
        median_us=timing.median_us,
        min_us=timing.min_us,
        spread=timing.spread,
        samples=len(timing.samples_us),
        compile_s=compile_s,
        dropped=timing.dropped,
        low_us=timing.interval[0],
        high_us=timing.interval[1],
    )
