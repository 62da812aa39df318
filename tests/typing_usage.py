"""Checked by mypy (`nox -s types`), not run: decorated functions keep their types."""

from __future__ import annotations

from typing import assert_type

import jax

import jaxtune


@jaxtune.profiled
def step(x: jax.Array, scale: float) -> jax.Array:
    return x * scale


@jaxtune.profiled(iters=3)
def loss(x: jax.Array) -> float:
    return float(x.sum())


@jaxtune.autotuned(configs={"chunk": [8, 16]})
def kernel(x: jax.Array, *, chunk: int) -> jax.Array:
    return x


def uses(x: jax.Array) -> None:
    assert_type(step(x, 2.0), jax.Array)
    assert_type(loss(x), float)
    assert_type(kernel(x), jax.Array)
    assert_type(kernel.__wrapped__(x, chunk=8), jax.Array)
    assert_type(step.profile(x, 2.0), jaxtune.Profile)
    step(x, "two")  # type: ignore[arg-type]
    loss(x, 1)  # type: ignore[call-arg]
