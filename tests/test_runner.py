"""The child-process runner, with real faults in real children."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from faulty_kernels import crash_beside_a_compile, faulty, identity, pid_probe
from waiting import all_gone, until

import jaxtune
from jaxtune._core.vocabulary import Failure, Measurement, config_id
from jaxtune._isolation import framing as _framing
from jaxtune._isolation import process as _process
from jaxtune._isolation import wire as _wire
from jaxtune._tuning.sweep import children as _children
from jaxtune._tuning.sweep import requests as _requests
from jaxtune._tuning.sweep import runner as _runner

pytestmark = [pytest.mark.slow, pytest.mark.child]

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _process_isolation(monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")


@pytest.fixture(autouse=True, scope="module")
def _warm_child():
    """One pooled child serves the module's tests (a test that crashes or kills it gets a
    new one from the pool); it ends with the module."""
    yield
    _process.shutdown_children()


@pytest.fixture
def fresh_pool():
    """An empty pool, for a test that looks at the child it starts."""
    _process.shutdown_children()
    yield
    _process.shutdown_children()


def sweep(kernel, fault, runner=None, x=None):
    x = jnp.ones(256) if x is None else x
    sig = kernel.options.bind((x,), {})
    space = [{"mode": "ok"}, {"mode": fault}, {"mode": "fast"}]
    task = kernel.options.bound(sig, space, {"mode": "ok"}).sweep_task()
    return (runner or _runner.ProcessRunner()).sweep(task)


#: Sweeps of ``faulty`` with one fault, by the fault: tests that read the same sweep share it
#: (one with ``late_abort`` loses a child and times its rounds again, config by config).
_SWEPT: dict[str, object] = {}


def swept(fault):
    """``sweep(faulty, fault)``, run once in this process for every test that reads it."""
    if fault not in _SWEPT:
        _SWEPT[fault] = sweep(faulty, fault)
    return _SWEPT[fault]


def failure_of(outcome, mode):
    (result,) = [m for m in outcome.measurements if m.config["mode"] == mode]
    assert isinstance(result, Failure), result
    return result


def sweep_space(kernel, modes, **plan):
    """A sweep of ``kernel`` over ``modes`` (the first is the default), its plan changed
    by ``plan``."""
    space = [{"mode": m} for m in modes]
    task = kernel.options.bound(
        kernel.options.bind((jnp.ones(64),), {}), space, space[0]
    ).sweep_task()
    task = dataclasses.replace(task, plan=dataclasses.replace(task.plan, **plan))
    return _runner.ProcessRunner().sweep(task)


def stages_of(outcome):
    """Each config's failure stage, or ``"ok"``, by its mode."""
    return {m.config["mode"]: getattr(m, "stage", "ok") for m in outcome.measurements}


def parent_still_works():
    assert float(jax.jit(lambda a: a.sum())(jnp.ones(8))) == 8.0


@pytest.mark.parametrize(
    ("fault", "stage", "words"),
    [
        ("segfault", "crash", ["killed by signal SIGSEGV", "Segmentation fault", "faulty"]),
        ("abort", "crash", ["killed by signal SIGABRT"]),
        ("exit3", "crash", ["exited with status 3"]),
        ("compile_error", "compile", ["ValueError: block does not divide the array"]),
        ("run_error", "run", ["boom at run time"]),
        ("run_abort", "crash", ["killed by signal SIGABRT"]),
        # Failing only while timed (the third call on): in the interleaved rounds.
        ("late_abort", "crash", ["killed by signal SIGABRT"]),
        ("late_error", "run", ["boom on a later call"]),
        ("wrong", "check", ["differs from the default config's"]),
    ],
)
def test_fault_is_recorded_and_sweep_finishes(fault, stage, words):
    outcome = swept(fault)
    failure = failure_of(outcome, fault)
    assert failure.stage == stage
    for word in words:
        assert word in failure.reason, failure.reason
    assert outcome.best.config == {"mode": "fast"}
    assert isinstance(outcome.default, Measurement)
    parent_still_works()


