from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxtune._core.arrays import dtype_name
from jaxtune._core.vocabulary import Failure, Measurement, config_id
from jaxtune._tuning.signature import Signature
from jaxtune._tuning.sweep import check as _check
from jaxtune._tuning.sweep import compile as _compile
from jaxtune._tuning.sweep import drive as _sweep
from jaxtune._tuning.sweep import engine as _engine
from jaxtune._tuning.sweep import inputs as _inputs
from jaxtune._tuning.sweep import progress as _progress
from jaxtune._tuning.sweep import samples as _samples
from jaxtune._tuning.sweep.stats import SweepOutcome
from jaxtune._tuning.sweep.timers import WallTimer
from jaxtune._tuning.sweep.work import SweepPlan, SweepTask


def task_of(fn, signature, configs, default, **plan):
    """A sweep task of kernel "k" over ``configs``."""
    return SweepTask(
        plan=SweepPlan(
            kernel="k", key=signature.key, configs=tuple(configs), default=default, **plan
        ),
        fn=fn,
        signature=signature,
    )


def bind(fn, *args, static=(), **kwargs):
    return Signature.bind(
        inspect.signature(fn),
        args,
        kwargs,
        static_argnames=frozenset(static),
        config_names=frozenset(),
    )


def kernel(x, y, *, delay):
    out = x @ y
    for _ in range(delay):
        out = jnp.tanh(out)
    return out


def test_keys_are_readable():
    sig = bind(kernel, jnp.ones((4, 8)), jnp.ones((8, 2), jnp.bfloat16))
    assert sig.key == "f32[4,8],bf16[8,2]"
    sig = bind(lambda x, t: x, {"a": jnp.ones(2), "b": jnp.ones(3, jnp.int32)}, True, static=("t",))
    assert sig.key == "(f32[2],s32[3]);t=True"


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (jnp.float32, "f32"),
        (jnp.bfloat16, "bf16"),
        (jnp.int8, "s8"),
        (jnp.bool_, "pred"),
        (ml_dtypes.float8_e4m3fn, "f8e4m3fn"),
        (ml_dtypes.float8_e5m2, "f8e5m2"),
    ],
)
def test_dtype_names(dtype, name):
    assert dtype_name(dtype) == name


@pytest.mark.parametrize(
    "dtype",
    [
        jnp.float32,
        jnp.bfloat16,
        jnp.float16,
        ml_dtypes.float8_e4m3fn,
        jnp.int32,
        jnp.uint8,
        jnp.bool_,
        jnp.complex64,
    ],
)
def test_random_inputs_are_deterministic_per_dtype(dtype):
    spec = jax.ShapeDtypeStruct((3, 5), dtype)
    task = task_of(lambda x, *, c: x, bind(lambda x: x, spec), ({"c": 1},), {"c": 1})
    a, b = (
        _inputs.make_inputs(task.plan.kernel, task.signature, task.inputs)[0]["x"],
        _inputs.make_inputs(task.plan.kernel, task.signature, task.inputs)[0]["x"],
    )
    assert a.shape == (3, 5) and np.dtype(a.dtype) == np.dtype(dtype)
    np.testing.assert_array_equal(
        np.asarray(a, np.float64) if dtype != jnp.complex64 else a,
        np.asarray(b, np.float64) if dtype != jnp.complex64 else b,
    )


def test_concrete_caller_arrays_are_used_as_inputs():
    x = jnp.arange(6.0)
    task = task_of(lambda x, *, c: x, bind(lambda x: x, x), ({"c": 1},), {"c": 1})
    assert _inputs.make_inputs(task.plan.kernel, task.signature, task.inputs)[0]["x"] is x


@pytest.mark.parametrize(
    ("dtype", "noise", "ok"),
    [
        (np.float32, 1e-6, True),
        (np.float32, 1e-2, False),
        (ml_dtypes.bfloat16, 1e-2, True),
        (ml_dtypes.bfloat16, 0.5, False),
        (np.float64, 1e-9, True),
        (np.float64, 1e-5, False),
    ],
)
def test_auto_tolerance_is_dtype_aware(dtype, noise, ok):
    ref = np.linspace(-1, 1, 64).astype(dtype)
    out = (ref.astype(np.float64) + noise).astype(dtype)
    assert (_check.check_outputs(out, ref, "auto") is None) is ok


