"""What the isolation layer keeps across calls in this process: one
:class:`~jaxtune._core.state.ProcessState`, whose parts the layer's modules declare."""

from __future__ import annotations

from .._core.state import ProcessState

__all__ = ["ISOLATION_STATE"]

#: The child-process service's registries: pooled children and those started ahead of need, the log folder, scripts re-imported in a child, notes for the parent.
ISOLATION_STATE = ProcessState("isolation")
