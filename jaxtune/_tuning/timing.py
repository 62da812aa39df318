"""Timing one compiled config: warm up, repeat to a minimum measured time, keep statistics.

The timer runs wherever the sweep runs (in this process for the inline runner, in the child
for the process runner). Wall-clock time around a blocking call is the measurement on CPU;
a device-profiler timer can replace it through the :class:`Timer` protocol.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

import jax

__all__ = ["Timer", "Timing", "TimingOptions", "WallTimer", "block"]


def block(out: Any) -> Any:
    """Waits until every array in ``out`` is computed."""
    return jax.block_until_ready(out)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TimingOptions:
    """How long and how often to measure.

    ``min_time_s``: total measured time to reach per config; ``min_samples``/``max_samples``
    bound the sample count; ``warmup`` calls run before timing (2: an interpret-mode
    Pallas call may retrace on its second call; a sweep counts its output check as the first); ``drop_ratio``: a config whose best sample
    is this many times slower than the best config so far stops early; ``leaders``,
    ``leader_window``, ``rounds`` and ``max_rounds`` control the interleaved re-timing of
    the front runners (``round_samples`` samples each a round, after one warm-up call): at
    least ``rounds`` rounds, then more until a paired signed-rank
    test at level ``alpha`` settles which leaders differ, or ``max_rounds`` is reached
    (``lean_rounds`` while a leader leans faster than the winner: p <= 0.05 and faster by
    more than ``tie_within`` in the median round, not yet significant at ``alpha``);
    leaders not faster than the earliest of them by more than ``tie_within`` (in the
    median round) are a tie whatever the test says; the earliest config of the space joins
    the leaders whenever its fastest sample is within ``tie_window`` of the best one's.

    The first pass only ranks configs (``min_time_s`` is short); the leaders' interleaved
    rounds decide the winner. A space of at most ``first_pass_above`` configs, measured in
    one batch, has no first pass: all its configs go straight into the rounds.
    """

    min_time_s: float = 0.002
    min_samples: int = 3
    max_samples: int = 200
    warmup: int = 2
    sample_floor_us: float = 100.0
    drop_ratio: float = 1.5
    drop_after: int = 3
    leaders: int = 3
    leader_window: float = 1.10
    rounds: int = 3
    max_rounds: int = 10
    lean_rounds: int = 30
    tie_within: float = 0.02
    tie_window: float = 2.0
    alpha: float = 0.002
    round_samples: int = 2
    first_pass_above: int = 4


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """Samples (µs per call) of one config and their summary."""

    samples_us: tuple[float, ...]
    dropped: bool = False

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    @property
    def min_us(self) -> float:
        return min(self.samples_us)

    @property
    def spread(self) -> float:
        """Interquartile range over the median (0 for fewer than 4 samples)."""
        if len(self.samples_us) < 4:
            return 0.0
        q = statistics.quantiles(self.samples_us, n=4)
        return (q[2] - q[0]) / self.median_us if self.median_us else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """A distribution-free 95 % confidence interval of the median (order statistics:
        ranks n/2 ± 0.98·√n), which narrows as samples accumulate."""
        ordered = sorted(self.samples_us)
        n = len(ordered)
        half = 0.98 * math.sqrt(n)
        low = max(0, math.floor(n / 2 - half))
        high = min(n - 1, math.ceil(n / 2 + half) - 1)
        return ordered[low], ordered[max(low, high)]

    def __add__(self, other: Timing) -> Timing:
        return Timing(
            samples_us=self.samples_us + other.samples_us, dropped=self.dropped or other.dropped
        )


#: The options sweeps use unless a kernel sets its own ``timing`` attribute.
DEFAULT = TimingOptions()


class Timer(Protocol):
    """Measures a blocking call; swappable (wall clock here, a device profiler elsewhere)."""

    def measure(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        best_us: float | None = None,
        samples: int | None = None,
    ) -> Timing: ...


class WallTimer:
    """Wall-clock timing around ``run()``, which must block until its outputs exist."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock

    def measure(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        best_us: float | None = None,
        samples: int | None = None,
    ) -> Timing:
        """Times ``run``; stops early when clearly slower than ``best_us``.

        With ``samples`` set, takes exactly that many samples after one warm-up call (used
        for interleaved re-timing); otherwise warms up and samples until ``min_time_s``.
        The last warm-up call, timed, sets how many calls a sample batches.
        Python's garbage collector is off meanwhile (as in ``timeit``): a collection of
        what compiling left behind would land in some config's samples.
        """
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._measure(run, options, best_us=best_us, samples=samples)
        finally:
            if collecting:
                gc.enable()

    def _measure(
        self,
        run: Callable[[], Any],
        options: TimingOptions,
        *,
        best_us: float | None,
        samples: int | None,
    ) -> Timing:
        clock = self.clock
        for _ in range(1 if samples else max(options.warmup, 1)):
            start = clock()
            run()
            first = clock() - start  # the last warm-up call sizes the batches
        # Batch very short calls so that each sample is long enough for the clock.
        batch = max(1, math.ceil(options.sample_floor_us * 1e-6 / max(first, 1e-9)))
        out: list[float] = []
        total = 0.0
        wanted = samples if samples else options.max_samples
        while len(out) < wanted:
            start = clock()
            for _ in range(batch):
                run()
            elapsed = clock() - start
            total += elapsed
            out.append(elapsed / batch * 1e6)
            if samples:
                continue
            if (
                best_us is not None
                and len(out) >= options.drop_after
                and min(out) > options.drop_ratio * best_us
            ):
                return Timing(samples_us=tuple(out), dropped=True)
            if len(out) >= options.min_samples and total >= options.min_time_s:
                break
        return Timing(samples_us=tuple(out))
