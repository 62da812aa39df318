"""A trace capture in a child started with the profiling flags: the request this process
sends, answered in the child by :mod:`jaxtune._profiling.serve`."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

from .._core import typed
from .._core.errors import ProfileError
from .._core.settings import settings
from .._core.vocabulary import CaptureInfo, ProfileOptions
from .._isolation.calling import call_request
from .._isolation.context import warn_notes, warn_unapplied
from .._isolation.frames import ErrorKind, ErrorReply, FrameError, NotTransportable, Request
from .._isolation.process import Deadline
from .._isolation.resolve import find
from .._isolation.service import ChildService, Crash

__all__ = ["HANDLER", "Captured", "capture_options", "profile_in_child"]

#: The module whose ``handle`` answers a capture request in the child.
HANDLER = "jaxtune._profiling.serve"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Captured:
    """The body of the answer to a capture request: what the capture found."""

    info: CaptureInfo = dataclasses.field(default_factory=CaptureInfo)


def capture_options(request: Request[Any]) -> ProfileOptions:
    """The options of a capture request as they arrived (its fields: the
    :class:`~jaxtune._core.vocabulary.ProfileOptions` the parent sent).

    Raises:
        FrameError: the request is no capture request.
    """
    why = f"an operation {request.op!r:.40}"
    if request.op == "profile":
        try:
            return typed.decode(ProfileOptions, request.fields, "fields")
        except typed.MismatchError as e:
            why = str(e)
    raise FrameError(f"a profile request names the function, iters, warmup and logdir ({why})")


def profile_in_child(
    fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], options: ProfileOptions
) -> CaptureInfo:
    """Captures a trace of ``fn`` in a child started with the profiling flags of
    ``options`` (whose ``logdir`` is set); returns what
    :func:`jaxtune._profiling.profiled.capture` returned there.

    Raises:
        NotTransportable: ``fn`` or its arguments cannot travel (the caller captures inline).
        ProfileError: the child failed; the message holds its stderr.
    """
    label = getattr(fn, "__qualname__", "profile")
    _check_named(fn)
    message = call_request(HANDLER, "profile", fn, args, kwargs, label=label, fields=options)
    limit = settings().timeout * (options.iters + max(options.warmup, 2) + 5)
    answer = ChildService(profiling=options).answer(message, deadline=Deadline(limit))
    if isinstance(answer, Crash):
        how = answer.how(f"the {limit:g} s limit (JAXTUNE_TIMEOUT for each call)")
        raise ProfileError(f"the profiling child was lost: {how}; stderr: {answer.stderr}")
    if isinstance(answer, ErrorReply) and answer.kind is not ErrorKind.NOT_TRANSPORTABLE:
        # The child's notes say why (a script's `__main__` block the child did not run):
        # in the error, after its first line, rather than in warnings before it.
        head, _, rest = answer.message.partition("\n")
        raise ProfileError("\n".join(p for p in (head, *answer.notes, rest) if p))
    warn_notes(answer.notes)
    if isinstance(answer, ErrorReply):
        raise NotTransportable(answer.message)
    warn_unapplied(label, answer.unapplied)
    try:
        return typed.decode(Captured, answer.body, within="the profiling child's answer").info
    except typed.MismatchError as e:
        raise ProfileError(f"the profiling child's answer is damaged: {e}") from None


def _check_named(fn: Any) -> None:
    """The child finds the function by ``module:qualname``. A transformed function names
    the function it wraps (``jax.grad(loss)`` is called ``loss``), which the child would
    profile instead; ``jax.jit(f)`` may stand for ``f`` (the capture jits it anyway).

    Raises:
        NotTransportable: that name leads to another function than ``fn``.
    """
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    qualname = getattr(fn, "__qualname__", "")
    if module is None or not qualname or "<" in qualname:
        return  # function_ref says why it cannot travel
    found = find(vars(module), qualname)
    if found is fn or getattr(found, "__wrapped_profiled__", None) is fn:
        return
    if hasattr(fn, "lower") and getattr(fn, "__wrapped__", None) is found:
        return
    raise NotTransportable(
        f"{module.__name__}:{qualname} names another function than the one given (a "
        "transformed function such as jax.grad(f) carries the name of f); wrap it in a "
        "module-level function, e.g. def step(x): return jax.grad(f)(x)"
    )
