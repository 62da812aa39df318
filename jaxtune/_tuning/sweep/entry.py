"""Parent side. The cache entry a finished sweep becomes: its times, decision, margin, search,
timer and the speedup's interval."""

from __future__ import annotations

import time
from typing import Any

from ..._core import versions as _versions
from ..._core.flags import normalise_platform
from ..._core.vocabulary import Entry, Measurement
from ..digest import CodeDigest
from .intervals import ratio_interval
from .stats import SweepOutcome
from .timers import resolve_timer
from .work import SweepPlan

__all__ = ["make_entry"]


def _speedup_range(best: Measurement, default: Any) -> tuple[float, float] | None:
    """The speedup's 95 % interval: of the per-round ratios where both raced in the rounds
    (the decision's estimator), else what the two medians' intervals allow; it always
    holds the speedup the entry states."""
    if not isinstance(default, Measurement):
        return None
    ratio = None
    if best.rounds_us and default.rounds_us and default.config != best.config:
        ratio, low, high = ratio_interval(default.rounds_us, best.rounds_us)
        if low is not None and high is not None:
            return (float(min(low, ratio)), float(max(high, ratio)))
    if None in (best.low_us, best.high_us, default.low_us, default.high_us):
        return None
    low = default.low_us / best.high_us  # type: ignore[operator]
    high = default.high_us / best.low_us  # type: ignore[operator]
    if ratio is not None:
        # Too few rounds side by side for their own interval (the default left the rounds
        # early): the medians' interval, widened to the ratio the entry states.
        low, high = min(low, ratio), max(high, ratio)
    return (float(low), float(high))


def make_entry(
    plan: SweepPlan,
    outcome: SweepOutcome,
    kind: str,
    version: str,
    *,
    code: CodeDigest | None = None,
) -> Entry:
    """The cache entry for a finished sweep (``code``: the digest of the kernel's code it
    was tuned for). When the stored config and the default were timed side by side in the
    rounds, the speedup is the median of their per-round ratios (the estimator the
    decision used) and its interval theirs, so the speedup agrees with the decision."""
    code = code or CodeDigest()
    searched = outcome.searched
    time_us, default_time_us = outcome.times()
    return Entry(
        kernel=plan.kernel,
        device_kind=kind,
        key=plan.key,
        config=dict(outcome.best.config),
        time_us=time_us,
        default_config=dict(plan.default),
        default_time_us=default_time_us,
        measurements=outcome.measurements,
        versions=_versions.toolchain(),
        created=time.time(),
        kernel_version=version,
        shapes=plan.shapes,
        statics=plan.statics,
        search=searched.strategy if searched else "exhaustive",
        space_size=len(plan.configs),
        tie=outcome.tie,
        speedup_range=_speedup_range(outcome.best, outcome.default),
        decision=outcome.decision,
        margin=None
        if outcome.margin is None
        else {
            "rival": dict(outcome.margin.rival),
            "ratio": outcome.margin.ratio,
            "low": outcome.margin.low,
            "high": outcome.margin.high,
            # Why the stored config is not the rounds' candidate, where it is not.
            **({"kept": outcome.margin.kept} if outcome.margin.kept else {}),
        },
        timer=resolve_timer(plan.timer, normalise_platform(kind) or kind),
        timing=plan.timing,
        code_digest=code.digest,
        code_parts=code.parts,
        phases=dict(outcome.phases),
        values=plan.values,
    )
