"""Lowering in processes (docs/autotuned.md, "Lowering in processes"): processes lower a
sweep's configs into the store of stored programs and the sweep loads them instead of tracing
each one; what they lowered is used only where it matches what the sweep's own process
lowers, and a process that dies costs nothing but its share's tracing. Also the failures
the store keeps (a config Mosaic or the refusal rules refuse is not traced again)."""

from __future__ import annotations

import pathlib
import time
import types

import jax.numpy as jnp
import pytest

import jaxtune
from jaxtune._core.vocabulary import config_id
from jaxtune._tuning.sweep import compile as _compile
from jaxtune._tuning.sweep import program_store
from jaxtune._tuning.sweep import runner as _runner
from jaxtune._tuning.sweep.breakdown import Breakdown
from tests import lowering_kernels as lk

pytestmark = pytest.mark.child  # lowering processes


def _sweep(kernel, space=lk.SPACE):
    """An in-process sweep of ``kernel`` over ``space``; the configs traced in this
    process, and the outcome."""
    x = jnp.linspace(0.0, 1.0, 256)
    task = kernel.options.bound(kernel.options.bind((x,), {}), space, space[0]).sweep_task()
    lk.TRACES.clear()
    outcome = _runner.InlineRunner().sweep(task)
    return sorted(lk.TRACES), outcome


def _programs(cache: pathlib.Path) -> list[pathlib.Path]:
    return sorted((cache / "xla" / program_store.STORE_DIR).rglob("*.msgpack"))


@pytest.fixture
def processes(store_on, monkeypatch):
    monkeypatch.setenv("JAXTUNE_LOWERING_PROCESSES", "2")
    return store_on


def test_processes_lower_the_configs_and_a_second_sweep_traces_one(processes, fast_timing):
    traced, outcome = _sweep(lk.sines)
    # Traced here: the first config (the processes start after it), the last ones while
    # they start (:func:`test_the_sweep_lowers_the_last_configs_while_processes_start`)
    # and the first one loaded from them, to compare the two programs.
    assert lk.SPACE[0]["n"] in traced
    assert len(_programs(processes)) == len(lk.SPACE)
    assert "lowering_wait" in outcome.phases  # processes started
    assert all(m.ok for m in outcome.measurements), [m for m in outcome.measurements if not m.ok]
    # A second sweep finds every program kept: no process is started.
    traced, outcome = _sweep(lk.sines)
    assert len(traced) == 1 and "lowering_wait" not in outcome.phases


def test_a_count_of_processes_without_flatbuffers_is_warned_about_and_starts_none(
    processes, fast_timing, monkeypatch
):
    """Without the package ``jax.export`` serialises with, no program can be handed over:
    the asked-for processes are not started, and the user is told why, once."""
    monkeypatch.setattr(program_store, "serialisable", lambda: False)
    with pytest.warns(jaxtune.JaxtuneWarning, match=r"LOWERING_PROCESSES=2 .*jaxtune\[retune\]"):
        traced, outcome = _sweep(lk.sines)
    assert "lowering_wait" not in outcome.phases  # none started
    assert len(traced) == len(lk.SPACE) and _programs(processes) == []
    assert all(m.ok for m in outcome.measurements), outcome.measurements


def test_a_sweep_in_its_child_process_starts_lowering_processes_there(processes, fast_timing):
    # The child (which holds the device in a TPU program) starts them; the JAX state and
    # variables they get are the child's, the kernel imported by reference there too.
    x = jnp.linspace(0.0, 1.0, 256)
    task = lk.sines.options.bound(
        lk.sines.options.bind((x,), {}), lk.SPACE, lk.SPACE[0]
    ).sweep_task()
    outcome = _runner.ProcessRunner().sweep(task)
    assert "lowering_wait" in outcome.phases  # processes started
    assert all(m.ok for m in outcome.measurements), outcome.measurements
    assert len(_programs(processes)) == len(lk.SPACE)


