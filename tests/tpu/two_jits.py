"""A program whose kernels sit in two jitted functions: flash attention in ``train`` (called
every step) and the example Pallas matmul in ``evaluate`` (from the second step on), looping
until it is stopped (``--steps N`` ends it). ``jaxtune tune -- python -m
tests.tpu.two_jits`` must record and tune both."""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from jaxtune.examples.pallas_matmul import matmul
from tests.tpu.kernels import flash, qkv


@jax.jit
def train(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return flash(q, k, v).astype(jnp.float32).sum()


@jax.jit
def evaluate(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(matmul(x, w)).astype(jnp.float32).mean()


def main(steps: int | None) -> None:
    q, k, v = qkv(seq=1024) if jax.default_backend() != "cpu" else qkv(1, 1, 256, 128)
    n = 1024 if jax.default_backend() != "cpu" else 128
    x = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    w = jax.random.normal(jax.random.key(2), (n, n), jnp.bfloat16)
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
    main(parser.parse_args().steps)
