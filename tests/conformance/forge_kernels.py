"""pallas-forge's fused SwiGLU as a jaxtune kernel whose space is pallas-forge's own tuning
grid (the one its `pallas_forge.tune` documents), built by its own `TuneConfig`.

pallas-forge runs its kernels with ``interpret=True`` when no TPU is present, so this needs
nothing set up on CPU.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from pallas_forge import fused_swiglu
from pallas_forge.tune import TuneConfig

import jaxtune

#: pallas-forge's grid for block sizes (`pallas_forge.tune` and `TuneConfig` docstrings).
GRID = {"block_m": [64, 128, 256], "block_n": [64, 128, 256]}

#: x [tokens, dim], weights [dim, ffn].
TOKENS, DIM, FFN = 512, 256, 512


def forge_grid(x, w_gate, w_up) -> list[dict]:
    """The grid as pallas-forge's tuner walks it."""
    return TuneConfig.from_dict(GRID).grid()


@jaxtune.autotuned(configs=forge_grid, name="conformance.pallas_forge.fused_swiglu")
def swiglu(x, w_gate, w_up, *, block_m, block_n):
    """`silu(x @ w_gate) * (x @ w_up)` by pallas-forge's fused kernel."""
    return fused_swiglu(x, w_gate, w_up, block_m=block_m, block_n=block_n)


def swiglu_args():
    rng = np.random.default_rng(0)
    return (
        jnp.asarray(rng.standard_normal((TOKENS, DIM)), jnp.float32),
        jnp.asarray(rng.standard_normal((DIM, FFN)) * 0.05, jnp.float32),
        jnp.asarray(rng.standard_normal((DIM, FFN)) * 0.05, jnp.float32),
    )
