"""The options of ``@autotuned`` checked when a kernel is decorated, so a mistake is an
error at import time rather than at the first sweep."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._core.errors import ConfigSpaceError
from .._core.setting_values import MAX_SECONDS

__all__ = [
    "validate_callable",
    "validate_check",
    "validate_nearest",
    "validate_static_argnames",
    "validate_timeout",
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
