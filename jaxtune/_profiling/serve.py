"""The child side of a trace capture: the handler of the ``profile`` requests
:mod:`jaxtune._profiling.capture` sends, imported by the child's server when one arrives."""

from __future__ import annotations

from typing import Any

from .._isolation.frames import Done, FrameError, Request
from .._isolation.resolve import resolve_callable
from .._isolation.wire import decode_value
from .profiled import capture

__all__ = ["handle"]


def handle(server: Any, request: Request) -> Done:
    """In the child: captures the trace a ``profile`` request asks for (its fields:
    ``iters``, ``warmup``, ``logdir``)."""
    server.arrived()
    f = request.fields
    iters, warmup, logdir = f.get("iters"), f.get("warmup"), f.get("logdir")
    if (
        request.op != "profile"
        or request.ref is None
        or not (isinstance(iters, int) and isinstance(warmup, int) and isinstance(logdir, str))
    ):
        raise FrameError("a profile request names the function, iters, warmup and logdir")
    info = capture(
        resolve_callable(request.ref),
        tuple(decode_value(request.args)),
        dict(decode_value(request.kwargs)),
        iters=iters,
        warmup=warmup,
        logdir=logdir,
    )
    return Done(body={"info": info.to_dict()})
