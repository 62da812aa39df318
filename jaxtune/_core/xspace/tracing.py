"""The ``jax.profiler`` options jaxtune traces with (the profile capture and the sweep's
profiler timer alike)."""

from __future__ import annotations

from typing import Any

__all__ = ["HOST_TRACER_LEVEL", "PYTHON_TRACER_LEVEL", "tracer_options"]

#: The profiler's tracer levels jaxtune uses. The Python tracer is off: neither a kernel
#: report nor a timer reads Python events, and on an interpret-mode step (whose kernels run
#: as Python callbacks) JAX's default level 1 writes hundreds of thousands of them and makes
#: the traced calls several times slower than untraced ones. The host tracer keeps JAX's
#: default level 2: XLA's CPU op events need level 1, and level 2 adds the runtime's host
#: events that XProf's trace viewer shows, at no measured cost.
PYTHON_TRACER_LEVEL = 0
HOST_TRACER_LEVEL = 2


def tracer_options(*, hlo_proto: bool, host_tracer_level: int | None = None) -> Any:
    """``jax.profiler.ProfileOptions`` with :data:`PYTHON_TRACER_LEVEL` and
    :data:`HOST_TRACER_LEVEL` (or ``host_tracer_level``: 0 for a timer that reads only
    the device planes); ``hlo_proto``: the trace carries each program's HLO proto (its op
    names, which a profile report reads and a timer does not)."""
    import jax

    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = PYTHON_TRACER_LEVEL
    options.host_tracer_level = (
        HOST_TRACER_LEVEL if host_tracer_level is None else host_tracer_level
    )
    options.enable_hlo_proto = hlo_proto
    return options
