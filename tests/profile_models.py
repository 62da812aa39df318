"""Models profiled by the tests, importable by the profiling child."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

import jaxtune


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def _tiled(body, name, x, cost=None):
    block = (32, x.shape[1])
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 32,),
        in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
        out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
        interpret=True,
        name=name,
        cost_estimate=cost,
    )(x)


def double_it(x):
    return _tiled(_double, "double_it", x)


def add_one(x):
    cost = pl.CostEstimate(flops=x.size, transcendentals=0, bytes_accessed=2 * x.size * 4)
    return _tiled(_add_one, "add_one", x, cost)


@jaxtune.profiled(iters=3)
def model(x):
    """Two interpret-mode Pallas kernels (one called at two sites) and XLA ops between."""
    y = jnp.sin(x) @ x
    z = double_it(y)
    w = jnp.tanh(z) * 3
    v = add_one(w)
    return double_it(jnp.cos(v)).sum()


@jaxtune.autotuned(
    configs={"chunk": [64, 128]},
    name="tests.profile.rowsum",
    flops=lambda x: float(x.size),
    bytes=lambda x: float(x.size * 4),
)
def rowsum(x, *, chunk):
    return x.reshape(x.shape[0], -1, chunk).sum(axis=(1, 2))


def with_autotuned(x):
    return rowsum(jnp.exp(x)) * 2
