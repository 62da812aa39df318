"""``@jaxtune.autotuned(...)``: the decorator and its documented options."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ParamSpec, TypeVar

from .._core.errors import ConfigSpaceError
from .autotuned import Autotuned
from .sweep.search import Budget

__all__ = ["autotuned"]

P = ParamSpec("P")
R = TypeVar("R")

_NO_OPTIONS = (
    "@jaxtune.autotuned needs its options: write @jaxtune.autotuned(configs={...}) "
    "with a dict of lists, a list of dicts or a callable."
)
_NO_CONFIGS = (
    "@jaxtune.autotuned(configs=...) is required: a dict of lists, a list of dicts or "
    "a callable of the abstract arguments."
)


def autotuned(
    *args: Any,
    configs: Any = None,
    default: Mapping[str, Any] | Callable[..., Mapping[str, Any]] | None = None,
    prune: Callable[..., bool] | None = None,
    key: Callable[..., Any] | None = None,
    name: str | None = None,
    version: Any = None,
    check: Any = "auto",
    inputs: Callable[..., Any] | None = None,
    static_argnames: Iterable[str] = (),
    timeout: float | None = None,
    flops: float | Callable[..., float] | None = None,
    bytes: float | Callable[..., float] | None = None,
    search: Any = "auto",
    budget: int | Budget | None = None,
    timer: str | None = None,
    timing: str = "auto",
    effort: str = "full",
    nearest: bool = False,
    buckets: Mapping[str, Mapping[int, Any]] | None = None,
) -> Callable[[Callable[P, R]], Autotuned[P, R]]:
    """Makes a kernel tune itself: the fastest config per shape/dtype/device, from a cache.

    Args:
        configs: a dict of lists (cartesian product), a list of dicts, or a callable of the
            abstract arguments returning dicts. Config values reach the kernel as keywords.
        default: the config when nothing is known (dict or callable); else the space's first.
        prune: ``prune(config, *args, **kwargs) -> bool`` keeps valid configs (must be pure).
        key: replaces the default key (shapes/dtypes, static values); called with abstract arguments.
        name: the kernel's stable cache id (default ``module.qualname``).
        version: bump to invalidate old cache entries when the kernel changes.
        check: ``"auto"`` (compare with the default config's output at a dtype-aware
            tolerance), ``False``, ``{"rtol":..., "atol":...}`` or ``(out, ref) -> bool``.
        inputs: builds concrete inputs from the abstract arguments for kernels whose inputs
            must satisfy invariants; returns a tuple of the array arguments or a dict.
        static_argnames: non-array arguments; their values (or defaults) enter the key.
        timeout: seconds per config (default ``JAXTUNE_TIMEOUT``).
        flops: FLOPs of one call (number or callable of the abstract arguments), for reports.
        bytes: bytes accessed by one call, likewise.
        search: which configs a sweep measures: ``"auto"`` (exhaustive when the budget
            covers the pruned space, else ``"model"``), ``"exhaustive"``, ``"random"``,
            ``"coordinate"``, ``"model"``, or an object following :class:`jaxtune.Strategy`.
        budget: configs a sweep may measure (an int), or :class:`jaxtune.Budget` with
            configs and/or seconds; default ``JAXTUNE_BUDGET``, else the strategy's own.
        timer: how a config is timed: ``"auto"`` (device time from the profiler on TPU and
            GPU, wall clock on CPU), ``"wall"``, ``"profiler"`` (device events of a
            ``jax.profiler`` trace) or ``"cupti"`` (NVIDIA GPUs); default ``JAXTUNE_TIMER``.
        timing: the pass timed: ``"auto"`` (forward and backward when the kernel is tuned
            from a differentiated program, such as ``jaxtune.tune(jax.grad(loss), ...)``,
            forward otherwise), ``"forward"`` or ``"vjp"`` (forward and backward, with a
            cotangent of ones).
        effort: how long a sweep times each config: ``"full"`` (default: until the
            interleaved rounds decide, or 5 s of rounds), ``"quick"`` (shorter samples and
            at most 1 s of rounds: faster sweeps that end undecided more often) or
            ``"thorough"`` (longer samples and up to 20 s of rounds, for busy machines).
        nearest: a shape never tuned may use the nearest tuned shape's config, one ``prune``
            accepts for it; default ``False`` (``JAXTUNE_NEAREST=1`` opts every kernel in).
        buckets: shapes that share one entry: array argument -> {dimension: rule}, the rule
            ``"pow2"`` (powers of two) or ascending upper bounds, e.g.
            ``{"q": {1: "pow2"}}``. Each bucket is tuned once, at its representative shape
            (its upper bound); a config ``prune`` rejects for the actual shape is never used.

    Examples:
        >>> import jax.numpy as jnp
        >>> import jaxtune
        >>> @jaxtune.autotuned(configs={"chunk": [64, 128]})
        ... def scale(x, *, chunk):
        ...     return (x.reshape(-1, chunk) * 2).reshape(x.shape)
        >>> scale(jnp.ones(256)).shape
        (256,)
    """
    if args or configs is None:
        raise ConfigSpaceError(_NO_OPTIONS if args else _NO_CONFIGS)
    # Every keyword of this call is an option of Autotuned, under the same name.
    options = {name: value for name, value in locals().items() if name != "args"}

    def wrap(fn: Callable[P, R]) -> Autotuned[P, R]:
        return Autotuned(fn, **options)

    return wrap
