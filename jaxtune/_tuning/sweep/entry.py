"""The cache entry a finished sweep becomes: its times, decision, margin, search, timer and
the speedup's interval."""

from __future__ import annotations

import time
from typing import Any

from ..._core import versions as _versions
from ..._core.flags import normalise_platform
from ..._core.vocabulary import Entry, Measurement
from ..digest import CodeDigest
from .plan import SweepPlan
from .stats import SweepOutcome
from .timers import resolve_timer

__all__ = ["make_entry"]


def _speedup_range(best: Measurement, default: Any) -> tuple[float, float] | None:
    if not isinstance(default, Measurement):
        return None
    if None in (best.low_us, best.high_us, default.low_us, default.high_us):
        return None
    low = default.low_us / best.high_us  # type: ignore[operator]
    high = default.high_us / best.low_us  # type: ignore[operator]
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
    rounds, their times are the medians of their per-round times (the estimator the
    decision used), so the speedup agrees with the decision."""
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
        },
        timer=resolve_timer(plan.timer, normalise_platform(kind) or kind),
        timing=plan.timing,
        code_digest=code.digest,
        code_parts=code.parts,
        phases=dict(outcome.phases),
    )
