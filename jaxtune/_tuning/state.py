"""What the tuning layer keeps across calls in this process: one
:class:`~jaxtune._core.state.ProcessState`, whose parts the layer's modules declare."""

from __future__ import annotations

from .._core.state import ProcessState

__all__ = ["TUNING_STATE"]

#: The tuning flow's registries: kernels, the calls behind marks, cache stores and layers, the shared store's connections, recordings, code digests, staleness, scopes' jitted functions.
TUNING_STATE = ProcessState("tuning")