def test_programs_that_differ_from_this_process_are_not_used(processes, fast_timing):
    traced, outcome = _sweep(lk.per_process)
    # The first program loaded differs from this process's: every config is traced here.
    assert traced == [c["n"] for c in lk.SPACE]
    assert all(m.ok for m in outcome.measurements), [m for m in outcome.measurements if not m.ok]
    # What the store holds now is this process's: a second sweep trusts and uses it.
    traced, _ = _sweep(lk.per_process)
    assert len(traced) == 1, traced


def test_a_lowering_process_that_dies_costs_only_its_tracing(
    processes, fast_timing, monkeypatch, tmp_path
):
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    monkeypatch.setenv("JAXTUNE_TEST_LOWERING_CRASH", str(crashed))  # aborts in a process
    monkeypatch.setattr(lk, "CRASHED", str(crashed))
    with pytest.warns(jaxtune.JaxtuneWarning, match="a lowering process ended"):
        traced, outcome = _sweep(lk.sines)
    assert traced == [c["n"] for c in lk.SPACE]
    assert all(m.ok for m in outcome.measurements), [m for m in outcome.measurements if not m.ok]


def test_a_process_is_told_its_configs_as_they_are_and_answers_apart_from_prints(
    processes, tmp_path
):
    """The job travels through jaxtune's codec (a tuple knob stays a tuple) and the answers
    as frames apart from what the kernel prints: every config is told of and stored. A
    process that ended is reaped then, not when the pool closes (a new user saw two
    ``<defunct>`` lowering processes for the rest of a sweep)."""
    x = jnp.linspace(0.0, 1.0, 256)
    call = lk.chatty.options.bound(lk.chatty.options.bind((x,), {}), lk.PAIRS, lk.PAIRS[0])
    store = program_store.ProgramStore(tmp_path / "kept")
    pool = _compile.LoweringPool.start(
        call.sweep_task(), store, lk.PAIRS, refuse=False, first_s=1.0
    )
    assert pool is not None
    try:
        ids = [config_id(c) for c in lk.PAIRS]
        assert [pool.wait(cid, 120) for cid in ids] == ["told"] * len(ids)
        assert all(store.has(cid) for cid in ids), sorted(p.name for p in store.folder.iterdir())
        deadline = time.monotonic() + 60
        while pool.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pool.running()
        # No entry left under /proc: a zombie keeps one (in state Z) until it is reaped.
        assert [p.pid for p in pool._processes if pathlib.Path(f"/proc/{p.pid}").exists()] == []
    finally:
        pool.close()


SCRIPT = """
import jax.numpy as jnp
import jaxtune

@jaxtune.autotuned(configs={"n": [2, 3, 4, 5]}, name="tests.lowering.script")
def script_sines(x, *, n):
    for _ in range(n):
        x = jnp.abs(jnp.sin(x))
    return x
"""


def test_a_kernel_of_a_script_the_child_re_ran_is_lowered_in_processes(processes, tmp_path):
    """``jaxtune tune -- python train.py``: the sweep's child finds a kernel of the
    program's ``__main__`` by re-running the script; its lowering processes are told the
    script again, not the name the child ran it under (which no process can import: they
    lowered nothing, and the sweep traced every config itself)."""
    from jaxtune._isolation.frames import FunctionRef
    from jaxtune._tuning.sweep.serve import resolve_kernel

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    kernel = resolve_kernel(
        FunctionRef(module="__main__", qualname="script_sines", path=str(script))
    )
    x = jnp.linspace(0.0, 1.0, 256)
    space = [{"n": n} for n in (2, 3, 4, 5)]
    task = kernel.options.bound(kernel.options.bind((x,), {}), space, space[0]).sweep_task()
    store = program_store.ProgramStore(tmp_path / "kept")
    pool = _compile.LoweringPool.start(task, store, space, refuse=False, first_s=1.0)
    assert pool is not None
    try:
        ids = [config_id(c) for c in space]
        assert [pool.wait(cid, 120) for cid in ids] == ["told"] * len(ids)
        assert set(pool.told().values()) == {"kept"} and all(store.has(c) for c in ids)
    finally:
        pool.close()
    # A script whose top level calls kernels is work, not definitions: no process
    # re-runs it (the child said so already), and the sweep lowers every config itself.
    busy = tmp_path / "busy.py"
    busy.write_text(
        SCRIPT.replace("script_sines", "busy_sines") + "script_call = busy_sines(jnp.ones(8))\n"
    )
    kernel = resolve_kernel(FunctionRef(module="__main__", qualname="busy_sines", path=str(busy)))
    task = kernel.options.bound(kernel.options.bind((x,), {}), space, space[0]).sweep_task()
    assert _compile.LoweringPool.start(task, store, space, refuse=False, first_s=1.0) is None


