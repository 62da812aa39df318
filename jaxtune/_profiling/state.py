"""What the profiling layer keeps across calls in this process: one
:class:`~jaxtune._core.state.ProcessState`, whose parts the layer's modules declare."""

from __future__ import annotations

from .._core.state import ProcessState

__all__ = ["PROFILING_STATE"]

#: The profiling flow's registries: Mosaic kernel bodies already counted.
PROFILING_STATE = ProcessState("profiling")
