"""Both sides. What a sweep's measurements are: its options (how long, how often) and the
samples of one config (:class:`Timing`). The timers (:mod:`.timers`) are the instruments that
take them (named ``samples``, not ``timing``: a kernel's ``timing`` is the pass it times).

The timers run wherever the sweep runs (in this process for the inline
runner, in the child for the process runner) and give :class:`Timing` samples.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any

import jax

from ..._core import typed

__all__ = ["DEFAULT", "Timing", "TimingOptions", "block", "clearly_slower"]


def block(out: Any) -> Any:
    """Waits until every array in ``out`` is computed."""
    return jax.block_until_ready(out)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TimingOptions:
    """How long and how often to measure, and how the winner is decided.

    First pass (it only ranks configs): ``warmup`` calls (2: an interpret-mode Pallas call
    may retrace on its second call; a sweep counts its output check as the first), then
    samples until ``min_time_s`` of measured time, between ``min_samples`` and
    ``max_samples`` of them, each at least ``sample_floor_us`` long (short calls are
    batched). A config whose first ``drop_after`` samples are all over ``drop_ratio``
    times the best so far stops early (``dropped``).

    Rounds (they decide): the ``leaders`` configs whose fastest sample is within
    ``leader_window`` of the best one's, with the default and the earliest config of the
    space when within ``tie_window``, are timed in interleaved rounds: a warm-up call of
    each, then passes over them until each config's samples add up to ``round_floor_us``
    of its calls (between ``round_samples`` and ``round_max_samples`` samples; the longest
    config takes one a pass, a shorter one several, spread over the passes; one sample, the round's first call, for a config whose
    call takes at least ``one_sample_above_s``: at that length a round's second call
    costs as much as a whole turn and steadies little). Every other config the first pass measured (dropped
    early or behind the leaders) gets a second look: it takes part in the first
    ``second_look_rounds`` rounds, and races on when its fastest time there is faster by
    more than ``tie_within`` than the ``leaders``-th fastest leader's. Under a timer whose
    samples are device time (the profiler timer on a TPU or GPU: the calls' execution on
    the chip, from the trace), which a burst of work on the host does not lengthen, only
    the configs whose fastest first-pass sample is within ``device_look_window`` of the
    best one's get the second look (each look round's trace costs the chip's profiler
    about 35 ms a program in it on a TPU v5e); with no rival within ``leader_window``,
    the fastest races the next fastest alone. After at least
    ``rounds`` rounds, they stop once every rival of the best is shown slower or
    equivalent within ``tie_within`` (see :mod:`jaxtune._tuning.sweep.stats`), or at
    ``max_rounds`` rounds or ``max_rounds_s`` seconds. From round ``behind_after_rounds`` on,
    a config whose fastest round is over ``drop_ratio`` times the slowest round of another
    config racing, and whose calls take at least ``behind_above_s``, is clearly behind: it
    leaves the rounds (it is out). Such a config would need ``rounds_to_show`` rounds (8)
    to be shown slower, and its long calls beside the leaders' disturb theirs in the
    rounds it shares with them (a 3x slower swiglu tile beside the best two: the
    runner-up's per-round ratio to the best spread 0.57-1.49 instead of 0.95-1.35).

    Under a device timer the first pass screens by the wall clock first: each config's
    calls are started back to back, with no trace, and a config whose calls take at least
    ``device_screen_above_us`` each and over ``leader_window`` times the best config's
    keeps that timing (at that length the host's part of a call is hidden behind the
    chip's work: the wall clock of calls in flight is the chip's time to within a few per
    cent; so far behind, the config is no leader); the others are timed inside captures,
    whose cost grows with the programs in them (0 turns the screen off).

    A space of at most ``first_pass_above`` configs, measured in one batch, has no first
    pass: all its configs go straight into the rounds; so does a whole space measured in
    one batch whose every config took at least ``rounds_above_s`` on its first call (a slow
    kernel: its first pass would cost more calls than the rounds that decide anyway).
    """

    min_time_s: float = 0.002
    min_samples: int = 5
    max_samples: int = 200
    warmup: int = 2
    sample_floor_us: float = 100.0
    drop_ratio: float = 1.5
    drop_after: int = 3
    leaders: int = 3
    leader_window: float = 2.0
    # Left out of a plan while it holds its default: plans written before it read and
    # write as they did (tests/test_record_formats.py).
    device_look_window: float = dataclasses.field(default=1.1, metadata=typed.OMIT_DEFAULT)
    device_screen_above_us: float = dataclasses.field(default=500.0, metadata=typed.OMIT_DEFAULT)
    tie_window: float = 2.0
    rounds: int = 6
    max_rounds: int = 200
    max_rounds_s: float = 5.0
    tie_within: float = 0.05
    round_samples: int = 2
    round_floor_us: float = 2000.0
    round_max_samples: int = 32
    one_sample_above_s: float = 0.05
    second_look_rounds: int = 2
    first_pass_above: int = 4
    rounds_above_s: float = 0.01
    behind_after_rounds: int = 3
    behind_above_s: float = 0.001


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


def clearly_slower(
    samples_us: Sequence[float], best_us: float | None, options: TimingOptions
) -> bool:
    """The first pass's dropping rule: at least ``drop_after`` samples, all over
    ``drop_ratio`` times ``best_us`` (other work on the machine only adds time, so even a
    config's fastest sample being that far behind is a clear verdict)."""
    return (
        best_us is not None
        and len(samples_us) >= options.drop_after
        and min(samples_us) > options.drop_ratio * best_us
    )


#: The options sweeps use unless a kernel sets its own ``timing`` attribute.
DEFAULT = TimingOptions()
