"""Kernels with real faults, importable by the child process (tests of the child runner)."""

from __future__ import annotations

import ctypes
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxtune

MODES = [
    "ok",
    "fast",
    "segfault",
    "abort",
    "exit3",
    "hang",
    "oom",
    "compile_error",
    "run_error",
    "wrong",
    "run_abort",
    "late_abort",
    "late_error",
]


def _abort(x):
    os.abort()


def _raise(x):
    raise RuntimeError("boom at run time")


_CALLS = {"late_abort": 0, "late_error": 0}


def _late(mode):
    """A callback that works on its first two calls (the output check and a warm-up) and
    fails from the third on, while the config is being timed."""

    def callback(x):
        _CALLS[mode] += 1
        if _CALLS[mode] >= 3:
            if mode == "late_abort":
                os.abort()
            raise RuntimeError("boom on a later call")
        return x

    return callback


@jaxtune.autotuned(configs={"mode": MODES}, default={"mode": "ok"}, name="tests.faulty", timeout=4)
def faulty(x, *, mode):
    if mode == "segfault":
        ctypes.string_at(0)
    elif mode == "abort":
        os.abort()
    elif mode == "exit3":
        os._exit(3)
    elif mode == "hang":
        if os.environ.get("HANG_MARK"):  # a test waits for the child to be in the hang
            open(os.environ["HANG_MARK"], "w").close()
        while True:
            time.sleep(0.01)
    elif mode == "oom":
        hog = np.ones(1 << 33, dtype=np.uint8)  # 8 GiB, over the child's memory limit
        return x + float(hog[0]) - 1.0
    elif mode == "compile_error":
        raise ValueError("block does not divide the array")
    elif mode == "run_error":
        return jax.pure_callback(_raise, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    elif mode == "run_abort":
        return jax.pure_callback(_abort, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    elif mode in ("late_abort", "late_error"):
        return jax.pure_callback(_late(mode), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    elif mode == "wrong":
        return x + 1.0
    elif mode == "fast":
        return x * 1.0
    y = x
    for _ in range(40):
        y = jnp.sin(y) + x
    return y - y + x


@jaxtune.autotuned(
    configs={"mode": ["ok", "slow_trace", "segfault_later", "fast"]},
    default={"mode": "ok"},
    name="tests.crash_beside_a_compile",
    timeout=60,
)
def crash_beside_a_compile(x, *, mode):
    """``segfault_later`` crashes at trace time while ``slow_trace`` is still being traced
    in the other compile thread: two configs are compiling when the child dies."""
    if mode == "slow_trace":
        time.sleep(1.5)
    elif mode == "segfault_later":
        time.sleep(0.3)
        ctypes.string_at(0)
    return x * 1.0 if mode == "fast" else x + 0.0


@jaxtune.autotuned(configs={"scale": [1, 2]}, check=False, name="tests.pid_probe")
def pid_probe(x, *, scale):
    """Records, at trace time, which process traced it."""
    with open(os.environ["PID_PROBE_FILE"], "a") as f:
        f.write(f"{os.getpid()}\n")
    return x * scale


@jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.identity_any_dtype")
def identity(x, *, c):
    return x


@jaxtune.autotuned(
    configs={"mode": ["ok", "segfault", "fast"]},
    default={"mode": "ok"},
    name="tests.faulty_light",
    timeout=120,
)
def faulty_light(x, *, mode):
    """Cheap at any size (the crash tests send tens of MB): only ``segfault`` is faulty."""
    if mode == "segfault":
        ctypes.string_at(0)
    if mode == "fast":
        return x * 1.0
    return x + 0.0


def _result_fd() -> int:
    return int(sys.argv[sys.argv.index("--res-fd") + 1])


@jaxtune.autotuned(
    configs={"mode": ["ok", "bad_length", "bad_msgpack", "not_a_frame", "fast"]},
    default={"mode": "ok"},
    name="tests.garbler",
    timeout=60,
)
def garbler(x, *, mode):
    """Writes bytes that are no frame on the child's result pipe (a kernel that believes
    fd N is its own), then works."""
    if mode == "bad_length":
        os.write(_result_fd(), b"\xff" * 16)
    elif mode == "bad_msgpack":
        os.write(_result_fd(), b"\x00\x00\x00\x04\xc1\xc1\xc1\xc1")
    elif mode == "not_a_frame":  # well-formed msgpack (an empty map), but no frame
        os.write(_result_fd(), b"\x00\x00\x00\x01\x80")
    return x * 1.0 if mode == "fast" else x + 0.0


def _start_daemon(pid_file: str) -> None:
    """Double-forks a daemon in its own session that writes its pid (whole: a temporary
    file renamed) and sleeps."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            tmp = f"{pid_file}.tmp"
            code = (
                f"import os, time; open({tmp!r}, 'w').write(str(os.getpid())); "
                f"os.replace({tmp!r}, {pid_file!r}); time.sleep(600)"
            )
            os.execv(sys.executable, [sys.executable, "-c", code])
        os._exit(0)


_DAEMONS: list[bool] = []


@jaxtune.autotuned(configs={"c": [1, 2]}, default={"c": 1}, name="tests.daemonizer")
def daemonizer(x, *, c):
    """Config ``c=2`` starts a daemon (at trace time, in the child), then works."""
    if c == 2 and not _DAEMONS and not os.path.exists(os.environ["DAEMON_PID_FILE"]):
        _DAEMONS.append(True)  # once: the pid file appears only once the daemon runs
        _start_daemon(os.environ["DAEMON_PID_FILE"])
    return x * 1.0
