"""A config that crashes while its (large) arguments are still arriving is a failed config."""

from __future__ import annotations

import subprocess
import sys

import jax.numpy as jnp
import pytest
from faulty_kernels import faulty_light, garbler

from jaxtune._core.vocabulary import Failure, Measurement
from jaxtune._isolation import process as _process
from jaxtune._tuning.sweep import runner as _runner

pytestmark = [pytest.mark.slow, pytest.mark.child]

#: Runs of the sweep; every one must record the crash and pick a working config. Each run
#: starts a child (the crash ends the last one), which is most of a run's time; the runs
#: where the child died while the arguments were still being sent are counted, and there
#: must be some (on this machine every run's crash came mid-send, 2026-12-04).
RUNS = 6


@pytest.fixture(autouse=True)
def _process_isolation(monkeypatch, crash_timing):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")


@pytest.fixture(autouse=True, scope="module")
def _pooled_child():
    """The child a test's last sweep left serves the next test's first configs (each test's
    crash ends a child anyway); it ends with the module."""
    yield
    _process.shutdown_children()


@pytest.fixture
def mid_send(monkeypatch):
    """A list that gets one item for each request whose child died while it was being sent."""
    lost: list[str] = []
    send = _process.ChildProcess.send

    def counted(self, message, *args, **kwargs):
        try:
            yield from send(self, message, *args, **kwargs)
        except _process.ChildLost:
            lost.append(type(message).__name__)
            raise

    monkeypatch.setattr(_process.ChildProcess, "send", counted)
    return lost


@pytest.fixture
def two_busy_processes():
    """Two CPU-bound processes beside the test (the machine is loaded)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def sweep_32mb_with_a_segfault():
    x = jnp.ones(8 << 20, jnp.float32)  # 32 MB: the crash comes while it is being sent
    sig = faulty_light.options.bind((x,), {})
    space = [{"mode": "ok"}, {"mode": "segfault"}, {"mode": "fast"}]
    task = faulty_light.options.bound(sig, space, {"mode": "ok"}).sweep_task()
    return _runner.ProcessRunner().sweep(task)


def check(outcome):
    by_mode = {m.config["mode"]: m for m in outcome.measurements}
    crash = by_mode["segfault"]
    assert isinstance(crash, Failure), crash
    assert crash.stage == "crash"
    assert "killed by signal SIGSEGV" in crash.reason, crash.reason
    assert isinstance(by_mode["ok"], Measurement), by_mode["ok"]
    assert isinstance(by_mode["fast"], Measurement), by_mode["fast"]
    assert outcome.best.config in ({"mode": "ok"}, {"mode": "fast"})


def runs_crashing_mid_send(mid_send) -> None:
    for _ in range(RUNS):
        check(sweep_32mb_with_a_segfault())
    # What this module is about: at least one crash came while the 32 MB were being sent.
    assert "Request" in mid_send, f"none of {RUNS} runs crashed while its arguments were sent"


def test_a_segfault_while_32mb_of_arguments_arrive_is_a_failed_config(mid_send):
    runs_crashing_mid_send(mid_send)


def test_the_same_with_two_busy_processes_on_the_machine(two_busy_processes, mid_send):
    runs_crashing_mid_send(mid_send)


@pytest.mark.parametrize("mode", ["bad_length", "bad_msgpack", "not_a_frame"])
def test_a_child_writing_garbage_on_its_result_pipe_is_a_failed_config(mode):
    x = jnp.ones(256)
    space = [{"mode": "ok"}, {"mode": mode}, {"mode": "fast"}]
    task = garbler.options.bound(garbler.options.bind((x,), {}), space, {"mode": "ok"}).sweep_task()
    outcome = _runner.ProcessRunner().sweep(task)
    by_mode = {m.config["mode"]: m for m in outcome.measurements}
    failure = by_mode[mode]
    assert isinstance(failure, Failure) and failure.stage == "crash", failure
    assert "no jaxtune frame" in failure.reason, failure.reason
    assert outcome.best.config in ({"mode": "ok"}, {"mode": "fast"})
