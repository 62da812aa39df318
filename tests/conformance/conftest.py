"""Fixtures of the conformance suite (tests/conformance/), shared by its parts: the ports of
peers' autotuning tests, real third-party kernel libraries, and real model programs.

Everything here runs what users run: the default (child) isolation and the real lookup.
The helpers that are not fixtures live in ``support.py``.
"""

from __future__ import annotations

import pytest
from jax._src import config as jax_config
from jax.experimental.pallas import tpu as pltpu


@pytest.fixture
def tune_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """``JAXTUNE_MODE=tune`` for one test: a lookup that misses sweeps."""
    monkeypatch.setenv("JAXTUNE_MODE", "tune")


@pytest.fixture
def tpu_interpret():
    """TPU interpret mode for one test (``pltpu.set_tpu_interpret_mode()``), so TPU Pallas
    kernels run on CPU; jaxtune carries it into the sweep child. Switched off afterwards."""
    pltpu.set_tpu_interpret_mode()
    yield
    jax_config.pallas_tpu_interpret_mode_context_manager.set_global(None)
