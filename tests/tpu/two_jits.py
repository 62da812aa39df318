"""A program whose kernels sit in two jitted functions: flash attention in ``train`` (called
every step; ``@jaxtune.profiled``, so ``jaxtune profile --`` reports it) and the example
Pallas matmul in ``evaluate`` (from the second step on), looping until it is stopped
(``--steps N`` ends it). ``jaxtune tune -- python -m
tests.tpu.two_jits`` must record and tune both."""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune.examples.pallas_matmul import matmul
from tests.tpu.kernels import DRY, flash, qkv, tiles


@jaxtune.profiled(iters=3)
@jax.jit
def train(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return flash(q, k, v).astype(jnp.float32).sum()


@jax.jit
def evaluate(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(matmul(x, w)).astype(jnp.float32).mean()


@jax.jit
def scale(x: jax.Array) -> jax.Array:
    return tiles(x).sum()


def inputs() -> tuple[tuple[jax.Array, ...], tuple[jax.Array, jax.Array]]:
    """``(q, k, v)`` of the attention and ``(x, w)`` of the matmul."""
    n = 1024 if jax.default_backend() != "cpu" else 128
    x = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    w = jax.random.normal(jax.random.key(2), (n, n), jnp.bfloat16)
    return qkv(seq=1024), (x, w)


def tiles_input() -> jax.Array:
    """The ``tiles`` kernel's float32 input: 64 MiB on a chip."""
    return jnp.ones((256, 512) if DRY else (4096, 4096), jnp.float32)


def main(steps: int | None, *, tiles_only: bool = False) -> None:
    if tiles_only:
        print(f"tiles {float(scale(tiles_input()))}", flush=True)
        return
    (q, k, v), (x, w) = inputs()
    step = 0
    while steps is None or step < steps:
        loss = float(train(q, k, v))
        if step >= 1:
            loss += float(evaluate(x, w))
        print(f"step {step} {loss:.4f}", flush=True)
        step += 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--tiles", action="store_true", help="run the tiles kernel only")
    parsed = parser.parse_args()
    main(parsed.steps, tiles_only=parsed.tiles)