def test_a_crash_during_a_round_of_passes_is_pinned_on_its_config_and_the_rounds_go_on():
    # late_abort works for its check and warm-up, then aborts in the rounds, where the
    # configs are timed in passes: the crash names no single config, so the rounds are
    # run again one config at a time, which pins it.
    outcome = swept("late_abort")
    assert failure_of(outcome, "late_abort").stage == "crash"
    rounds = {
        m.config["mode"]: len(m.rounds_us)
        for m in outcome.measurements
        if isinstance(m, Measurement)
    }
    assert set(rounds) == {"ok", "fast"}
    assert min(rounds.values()) >= 2, rounds  # the survivors were still timed in rounds
    assert outcome.best.config == {"mode": "fast"}


def test_a_crash_in_a_shared_capture_of_the_first_pass_is_pinned_on_its_config(fresh_pool):
    """With the profiler timer, each visit of the first pass is one capture of several
    configs (five: a first pass). late_abort aborts on its third call, inside the first
    visit's capture: the crash is its alone, and the others are measured again in a new
    child, by their device time."""
    outcome = sweep_space(
        faulty, ["ok", "late_abort", "fast", "late_error", "wrong"], timer="profiler"
    )
    assert stages_of(outcome) == {
        "ok": "ok",
        "late_abort": "crash",
        "fast": "ok",
        "late_error": "run",
        "wrong": "check",
    }
    assert "killed by signal SIGABRT" in failure_of(outcome, "late_abort").reason
    assert "boom on a later call" in failure_of(outcome, "late_error").reason
    assert outcome.best.config == {"mode": "fast"}


def test_endless_loop_ends_at_the_timeout_and_the_sweep_goes_on():
    # That the deadline ended the hung config (it never ends by itself), and the sweep
    # went on; no wall-time bound, which a loaded machine stretches.
    sweep(faulty, "ok")  # a warm child
    outcome = sweep(faulty, "hang")
    failure = failure_of(outcome, "hang")
    assert failure.stage == "timeout"
    assert "no answer within the 4 s limit" in failure.reason
    assert outcome.best.config == {"mode": "fast"}
    parent_still_works()


def test_memory_blow_up_under_a_memory_limit():
    runner = _runner.ProcessRunner(memory_limit=2560 << 20)
    outcome = sweep(faulty, "oom", runner)
    failure = failure_of(outcome, "oom")
    assert "MemoryError" in failure.reason or "memory" in failure.reason.lower()
    assert outcome.best.config == {"mode": "fast"}
    # The limit applies to the child only: the parent can still map past it.
    assert np.empty(4 << 30, dtype=np.uint8).nbytes == 4 << 30


def test_crash_while_compiling_in_parallel_is_pinned_by_serial_recompile():
    outcome = sweep_space(faulty, ["ok", "fast", "segfault", "wrong", "compile_error"])
    assert stages_of(outcome) == {
        "ok": "ok",
        "fast": "ok",
        "segfault": "crash",
        "wrong": "check",
        "compile_error": "compile",
    }


def test_a_crash_beside_another_compile_is_pinned_by_its_thread_at_once(monkeypatch):
    """Two configs compile in parallel when one crashes: the child's fatal-error report
    names the crashing thread, the compile event said which config that thread compiles,
    so the crash is pinned without compiling the suspects again one at a time (one child
    lost, not two)."""
    lost = []
    discard = _process.ChildPool.discard

    def counting(self, child):
        lost.append(child.proc.pid)
        return discard(self, child)

    monkeypatch.setattr(_process.ChildPool, "discard", counting)
    # Two threads, whatever the machine's cores (one core: one thread by default).
    modes = ["ok", "slow_trace", "segfault_later", "fast"]
    outcome = sweep_space(crash_beside_a_compile, modes, compile_threads=2)
    assert stages_of(outcome) == {
        "ok": "ok",
        "slow_trace": "ok",
        "segfault_later": "crash",
        "fast": "ok",
    }
    crash = failure_of(outcome, "segfault_later")
    assert "killed by signal SIGSEGV" in crash.reason and "Current thread" in crash.reason
    assert len(lost) == 1, lost


