"""Fixtures for the conformance suite: the kernels, their arguments, and interpret mode."""

from __future__ import annotations

import pytest
from jax._src import config as jax_config
from jax.experimental.pallas import tpu as pltpu

from . import kernels

#: name -> (autotuned kernel, function building its arguments)
KERNELS = {
    "flash_attention": (kernels.flash, kernels.flash_args),
    "matmul": (kernels.matmul, kernels.matmul_args),
    "gmm": (kernels.gmm, kernels.gmm_args),
    "paged_attention": (kernels.paged, kernels.paged_args),
    "splash_attention": (kernels.splash, kernels.splash_args),
}


@pytest.fixture
def interpret_globally():
    """``pltpu.set_tpu_interpret_mode()`` for one test, switched off afterwards."""
    pltpu.set_tpu_interpret_mode()
    yield
    jax_config.pallas_tpu_interpret_mode_context_manager.set_global(None)