def test_check_variants():
    ref = np.ones(4, np.float32)
    out = ref * 1.01
    assert _check.check_outputs(out, ref, False) is None
    assert _check.check_outputs(out, ref, {"rtol": 0.02}) is None
    assert "exceeds" in _check.check_outputs(out, ref, {"rtol": 0.001})
    assert _check.check_outputs(out, ref, lambda o, r: True) is None
    assert _check.check_outputs(out, ref, lambda o, r: False) == "the check callable returned False"
    assert "differs" in _check.check_outputs(np.array([1, 2]), np.array([1, 3]), "auto")
    assert "is f32[3]" in _check.check_outputs(np.ones(3, np.float32), ref, "auto")
    assert "exceeds" in _check.check_outputs(
        np.array([np.nan], np.float32), np.array([1.0], np.float32), "auto"
    )


def test_the_checks_comparison_compiles_ahead_on_a_compiling_thread(fast_timing, monkeypatch):
    """The comparison a check makes is compiled once, on a compiling thread, as soon as
    the first config is lowered, not on first use on the thread that runs the configs (a
    TPU sweep's first check waited about 1.3 s for it), and the check still fails the
    wrong config. Here the sweep runs as a user's does, while ``jax.jit`` traces the
    call, with JAX's compilation cache on: there ``_within`` called by name compiled
    again."""
    import threading

    from jax._src import monitoring

    import jaxtune
    from jaxtune._tuning.state import TUNING_STATE

    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")  # a kernel defined in the test
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", "1")  # on, as users have it
    compiled_on: list[tuple[str, str]] = []

    def heard(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled_on.append((str(kwargs.get("fun_name")), threading.current_thread().name))

    @jaxtune.autotuned(configs={"mode": ["a", "wrong", "b", "c"]}, name="tests.compared_ahead")
    def k(x, *, mode):
        scale = {"a": 1.0, "wrong": 1.0, "b": 2.0, "c": 3.0}[mode]  # a program each
        return x + 1 if mode == "wrong" else x * scale / scale

    # A shape no other test's check compares, so the comparison is compiled here.
    x = jnp.ones((37, 53), jnp.float32)
    TUNING_STATE.reset("comparisons compiled ahead")  # as in a fresh process
    monitoring.register_event_duration_secs_listener(heard)
    try:
        jax.jit(k)(x)
    finally:
        monitoring.unregister_event_duration_listener(heard)
    entry = k.config_for(x).entry
    by = {m.config["mode"]: m for m in entry.measurements}
    assert isinstance(by["wrong"], Failure) and by["wrong"].stage == "check"
    assert all(isinstance(by[m], Measurement) for m in "abc"), by
    comparisons = [thread for name, thread in compiled_on if name == "jit(_within)"]
    # Once, on a compiling thread: the checks call what it compiled.
    assert len(comparisons) == 1 and comparisons[0].startswith("jaxtune-compile"), compiled_on


@pytest.mark.child
def test_a_comparison_compiled_ahead_serves_only_the_device_it_was_compiled_for(tmp_path):
    """Compiled ahead for one device, a comparison is not handed outputs on another: there
    it would copy them across (or refuse them) instead of comparing where they lie, so the
    check compiles one for theirs. Two host devices, in a process of their own."""
    script = tmp_path / "two_devices.py"
    script.write_text(
        textwrap.dedent(
            """
            import threading
            import jax, jax.numpy as jnp
            from jax._src import monitoring
            from jaxtune._tuning.sweep import check

            seen = []
            monitoring.register_event_duration_secs_listener(
                lambda event, d, **kw: seen.append(kw.get("fun_name"))
                if event == "/jax/core/compile/backend_compile_duration" else None
            )
            d0, d1 = jax.devices()
            spec = jax.ShapeDtypeStruct((5, 7), jnp.float32)
            with jax.default_device(d1):
                check.prepare(spec, "auto")
                o = jnp.ones((5, 7)) * 1.0
                assert check.check_outputs(o, o, "auto") is None
            assert seen.count("jit(_within)") == 1, seen  # prepared for d1, used there
            o0 = jnp.ones((5, 7)) * 1.0  # on d0
            assert check.check_outputs(o0, o0 + 1, "auto") is not None
            assert seen.count("jit(_within)") == 2, seen  # compiled for d0 where it ran
            print("ok")
            """
        )
    )
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(pathlib.Path(__file__).parents[1]),
    }
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


