"""The child side of a trace capture: the handler of the ``profile`` requests
:mod:`jaxtune._profiling.capture` sends, imported by the child's server when one arrives."""

from __future__ import annotations

from typing import Any

from .._isolation.resolve import resolve_callable
from .._isolation.wire import decode_value
from .profiled import capture

__all__ = ["handle"]


def handle(server: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """In the child: captures the trace a ``profile`` request asks for."""
    server.arrived()
    info = capture(
        resolve_callable(msg["ref"]),
        tuple(decode_value(msg["args"])),
        dict(decode_value(msg["kwargs"])),
        iters=msg["iters"],
        warmup=msg["warmup"],
        logdir=msg["logdir"],
    )
    return {"t": "done", "info": info}
