"""A trace capture in a child started with the profiling flags (the profiling flow's use of
the child runner)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._config import settings
from .._errors import ProfileError
from .context import warn_notes, warn_unapplied
from .process import POOL, ChildLost
from .requests import profile_request
from .runner import ProcessRunner
from .wire import NotTransportable

__all__ = ["profile_in_child"]


def profile_in_child(
    fn: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    iters: int,
    warmup: int,
    llo: bool,
    custom_call_tracing: bool,
    logdir: str,
) -> dict[str, Any]:
    """Captures a trace of ``fn`` in a child started with the profiling flags; returns what
    :func:`jaxtune._profiling.profiled.capture` returned there.

    Raises:
        NotTransportable: ``fn`` or its arguments cannot travel (the caller captures inline).
        ProfileError: the child failed; the message holds its stderr.
    """
    message = profile_request(fn, args, kwargs, iters=iters, warmup=warmup, logdir=logdir)
    runner = ProcessRunner(profiling={"llo": llo, "custom_call_tracing": custom_call_tracing})
    child = runner.child()
    limit = settings().timeout * (iters + max(warmup, 2) + 5)
    with child.lock:
        offset = child.log_size()
        try:
            answer = child.request(message, timeout=lambda: limit)
        except ChildLost as lost:
            how = "did not finish in time" if lost.hung else child.describe_exit()
            POOL.discard(child)
            raise ProfileError(
                f"the profiling child {how}; stderr: {child.stderr_tail(offset)}"
            ) from None
    warn_notes(answer)
    if answer.get("t") == "error" and answer.get("type") == "NotTransportable":
        raise NotTransportable(answer["message"])
    if answer.get("t") == "error":
        raise ProfileError(answer["message"])
    warn_unapplied(getattr(fn, "__qualname__", "profile"), answer)
    info: dict[str, Any] = answer["info"]
    return info