class FakeClock:
    """A clock whose time advances only when the fake kernel runs."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_timer_warms_up_and_reaches_min_time():
    clock = FakeClock()
    calls = []

    def run():
        calls.append(1)
        clock.now += 1e-3

    opts = _samples.TimingOptions(min_time_s=0.02, min_samples=5, max_samples=100, warmup=2)
    t = WallTimer(clock).measure(run, opts)
    assert len(t.samples_us) == 20
    assert t.median_us == pytest.approx(1000.0)
    assert len(calls) == 2 + 20  # warm-up (the last one, timed, sizes batches), samples


def test_timer_batches_short_calls_and_drops_slow_configs():
    clock = FakeClock()

    def fast():
        clock.now += 1e-6

    opts = _samples.TimingOptions(min_time_s=0.001, sample_floor_us=100.0)
    t = WallTimer(clock).measure(fast, opts)
    assert t.median_us == pytest.approx(1.0)

    def slow():
        clock.now += 1e-3

    t = WallTimer(clock).measure(slow, _samples.TimingOptions(min_time_s=1.0), best_us=100.0)
    assert t.dropped and len(t.samples_us) == 3


def test_sweep_records_every_failure_kind_and_picks_fastest(fast_timing):
    def k(x, *, mode):
        if mode == "compile_error":
            raise ValueError("tile does not divide")
        if mode == "wrong":
            return x + 1
        if mode == "slow":
            y = x
            for _ in range(200):
                y = jnp.sin(y) + x
            return y - y + x
        return x

    x = jnp.ones((256,))
    configs = tuple({"mode": m} for m in ("fast", "compile_error", "wrong", "slow"))
    task = task_of(k, bind(k, x), configs, {"mode": "fast"}, options=fast_timing)
    out = _sweep.run_sweep(task)
    by = {m.config["mode"]: m for m in out.measurements}
    assert isinstance(by["compile_error"], Failure) and by["compile_error"].stage == "compile"
    assert "tile does not divide" in by["compile_error"].reason
    assert isinstance(by["wrong"], Failure) and by["wrong"].stage == "check"
    assert isinstance(by["slow"], Measurement)
    assert out.best.config == {"mode": "fast"}
    assert out.default is by["fast"]


def test_default_outside_space_is_a_candidate_with_its_measurement(fast_timing):
    """DESIGN: the default is always a candidate, whether or not it is in configs, and the
    entry holds its measurement."""

    def k(x, *, c):
        return x * 1.0

    x = jnp.ones(8)
    task = task_of(k, bind(k, x), ({"c": 2}, {"c": 3}), {"c": 1}, options=fast_timing)
    out = _sweep.run_sweep(task)
    assert [m.config for m in out.measurements] == [{"c": 2}, {"c": 3}, {"c": 1}]
    assert isinstance(out.default, Measurement) and out.default.config == {"c": 1}


@pytest.mark.parametrize("verbose", [1, 2])
def test_progress_lines(verbose, fast_timing):
    stream = io.StringIO()
    progress = _progress.Progress("k f32[8]", 2, verbose, stream)
    m = Measurement(
        config={"c": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.1
    )
    f = Failure(config={"c": 2}, stage="run", reason="boom")
    progress.update(m)
    progress.update(f)
    progress.finish(SweepOutcome(measurements=(m, f), best=m, default=m))
    text = stream.getvalue()
    assert "tuned k f32[8]" in text and "2 configs (1 failed)" in text
    assert ("FAILED at run: boom" in text) is (verbose == 2)


@pytest.mark.parametrize(
    "rounds_s, decision", [(5.0, "undecided"), (20.0, "undecided"), (5.0, "tie")]
)
def test_an_undecided_finish_says_the_thorough_effort_lets_the_rounds_go_on(rounds_s, decision):
    """Where the rounds stopped at their time limit with a rival still undecided, the
    finish line says which effort lets them go on (a new user's gmm sweep ended
    undecided at 0.99x and nothing said that more rounds could decide it)."""
    from jaxtune._tuning.sweep.stats import Margin

    stream = io.StringIO()
    progress = _progress.Progress("k f32[8]", 2, 1, stream, rounds_s=rounds_s)
    m = Measurement(
        config={"c": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.1
    )
    rival = dataclasses.replace(m, config={"c": 2})
    margin = Margin(rival={"c": 2}, ratio=0.99, low=0.85, high=1.2)
    progress.finish(
        SweepOutcome(measurements=(m, rival), best=m, default=m, decision=decision, margin=margin)
    )
    text = stream.getvalue()
    hinted = decision == "undecided" and rounds_s < 20.0
    assert ('effort="thorough" lets the rounds go on for 20 s' in text) is hinted, text
    assert f"{decision} " in text or "a tie with" in text, text


def test_progress_names_configs_with_their_knobs_in_the_spaces_order():
    """The verbose lines name configs as the table does, the knobs in the order the author
    wrote them (a new user read ``tk=512,tm=128,tn=512`` there and ``tm=128, tk=512,
    tn=512`` in the table)."""
    stream = io.StringIO()
    progress = _progress.Progress("k f32[8]", 1, 2, stream)
    m = Measurement(
        config={"tm": 128, "tk": 512, "tn": 512},
        median_us=5.0,
        min_us=4.0,
        spread=0.0,
        samples=3,
        compile_s=0.1,
        calls=4,
    )
    progress.update(m)
    progress.finish(SweepOutcome(measurements=(m,), best=m, default=m, phases={"total": 1.0}))
    text = stream.getvalue()
    assert "tm=128, tk=512, tn=512: 5.0 us" in text
    assert "best tm=128, tk=512, tn=512 at 5.0 us" in text
    assert "per config: tm=128, tk=512, tn=512: 4 calls" in text
    assert "tk=512" not in text.replace("tm=128, tk=512", "")


def test_live_progress_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    progress = _progress.Progress("k", 3, 0, stream)
    progress.update(
        Measurement(
            config={"c": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.1
        )
    )
    assert "\rjaxtune: tuning k 1/3, best 5.0 us" in stream.getvalue()


def test_progress_lines_on_a_non_terminal_show_an_eta():
    stream = io.StringIO()
    progress = _progress.Progress("k f32[8]", 3, 2, stream)
    m = Measurement(
        config={"c": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.1
    )
    progress.update(m)
    progress.update(m)
    progress.update(m)
    first, second, last = stream.getvalue().splitlines()
    assert re.search(r"\[1/3, ETA \d+ s\]", first) and re.search(r"\[2/3, ETA \d+ s\]", second)
    assert "[3/3]" in last  # nothing left to wait for


def test_rounds_show_progress_and_no_eta(monkeypatch):
    """A slow kernel's whole space timed in rounds at once reports its configs only when
    the rounds end, all in the same instant: a new user saw nothing for 38 s of rounds,
    then "[1/36, ETA 22.2 min]" counting down to 1 s at once. The rounds now say how far
    they are, a line every 5 s, and no ETA is shown once they began."""
    clock = [0.0]
    monkeypatch.setattr(_progress.time, "perf_counter", lambda: clock[0])
    stream = io.StringIO()
    progress = _progress.Progress("k f32[8]", 4, 2, stream)
    for i in range(4):
        clock[0] = 10.0 * (i + 1)
        progress.compile_done(f"c={i}", failed=False)
    for done in range(1, 9):
        clock[0] = 40.0 + 2.0 * done
        progress.round_timed(done, 4 if done < 6 else 2)
    clock[0] = 60.0
    m = Measurement(
        config={"c": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.1
    )
    progress.update(m)
    lines = stream.getvalue().splitlines()
    rounds = [x for x in lines if "round " in x]
    # The first round, then one at least 5 s after the last.
    assert rounds == [
        "jaxtune: k f32[8] round 1, 4 configs racing in 42 s",
        "jaxtune: k f32[8] round 4, 4 configs racing in 48 s",
        "jaxtune: k f32[8] round 7, 2 configs racing in 54 s",
    ], lines
    assert "[1/4] c=1" in lines[-1], lines  # no ETA after the rounds

    class Tty(io.StringIO):
        def isatty(self):
            return True

    live = _progress.Progress("k", 3, 0, Tty())
    live.round_timed(2, 3)
    assert "round 2, 3 configs racing" in live.stream.getvalue()


def test_the_eta_after_every_config_compiled_counts_only_the_timing(monkeypatch):
    """A sweep whose configs all compiled first (90 s) reports its first config at 96 s:
    the 15 left need their timing alone (a new user saw "ETA 24.2 min" for a sweep that
    ended seconds later)."""
    clock = [0.0]
    monkeypatch.setattr(_progress.time, "perf_counter", lambda: clock[0])
    stream = io.StringIO()
    progress = _progress.Progress("k f32[8]", 16, 2, stream)
    for i in range(16):
        clock[0] = 90.0 * (i + 1) / 16
        progress.compile_done(f"c={i}", failed=False)
    clock[0] = 96.0
    progress.update(
        Measurement(
            config={"c": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.1
        )
    )
    (line,) = [x for x in stream.getvalue().splitlines() if "[1/16" in x]
    assert "[1/16, ETA 90 s]" in line, line  # 6 s a config for 15 more, not 96 s each
    # Configs done while others compiled (failures, early timings) are not the timing's
    # pace: 4 failed in the first 40 s, then one is timed 6 s after the compiles end.
    clock[0] = 0.0
    stream = io.StringIO()
    progress = _progress.Progress("k f32[8]", 16, 2, stream)
    failed = Failure(config={"c": 0}, stage="compile", reason="refused")
    for i in range(16):
        clock[0] = 90.0 * (i + 1) / 16
        progress.compile_done(f"c={i}", failed=i < 4)
        if i < 4:
            progress.update(failed)
    assert "[4/16, ETA" in stream.getvalue()  # from the start, while compiling
    clock[0] = 96.0
    progress.update(
        Measurement(
            config={"c": 5}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.1
        )
    )
    (line,) = [x for x in stream.getvalue().splitlines() if "[5/16" in x]
    assert "[5/16, ETA 66 s]" in line, line  # 6 s for the one timed, 11 left; not 1.5 s each


class BurstCompiler(_compile.Compiler):
    """A compiler whose configs "run" by advancing a fake clock by their true time, the
    first ``n`` calls of config ``k`` ``slow`` times slower for ``burst[k] = (n, slow)`` (a
    burst of other work on the machine during its first pass); nothing is traced or
    compiled."""

    def __init__(self, task, *, clock, truth_ms, burst, **kwargs):
        super().__init__(task, **kwargs)
        self.clock, self.truth_ms, self.burst = clock, truth_ms, burst
        self.calls: dict[str, int] = {}

    def lower(self, config, spec):
        k = config["k"]

        def run(inputs):
            self.calls[k] = self.calls.get(k, 0) + 1
            n, slow = self.burst.get(k, (0, 1.0))
            slow = slow if self.calls[k] <= n else 1.0
            self.clock.now += self.truth_ms[k] * slow * 1e-3
            return np.ones(4, np.float32)

        return _compile.Lowering(lowered=_Compiled(run), seconds=0.0)


class _Compiled:
    """Stands for JAX's ``Lowered``: its ``compile()`` gives ``run``."""

    def __init__(self, run):
        self.run = run

    def compile(self):
        return self.run