#: A process that reads its job only once told to (a lowering process imports JAX and the
#: kernel's module first): when the file named by its argument exists.
LATE_READER = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
    "sys.stdin.buffer.read()"
)


def test_starting_the_processes_never_waits_for_one_to_read_its_job(
    processes, tmp_path, monkeypatch
):
    """Each job is written apart from the start: a job past the pipe's buffer (a space of
    thousands of configs) does not hold the start until a process has read it (written in
    the start, the processes below, which read only once the start has returned, would
    never be told). A process that ends unread leaves nothing open."""
    import subprocess
    import sys
    import threading

    from jaxtune._tuning.sweep import lowering_pool

    go = tmp_path / "go"
    real = subprocess.Popen
    monkeypatch.setattr(
        lowering_pool.subprocess,
        "Popen",
        lambda args, **kw: real([sys.executable, "-c", LATE_READER, str(go)], **kw),
    )
    x = jnp.linspace(0.0, 1.0, 256)
    space = [{"block": 8, "pad": "x" * 400, "i": i} for i in range(2000)]  # ~1 MB of jobs
    call = lk.chatty.options.bound(lk.chatty.options.bind((x,), {}), lk.PAIRS, lk.PAIRS[0])
    store = program_store.ProgramStore(tmp_path / "kept")
    started = []
    starting = threading.Thread(
        target=lambda: started.append(
            _compile.LoweringPool.start(call.sweep_task(), store, space, refuse=False, first_s=1.0)
        ),
        daemon=True,
    )
    starting.start()
    starting.join(timeout=60)
    returned = not starting.is_alive()
    go.touch()  # the processes read their jobs now (a start still blocked then returns)
    starting.join(timeout=60)
    pool = started[0] if started else None
    assert pool is not None
    try:
        assert returned, "the start waited for a process to read its job"
        assert pool.wait(config_id(space[0]), 60) == "ended"
    finally:
        pool.close()


def test_auto_starts_no_process_off_a_tpu(store_on, fast_timing):
    traced, outcome = _sweep(lk.sines)
    assert traced == [c["n"] for c in lk.SPACE]
    assert "lowering_wait" not in outcome.phases


def test_a_refused_config_is_not_traced_again(store_on, fast_timing, monkeypatch):
    # A rule refusing the two longest configs (more abs equations than 5), as
    # :mod:`.refusals` refuses from the traced program.
    def refuse(jaxpr):
        n = sum(eqn.primitive.name == "abs" for eqn in jaxpr.eqns)
        return "refused before compiling: a test rule" if n > 5 else None

    monkeypatch.setattr(_compile, "checker", lambda: refuse)
    traced, outcome = _sweep(lk.sines)
    failed = {m.config["n"]: m.reason for m in outcome.measurements if not m.ok}
    assert set(failed) == {6, 7}
    assert all(_compile.REMEMBERED not in why for why in failed.values())
    traced, outcome = _sweep(lk.sines)
    assert 6 not in traced and 7 not in traced
    failed = {m.config["n"]: m.reason for m in outcome.measurements if not m.ok}
    assert set(failed) == {6, 7}
    assert all(why.endswith(_compile.REMEMBERED) for why in failed.values())


