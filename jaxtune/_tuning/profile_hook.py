"""What a profile asks of an autotuned kernel.

Each call of a kernel runs under a marker (:func:`mark_call`) that names the kernel in the
program and maps back, in this process, to the call: its key, config and abstract
arguments, with the kernel as the mark's ``autotuned``. A capture (``jaxtune._profiling``)
reads the markers from its trace and asks that kernel, through
:class:`~jaxtune._program.markers.MarkedKernel`, for the call's ``flops``/``bytes`` hints
(:func:`cost_hint`), the recorded call that ``jaxtune tune --from-profile`` replays
(:func:`jaxtune._tuning.record.frame_for_mark`), and the speedup its config was tuned for
(:func:`tuned_speedup`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .._core.errors import CacheError
from .._core.vocabulary import Choice
from .._program import markers as _markers
from .signature import Signature
from .store import cache as _cache

__all__ = ["Hinted", "Profiled", "cost_hint", "mark_call", "tuned_speedup"]


class Hinted(Protocol):
    """A kernel's ``flops=`` / ``bytes=`` hints."""

    flops: float | Callable[..., float] | None
    bytes: float | Callable[..., float] | None


class Profiled(_markers.MarkedKernel, Hinted, Protocol):
    """What a profile asks of a kernel: what it asks through a mark, its version, and its
    cost hints."""

    version: str


def mark_call(
    kernel: Profiled, sig: Signature, choice: Choice, *, differentiated: bool = False
) -> str:
    """The scope name a call of ``kernel`` runs under (see :mod:`jaxtune._program.markers`)."""
    args, kwargs = sig.call_arguments(abstract=True)
    return _markers.mark(
        _markers.Mark(
            kernel=kernel.kernel_id,
            key=sig.key,
            config=dict(choice.config),
            source=choice.source,
            args=args,
            kwargs=kwargs,
            autotuned=kernel,
            differentiated=differentiated,
        )
    )


def cost_hint(kernel: Hinted, sig: Signature) -> dict[str, float] | None:
    """The ``flops=`` / ``bytes=`` hints evaluated for a bound call, or ``None`` when the
    decorator gave none."""
    if kernel.flops is None and kernel.bytes is None:
        return None
    a, k = sig.call_arguments(abstract=True)
    out: dict[str, float] = {}
    for label, hint in (("flops", kernel.flops), ("bytes", kernel.bytes)):
        if hint is not None:
            out[label] = float(hint(*a, **k) if callable(hint) else hint)
    return out


def tuned_speedup(
    kernel: Profiled, key: str, config: Mapping[str, Any], device_kind: str
) -> float | None:
    """The speedup over the default that the user cache measured for ``key`` on
    ``device_kind``, when its entry stored ``config`` (``None`` otherwise: a default, an
    entry of another config, or a cache that cannot say)."""
    try:
        entry = _cache.user_cache().lookup(
            kernel.kernel_id, device_kind, key, version=kernel.version
        )
    except (CacheError, OSError):  # a damaged or unreadable cache: the figure is a hint
        return None
    if entry is None or dict(entry.config) != dict(config):
        return None
    return float(entry.speedup) if entry.speedup else None
