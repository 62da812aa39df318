"""What the distributed layer keeps across calls in this process: one
:class:`~jaxtune._core.state.ProcessState`, whose parts the layer's modules declare."""

from __future__ import annotations

from .._core.state import ProcessState

__all__ = ["DISTRIBUTED_STATE"]

#: Multi-host agreement's registries: the answers agreed this round, and the round.
DISTRIBUTED_STATE = ProcessState("distributed")
