"""A sweep never times configs with custom-call tracing in effect (docs/errors.md, the warning
table's ``CustomCallTracingWarning``; docs/profiling.md, "Inside a TPU kernel: custom-call
tracing"): the sweep's child runs without the flag, and says so once; a sweep in this process
says it cannot."""

from __future__ import annotations

import os
import warnings

import jax.numpy as jnp
import pytest
from faulty_kernels import pid_probe

from jaxtune._core.errors import CustomCallTracingWarning
from jaxtune._core.vocabulary import ProfileOptions
from jaxtune._isolation import process as _process
from jaxtune._isolation.service import ChildService
from jaxtune._tuning.sweep import runner as _runner

TRACING = "--xla_xprof_enable_custom_call_tracing=true"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, fast_timing, fresh_warnings):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    yield
    _process.shutdown_children()


@pytest.mark.child
@pytest.mark.slow
def test_a_sweep_child_runs_without_custom_call_tracing(tmp_path, monkeypatch):
    # jaxlib on CPU does not know the flag: a child started with it would abort at backend
    # start ("Unknown command line flag"), so a sweep that measures at all ran without it.
    x = jnp.ones(4)  # this process's backend starts before the flag is set, as in a program
    monkeypatch.setenv("XLA_FLAGS", f"--xla_enable_custom_call_region_trace {TRACING}")
    monkeypatch.setenv("PID_PROBE_FILE", str(tmp_path / "pids"))
    with pytest.warns(CustomCallTracingWarning, match="removed from the sweep's child") as seen:
        (entry,) = pid_probe.tune(x).values()
    assert len(entry.measurements) == 2
    assert len([w for w in seen if w.category is CustomCallTracingWarning]) == 1  # once
    assert "XLA_FLAGS" in str(seen[0].message)
    (child,) = _process.POOL.children()
    assert "custom_call" not in (child.ready.env.get("XLA_FLAGS") or "")
    assert TRACING in os.environ["XLA_FLAGS"]  # this process's own flags are untouched


def test_the_child_environment_keeps_every_other_flag(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to=/tmp/d {TRACING}")
    with pytest.warns(CustomCallTracingWarning, match=r"--xla_xprof_enable_custom_call_tracing"):
        env = _runner.ProcessRunner(platform="cpu").environment()
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/d"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, not per child
        assert (
            _runner.ProcessRunner(platform="cpu").environment()["XLA_FLAGS"]
            == "--xla_dump_to=/tmp/d"
        )


def test_tracing_turned_off_or_a_profile_capture_is_left_alone(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setenv("XLA_FLAGS", f"{TRACING} --xla_xprof_enable_custom_call_tracing=false")
        off = _runner.ProcessRunner(platform="cpu").environment()
        assert "custom_call_tracing=false" in off["XLA_FLAGS"]  # the last entry counts: off
        monkeypatch.setenv("XLA_FLAGS", TRACING)
        capture = ChildService(platform="cpu", profiling=ProfileOptions())
        assert TRACING in capture.environment()["XLA_FLAGS"]  # profiling wants it


def test_a_sweep_in_this_process_says_it_cannot_turn_tracing_off(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    monkeypatch.setenv("PID_PROBE_FILE", str(tmp_path / "pids"))
    monkeypatch.setenv("LIBTPU_INIT_ARGS", TRACING)
    with pytest.warns(CustomCallTracingWarning, match="cannot turn it off") as seen:
        (entry,) = pid_probe.tune(jnp.ones(4)).values()
    assert "LIBTPU_INIT_ARGS" in str(seen[0].message)
    assert len(entry.measurements) == 2


def test_a_tpu_sweep_child_pins_a_small_transfer_buffer_unless_the_user_set_one(monkeypatch):
    """docs/isolation.md, "What the child gets": libtpu's default premapped buffer (4 GiB)
    took 7.7 s of a TPU child's start on the lent v5e; a sweep's child asks for 256 MiB."""
    from jaxtune._isolation.environ import SWEEP_PREMAPPED_BYTES

    monkeypatch.delenv("TPU_PREMAPPED_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    tpu = _runner.ProcessRunner(platform="tpu").environment()
    assert tpu["TPU_PREMAPPED_BUFFER_SIZE"] == str(SWEEP_PREMAPPED_BYTES) == str(256 << 20)
    # A profile capture runs the user's step, transfers and all: libtpu's default stays
    # (without LLO flags, which this machine's missing libtpu could not check).
    capture = ChildService(platform="tpu", profiling=ProfileOptions(llo=False))
    assert "TPU_PREMAPPED_BUFFER_SIZE" not in capture.environment()
    # Off TPU nothing reads it, and a CPU child's environment stays the user's.
    assert "TPU_PREMAPPED_BUFFER_SIZE" not in _runner.ProcessRunner(platform="cpu").environment()
    # A transfer threshold the user sized for libtpu's buffer keeps that buffer too.
    monkeypatch.setenv("TPU_PREMAPPED_BUFFER_TRANSFER_THRESHOLD_BYTES", str(1 << 30))
    assert "TPU_PREMAPPED_BUFFER_SIZE" not in _runner.ProcessRunner(platform="tpu").environment()
    monkeypatch.delenv("TPU_PREMAPPED_BUFFER_TRANSFER_THRESHOLD_BYTES")
    monkeypatch.setenv("TPU_PREMAPPED_BUFFER_SIZE", str(8 << 30))
    assert _runner.ProcessRunner(platform="tpu").environment()["TPU_PREMAPPED_BUFFER_SIZE"] == str(
        8 << 30
    )
