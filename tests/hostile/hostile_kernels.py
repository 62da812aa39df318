"""Kernels that misbehave on purpose, importable by the child process (tests/hostile)."""

from __future__ import annotations

import ctypes
import os
import time

import jax
import jax.numpy as jnp

import jaxtune


def _note(name: str, value: int) -> None:
    """Writes ``value`` to the file ``name`` of HOSTILE_PID_DIR whole (a temporary file
    renamed): the test reads it as soon as it exists."""
    path = os.environ.get("HOSTILE_PID_DIR")
    if path:
        tmp = os.path.join(path, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(str(value))
        os.replace(tmp, os.path.join(path, name))


def _fork_sleeper() -> int:
    """Forks a process that inherits every descriptor (pipes, log) and outlives its parent."""
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    return pid


@jaxtune.autotuned(
    configs={"mode": ["ok", "fork_crash", "fast"]},
    default={"mode": "ok"},
    name="tests.hostile.forker",
    timeout=60,
)
def forker(x, *, mode):
    if mode == "fork_crash":
        _note("grandchild", _fork_sleeper())
        _note("child", os.getpid())
        ctypes.string_at(0)  # SIGSEGV, while the forked process holds the pipes open
    return x * 1.0


@jaxtune.autotuned(configs={"mode": ["ok", "fork_hang"]}, name="tests.hostile.fork_hang")
def fork_hang(x, *, mode):
    if mode == "fork_hang":
        _note("grandchild", _fork_sleeper())
        _note("child", os.getpid())
        while True:
            time.sleep(0.05)
    return x * 1.0


@jaxtune.autotuned(configs={"c": [1, 2]}, check=False, name="tests.hostile.recursive")
def recursive(x, *, c):
    """Calls itself on the first half: tuning it traces (and tunes) the smaller kernel."""
    n = x.shape[0]
    if n <= 2:
        return x + 0 * c
    head = recursive(x[: n // 2])
    return jnp.concatenate([head, x[n // 2 :] + 0 * c])


@jaxtune.autotuned(
    configs={
        "precision": [jax.lax.Precision.DEFAULT, jax.lax.Precision.HIGHEST],
        "acc": [jnp.float32, jnp.dtype("float32")],
    },
    name="tests.hostile.enum_configs",
)
def enum_configs(x, *, precision, acc):
    return jnp.matmul(x, x, precision=precision, preferred_element_type=acc)


@jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.hostile.plain")
def plain(x, *, c):
    return x * 1.0