def test_autotuned_sweeps_in_a_child_by_default(tmp_path, monkeypatch):
    probe = tmp_path / "pids"
    monkeypatch.setenv("PID_PROBE_FILE", str(probe))
    (entry,) = pid_probe.tune(jnp.ones(4)).values()
    pids = {int(line) for line in probe.read_text().split()}
    assert os.getpid() not in pids and len(pids) == 1
    assert len(entry.measurements) == 2


def test_flag_for_the_child_takes_effect_there_only(fresh_pool, tmp_path):
    dump = tmp_path / "dump"
    runner = _runner.ProcessRunner(env={"XLA_FLAGS": f"--xla_dump_to={dump}"})
    sweep(faulty, "fast", runner)
    assert any(dump.iterdir()), "the child did not see XLA_FLAGS"
    assert "xla_dump_to" not in os.environ.get("XLA_FLAGS", "")
    child = _process.POOL.children()[0]
    assert f"--xla_dump_to={dump}" in child.ready.env["XLA_FLAGS"]


def test_child_reports_ready_with_platform_and_versions(fresh_pool):
    sweep(faulty, "fast")
    child = _process.POOL.children()[0]
    assert child.ready.platform == "cpu"
    assert child.ready.versions["jax"] == jax.__version__
    assert child.ready.pid == child.proc.pid


def test_wrong_platform_is_an_error_not_a_cpu_fallback():
    with pytest.raises(jaxtune.SweepError, match="child process did not start"):
        sweep(faulty, "fast", _runner.ProcessRunner(platform="gpu"))


def test_closure_falls_back_to_inline_with_one_warning():
    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.closure")
    def local_kernel(x, *, c):
        return x * 1.0

    with pytest.warns(jaxtune.JaxtuneWarning, match="defined inside a function") as record:
        local_kernel.tune(jnp.ones(4))
        local_kernel.tune(jnp.ones(8))
    assert len([w for w in record if "tests.closure" in str(w.message)]) == 1


@pytest.mark.parametrize(
    "dtype", [jnp.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, jnp.int8, jnp.float32]
)
def test_arrays_round_trip_exactly(dtype):
    rng = np.random.default_rng(0)
    original = jnp.asarray(rng.standard_normal((3, 7)).astype(np.float32).astype(dtype))
    read, write = os.pipe()
    try:
        # Through a pipe, as to a child: the array's bytes follow the frame's msgpack part.
        _framing.write_frame(write, {"args": _wire.encode_value((original, {"k": (original,)}))})
        frame = _framing.FrameReader(read).read(timeout=10)
    finally:
        os.close(read)
        os.close(write)
    back, nested = _wire.decode_value(frame["args"])
    assert nested["k"][0].dtype == original.dtype
    np.testing.assert_array_equal(np.asarray(nested["k"][0]), np.asarray(back))
    assert back.dtype == original.dtype
    np.testing.assert_array_equal(
        np.asarray(back).view(np.uint8), np.asarray(original).view(np.uint8)
    )


def _socket_ends():
    ends = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return ends[0].detach(), ends[1].detach()