#: Six configs of milliseconds (default timing: a first pass of 3 samples a visit); "e",
#: last in the space, is the fastest.
TRUTH_MS = {"a": 3.0, "b": 2.5, "c": 2.4, "d": 2.6, "e": 2.0, "f": 2.8}


def burst_sweep(burst):
    configs = tuple({"k": k} for k in TRUTH_MS)
    task = task_of(lambda x, *, k: x, bind(lambda x: x, jnp.ones(4)), configs, configs[0])
    clock = FakeClock()
    compiler = functools.partial(BurstCompiler, clock=clock, truth_ms=TRUTH_MS, burst=burst)
    sweeper = _engine.Sweeper(task, timer=WallTimer(clock), compiler=compiler)
    plan = task.plan
    outcome = _sweep.drive(plan, _sweep.InProcess(sweeper), progress=_sweep.new_progress(plan))
    return outcome, {m.config["k"]: m for m in outcome.measurements}


@pytest.mark.parametrize(
    ("burst", "why"),
    [
        # The check run, the warm-up and the 3 samples of "e"'s first visit at 6 ms, over
        # 1.5x the best so far (2.4 ms): dropped early, before its second visit.
        ({"e": (5, 3.0)}, "the fastest dropped early"),
        # Every config but the default (first, never dropped) in a burst: all dropped
        # early, the default alone left within the leaders' window.
        ({k: (5, 3.0) for k in "bcdef"}, "all but the default dropped early"),
        # Both visits of "e" (last in the first, so first in the second: back to back) at
        # 3 ms: behind the three leaders (2.4-2.6 ms), out of the rounds.
        ({"e": (9, 1.5)}, "the fastest behind the leaders"),
    ],
)
def test_a_burst_during_the_first_pass_does_not_rule_out_the_fastest(burst, why):
    """A first pass times one config at a time for a few milliseconds: a burst of other
    work can cover all of one config's samples. The configs it leaves out get a second look
    in the first rounds, side by side with the leaders, and the fastest races and wins."""
    outcome, by = burst_sweep(burst)
    assert (dict(outcome.best.config), outcome.decision) == ({"k": "e"}, "clear"), why
    assert by["e"].rounds_us and not by["e"].dropped
    if "f" not in burst:
        # Behind the leaders on its second look too: not raced, its first pass stands.
        assert not by["f"].rounds_us and not by["f"].dropped


