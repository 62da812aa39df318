"""The options of ``@autotuned`` checked when a kernel is decorated, so a mistake is an
error at import time rather than at the first sweep, and the timing presets that
``effort=`` names (:data:`EFFORTS`)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._core.errors import ConfigSpaceError
from .._core.setting_values import MAX_SECONDS
from .sweep import samples as _samples
from .sweep.samples import TimingOptions

__all__ = [
    "EFFORTS",
    "TIMINGS",
    "timing_options",
    "validate_callable",
    "validate_check",
    "validate_effort",
    "validate_nearest",
    "validate_static_argnames",
    "validate_timeout",
    "validate_timer",
    "validate_timing",
]


def validate_check(check: Any) -> Any:
    """``check=`` as given, or a copy of its dict form.

    Raises:
        ConfigSpaceError: it is none of the accepted forms.
    """
    if check == "auto" or check is False or callable(check):
        return check
    if isinstance(check, Mapping):
        unknown = set(check) - {"rtol", "atol"}
        if unknown or not check:
            raise ConfigSpaceError(
                f"check={dict(check)!r}: a dict check takes only 'rtol' and 'atol', e.g. "
                "check={'rtol': 1e-3, 'atol': 1e-5}."
            )
        for k, v in check.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ConfigSpaceError(f"check[{k!r}] must be a non-negative number, got {v!r}.")
        return dict(check)
    raise ConfigSpaceError(
        f"check must be 'auto', False, a dict {{'rtol':..., 'atol':...}} or a callable "
        f"(out, ref) -> bool; got {check!r} ({type(check).__name__})."
    )


def validate_callable(name: str, value: Any) -> Any:
    """``inputs=`` or ``key=``: ``None`` or a callable.

    Raises:
        ConfigSpaceError: anything else.
    """
    if value is not None and not callable(value):
        raise ConfigSpaceError(f"{name} must be a callable, got {type(value).__name__}.")
    return value


def validate_static_argnames(
    fn: Callable[..., Any], signature: inspect.Signature, names: Iterable[str]
) -> frozenset[str]:
    """``static_argnames=`` as a set (one name may be given as a string).

    Raises:
        ConfigSpaceError: a name is not a parameter of ``fn``.
    """
    found = frozenset((names,) if isinstance(names, str) else names)
    params = signature.parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unknown = sorted(n for n in found if n not in params and not takes_kwargs)
    if unknown:
        raise ConfigSpaceError(
            f"static_argnames {unknown} are not parameters of {fn.__qualname__}."
        )
    return found


def validate_timeout(timeout: Any) -> float | None:
    """``timeout=``: ``None`` or a positive number of seconds up to the settings' limit.

    Raises:
        ConfigSpaceError: anything else.
    """
    most = MAX_SECONDS
    if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout <= most):
        raise ConfigSpaceError(
            f"timeout must be a positive number of seconds <= {most:g}: {timeout!r}"
        )
    return timeout


#: ``timing=`` values of ``@autotuned``.
TIMINGS = ("auto", "forward", "vjp")


def validate_timing(timing: Any) -> str:
    """``timing=``: one of :data:`TIMINGS`.

    Raises:
        ConfigSpaceError: anything else.
    """
    if timing not in TIMINGS:
        raise ConfigSpaceError(
            f"timing must be one of {', '.join(map(repr, TIMINGS))}: {timing!r}. 'vjp' times "
            "forward and backward (for a kernel used under jax.grad), 'forward' the call alone."
        )
    return str(timing)


def validate_timer(timer: Any) -> str | None:
    """``timer=``: ``None`` (``JAXTUNE_TIMER``) or a timer name.

    Raises:
        ConfigSpaceError: anything else.
    """
    from .sweep.timers import TIMERS

    if timer is not None and timer != "auto" and timer not in TIMERS:
        raise ConfigSpaceError(
            f"timer must be 'auto' or one of {', '.join(map(repr, TIMERS))}: {timer!r}."
        )
    return timer


def validate_nearest(nearest: Any) -> bool:
    """``nearest=``: ``True`` or ``False``.

    Raises:
        ConfigSpaceError: anything else.
    """
    if not isinstance(nearest, bool):
        raise ConfigSpaceError(
            f"nearest must be True or False, got {nearest!r}: True lets a shape never tuned "
            "use the nearest tuned shape's config (one prune accepts for it)."
        )
    return nearest


#: ``effort=`` presets of ``@autotuned``: how long a sweep's first pass samples each config
#: and how long its interleaved rounds may go on (the fields of
#: :class:`~jaxtune._tuning.sweep.samples.TimingOptions` that differ from ``"full"``, the
#: default, which is the sweeps' timing as it is). ``"quick"`` stops the rounds at 1 s
#: instead of 5 s (faster sweeps that end undecided between close configs more often);
#: ``"thorough"`` samples longer and lets the rounds run for up to 20 s, for a busy machine
#: whose rounds end undecided at ``"full"``. The decision rule is the same at every effort.
EFFORTS: dict[str, dict[str, Any]] = {
    "quick": {
        "min_time_s": 0.001,
        "min_samples": 3,
        "max_samples": 50,
        "max_rounds": 40,
        "max_rounds_s": 1.0,
        "round_floor_us": 1000.0,
        "round_max_samples": 16,
    },
    "full": {},
    "thorough": {
        "min_time_s": 0.01,
        "min_samples": 10,
        "max_samples": 500,
        "rounds": 10,
        "max_rounds": 800,
        "max_rounds_s": 20.0,
        "round_floor_us": 5000.0,
        "round_max_samples": 64,
        "second_look_rounds": 3,
    },
}


def validate_effort(effort: Any) -> str:
    """``effort=``: one of :data:`EFFORTS`.

    Raises:
        ConfigSpaceError: anything else.
    """
    if not isinstance(effort, str) or effort not in EFFORTS:
        raise ConfigSpaceError(
            f"effort must be one of {', '.join(map(repr, EFFORTS))}: {effort!r}. 'full' (the "
            "default) times until the rounds decide or 5 s pass, 'quick' stops them at 1 s, "
            "'thorough' at 20 s (for busy machines)."
        )
    return effort


def timing_options(effort: str) -> TimingOptions:
    """The timing options of a sweep at ``effort`` (one of :data:`EFFORTS`): the sweeps'
    defaults with the preset's fields replaced."""
    changed = EFFORTS[effort]
    # The defaults are read now, not at import: a test may shorten every sweep's timing.
    return dataclasses.replace(_samples.DEFAULT, **changed) if changed else _samples.DEFAULT