def test_only_failures_the_same_program_always_meets_are_kept(tmp_path):
    store = program_store.ProgramStore(tmp_path, trusted=True)
    assert store.remember_failure("a", "Mosaic failed to compile TPU kernel: ...")
    assert store.remember_failure("b", "RESOURCE_EXHAUSTED: scoped vmem limit exceeded")
    assert not store.remember_failure("c", "RESOURCE_EXHAUSTED: out of host memory")
    assert store.failure("a").startswith("Mosaic") and store.failure("c") is None
    # Not before the store is trusted (a stored program matched a fresh lowering).
    assert program_store.ProgramStore(tmp_path).failure("a") is None
    store.forget_failures()
    assert store.failure("a") is None


class _Pool:
    """Stands for the lowering processes: what they told so far, set by the test."""

    def __init__(self) -> None:
        self.told_ids: set[str] = set()
        self.refused: set[str] = set()
        self.alive = True
        self.waited: list[str] = []
        self.closed = False

    def told(self):
        return {cid: "kept" for cid in self.told_ids} | {cid: "refused" for cid in self.refused}

    def running(self):
        return self.alive

    def wait(self, cid, timeout_s):
        self.waited.append(cid)
        return "told" if cid in self.told_ids else "waiting" if self.alive else "ended"

    def close(self):
        self.closed = True


def _lowering_order(monkeypatch, *, trusted):
    """The order in which a sweep lowers 8 configs beside a :class:`_Pool` (their ids, the
    pool, the store, the order, the compiler)."""
    configs = [{"n": n} for n in range(8)]
    pool = _Pool()
    monkeypatch.setattr(_compile.LoweringPool, "start", lambda *a, **k: pool)
    compiler = types.SimpleNamespace(
        compiled=lambda cid: False, task=None, refuse=None, breakdown=Breakdown()
    )
    store = types.SimpleNamespace(has=lambda cid: False, trusted=trusted)
    order = _compile.LoweringAhead(compiler, configs, [store]).order()
    return [config_id(c) for c in configs], pool, store, order, compiler


def test_the_sweep_lowers_the_last_configs_while_processes_start(monkeypatch):
    """The sweep's thread never sits idle while the processes start (importing JAX and
    the kernel took twelve of them 25-30 s beside Tokamax's ragged_dot on a TPU v5e host,
    with the compiling threads idle): it lowers the last configs, which the processes
    reach last; then the earliest config a process told of, else the next, waited for a
    moment and lowered here; once every process ended, the rest here."""
    ids, pool, _, order, compiler = _lowering_order(monkeypatch, trusted=True)
    assert next(order) == 0  # the first, here; then the processes start
    assert [next(order), next(order)] == [7, 6]  # none told yet: the last ones, here
    pool.told_ids |= {ids[3], ids[1]}
    assert [next(order), next(order)] == [1, 3]  # told: loaded, earliest first
    assert next(order) == 2 and pool.waited == [ids[2]]  # waited for, then lowered here
    pool.told_ids.add(ids[5])
    assert next(order) == 5
    pool.alive = False  # every process ended: the rest here, the pool closed
    assert list(order) == [4] and pool.closed
    assert "lowering_wait" in compiler.breakdown.finish(1.0)


def test_a_kept_program_is_taken_first_until_the_processes_are_trusted(monkeypatch):
    """A process's refusal counts only once one of its programs matched a fresh lowering
    here (:meth:`.ProgramStore.failure`): until then the sweep takes a kept program, which
    earns that trust, over the refusals told before it (Tokamax's ragged_dot: its first
    20-odd configs are refusals, and lowering each again here left the compiling threads
    idle for 6 s on a TPU v5e); with none kept yet, it lowers the last configs, as while
    the processes start."""
    ids, pool, store, order, _ = _lowering_order(monkeypatch, trusted=None)
    assert next(order) == 0
    pool.refused |= {ids[1], ids[2]}
    assert next(order) == 7  # only refusals told: not lowered again here yet
    pool.told_ids.add(ids[4])
    assert next(order) == 4  # the kept program, ahead of the earlier refusals
    store.trusted = True  # it matched: the refusals are taken now, earliest first
    assert [next(order), next(order)] == [1, 2]
