"""What a capture records about the autotuned calls it saw: each kernel's call sites per
step, its ``flops``/``bytes`` hints, one recorded call per (kernel, key) for ``tune
--from-profile``, and the config each ran with and its tuned speedup."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from .._core.vocabulary import Choice, RecordedCall
from .._program import markers as _markers
from .._program.locate import KernelSite

__all__ = ["autotuned_counts", "configs", "hints"]


def autotuned_counts(sites: Iterable[KernelSite]) -> dict[str, int]:
    """How many call sites of each jaxtune kernel one run of the program has."""
    counts: dict[str, int] = {}
    for site in sites:
        if site.kind == "autotuned" and site.kernel_id:
            counts[site.kernel_id] = counts.get(site.kernel_id, 0) + 1
    return counts


def hints(sites: Iterable[KernelSite]) -> tuple[dict[str, dict[str, float]], list[RecordedCall]]:
    """Per-call ``flops``/``bytes`` hints of the jaxtune kernels among ``sites``, and one
    recorded call per (kernel, key) (what ``tune from a profile`` replays)."""
    hints: dict[str, dict[str, float]] = {}
    calls: dict[tuple[str, str], RecordedCall] = {}
    for site in sites:
        if site.kind != "autotuned":
            continue
        marks = _markers.parse(site.name_stack)
        mark = _markers.lookup(marks[-1].digest) if marks else None
        if mark is not None:
            # What this program runs, from its name stack: a trace of the kernel made
            # under a gradient is reused by JAX for a plain call of the same shapes, with
            # its mark.
            mark = dataclasses.replace(
                mark, differentiated=_markers.differentiated(site.name_stack, mark.kernel)
            )
        if mark is not None and mark.call is not None:
            hint = mark.call.cost_hint()
            if hint:
                hints[mark.kernel] = hint
            if (mark.kernel, mark.key) not in calls:
                # A call traced under jax.grad/jax.vjp runs its backward pass too.
                choice = Choice(config=mark.config, source=mark.source, key=mark.key)
                calls[mark.kernel, mark.key] = mark.call.recorded_call(
                    choice, differentiated=mark.differentiated
                )
    return hints, list(calls.values())


def configs(sites: Iterable[KernelSite], device_kind: str) -> dict[str, dict[str, Any]]:
    """Each jaxtune kernel's config that ran (by kernel id), and the speedup over its
    default config the cache measured for it (``None`` when the config was not tuned
    here: a default, or an entry of another key)."""
    out: dict[str, dict[str, Any]] = {}
    for site in sites:
        marks = _markers.parse(site.name_stack) if site.kind == "autotuned" else []
        mark = _markers.lookup(marks[-1].digest) if marks else None
        if mark is None or mark.kernel in out:
            continue
        out[mark.kernel] = {"config": dict(mark.config), "speedup": _speedup(mark, device_kind)}
    return out


def _speedup(mark: _markers.Mark, device_kind: str) -> float | None:
    """The tuned speedup of the mark's config, asked of its kernel (never an error: the
    figure is only a hint)."""
    if mark.call is None:
        return None
    return mark.call.tuned_speedup(mark.config, device_kind)
