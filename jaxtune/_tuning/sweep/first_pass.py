"""The first pass: each checked config timed in two visits, the second in reverse order (a
slow spell of the machine during one config's turn does not decide its rank), dropping
configs clearly slower than the best on the first (see :func:`~.samples.clearly_slower`);
under a timer whose samples are device time, which a slow spell of the host does not
lengthen, in one visit with both visits' share of samples.
The earliest config of the space wins ties and the default always races in the rounds, so
neither is dropped.

A device timer (a :class:`~.timers.RecordingTimer`) first screens each config by the wall
clock, its calls in flight with no trace: a config whose calls take at least
``device_screen_above_us`` and over ``leader_window`` times the best config's keeps that
timing, since the host's part of so long a call is hidden behind the chip's work and the
config is no leader. The others are timed inside captures
(:meth:`~.measure.Stopwatch.captured`), whose cost grows with the programs in them (about
35 ms each on a TPU v5e, on top of 0.25 s a capture). Their device timings arrive when the
captures end, so the first visit drops by them, against the best of the visit, before the
second begins. While other configs still compile, the chip would idle: there the configs
that passed their check are captured, unscreened (:func:`captured_ahead`), once
:data:`~.measure.CONFIGS_PER_CAPTURE` of them came at a compile's pace
(:data:`~.engine.EARLY_PACE_S`), and keep that timing in the visit.
The wall timer times one config at a time and stops a config's samples as soon as they
show it clearly slower than the best so far.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence

from ..._core.vocabulary import Config, Failure, Measurement, config_id
from ..._isolation.frames import ConfigResult
from .measure import Stopwatch
from .rounds import measurement
from .samples import Timing, TimingOptions, clearly_slower
from .timers import RecordingTimer

__all__ = ["captured_ahead", "first_pass"]

Result = Measurement | Failure


@dataclasses.dataclass(frozen=True, slots=True)
class _Dropping:
    """The first visit's dropping: the best time known before it (measured in earlier
    batches), and the configs never dropped (the earliest of the space, the default)."""

    best_us: float | None
    kept: frozenset[str | None]


def first_pass(
    stopwatch: Stopwatch,
    runnable: Sequence[Config],
    best_us: float | None,
    ahead: Mapping[str, Timing | Failure] | None = None,
) -> dict[str, Result]:
    """Times ``runnable`` (compiled and checked) in two visits, dropping configs clearly
    slower than the best (``best_us``, measured in earlier batches, or better) on the
    first; reports each config's result once it is final. ``ahead`` holds the first
    visit of configs a device timer captured while others still compiled
    (:func:`captured_ahead`)."""
    plan = stopwatch.compiler.task.plan
    compile_s = stopwatch.compiler.compile_s()
    timed: dict[str, Timing | Failure] = {}
    earliest = config_id(plan.configs[0]) if plan.configs else None
    kept = frozenset({earliest, config_id(plan.default)})

    def result(config: Config, got: Timing | Failure) -> Result:
        if isinstance(got, Failure):
            return got
        return measurement(config, got, compile_s[config_id(config)])

    # Device time is the chip's own, which a slow spell of the host does not lengthen:
    # one visit with the whole share of samples, one turn of each config instead of two.
    visits = (runnable,) if stopwatch.timer.device_time else (runnable, runnable[::-1])
    for visit, sequence in enumerate(visits):
        todo = [c for c in sequence if _timed_on(timed.get(config_id(c)))]
        first_visit = visit == 0
        options = _visit_options(plan.options, first_visit=first_visit, visits=len(visits))
        dropping = _Dropping(best_us=best_us, kept=kept) if first_visit else None
        if isinstance(stopwatch.timer, RecordingTimer):
            got = _visit_screened(stopwatch, todo, options, dropping, ahead or {})
        else:
            got = _visit_in_turn(stopwatch, todo, options, dropping)
        for config in todo:
            cid = config_id(config)
            now, before = got[cid], timed.get(cid)
            if isinstance(now, Timing) and isinstance(before, Timing):
                now = before + now
            timed[cid] = now
            last_visit = visit == len(visits) - 1
            if last_visit or not isinstance(now, Timing) or now.dropped:
                stopwatch.emit(ConfigResult(cid=cid, result=result(config, now)))
    return {config_id(c): result(c, timed[config_id(c)]) for c in runnable}


def _timed_on(got: Timing | Failure | None) -> bool:
    """Whether a config goes on to its next visit (it has not failed nor been dropped)."""
    return got is None or (isinstance(got, Timing) and not got.dropped)


def _visit_options(options: TimingOptions, *, first_visit: bool, visits: int) -> TimingOptions:
    """One visit's share of a config's samples (of ``visits``: half the minimum time and
    count of two)."""
    return dataclasses.replace(
        options,
        # On the first visit, the first run (for the check) was the first warm-up call.
        warmup=max(1, options.warmup - 1) if first_visit else 1,
        min_time_s=options.min_time_s / visits,
        min_samples=max(1, -(-options.min_samples // visits)),
        max_samples=max(1, -(-options.max_samples // visits)),
    )


def _visit_in_turn(
    stopwatch: Stopwatch,
    configs: Sequence[Config],
    options: TimingOptions,
    dropping: _Dropping | None,
) -> dict[str, Timing | Failure]:
    """One visit, one config at a time; with ``dropping``, a config stops once clearly
    slower than the best so far (see :func:`~.samples.clearly_slower`)."""
    timer = stopwatch.timer
    best_us = dropping.best_us if dropping is not None else None
    out: dict[str, Timing | Failure] = {}
    for config in configs:
        cid = config_id(config)
        bar = best_us if dropping is not None and cid not in dropping.kept else None
        got = stopwatch.timed(
            config, functools.partial(timer.measure, options=options, best_us=bar)
        )
        if isinstance(got, Timing) and not got.dropped:
            best_us = got.min_us if best_us is None else min(best_us, got.min_us)
        out[cid] = got
    return out


def captured_ahead(stopwatch: Stopwatch, configs: Sequence[Config]) -> dict[str, Timing | Failure]:
    """The first visit of a device timer to ``configs``, captured with no screen: while
    other configs still compile, the chip would otherwise idle (and a stop of a trace,
    which holds no lock of Python's, runs beside the compiling threads), whereas the
    screen's wall clock would be slowed by the host's work."""
    plan = stopwatch.compiler.task.plan
    options = _visit_options(plan.options, first_visit=True, visits=1)
    return stopwatch.captured(
        configs, lambda rec, module, run: rec.measure(run, options, module=module)
    )


def _visit_screened(
    stopwatch: Stopwatch,
    configs: Sequence[Config],
    options: TimingOptions,
    dropping: _Dropping | None,
    ahead: Mapping[str, Timing | Failure],
) -> dict[str, Timing | Failure]:
    """One visit of a device timer: under device time, each config first screened by the
    wall clock with no trace (:meth:`~.timers.ProfilerTimer.screen`), and those whose
    calls take at least ``device_screen_above_us`` and over ``leader_window`` times the
    best keep that timing; the others are timed inside captures
    (:meth:`~.measure.Stopwatch.captured`). On the first visit (``dropping``), the configs
    timed ``ahead`` keep that timing, and those clearly slower than the best of the visit
    (or the best known before) are dropped once the captures have ended."""
    timer = stopwatch.timer
    assert isinstance(timer, RecordingTimer)
    done = ahead if dropping is not None else {}
    out = {config_id(c): done[config_id(c)] for c in configs if config_id(c) in done}
    configs_left = [c for c in configs if config_id(c) not in out]
    above = options.device_screen_above_us
    if timer.device_time and above > 0:
        screen = functools.partial(timer.screen, options=options)
        start = time.perf_counter()
        screened = {config_id(c): stopwatch.timed(c, screen) for c in configs_left}
        stopwatch.compiler.breakdown.add("screen", time.perf_counter() - start)
        # Device times (captured ahead, or in earlier batches) count too: a wall clock's
        # is never shorter.
        times = [t.min_us for t in (*screened.values(), *out.values()) if isinstance(t, Timing)]
        if dropping is not None and dropping.best_us is not None:
            times.append(dropping.best_us)
        # The leaders come from within ``leader_window`` of the best: those stay timed on
        # the device, so a wall-clock figure decides no leader and no second look.
        bar = max(above, options.leader_window * min(times, default=0.0))
        out |= {
            cid: got
            for cid, got in screened.items()
            if isinstance(got, Failure) or got.min_us > bar
        }
    captured = [c for c in configs if config_id(c) not in out]
    if captured:
        stopwatch.ready(len(captured))
        out.update(
            stopwatch.captured(
                captured, lambda rec, module, run: rec.measure(run, options, module=module)
            )
        )
    out = {config_id(c): out[config_id(c)] for c in configs}  # in the visit's order
    if dropping is None:
        return out
    times = [got.min_us for got in out.values() if isinstance(got, Timing)]
    if dropping.best_us is not None:
        times.append(dropping.best_us)
    best = min(times, default=None)
    for cid, got in out.items():
        if (
            isinstance(got, Timing)
            and cid not in dropping.kept
            and clearly_slower(got.samples_us, best, options)
        ):
            out[cid] = dataclasses.replace(got, dropped=True)
    return out
