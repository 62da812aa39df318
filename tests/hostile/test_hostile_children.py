"""Kernels that crash, fork or recurse, with the default (child) isolation. Nothing leaks, a
crash is a crash, nothing outlives its parent, nothing deadlocks.

Covers docs/isolation.md, "When a config fails" and "What a child starts ends with it", and
docs/errors.md, "Hostile input"."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc

import jax.numpy as jnp
import pytest
from faulty_kernels import faulty
from hostile_kernels import forker
from waiting import all_gone, until

from jaxtune._core.vocabulary import Failure, Measurement
from jaxtune._isolation import logs as _logs
from jaxtune._isolation import process as _process
from jaxtune._tuning.sweep import runner as _runner

pytestmark = [pytest.mark.slow, pytest.mark.child]


@pytest.fixture(autouse=True)
def _children(monkeypatch, crash_timing, tmp_path):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    # A private temp dir: the logs counted are this test's, not other processes'.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield
    _process.shutdown_children()


def sweep(kernel, space, default, runner):
    x = jnp.ones(64)
    task = kernel.options.bound(kernel.options.bind((x,), {}), space, default).sweep_task()
    return runner.sweep(task)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


#: Sweeps with a crash: past the first two (which open what they keep), enough to see one
#: fd or log a sweep pile up, and more than ``KEEP_CRASH_LOGS`` crash logs written.
SWEEPS = _logs.KEEP_CRASH_LOGS + 3


def test_fds_and_logs_stay_flat_across_sweeps_with_a_crashing_config():
    runner = _runner.ProcessRunner()
    space = [{"mode": "ok"}, {"mode": "segfault"}]
    counts = []
    for _ in range(SWEEPS):
        outcome = sweep(faulty, space, {"mode": "ok"}, runner)
        (crash,) = [m for m in outcome.measurements if m.config["mode"] == "segfault"]
        assert isinstance(crash, Failure) and crash.stage == "crash", crash
        logs = _logs.log_dir()
        counts.append(
            (
                open_fds(),
                len(list(logs.glob(f"child-{os.getpid()}-*.log"))),
                len(list(logs.glob("crash-*"))),
            )
        )
    fds = [c[0] for c in counts[2:]]
    assert max(fds) == min(fds), counts  # flat after the first sweeps opened what they keep
    assert all(c[1] <= 1 for c in counts), counts  # only the live pooled child's log
    assert counts[-1][2] == _logs.KEEP_CRASH_LOGS, counts
    _process.shutdown_children()
    # A healthy child leaves none (other processes on the machine may have live ones).
    assert not list(_logs.log_dir().glob(f"child-{os.getpid()}-*.log"))


def test_a_large_crash_log_is_tailed_with_seek(tmp_path):
    log = tmp_path / "child-big.log"
    with open(log, "wb") as f:
        f.truncate(300 << 20)  # 300 MB (sparse), then the crash at the end
        f.seek(300 << 20)
        f.write(b"Fatal Python error: Segmentation fault\n\nCurrent thread 0x1:\n  File x\n")
    child = object.__new__(_process.ChildProcess)
    child.log_path = str(log)
    child._trimmed = 0
    tracemalloc.start()
    tail = child.stderr_tail(0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert tail.startswith("Fatal Python error: Segmentation fault")
    assert peak < 4 << 20, peak


def test_a_kernel_that_forks_then_crashes_is_a_crash_and_its_fork_dies(monkeypatch, tmp_path):
    monkeypatch.setenv("HOSTILE_PID_DIR", str(tmp_path))
    runner = _runner.ProcessRunner()
    start = time.monotonic()
    outcome = sweep(forker, [{"mode": "ok"}, {"mode": "fork_crash"}], {"mode": "ok"}, runner)
    took = time.monotonic() - start
    (crash,) = [m for m in outcome.measurements if m.config["mode"] == "fork_crash"]
    assert isinstance(crash, Failure), crash
    assert crash.stage == "crash" and "SIGSEGV" in crash.reason, crash
    assert took < forker.options.timeout, took  # noticed when the child died, not at the timeout
    assert isinstance(outcome.default, Measurement)
    grandchild = int((tmp_path / "grandchild").read_text())
    all_gone([grandchild], "the process the kernel forked to end with the sweep's child")


PARENT = """
import jax.numpy as jnp
from hostile_kernels import fork_hang
fork_hang.tune(jnp.ones(8))
"""


def test_nothing_the_child_started_outlives_a_killed_parent(tmp_path):
    env = dict(os.environ)
    env.update(HOSTILE_PID_DIR=str(tmp_path), JAXTUNE_ISOLATION="process", JAXTUNE_TIMEOUT="300")
    env["TMPDIR"] = str(tmp_path)  # where the parent puts its child's log
    env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(__file__).parent), *sys.path])
    parent = subprocess.Popen([sys.executable, "-c", PARENT], env=env)
    try:
        names = ("child", "grandchild")  # each written whole (hostile_kernels._note)
        until(
            lambda: all((tmp_path / n).exists() for n in names), "the child's and its fork's pids"
        )
        pids = [int((tmp_path / name).read_text()) for name in names]
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    all_gone(pids, "the child and its fork to end after their parent was killed")
    assert not list(tmp_path.glob("jaxtune-*/child-*.log"))  # the child deleted its log


RECURSIVE = """
import jax, jax.numpy as jnp
from hostile_kernels import recursive
print("out", recursive(jnp.arange(16.0)).tolist()[:3])
print("jit", jax.jit(recursive)(jnp.arange(8.0)).tolist()[:3])
"""


@pytest.mark.parametrize("isolation", ["process", "inline"])
def test_a_recursive_kernel_does_not_deadlock_in_tune_mode(py, tmp_path, isolation):
    proc = py(
        RECURSIVE,
        env={
            "JAXTUNE_MODE": "tune",
            "JAXTUNE_ISOLATION": isolation,
            "JAXTUNE_CACHE_DIR": str(tmp_path),
        },
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "out [0.0, 1.0, 2.0]" in proc.stdout
    assert "jit [0.0, 1.0, 2.0]" in proc.stdout
