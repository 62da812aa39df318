"""Kernels for tests/test_lowering_pool.py, in a module of their own: a lowering process
imports it by reference, as a sweep's child does."""

from __future__ import annotations

import os

import jax.numpy as jnp

import jaxtune

#: The configs each test sweeps: more than one process's share.
SPACE = [{"n": n} for n in range(2, 8)]
TRACES: list[int] = []  # one per trace of a kernel below, in this process

# A lowering process (on CPU, jaxtune off), not the test's own: a real crash.
if os.environ.get("JAXTUNE_TEST_LOWERING_CRASH") and os.environ.get("JAXTUNE_MODE") == "off":
    os.abort()


def _sines(x, n):
    for i in range(n):
        x = jnp.abs(jnp.sin(x)) if i == 0 else jnp.abs(x)
    return x


@jaxtune.autotuned(configs={"n": [c["n"] for c in SPACE]}, name="tests.lowering.sines")
def sines(x, *, n):
    TRACES.append(n)
    return _sines(x, n)


@jaxtune.autotuned(configs={"n": [c["n"] for c in SPACE]}, name="tests.lowering.per_process")
def per_process(x, *, n):
    """Lowers to another program in each process (a constant its code reads from the
    process it runs in, where no code digest sees it)."""
    TRACES.append(n)
    return _sines(x, n) * float(os.getpid())
