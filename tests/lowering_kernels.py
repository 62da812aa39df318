"""Kernels for tests/test_lowering_pool.py, in a module of their own: a lowering process
imports it by reference, as a sweep's child does."""

from __future__ import annotations

import os
import pathlib
import time

import jax.numpy as jnp

import jaxtune

#: The configs each test sweeps: more than one process's share.
SPACE = [{"n": n} for n in range(2, 8)]
TRACES: list[int] = []  # one per trace of a kernel below, in this process

#: A folder: each lowering process (on CPU, jaxtune off), not the test's own, notes its
#: pid there and crashes (a real one) as it imports this module.
CRASHED = os.environ.get("JAXTUNE_TEST_LOWERING_CRASH")
if CRASHED and os.environ.get("JAXTUNE_MODE") == "off":
    pathlib.Path(CRASHED, str(os.getpid())).touch()
    os.abort()


def _until_processes_crashed(count: int = 2) -> None:
    """In the test's process: waits until ``count`` lowering processes noted their crash
    (the sweep lowers configs itself while they start, and would else be done first)."""
    deadline = time.monotonic() + 60
    while CRASHED and len(os.listdir(CRASHED)) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _sines(x, n):
    for i in range(n):
        x = jnp.abs(jnp.sin(x)) if i == 0 else jnp.abs(x)
    return x


@jaxtune.autotuned(configs={"n": [c["n"] for c in SPACE]}, name="tests.lowering.sines")
def sines(x, *, n):
    TRACES.append(n)
    if len(TRACES) == 2:  # the processes started after the first
        _until_processes_crashed()
    return _sines(x, n)


@jaxtune.autotuned(configs={"n": [c["n"] for c in SPACE]}, name="tests.lowering.per_process")
def per_process(x, *, n):
    """Lowers to another program in each process (a constant its code reads from the
    process it runs in, where no code digest sees it)."""
    TRACES.append(n)
    return _sines(x, n) * float(os.getpid())


#: Configs whose knob is a tuple: a lowering process must be told a tuple, not a list.
PAIRS = [{"pair": (n, 1)} for n in range(2, 8)]


@jaxtune.autotuned(configs={"pair": [c["pair"] for c in PAIRS]}, name="tests.lowering.chatty")
def chatty(x, *, pair):
    """Prints as it traces (in a lowering process: onto the stdout it answers on), and
    refuses a knob that did not arrive as the tuple the space holds."""
    TRACES.append(pair[0])
    print(f"tracing pair={pair}")
    if not isinstance(pair, tuple):
        raise TypeError(f"pair arrived as a {type(pair).__name__}")
    return _sines(x, pair[0])