def test_without_a_burst_the_second_look_costs_a_round_or_two():
    outcome, by = burst_sweep({})
    assert (dict(outcome.best.config), outcome.decision) == ({"k": "e"}, "clear")
    raced = {k for k, m in by.items() if m.rounds_us}
    assert raced == {"a", "b", "c", "e"}  # the leaders (c, e, b) and the default


def test_a_retime_request_carries_the_second_look_and_a_crash_there_is_blamed_on_its_config():
    from faulty_kernels import faulty

    from jaxtune._tuning.sweep import requests as _requests
    from jaxtune._tuning.sweep.flight import InFlight

    task = faulty.options.bound(
        faulty.options.bind((jnp.ones(8),), {}), [{"mode": "ok"}], {"mode": "ok"}
    ).sweep_task()
    request = _requests.sweep_request(task)
    leaders, second = [{"mode": "ok"}, {"mode": "fast"}], [{"mode": "late_abort"}]
    retime = _requests.Retime(todo=leaders, second=second).of(request)
    again = _requests.read_request(retime.to_wire()).fields.work
    assert again == _requests.Retime(todo=leaders, second=second)
    flight = InFlight(retime)
    assert set(flight.by_id) == {config_id(c) for c in leaders + second}
    flight.running = (config_id(second[0]), 0.0)
    assert flight.suspects(hung=False, timeout_s=4) == [config_id(second[0])]
