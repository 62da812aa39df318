"""A tiled Pallas matmul with block sizes to tune.

On TPU and GPU this is a real kernel; on CPU it runs in Pallas interpret mode, where bigger
blocks mean fewer grid steps, so the tuner has something real to find everywhere. On TPU the
space keeps Mosaic's tiling rule (a block's last two dimensions divisible by 8 and 128, or
spanning the array): every block edge is at least 128 or its whole dimension, and the default
is 128 (or the whole dimension where 128 does not divide it); elsewhere it starts at 32.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

import jaxtune

__all__ = ["BLOCKS", "TPU_MIN_BLOCK", "matmul"]

BLOCKS = (32, 64, 128, 256, 512)
#: Mosaic TPU's smallest legal block edge used here (its rule: the last two dimensions of a
#: block divisible by 8 and 128).
TPU_MIN_BLOCK = 128


def _on_tpu() -> bool:
    return jax.default_backend() == "tpu"


def _fits(config: dict[str, int], x: jax.ShapeDtypeStruct, y: jax.ShapeDtypeStruct) -> bool:
    (m, k), n = x.shape, y.shape[1]
    edges = ((config["block_m"], m), (config["block_n"], n), (config["block_k"], k))
    if any(dim % block for block, dim in edges):
        return False
    # Mosaic takes a block edge of at least 128 here, or one that spans its whole dimension.
    return not _on_tpu() or all(block >= TPU_MIN_BLOCK or block == dim for block, dim in edges)


def _default(x: jax.ShapeDtypeStruct, y: jax.ShapeDtypeStruct) -> dict[str, int]:
    (m, k), n = x.shape, y.shape[1]
    if not _on_tpu():
        return {"block_m": BLOCKS[0], "block_n": BLOCKS[0], "block_k": BLOCKS[0]}

    def edge(dim: int) -> int:
        return TPU_MIN_BLOCK if dim % TPU_MIN_BLOCK == 0 else dim

    return {"block_m": edge(m), "block_n": edge(n), "block_k": edge(k)}


def _kernel(x_ref: Any, y_ref: Any, o_ref: Any, *, steps_k: int) -> None:
    @pl.when(pl.program_id(2) == 0)
    def _init() -> None:
        o_ref[...] = jnp.zeros_like(o_ref)

    # The output block is float32: the sum over k steps keeps its precision whatever
    # block_k is, so every config agrees with the default within the sweep's check.
    o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)
    del steps_k


@jaxtune.autotuned(
    configs={"block_m": list(BLOCKS), "block_n": list(BLOCKS), "block_k": list(BLOCKS)},
    prune=_fits,
    default=_default,
    name="jaxtune.examples.pallas_matmul",
    flops=lambda x, y: 2.0 * x.shape[0] * x.shape[1] * y.shape[1],
    bytes=lambda x, y: float((x.size + y.size + x.shape[0] * y.shape[1]) * x.dtype.itemsize),
)
def matmul(x: jax.Array, y: jax.Array, *, block_m: int, block_n: int, block_k: int) -> jax.Array:
    """``x @ y`` as a Pallas kernel over a ``(m/block_m, n/block_n, k/block_k)`` grid.

    Examples:
        >>> import jax.numpy as jnp
        >>> from jaxtune.examples.pallas_matmul import matmul
        >>> out = matmul(jnp.ones((64, 64)), jnp.ones((64, 64)), block_m=32, block_n=32,
        ...              block_k=32)
        >>> float(out[0, 0])
        64.0
    """
    m, k = x.shape
    _, n = y.shape
    grid = (m // block_m, n // block_n, k // block_k)
    return pl.pallas_call(
        functools.partial(_kernel, steps_k=grid[2]),
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=grid,
        in_specs=[
            pl.BlockSpec((block_m, block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((block_k, block_n), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((block_m, block_n), lambda i, j, kk: (i, j)),
        interpret=jax.default_backend() == "cpu",
        name="jaxtune_example_matmul",
    )(x, y).astype(x.dtype)
