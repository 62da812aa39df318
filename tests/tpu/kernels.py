"""Autotuned TPU kernels for the TPU tier, the v5e fixtures and bench/bench_tpu.py: JAX's own Pallas
TPU flash attention (nobody here wrote it) with its block sizes as the tuning space, the
example Pallas matmul, and a kernel whose space holds configs Mosaic refuses.

On CPU every kernel here runs in TPU interpret mode (the tier's CPU twin is tests that
lower them for TPU through ``jax.export``); on the chip they are real Mosaic kernels.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import jaxtune

#: ``JAXTUNE_TPU_DRY=1``: the tier's dry run on CPU (TPU interpret mode, small shapes), set
#: here at import so that jaxtune's children have it too. Nothing here asks JAX for its
#: backend at import: on a TPU that would open the chip.
DRY = os.environ.get("JAXTUNE_TPU_DRY") == "1"
if DRY:
    pltpu.set_tpu_interpret_mode()

#: Block sizes of the flash space: 16 configs at sequence 2048, all legal on Mosaic.
FLASH_BLOCKS = (128, 256, 512, 1024)
FLASH = "tpu.flash_attention"


def block_sizes(block_q: int, block_k: int) -> fa.BlockSizes:
    """Flash attention's forward and backward (dkv, dq) block sizes from one config."""
    return fa.BlockSizes(
        block_q=block_q,
        block_k_major=block_k,
        block_k=block_k,
        block_b=1,
        block_q_major_dkv=block_q,
        block_k_major_dkv=block_k,
        block_k_dkv=block_k,
        block_q_dkv=block_q,
        block_k_major_dq=block_k,
        block_k_dq=block_k,
        block_q_dq=block_q,
    )


def _fits(config: Mapping[str, int], q: Any, k: Any, v: Any) -> bool:
    return q.shape[2] % config["block_q"] == 0 and k.shape[2] % config["block_k"] == 0


@jaxtune.autotuned(
    configs={"block_q": list(FLASH_BLOCKS), "block_k": list(FLASH_BLOCKS)},
    prune=_fits,
    default={"block_q": 128, "block_k": 128},
    name=FLASH,
)
def flash(q: jax.Array, k: jax.Array, v: jax.Array, *, block_q: int, block_k: int) -> jax.Array:
    """Causal flash attention over ``(batch, heads, seq, head_dim)``; under ``jax.grad`` the
    same block sizes drive the dkv and dq kernels."""
    return fa.flash_attention(
        q,
        k,
        v,
        causal=True,
        sm_scale=1.0 / math.sqrt(q.shape[-1]),
        block_sizes=block_sizes(block_q, block_k),
    )


def qkv(
    batch: int = 2, heads: int = 8, seq: int = 2048, head_dim: int = 128
) -> tuple[jax.Array, ...]:
    """bf16 q, k, v of ``(batch, heads, seq, head_dim)``."""
    keys = jax.random.split(jax.random.key(0), 3)
    shape = (batch, heads, seq, head_dim)
    return tuple(jax.random.normal(k, shape, jnp.bfloat16) for k in keys)


def _tile_kernel(x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] * 2.0


#: Blocks of the ``tiles`` kernel: (8, 100) breaks Mosaic's (8, 128) rule; (4096, 4096)
#: float32 needs 3 x 64 MiB of VMEM, far beyond a v5e core's; the rest are legal.
TILES = ((8, 100), (8, 128), (256, 512), (4096, 4096))


@jaxtune.autotuned(
    configs=[{"rows": r, "cols": c} for r, c in TILES],
    prune=lambda cfg, x: x.shape[0] % cfg["rows"] == 0,
    default={"rows": 8, "cols": 128},
    check=False,
    name="tpu.tiles",
)
def tiles(x: jax.Array, *, rows: int, cols: int) -> jax.Array:
    """``2 * x`` over ``(rows, cols)`` blocks: a space where some configs cannot compile."""
    grid = (x.shape[0] // rows, pl.cdiv(x.shape[1], cols))
    return pl.pallas_call(
        _tile_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=grid,
        in_specs=[pl.BlockSpec((rows, cols), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((rows, cols), lambda i, j: (i, j)),
        interpret=DRY,
        name="tiles",
    )(x)