@pytest.mark.parametrize("channel", [os.pipe, _socket_ends], ids=["pipe", "socket"])
def test_a_deferred_frame_gives_the_shapes_first_and_the_bytes_on_finish(channel):
    # Larger than either channel's buffer: the writer blocks until the reader takes it.
    x = jnp.arange(1 << 20, dtype=jnp.float32)
    read, write = channel()
    writer = threading.Thread(
        target=lambda: (
            _framing.write_frame(write, {"args": _wire.encode_value((x,)), "n": 1}),
            _framing.write_frame(write, {"n": 2}),
        )
    )
    writer.start()
    try:
        reader = _framing.FrameReader(read)
        frame = reader.read(timeout=10, defer=True)
        (spec,) = _wire.decode_value(frame["args"], abstract=True)
        assert (spec.shape, spec.dtype) == ((1 << 20,), jnp.float32)
        assert reader.pending  # the array's bytes are not read yet
        reader.finish()
        np.testing.assert_array_equal(np.asarray(_wire.decode_value(frame["args"])[0]), x)
        assert reader.read(timeout=10) == {"n": 2}  # the stream goes on where it should
    finally:
        writer.join(timeout=30)
        os.close(read)
        os.close(write)


def test_a_child_that_moved_on_to_another_task_is_sent_the_arguments_again(monkeypatch):
    sent: list[bool] = []
    send = _process.ChildProcess.send

    def spy(self, message, *args, **kw):
        sent.append("args" in message.to_wire())
        return send(self, message, *args, **kw)

    monkeypatch.setattr(_process.ChildProcess, "send", spy)
    runner = _runner.ProcessRunner()
    x = jnp.ones(256)
    space = [{"mode": "ok"}, {"mode": "fast"}]
    task = faulty.options.bound(faulty.options.bind((x,), {}), space, {"mode": "ok"}).sweep_task()
    request = _requests.sweep_request(task)
    measure = _requests.Measure(todo=space).of(request)
    retime = _requests.Retime(todo=space).of(request)
    assert _children.ask(runner, task.plan, measure, progress=None)[0] is None
    assert _children.ask(runner, task.plan, retime, progress=None)[0] is None
    assert sent == [True, False]  # the re-timing went without the arguments
    other = identity.options.bound(
        identity.options.bind((x,), {}), [{"c": 1}, {"c": 2}], {"c": 1}
    ).sweep_task()
    runner.sweep(other)  # another task: the child lets the first one go
    crashed, got = _children.ask(runner, task.plan, retime, progress=None)
    assert crashed is None and all(isinstance(m, Measurement) for m in got.values())
    # Sent lean, answered "unknown task", sent again with the arguments.
    assert sent[-2:] == [False, True]


def _measure_ok_then(mode):
    """The space ``ok`` then ``mode`` of the faulty kernel, its sweep task, and the request
    that measures both."""
    space = [{"mode": "ok"}, {"mode": mode}]
    task = faulty.options.bound(
        faulty.options.bind((jnp.ones(64),), {}), space, {"mode": "ok"}
    ).sweep_task()
    return space, task, _requests.Measure(todo=space).of(_requests.sweep_request(task))


@pytest.mark.parametrize("stop", ["closed", "raised"])
def test_a_caller_that_stops_reading_mid_request_stops_the_child_at_once(
    stop, fresh_pool, monkeypatch
):
    """The caller pulls the child's events: one that stops before the answer (it closes the
    exchange, or its own step raises, as Ctrl-C would) kills the child, which hangs in a
    config, at once, without a crash log, and lets go of the child's lock."""
    from jaxtune._isolation.frames import CompileStarted
    from jaxtune._isolation.logs import log_dir
    from jaxtune._isolation.process import Deadline
    from jaxtune._tuning.sweep import drive as _drive

    runner = _runner.ProcessRunner()
    space, task, message = _measure_ok_then("hang")

    def at_the_hang(event):
        return isinstance(event, CompileStarted) and event.cid == config_id(space[1])

    if stop == "closed":
        said = runner.exchange(message, deadline=Deadline(600))
        assert any(at_the_hang(item) for item in said)
        said.close()
    else:

        def shown(plan, progress):
            def show(event):
                if at_the_hang(event):
                    raise RuntimeError("the progress line failed")

            return show

        monkeypatch.setattr(_children, "progress_sink", shown)
        progress = _drive.new_progress(task.plan)
        with pytest.raises(RuntimeError, match="progress line failed"):
            _children.ask(
                runner, dataclasses.replace(task.plan, timeout_s=600), message, progress=progress
            )
    child = runner.held
    assert child is not None
    until(lambda: child.proc.poll() is not None, "the child to be killed", within=30)
    assert not child.lock.locked()
    assert not list(log_dir().glob(f"crash-*-{child.proc.pid}.log"))  # nothing went wrong in it


