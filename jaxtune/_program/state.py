"""What the program layer keeps across calls in this process: one
:class:`~jaxtune._core.state.ProcessState`, whose parts the layer's modules declare."""

from __future__ import annotations

from .._core.state import ProcessState

__all__ = ["PROGRAM_STATE"]

#: The program readers' registries: the marks autotuned calls made, memos of source files.
PROGRAM_STATE = ProcessState("program")
