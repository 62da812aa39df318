"""Interleaved rounds: the configs that may win are timed side by side, one turn each per
round in a rotated order, until :func:`~.stats.decide` says no further round could change
the config to store, or the rounds' limits are reached.

A burst of machine noise during one config's turn then cannot decide the winner: the
winner is decided from each round's times (``rounds_us`` of each measurement), and each
round's time is the config's fastest call in that round. The configs the first pass left
out take part in the first rounds too (a second look, side by side with the leaders), so
that a burst during a config's short first pass does not rule it out.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._core.vocabulary import Config, Failure, Measurement, config_id
from .samples import Timing, TimingOptions
from .stats import decide, in_space_order, rounds_to_show, stay_after_second_look

__all__ = ["clearly_behind", "interleaved", "measurement"]

Result = Measurement | Failure


def interleaved(
    configs: Sequence[Config],
    *,
    timed: Callable[[list[Config]], Mapping[str, Timing | Failure]],
    compile_s: Mapping[str, float],
    space: Sequence[Config],
    options: TimingOptions,
    default: Config | None = None,
    second: Sequence[Config] = (),
    clock: Callable[[], float] = time.perf_counter,
    timed_rounds: Callable[[list[list[Config]]], Sequence[Mapping[str, Timing | Failure]]]
    | None = None,
    ahead: Callable[[], int] = lambda: 1,
    on_round: Callable[[int, list[str]], None] = lambda done, racing: None,
) -> dict[str, Result]:
    """Times ``configs`` (``timed(configs)``: one round's samples of each compiled config
    in the given order, or its failure) in interleaved rounds: at least ``rounds``, then
    more while a rival is undecided, up to ``max_rounds`` rounds or ``max_rounds_s``
    seconds. A config shown slower leaves the rounds and is marked ``dropped`` (it is out),
    and so does one clearly behind another (:func:`clearly_behind`) after
    ``behind_after_rounds``;
    one that fails in a round (an exception, a step over the time limit) is a failure.
    ``space`` orders the configs for the tie rule; ``default`` (when among ``configs``) is
    the default config.

    The configs of ``second`` (left out after the first pass) get a second look: they take
    part in the first ``second_look_rounds`` rounds, side by side with ``configs``, and
    race on only when faster there than the leaders
    (:func:`~.stats.stay_after_second_look`); the others are not in the result (their
    first pass stands) unless they failed. The look's rounds count as rounds, and their
    time as the rounds' time.

    ``timed_rounds`` (one round's samples for each list of configs) times ``ahead()``
    rounds at once (a device timer's capture holds them all), never past the look's end,
    ``behind_after_rounds`` or ``rounds``; the rounds are then judged one by one, as if
    timed one by one: what a config that left meanwhile got in the later ones is not
    looked at, nor are the rounds after a stop. ``on_round(done, racing)`` hears of each
    round timed: its number and the configs that ran in it (the failed left out)."""
    by_id = {config_id(c): c for c in configs}
    for c in second:
        by_id.setdefault(config_id(c), c)
    if not by_id:
        return {}
    leading = {config_id(c) for c in configs}
    looking = [cid for cid in by_id if cid not in leading]
    order = in_space_order(list(by_id), space)
    default_id = config_id(default) if default is not None else None
    fresh = {cid: Timing(samples_us=()) for cid in by_id}
    rounds: dict[str, list[float]] = {cid: [] for cid in by_id}
    failed: dict[str, Failure] = {}
    out: set[str] = set()
    behind: set[str] = set()  # out for being clearly behind (the rest of out: shown slower)
    left: set[str] = set()  # not faster than the leaders on their second look: not raced
    active = list(by_id)
    look = max(1, options.second_look_rounds) if looking else 0
    many = timed_rounds or (lambda rotations: [timed(r) for r in rotations])
    last = max(options.rounds, options.max_rounds)
    marks = sorted({look, options.behind_after_rounds, options.rounds, last})
    pending: list[Mapping[str, Timing | Failure]] = []
    start = clock()
    for done in range(1, last + 1):
        if not pending:
            mark = next(m for m in marks if m >= done)
            count = max(1, min(ahead(), mark - done + 1))
            rotations = []
            for k in range(count):
                turn = (done - 1 + k) % len(active)
                rotations.append([by_id[cid] for cid in active[turn:] + active[:turn]])
            pending = list(many(rotations))
        timings = pending.pop(0)
        for cid, got in timings.items():
            if cid not in active:
                continue
            if isinstance(got, Failure):
                failed[cid] = got
                continue
            fresh[cid] = fresh[cid] + got
            rounds[cid].append(got.min_us)  # noise slows calls, never speeds them
        active = [cid for cid in active if cid not in failed]
        if active:
            on_round(done, active)
        if done == look:
            stay = stay_after_second_look(
                {cid: rounds[cid] for cid in active},
                looking,
                count=options.leaders,
                tie_within=options.tie_within,
            )
            left = {cid for cid in looking if cid in active and cid not in stay}
            active = [cid for cid in active if cid not in left]
        if len(active) < 2:
            break
        if done < look:
            continue
        if done >= options.behind_after_rounds:
            behind |= clearly_behind(
                {cid: rounds[cid] for cid in active},
                options.drop_ratio,
                options.behind_above_s * 1e6,
            )
            out |= behind
            active = [cid for cid in active if cid not in behind]
            if len(active) < 2:
                break
        decision = decide(
            {cid: rounds[cid] for cid in active},
            [cid for cid in order if cid in active],
            default=default_id if default_id in active else None,
            tie_within=options.tie_within,
        )
        out |= {cid for cid, v in decision.verdicts.items() if v == "slower"}
        if done >= options.rounds and decision.settled:
            break
        # At least the rounds that can show a config slower, however long a round takes
        # (a slow kernel's round may take seconds), the look's included; then no more
        # than ``max_rounds_s`` of rounds in all.
        if done > look and done >= rounds_to_show() and clock() - start > options.max_rounds_s:
            break
        # Shown slower: out. Tied or undecided: go on, against the best.
        active = [cid for cid in active if cid not in out]
        if len(active) < 2:
            break
    return {
        cid: failed.get(cid)
        or measurement(
            by_id[cid],
            dataclasses.replace(fresh[cid], dropped=cid in out),
            compile_s.get(cid, 0.0),
            tuple(rounds[cid]),
            behind=cid in behind,
        )
        for cid in by_id
        if cid not in left
    }


def clearly_behind(
    rounds: Mapping[str, Sequence[float]], ratio: float, floor_us: float = 0.0
) -> set[str]:
    """The configs whose fastest round is over ``ratio`` times the slowest round of some
    other config (every round of that config beat every round of theirs by that much:
    other work on the machine only adds time, so a config's fastest round is its best
    showing) and at least ``floor_us`` long. They cannot be the fastest, and rounds spent
    on them would decide nothing (a long call beside the leaders' also spreads their
    per-round times). The floor keeps the rule to calls of a millisecond or more, whose
    rounds are costly; a short config's rounds are cheap, and the rounds' own tests decide
    it, however long a spell of other work slows its turns."""
    slowest = [max(times) for times in rounds.values() if times]
    if not slowest:
        return set()
    bar = ratio * min(slowest)
    return {
        cid
        for cid, times in rounds.items()
        if times and min(times) > bar and min(times) >= floor_us
    }


def measurement(
    config: Mapping[str, Any],
    timing: Timing,
    compile_s: float,
    rounds_us: tuple[float, ...] = (),
    *,
    behind: bool = False,
) -> Measurement:
    """A :class:`Measurement` from a timing (and, for configs timed in rounds, their
    per-round times and whether they left them clearly behind)."""
    return Measurement(
        rounds_us=rounds_us,
        behind=behind,
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
