"""JAX's megablox grouped matmul (nobody here wrote it) in TPU interpret mode, with the
group sizes a program runs: skewed, summing to the rows. In interpret mode each grid step
costs about the same, and the grid visits the tiles the groups cover: on the program's
groups 128-row tiles take about 4.7x the time of 512-row ones, on made-up group sizes
(integers in 0..16, a few dozen rows in all) the gap nearly closes. The program sets TPU
interpret mode; jaxtune carries it to the sweep child with the recorded call."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import megablox

import jaxtune

M, K, N = 2048, 128, 128
SIZES = (1200, 500, 300, 48)
TILINGS = [{"tm": tm, "tk": 128, "tn": 128} for tm in (128, 512, 1024)]


@jaxtune.autotuned(configs=TILINGS, default=TILINGS[0], name="conformance.value_gmm")
def gmm(lhs, rhs, group_sizes, *, tm, tk, tn):
    """Megablox grouped matmul with tiling ``(tm, tk, tn)``."""
    return megablox.gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))


def inputs():
    k1, k2 = jax.random.split(jax.random.key(0))
    lhs = jax.random.normal(k1, (M, K), jnp.float32)
    rhs = jax.random.normal(k2, (len(SIZES), K, N), jnp.float32)
    return lhs, rhs, jnp.array(SIZES, jnp.int32)


if __name__ == "__main__":
    pltpu.set_tpu_interpret_mode()
    step = jax.jit(lambda *a: gmm(*a).sum())
    args = inputs()
    for _ in range(int(sys.argv[1]) if sys.argv[1:] else 2):
        jax.block_until_ready(step(*args))
