"""Kernels for the ports of Tokamax's and tune-jax's autotuning tests.

Module-level definitions with stable names, so the sweep child re-imports them. Where a test
is about which config is fastest, the configs differ by far more than noise (the work is
proportional to the knob) and give the same output; where a test is about which config was
used, the output says so (``check=False``, since the outputs then differ on purpose).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

import jaxtune


@jaxtune.autotuned(configs={"reps": [8, 1, 3]}, name="conformance.reps")
def reps(x, w, *, reps):
    """``reps`` chained 256x256 matmuls whose result is discarded: the time grows with
    ``reps`` (8x between the extremes), the output does not depend on it. The default (the
    first config) is the slowest, so a sweep that kept it would be seen."""
    junk = jax.lax.fori_loop(0, reps, lambda i, c: jnp.tanh(c @ w), x)
    return x * 2 + 0.0 * junk.sum()


@jaxtune.autotuned(configs={"k": [0, 1, 2, 3]}, check=False, name="conformance.add_k")
def add_k(x, *, k):
    """Adds the config to its input: the output names the config that ran."""
    return x + k


@jaxtune.autotuned(configs={"chunk": [128, 1024]}, name="conformance.softplus")
def softplus(x, *, chunk):
    """Softplus over chunks of the flattened input: one output for every config."""
    return jax.nn.softplus(x.reshape(-1, chunk)).reshape(x.shape)


def softplus_loss(x):
    return softplus(x).sum()


def two_kernels(x):
    """Reaches ``softplus`` once and ``add_k`` twice with one key."""
    return add_k(softplus(x)) + add_k(x)


def _sleep(x, ms):
    def wait(v):
        time.sleep(ms / 1000)
        return v

    return jax.pure_callback(wait, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


@jaxtune.autotuned(configs={"ms": [20, 30]}, default={"ms": 0}, name="conformance.sleep_default")
def sleep_default(x, *, ms):
    """Sleeps ``ms`` milliseconds on the host. The default (0 ms) is outside ``configs``
    and faster than every config in it (docs/autotuned.md, "Sweeps": the default is
    always measured, and stored when it is the fastest)."""
    return _sleep(x, ms)


@jaxtune.autotuned(configs={"ms": [20, 40]}, timer="wall", name="conformance.sleep_wall")
def sleep_wall(x, *, ms):
    """Sleeps a known time, timed by the wall clock."""
    return _sleep(x, ms)


@jaxtune.autotuned(configs={"ms": [3000, 4000]}, timeout=1, name="conformance.sleep_long")
def sleep_long(x, *, ms):
    """Every config runs longer than the 1 s timeout."""
    return _sleep(x, ms)


@jaxtune.autotuned(configs={"ms": [1, 2]}, timeout=120, name="conformance.sleep_timeout")
def sleep_timeout(x, *, ms):
    """A generous timeout that no config reaches."""
    return _sleep(x, ms)


@jaxtune.autotuned(configs={"flavour": ["a", "b"]}, name="conformance.always_fails")
def always_fails(x, *, flavour):
    """Raises for every config."""
    raise ValueError(f"flavour {flavour} is broken")


@jaxtune.autotuned(configs={"n": [256, 32]}, check=False, name="conformance.no_arrays")
def no_arrays(*, n):
    """Takes no arguments at all: the config alone decides the work (512x between the two)
    and the output's shape."""
    a = jnp.ones((n, n), jnp.float32)
    return a @ a


@jaxtune.autotuned(configs={"chunk": [64]}, name="conformance.one_config")
def one_config(x, *, chunk):
    """A space of one config."""
    return jnp.cumsum(x.reshape(-1, chunk), axis=1).reshape(x.shape)


@jaxtune.autotuned(
    configs={"chunk": [128, 256, 512, 1024]},
    default=lambda x: {"chunk": min(x.size, 1024)},
    prune=lambda cfg, x: x.size % cfg["chunk"] == 0,
    name="conformance.heuristic_default",
)
def heuristic_default(x, *, chunk):
    """A default computed from the shapes (Tokamax's heuristics config)."""
    return jax.nn.softplus(x.reshape(-1, chunk)).reshape(x.shape)


def _split_matmul(a, b, splits):
    acc = jnp.zeros((a.shape[0], b.shape[1]), a.dtype)
    for x, y in zip(jnp.split(a, splits, axis=1), jnp.split(b, splits, axis=0), strict=True):
        acc = acc + x @ y
    return acc


#: A function that is already ``jax.jit``-ed with its knob static, then autotuned (tune-jax
#: tunes ``jax.jit(attention, static_argnames=...)``).
split_matmul = jaxtune.autotuned(configs={"splits": [4, 1]}, name="conformance.split_matmul")(
    jax.jit(_split_matmul, static_argnames=("splits",))
)


@jaxtune.autotuned(configs={"splits": [1, 2]}, name="conformance.split_keyword")
def split_keyword(a, *, b, splits):
    """An array passed by keyword (tune-jax's ``fn(A, *, B, splits)``)."""
    return _split_matmul(a, b, splits)


@jaxtune.autotuned(configs={"unroll": [1, 2]}, name="conformance.elementwise")
def elementwise(x, *, unroll):
    """Elementwise (so any sharding of ``x`` carries through): twice ``tanh``, in a loop
    unrolled by the config."""
    return jax.lax.fori_loop(0, 2, lambda i, c: jnp.tanh(c), x, unroll=unroll)
