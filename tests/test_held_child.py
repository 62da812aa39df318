"""A sweep child started on hold: where ``jaxtune tune --`` runs a program that holds the
only chip, the sweep child imports JAX and the sweep's code meanwhile and opens the device
only when the first sweep asks for it (after the program ended)."""

from __future__ import annotations

import pathlib
import select

import pytest
from faulty_kernels import faulty
from waiting import all_gone

from jaxtune._core.errors import SweepError
from jaxtune._core.vocabulary import Failure
from jaxtune._isolation import prestart as _prestart
from jaxtune._isolation import process as _process
from jaxtune._tuning.sweep import runner as _runner
from jaxtune._tuning.sweep.requests import HANDLER

pytestmark = [pytest.mark.slow, pytest.mark.child]


@pytest.fixture(autouse=True)
def _fresh_pool(monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    _process.shutdown_children()
    yield
    _process.shutdown_children()


def _sweep(runner):
    import jax.numpy as jnp

    x = jnp.ones(256)
    space = [{"mode": "ok"}, {"mode": "fast"}]
    task = faulty.options.bound(faulty.options.bind((x,), {}), space, space[0]).sweep_task()
    return runner.sweep(task)


def _says_nothing(child, wait_s):
    """Whether ``child`` has written no frame within ``wait_s`` seconds."""
    readable, _, _ = select.select([child.reader.fd], [], [], wait_s)
    return not readable


def test_a_held_child_is_ready_only_once_released():
    env = _runner.ProcessRunner(platform="cpu").environment()
    held = _process.ChildProcess(env, hold=[HANDLER])
    try:
        # A child started beside it without the hold is ready as soon as it has started
        # its backend; the held one, started first, has still said nothing by then.
        _process.ChildProcess(env).close()
        assert held.on_hold and held.alive()
        assert _says_nothing(held, 1.0)
        held.release()
        assert not held.on_hold
        assert held.ready.platform == "cpu"
        assert held.ready.pid == held.proc.pid
    finally:
        held.close()


def test_a_held_child_starts_no_backend_until_released():
    """With a platform that cannot start, a child fails as soon as it starts its backend:
    the held one lives on, silent, and fails only once released."""
    env = {**_runner.ProcessRunner(platform="cpu").environment(), "JAX_PLATFORMS": "nowhere"}
    held = _process.ChildProcess(env, hold=[HANDLER])
    try:
        with pytest.raises(SweepError, match="backend did not start"):
            _process.ChildProcess(env)
        assert held.alive()
        assert _says_nothing(held, 1.0)
        with pytest.raises(SweepError, match="backend did not start"):
            held.release()
    finally:
        held.abandon()


def test_the_pool_hands_out_the_held_child_and_it_sweeps():
    runner = _runner.ProcessRunner(platform="cpu")
    assert _process.POOL.hold(runner.environment(), handlers=[HANDLER])
    assert not _process.POOL.hold(runner.environment(), handlers=[HANDLER])  # one each
    (held,) = _process.POOL._held.values()
    outcome = _sweep(runner)
    assert runner.ready.pid == held.proc.pid
    assert not any(isinstance(m, Failure) for m in outcome.measurements)
    assert {m.config["mode"] for m in outcome.measurements} == {"ok", "fast"}


def test_a_held_child_that_died_is_replaced_by_a_new_one():
    runner = _runner.ProcessRunner(platform="cpu")
    assert _process.POOL.hold(runner.environment(), handlers=[HANDLER])
    (held,) = _process.POOL._held.values()
    held.proc.kill()
    held.proc.wait(timeout=30)
    outcome = _sweep(runner)
    assert runner.ready.pid != held.proc.pid
    assert not any(isinstance(m, Failure) for m in outcome.measurements)


def test_a_held_child_is_stopped_with_the_pool_and_keeps_no_crash_log():
    runner = _runner.ProcessRunner(platform="cpu")
    assert _process.POOL.hold(runner.environment(), handlers=[HANDLER])
    (held,) = _process.POOL._held.values()
    _process.shutdown_children()
    all_gone([held.proc.pid], "the held child to end with the pool")
    assert not _process.POOL._held
    # Its log is deleted, not kept as a crash log: nothing went wrong in it.
    assert pathlib.Path(held.log_path).name.startswith("child-")
    assert not pathlib.Path(held.log_path).exists()


def _as_on_a_tpu_host(monkeypatch, runner, *, parent_backend, tpu=True):
    """What ``prestart`` sees on a TPU host (``tpu``; else a GPU host): no platform
    decided, not CPU-only, and this process's backend ``parent_backend``."""
    monkeypatch.setattr(runner, "expected_platform", lambda: None)
    monkeypatch.setattr(_prestart, "cpu_only", lambda: False)
    monkeypatch.setattr(_prestart, "tpu_runtime", lambda: tpu)
    monkeypatch.setattr(_prestart, "parent_backend", lambda: parent_backend)


def test_a_caller_without_a_backend_holds_a_child_for_the_chip(monkeypatch):
    runner = _runner.ProcessRunner()
    _as_on_a_tpu_host(monkeypatch, runner, parent_backend=None)
    assert not runner.prestart()  # without hold: no child that might take the chip
    assert not _process.POOL._held
    assert runner.prestart(hold=True)
    (held,) = _process.POOL._held.values()
    assert held.on_hold
    child = runner.child()
    assert child is held and child.ready.pid == held.proc.pid


@pytest.mark.parametrize("case", ["holds a backend", "no TPU runtime"])
def test_no_child_is_held_for_a_caller_with_a_backend_or_where_no_tpu_is(monkeypatch, case):
    runner = _runner.ProcessRunner()
    if case == "holds a backend":
        _as_on_a_tpu_host(monkeypatch, runner, parent_backend="tpu")
    else:
        _as_on_a_tpu_host(monkeypatch, runner, parent_backend=None, tpu=False)
    assert not runner.prestart(hold=True)
    assert not _process.POOL._held
