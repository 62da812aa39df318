"""What a capture records about the autotuned calls it saw: each kernel's call sites per
step, its ``flops``/``bytes`` hints, one recorded call per (kernel, key) for ``tune
--from-profile``, and the config each ran with and its tuned speedup.

The facts about a call come from the tuning flow, the layer below this one: the call behind
each mark, ``jaxtune._tuning.bound.marked_call``. It is imported where a capture saw an
autotuned call, which only a process that loaded the tuning flow makes: ``@profiled``
alone does not load it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._core.vocabulary import Choice, RanConfig, RecordedCall
from .._program import markers as _markers
from .._program.locate import KernelSite

if TYPE_CHECKING:
    from .._tuning.bound import BoundCall

__all__ = ["autotuned_counts", "configs", "hints"]


def autotuned_counts(sites: Iterable[KernelSite]) -> dict[str, int]:
    """How many call sites of each jaxtune kernel one run of the program has."""
    counts: dict[str, int] = {}
    for site in sites:
        if site.kind == "autotuned" and site.kernel_id:
            counts[site.kernel_id] = counts.get(site.kernel_id, 0) + 1
    return counts


def _marked(site: KernelSite) -> tuple[_markers.Mark, BoundCall | None] | None:
    """The innermost mark of an autotuned site and the call behind it (``None`` for a
    call this process did not mark), or ``None`` when the site has no mark of this
    process."""
    found = _markers.parse(site.name_stack) if site.kind == "autotuned" else []
    mark = _markers.lookup(found[-1].digest) if found else None
    if mark is None:
        return None
    from .._tuning.bound import marked_call  # the tuning flow is loaded: it made the mark

    return mark, marked_call(found[-1].digest)


def hints(sites: Iterable[KernelSite]) -> tuple[dict[str, dict[str, float]], list[RecordedCall]]:
    """Per-call ``flops``/``bytes`` hints of the jaxtune kernels among ``sites``, and one
    recorded call per (kernel, key) (what ``tune from a profile`` replays)."""
    hints: dict[str, dict[str, float]] = {}
    calls: dict[tuple[str, str], RecordedCall] = {}
    for site in sites:
        mark, call = _marked(site) or (None, None)
        if mark is None or call is None:
            continue
        hint = call.cost_hint()
        if hint:
            hints[mark.kernel] = hint
        if (mark.kernel, mark.key) not in calls:
            # What this program runs, from its name stack: a trace of the kernel made
            # under a gradient is reused by JAX for a plain call of the same shapes, with
            # its mark. A call traced under jax.grad/jax.vjp runs its backward pass too.
            choice = Choice(config=mark.config, source=mark.source, key=mark.key)
            calls[mark.kernel, mark.key] = call.recorded_call(
                choice, differentiated=_markers.differentiated(site.name_stack, mark.kernel)
            )
    return hints, list(calls.values())


def configs(sites: Iterable[KernelSite], device_kind: str) -> dict[str, RanConfig]:
    """Each jaxtune kernel's config that ran (by kernel id), and the speedup over its
    default config the cache measured for it (``None`` when the config was not tuned
    here: a default, or an entry of another key)."""
    out: dict[str, RanConfig] = {}
    for site in sites:
        mark, call = _marked(site) or (None, None)
        if mark is None or mark.kernel in out:
            continue
        # The tuned speedup is only a hint: never an error.
        speedup = None if call is None else call.tuned_speedup(mark.config, device_kind)
        out[mark.kernel] = RanConfig(config=dict(mark.config), speedup=speedup)
    return out