def test_a_caller_that_raises_after_the_child_crashed_keeps_the_crash_log(fresh_pool):
    """The caller's own step fails while the child is already dead (a config aborted it):
    the child crashed of itself, so its crash log is kept, as it is for a caller that reads
    on to the crash."""
    from jaxtune._isolation.frames import RunStarted
    from jaxtune._isolation.logs import log_dir
    from jaxtune._isolation.process import Deadline

    runner = _runner.ProcessRunner()
    space, _, message = _measure_ok_then("run_abort")
    crashing = config_id(space[1])
    said = runner.exchange(message, deadline=Deadline(600))
    with pytest.raises(RuntimeError, match="the caller's step failed"), contextlib.closing(said):
        for item in said:
            if isinstance(item, RunStarted) and item.cid == crashing:
                child = runner.held
                assert child is not None
                until(lambda c=child: c.proc.poll() is not None, "the child to abort", within=60)
                raise RuntimeError("the caller's step failed")
    assert child.proc.returncode == -signal.SIGABRT
    assert not child.lock.locked()
    assert list(log_dir().glob(f"crash-*-{child.proc.pid}.log"))  # the crash's log is kept


def test_concrete_bf16_arrays_travel_to_the_child():
    x = jnp.asarray(np.arange(64, dtype=np.float32)).astype(jnp.bfloat16)
    (entry,) = identity.tune(x).values()
    assert entry.key == "bf16[64]"
    assert all(m.ok for m in entry.measurements)


MAIN_SCRIPT = textwrap.dedent(
    """
    import os, pathlib, sys
    import jax.numpy as jnp
    import jaxtune

    @jaxtune.autotuned(configs={"c": [1, 2]}, name="script.kernel")
    def kernel(x, *, c):
        pathlib.Path(os.environ["PROBE"], f"traced-{os.getpid()}").touch()
        return x * 1.0

    if __name__ == "__main__":
        pathlib.Path(os.environ["PROBE"], f"main-{os.getpid()}").touch()
        print(kernel.tune(jnp.ones(4)).table())
    """
)


