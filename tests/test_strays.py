"""A daemon a config starts in the child (double fork, setsid) does not outlive it."""

from __future__ import annotations

import os
import signal

import jax.numpy as jnp
import pytest
from faulty_kernels import daemonizer
from waiting import all_gone, until

from jaxtune._isolation import process as _process
from jaxtune._tuning.sweep import runner as _runner

pytestmark = [pytest.mark.slow, pytest.mark.child]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_setsid_daemon_started_by_a_config_ends_with_the_child(tmp_path, monkeypatch):
    pid_file = tmp_path / "daemon.pid"
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    monkeypatch.setenv("DAEMON_PID_FILE", str(pid_file))
    x = jnp.ones(8)
    task = daemonizer.options.bound(
        daemonizer.options.bind((x,), {}), [{"c": 1}, {"c": 2}], {"c": 1}
    ).sweep_task()
    daemon = None
    try:
        _runner.ProcessRunner().sweep(task)
        until(pid_file.exists, "the daemon's pid file")
        daemon = int(pid_file.read_text())
        assert alive(daemon)
        assert os.getsid(daemon) != os.getsid(0)  # it left the session
        _process.shutdown_children()  # what the program's end runs
        # Killed, it needs a moment on the cores to be gone; left alone it sleeps 600 s.
        all_gone([daemon], "the daemon to end with the child")
    finally:
        _process.shutdown_children()
        if daemon is not None and alive(daemon):
            os.kill(daemon, signal.SIGKILL)
