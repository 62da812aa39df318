"""Kernels over the kinds of argument a program passes (tests/test_argument_kinds.py):
typed PRNG keys, float8 outputs, any pytree. Importable by sweep children and by the
programs the tests run. Each kernel's output is the same under every config (the numerics
check passes), except where said."""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp

import jaxtune


def _chunked(x: jax.Array, chunks: int) -> jax.Array:
    """``x`` computed in ``chunks`` pieces (the same values, another program)."""
    return jnp.concatenate([c * 1.0 for c in jnp.split(x.reshape(-1), chunks)]).reshape(x.shape)


@jaxtune.autotuned(configs={"chunks": [1, 2]}, name="tests.keyed_noise")
def keyed_noise(x: jax.Array, key: jax.Array, *, chunks: int) -> jax.Array:
    """``x`` plus noise drawn from a typed key (or an array of them: one draw per key)."""
    if key.shape:
        noise = jax.vmap(lambda k: jax.random.normal(k, x.shape[1:], x.dtype))(key)
    else:
        noise = jax.random.normal(key, x.shape, x.dtype)
    return _chunked(x, chunks) + noise


@jaxtune.autotuned(configs={"scale": [1.0, 2.0]}, check=False, name="tests.scaled_noise")
def scaled_noise(x: jax.Array, key: jax.Array, *, scale: float) -> jax.Array:
    """``x`` times the config's scale plus noise: the output tells the config used."""
    return x * scale + 0.0 * jax.random.normal(key, x.shape, x.dtype)


@jaxtune.autotuned(configs={"chunks": [1, 2]}, name="tests.to_float8")
def to_float8(x: jax.Array, *, chunks: int) -> jax.Array:
    """``x`` as float8 (e4m3fn), computed in pieces."""
    return _chunked(x, chunks).astype(jnp.float8_e4m3fn)


@jaxtune.autotuned(configs={"scale": [1.0, 2.0]}, check=False, name="tests.tree_sum")
def tree_sum(tree: object, *, scale: float) -> jax.Array:
    """The sum of a pytree's leaves (any registered type: a NamedTuple of the caller's),
    times the config's scale."""
    return jax.tree_util.tree_reduce(operator.add, tree) * scale


@jaxtune.autotuned(configs={"scale": [1.0, 2.0]}, check=False, name="tests.scaled")
def scaled(x: jax.Array, *, scale: float) -> jax.Array:
    """``x`` times the config's scale: the output tells the config used."""
    return x * scale
