"""Event drops: what a trace says it lost, said at the top of every report with the flag
change that fixes it.

Three signs: a ``dropped_traces`` stat (XLA's schema) on a plane; an error or warning of
the XSpace that speaks of dropped or lost events; and intra-kernel events outside every
kernel event (:mod:`.intrakernel`), which is what an overflowing custom-call trace leaves
when it loses the kernel's Begin/End events (the kernel then shows as idle time). XProf's
open-source UI shows none of these.
"""

from __future__ import annotations

import math
from typing import Any

from .._core import flags as _flags
from .._core.xspace import xplane as _xplane

__all__ = ["DROP_FIX", "DROP_STATS", "drop_warnings"]

#: Plane stats that count dropped events.
DROP_STATS = ("dropped_traces", "dropped_events")

#: The flag change that keeps more events (and the other way out).
DROP_FIX = (
    "raise the bundle instrumentation frequencies (default 10) to 50-100: "
    f'LIBTPU_INIT_ARGS="--{_flags.BUNDLE_INSTRUMENTATION}=trace_best_effort_frequency=100,'
    'trace_guaranteed_frequency=100" (jaxtune.flags.profile_flags("tpu", '
    "custom_call_tracing=True, best_effort_frequency=100, guaranteed_frequency=100)), "
    "or capture a shorter window"
)


def _count(value: Any) -> int | None:
    """A positive count, or ``None`` for anything else (text, bool, NaN, infinity)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and 0 < value < math.inf:
        return int(value)
    return None


def drop_warnings(space: _xplane.Space, plane: _xplane.Plane | None, orphans: int) -> list[str]:
    """The warnings for a report of ``space`` whose device plane is ``plane``; ``orphans``
    intra-kernel events lay outside every kernel event."""
    out = []
    dropped = 0
    for p in [plane] if plane is not None else []:
        for key in DROP_STATS:
            dropped += _count(p.stats.get(key)) or 0
    if dropped:
        out.append(
            f"the trace dropped {dropped} events ({plane.name if plane else ''}); {DROP_FIX}"
        )
    said = [
        m for m in (*space.errors, *space.warnings) if "drop" in m.lower() or "lost" in m.lower()
    ]
    if said:
        out.append(f"the trace dropped events ({said[0][:160]}); {DROP_FIX}")
    if orphans:
        out.append(
            f"{orphans} intra-kernel events lie outside every kernel event: the kernels' "
            "Begin/End events were lost (their time shows as idle); " + DROP_FIX
        )
    return out