def test_main_script_kernel_is_reimported_without_its_main_block(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(MAIN_SCRIPT)
    probe = tmp_path / "probe"
    probe.mkdir()
    env = {
        **os.environ,
        "PROBE": str(probe),
        "JAXTUNE_ISOLATION": "process",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-W", "error::jaxtune.JaxtuneWarning", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = sorted(p.name for p in probe.iterdir())
    main_runs = [n for n in names if n.startswith("main-")]
    traced = {n.split("-")[1] for n in names if n.startswith("traced-")}
    assert len(main_runs) == 1
    parent_pid = main_runs[0].split("-")[1]
    assert traced and parent_pid not in traced  # traced only in the child
    assert "script.kernel" in proc.stdout


KILL_PARENT = textwrap.dedent(
    """
    import sys, threading, time
    sys.path.insert(0, sys.argv[1])
    import jax.numpy as jnp
    from faulty_kernels import faulty
    from jaxtune._isolation import process as _process
    from jaxtune._tuning.sweep import runner as _runner

    def report():
        while not _process.POOL.children():
            time.sleep(0.05)
        print(_process.POOL.children()[0].proc.pid, flush=True)

    threading.Thread(target=report, daemon=True).start()
    sig = faulty.options.bind((jnp.ones(8),), {})
    task = faulty.options.bound(sig, [{"mode": "ok"}, {"mode": "hang"}], {"mode": "ok"}).sweep_task()
    _runner.ProcessRunner().sweep(task)
    """
)


def alive(pid):
    """Whether ``pid`` runs (a zombie waiting to be reaped has exited)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_child_exits_soon_after_its_parent_is_killed(tmp_path):
    hanging = tmp_path / "hanging"
    parent = subprocess.Popen(
        [sys.executable, "-c", KILL_PARENT, str(ROOT / "tests")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HANG_MARK": str(hanging)},
    )
    with parent.stdout:
        child_pid = int(parent.stdout.readline())
    until(hanging.exists, "the child to reach the hanging config")
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    try:
        # It notices within 0.5 s; left alone, it would hang in the config for good.
        all_gone([child_pid], "the child to end after its parent was killed")
    finally:
        if alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def test_one_child_per_device_share_the_sweep(tmp_path, monkeypatch):
    sig = faulty.options.bind((jnp.ones(64),), {})
    space = [{"mode": m} for m in ("ok", "fast", "segfault", "wrong", "exit3")]
    task = faulty.options.bound(sig, space, {"mode": "ok"}).sweep_task()
    outcome = _runner.ProcessRunner(devices=[0, 1]).sweep(task)
    stages = stages_of(outcome)
    assert stages == {
        "ok": "ok",
        "fast": "ok",
        "segfault": "crash",
        "wrong": "check",
        "exit3": "crash",
    }
    assert outcome.best.config == {"mode": "fast"}

    probe = tmp_path / "pids"
    monkeypatch.setenv("PID_PROBE_FILE", str(probe))
    sig = pid_probe.options.bind((jnp.ones(8),), {})
    task = pid_probe.options.bound(
        sig, [{"scale": 1}, {"scale": 2}, {"scale": 3}], {"scale": 1}
    ).sweep_task()
    _runner.ProcessRunner(devices=[0, 1]).sweep(task)
    pids = {int(line) for line in probe.read_text().split()}
    assert len(pids) == 2 and os.getpid() not in pids


def test_parent_holding_the_tpu_falls_back_to_inline_with_advice(
    fresh_pool, fresh_warnings, monkeypatch
):
    monkeypatch.setattr(_runner, "parent_backend", lambda: "tpu")
    sig = faulty.options.bind((jnp.ones(8),), {})
    task = faulty.options.bound(
        sig, [{"mode": "ok"}, {"mode": "fast"}], {"mode": "ok"}
    ).sweep_task()
    with pytest.warns(jaxtune.JaxtuneWarning, match=r"jaxtune tune -- python"):
        outcome = _runner.ProcessRunner(platform="tpu").sweep(task)
    assert outcome.best.config in ({"mode": "ok"}, {"mode": "fast"})
    assert _process.POOL.children() == []  # no child was started for the chip


KERNEL_MODULE = textwrap.dedent(
    """
    import jaxtune

    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.hidden_module")
    def hidden(x, *, c):
        return x * 1.0
    """
)


def _load_hidden(path, name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_module_outside_sys_path_is_loaded_from_its_file(tmp_path, recwarn):
    path = tmp_path / "hidden_kernels.py"
    path.write_text(KERNEL_MODULE)
    module = _load_hidden(path, "jaxtune_test_hidden_kernels")
    try:
        (entry,) = module.hidden.tune(jnp.ones(4)).values()
    finally:
        del sys.modules["jaxtune_test_hidden_kernels"]
    assert len(entry.measurements) == 2
    assert not [w for w in recwarn if issubclass(w.category, jaxtune.JaxtuneWarning)]


def test_module_the_child_cannot_import_falls_back_inline(tmp_path):
    path = tmp_path / "gone_kernels.py"
    path.write_text(KERNEL_MODULE.replace("tests.hidden_module", "tests.gone_module"))
    module = _load_hidden(path, "jaxtune_test_gone_kernels")
    path.unlink()  # neither importable by name nor loadable from its file any more
    try:
        with pytest.warns(jaxtune.JaxtuneWarning, match="could not import it"):
            (entry,) = module.hidden.tune(jnp.ones(4)).values()
    finally:
        del sys.modules["jaxtune_test_gone_kernels"]
    assert len(entry.measurements) == 2


def test_pool_key_ignores_variables_that_do_not_reach_the_backend():
    from jaxtune._isolation.environ import pool_key

    cpu = {"JAX_PLATFORMS": "cpu", "PYTHONPATH": "/p", "XLA_FLAGS": "--a"}
    # A library that sets an unrelated variable (Tokamax sets MOSAIC_GPU_CUDA_ROOT at
    # import) keeps the child started ahead of need; a CPU child ignores GPU variables.
    assert pool_key({**cpu, "MOSAIC_GPU_CUDA_ROOT": "/c", "HOME": "/h"}) == pool_key(cpu)
    assert pool_key({**cpu, "XLA_FLAGS": "--b"}) != pool_key(cpu)
    assert pool_key({**cpu, "PYTHONPATH": "/q"}) != pool_key(cpu)
    gpu = {**cpu, "JAX_PLATFORMS": "cuda"}
    assert pool_key({**gpu, "CUDA_VISIBLE_DEVICES": "1"}) != pool_key(gpu)


def test_a_live_child_sees_the_callers_variables(tmp_path, monkeypatch):
    """A variable set after the child started reaches it with the next request, without a
    new child (the pid probe kernel writes to the file the variable names)."""
    sig = pid_probe.options.bind((jnp.ones(8),), {})
    space = [{"scale": 1}, {"scale": 2}]
    runner = _runner.ProcessRunner()
    monkeypatch.setenv("PID_PROBE_FILE", str(tmp_path / "first"))
    runner.sweep(pid_probe.options.bound(sig, space, {"scale": 1}).sweep_task())
    monkeypatch.setenv("PID_PROBE_FILE", str(tmp_path / "second"))
    runner.sweep(pid_probe.options.bound(sig, space, {"scale": 1}).sweep_task())
    first = set((tmp_path / "first").read_text().split())
    second = set((tmp_path / "second").read_text().split())
    assert first == second and len(first) == 1  # the same child, the new file


def test_a_bad_libtpu_init_args_stops_no_cpu_sweep_and_is_named_for_tpu(monkeypatch):
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_foo='unterminated")
    x = jnp.ones(8)
    task = identity.options.bound(
        identity.options.bind((x,), {}), [{"c": 1}, {"c": 2}], {"c": 1}
    ).sweep_task()
    outcome = _runner.ProcessRunner(platform="cpu").sweep(task)
    assert all(isinstance(m, Measurement) for m in outcome.measurements)
    with pytest.raises(jaxtune.FlagError, match=r"^LIBTPU_INIT_ARGS in this process's env"):
        _runner.ProcessRunner(platform="tpu").environment()


def test_one_child_sweeps_every_kernel_of_a_tune_run(fresh_pool, monkeypatch, tmp_path):
    """docs/isolation.md, "One long-lived child": all kernels of one `jaxtune.tune` share
    one child (children are pooled by environment, not by kernel)."""
    import subprocess

    from conformance import peer_kernels as pk

    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path))
    started: list[object] = []
    popen = subprocess.Popen

    class Counting(popen):  # type: ignore[misc, valid-type]
        def __init__(self, args, *rest, **kwargs):
            if any("jaxtune._isolation.child" in str(a) for a in args):
                started.append(args)
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Counting)
    result = jaxtune.tune(pk.two_kernels, jnp.ones((64, 64)))
    assert len({kernel for kernel, _, _ in result}) == 2
    assert len(started) == 1
