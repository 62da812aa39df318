"""The child side of a trace capture: the handler of the ``profile`` requests
:mod:`jaxtune._profiling.capture` sends, imported by the child's server when one arrives."""

from __future__ import annotations

from typing import Any

from .._core import typed
from .._isolation.child import Server
from .._isolation.frames import Done, FrameError, Request
from .._isolation.resolve import resolve_callable
from .._isolation.wire import decode_value
from .capture import Captured, capture_options
from .profiled import capture

__all__ = ["handle"]


def handle(server: Server, received: Request[Any]) -> Done:
    """In the child: captures the trace a ``profile`` request asks for (its fields: the
    :class:`~jaxtune._core.vocabulary.ProfileOptions` of the capture)."""
    server.arrived()
    request = received.with_fields(received.op, capture_options(received))
    if request.ref is None:
        raise FrameError("a profile request names the function to profile")
    info = capture(
        resolve_callable(request.ref),
        tuple(decode_value(request.args)),
        dict(decode_value(request.kwargs)),
        request.fields,
    )
    return Done(body=typed.encode(Captured(info=info)))
