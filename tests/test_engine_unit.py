"""The sweep engine (``Sweeper``) and its interleaved rounds, with a fake clock and fake
compiled runs: no XLA compile, no timed kernel, so each rule is checked exactly.

Covers docs/autotuned.md, "Sweeps" (the stored config is the fastest measured; a config
that fails to compile, run or match the reference is recorded with its reason, never
raised), docs/search.md, "Calls where the decision needs them" (one sample a round for a
call of at least ``one_sample_above_s``; a config over 1.5x behind leaves the rounds) and
docs/isolation.md, "When a config fails" (every config's compile outcome reaches the
thread waiting on it).

Each config is traced and lowered by JAX as in a real sweep (a trivial kernel); XLA's
compile and the compiled call are replaced: a config's call advances :class:`FakeClock` by
its true time, so the wall timer measures exactly that.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import threading
import time
import types
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
import pytest

from jaxtune._core.vocabulary import Failure, Measurement, config_id
from jaxtune._isolation.frames import CompileFinished, ConfigResult
from jaxtune._tuning.signature import Signature
from jaxtune._tuning.sweep import compile as _compile
from jaxtune._tuning.sweep import drive as _drive
from jaxtune._tuning.sweep import engine as _engine
from jaxtune._tuning.sweep import first_pass as _first_pass
from jaxtune._tuning.sweep import first_run as _first_run
from jaxtune._tuning.sweep import rounds as _rounds
from jaxtune._tuning.sweep.measure import ROUNDS_PER_CAPTURE
from jaxtune._tuning.sweep.samples import Timing, TimingOptions
from jaxtune._tuning.sweep.timers import ProfilerTimer, Recording, WallTimer
from jaxtune._tuning.sweep.work import Rounds, SweepPlan, SweepTask


class FakeClock:
    """A clock whose time advances only when a fake config runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass(frozen=True)
class Fake:
    """How one config behaves: its call's true time, and where (if anywhere) it fails."""

    ms: float
    trace_error: bool = False  # the kernel raises while JAX traces it
    compile_error: bool = False  # XLA refuses the lowered module
    run_error_at: int | None = None  # the n-th call raises (1: the check's run)
    wrong: bool = False  # its output differs from the reference's
    dispatch_ms: float = 0.0  # what the wall clock adds to each call, the device timer not
    noise: tuple[float, ...] = ()  # each call's time is ``ms`` times the next of these, cycling


def kernel(x, *, k):
    """The kernel JAX traces for each config; a config marked ``trace_error`` raises."""
    if FAKES_NOW[k].trace_error:
        raise ValueError(f"block {k} does not divide the array")
    return x


#: The fakes of the sweep under way (the kernel above reads them while JAX traces it).
FAKES_NOW: dict[str, Fake] = {}


class _Lowered:
    """Stands for JAX's ``Lowered``: its ``compile()`` gives a fake executable."""

    def __init__(self, sweeper: FakeSweeper, k: str) -> None:
        self.sweeper, self.k = sweeper, k

    def compile(self):
        fake = self.sweeper.fakes[self.k]
        if fake.compile_error:
            raise RuntimeError(f"XLA: resource exhausted compiling block {self.k}")

        def executable(inputs):
            calls = self.sweeper.calls
            calls[self.k] = calls.get(self.k, 0) + 1
            slow = fake.noise[(calls[self.k] - 1) % len(fake.noise)] if fake.noise else 1.0
            self.sweeper.clock.now += (fake.ms * slow + fake.dispatch_ms) * 1e-3
            self.sweeper.on_call(self.k)
            if fake.run_error_at is not None and calls[self.k] >= fake.run_error_at:
                raise FloatingPointError(f"block {self.k} read out of bounds")
            return np.full(4, 2.0 if fake.wrong else 1.0, np.float32)

        return executable


class FakeDeviceTimer(ProfilerTimer):
    """The profiler timer over a fake trace: each call's device time is its config's
    ``ms``, without the ``dispatch_ms`` the wall clock adds. ``captures`` counts the
    captures (``recording()`` entries); ``on_end`` runs as each capture ends. It stands
    for a chip's trace: its samples are device time."""

    device_time = True

    def __init__(self, sweeper: FakeSweeper) -> None:
        super().__init__(sweeper.clock)
        self.sweeper = sweeper
        self.captures = 0
        self.captured: set[str] = set()  # the configs whose calls a capture held
        self.on_end = lambda: None
        self.in_flight = False  # the calls started back to back, as on a TPU

    @contextlib.contextmanager
    def recording(self):
        self.captures += 1
        rec = Recording(self, in_flight=self.in_flight)
        yield rec
        self.on_end()
        module_of = {m: cid for cid, m in self.sweeper.compiler.names.modules.items()}
        self.captured.update(module_of[c.module] for c in rec.calls)
        fakes = {config_id({"k": k}): f for k, f in self.sweeper.fakes.items()}
        rec._results = [
            Timing(samples_us=(fakes[module_of[c.module]].ms * 1e3,) * len(c.wall.samples_us))
            for c in rec.calls
        ]


class FakeCompiler(_compile.Compiler):
    """A compiler whose configs JAX lowers for real, and whose XLA compile is a fake."""

    def __init__(self, sweeper: FakeSweeper, task, **kwargs) -> None:
        super().__init__(task, **kwargs)
        self.sweeper = sweeper

    def lower(self, config, spec):
        got = super().lower(config, spec)
        if isinstance(got, _compile.Lowering):
            # The kernel JAX lowers ignores ``k``: each fake is a program of its own.
            self.names.digests[config_id(config)] = f"fake {config['k']}"
            return _compile.Lowering(lowered=_Lowered(self.sweeper, config["k"]), seconds=0.0)
        return got


class FakeSweeper(_engine.Sweeper):
    """A sweeper whose configs JAX lowers for real, and whose compile and calls are fakes
    (timed by the wall clock, or with ``device`` by :class:`FakeDeviceTimer`)."""

    def __init__(self, task, fakes: dict[str, Fake], *, device: bool = False, **kwargs) -> None:
        self.clock = FakeClock()
        self.fakes = fakes
        timer = FakeDeviceTimer(self) if device else WallTimer(self.clock)
        compiler = functools.partial(FakeCompiler, self)
        super().__init__(task, timer=timer, compiler=compiler, **kwargs)
        self.calls: dict[str, int] = {}
        self.on_call: Callable[[str], None] = lambda k: None


def _sweeper(fakes: dict[str, Fake], options: TimingOptions | None = None, **kwargs):
    FAKES_NOW.clear()
    FAKES_NOW.update(fakes)
    x = jnp.ones(4, jnp.float32)
    signature = Signature.bind(
        inspect.signature(lambda x: x),
        (x,),
        {},
        static_argnames=frozenset(),
        config_names=frozenset(),
    )
    configs = tuple({"k": k} for k in fakes)
    plan = SweepPlan(
        kernel="k",
        key=signature.key,
        configs=configs,
        default=configs[0],
        options=options or TimingOptions(),
        compile_threads=2,
    )
    task = SweepTask(plan=plan, fn=kernel, signature=signature)
    return FakeSweeper(task, fakes, **kwargs)


def _sweep(fakes: dict[str, Fake], options: TimingOptions | None = None, **kwargs):
    """A whole sweep (search, first pass, rounds, pick) through the fake sweeper."""
    sweeper = _sweeper(fakes, options, **kwargs)
    plan = sweeper.task.plan
    outcome = _drive.drive(plan, _drive.InProcess(sweeper), progress=_drive.new_progress(plan))
    return outcome, {m.config["k"]: m for m in outcome.measurements}, sweeper


# -- the stored winner ------------------------------------------------------------------


@pytest.mark.parametrize(
    "truth_ms",
    [
        # At most ``first_pass_above`` configs: straight into the rounds.
        {"a": 3.0, "b": 1.0, "c": 2.0},
        # More: a first pass, then the leaders re-timed in rounds.
        {"a": 3.0, "b": 2.5, "c": 2.4, "d": 2.6, "e": 1.0, "f": 2.8},
        # The fastest first in the space (it is also the default).
        {"a": 1.0, "b": 2.5, "c": 2.4, "d": 2.6, "e": 3.0, "f": 2.8},
    ],
)
def test_the_stored_winner_is_the_fastest_measured(truth_ms):
    fastest = min(truth_ms, key=truth_ms.__getitem__)
    outcome, by, _ = _sweep({k: Fake(ms=ms) for k, ms in truth_ms.items()})
    assert outcome.best.config == {"k": fastest}
    assert outcome.decision == "clear"
    # Every config of the space was measured, each near its true time.
    assert set(by) == set(truth_ms)
    for k, m in by.items():
        assert isinstance(m, Measurement)
        assert m.min_us == pytest.approx(truth_ms[k] * 1e3)


def test_a_tie_goes_to_the_earliest_config_of_the_space():
    outcome, _, _ = _sweep({"a": Fake(ms=2.0), "b": Fake(ms=2.0), "c": Fake(ms=2.0)})
    assert outcome.best.config == {"k": "a"}


def test_near_equal_configs_undecided_after_the_round_budget_say_so_in_the_table():
    """Two configs within 2 % of each other whose rounds swing by +-30 %: the rounds run
    out (``max_rounds``) with neither shown slower nor shown equal, and the table's line
    under the entry says ``undecided``, with the interval the decision used and the
    rounds it took, not a tie or a clear win."""
    import jaxtune
    from jaxtune._tuning.sweep.entry import make_entry

    swing = (1.0, 1.3, 0.8, 1.25, 0.9, 1.2, 1.0, 0.75)
    fakes = {"a": Fake(ms=2.0, noise=swing), "b": Fake(ms=1.96, noise=swing[::-1])}
    options = TimingOptions(rounds=4, max_rounds=8, round_samples=1, round_floor_us=0.0)
    outcome, by, _ = _sweep(fakes, options)
    assert outcome.decision == "undecided"
    assert all(len(m.rounds_us) == 8 for m in by.values())  # the whole round budget
    entry = make_entry(outcome_plan(fakes, options), outcome, "cpu", "1")
    table = jaxtune.TuningResult.of(entry).table()
    (line,) = [x for x in table.splitlines() if "decided:" in x]
    rival = "a" if outcome.best.config == {"k": "b"} else "b"
    assert f"decided: undecided vs k={rival!r}: " in line and "after 8 rounds" in line, line


def outcome_plan(fakes: dict[str, Fake], options: TimingOptions) -> SweepPlan:
    """The plan of the fake sweep of ``fakes`` (what :func:`_sweep` ran)."""
    return _sweeper(fakes, options).task.plan


# -- failures are data ------------------------------------------------------------------


def test_a_config_that_fails_to_compile_or_run_is_a_failure_with_its_reason():
    fakes = {
        "a": Fake(ms=3.0),
        # Each failing config would be the fastest: a failure never wins.
        "trace": Fake(ms=0.5, trace_error=True),
        "xla": Fake(ms=0.5, compile_error=True),
        "first_run": Fake(ms=0.5, run_error_at=1),
        "later_run": Fake(ms=0.5, run_error_at=4),
        "wrong": Fake(ms=0.5, wrong=True),
        "b": Fake(ms=2.0),
    }
    outcome, by, _ = _sweep(fakes)
    stages = {k: (m.stage if isinstance(m, Failure) else None) for k, m in by.items()}
    assert stages == {
        "a": None,
        "trace": "compile",
        "xla": "compile",
        "first_run": "run",
        "later_run": "run",
        "wrong": "check",
        "b": None,
    }
    assert "block trace does not divide" in by["trace"].reason
    # The stage is "compile" either way; the reason says when tracing or lowering raised.
    assert by["trace"].reason.startswith("while tracing or lowering: ")
    assert not by["xla"].reason.startswith("while tracing")
    assert "resource exhausted compiling block xla" in by["xla"].reason
    assert "block first_run read out of bounds" in by["first_run"].reason
    assert "block later_run read out of bounds" in by["later_run"].reason
    assert outcome.best.config == {"k": "b"}


def test_a_reference_that_fails_hands_the_check_to_the_first_config_that_runs():
    fakes = {"a": Fake(ms=1.0, compile_error=True), "b": Fake(ms=2.0), "c": Fake(ms=3.0)}
    sweeper = _sweeper(fakes)
    configs = list(sweeper.task.plan.configs)
    got = sweeper.measure(configs, reference=configs[0])
    assert isinstance(got[config_id({"k": "a"})], Failure)
    assert all(isinstance(got[config_id({"k": k})], Measurement) for k in "bc")


# -- dropping ---------------------------------------------------------------------------


def test_the_first_pass_drops_a_config_over_the_drop_ratio_behind_the_best():
    """A config whose first samples are all over ``drop_ratio`` (1.5x) the best so far
    stops early and is not visited again; one within it is timed on both visits."""
    truth_ms = {"a": 2.0, "b": 2.0, "c": 2.8, "d": 3.2, "e": 2.1, "f": 2.2}
    sweeper = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()})
    configs = list(sweeper.task.plan.configs)
    got = {
        c["k"]: m
        for c, m in zip(
            configs, sweeper.measure(configs, reference=configs[0]).values(), strict=True
        )
    }
    assert got["d"].dropped  # 1.6x
    assert not got["c"].dropped  # 1.4x
    assert sweeper.calls["d"] < sweeper.calls["c"]


# -- the first pass with a device timer --------------------------------------------------


def test_a_device_timer_times_the_first_pass_in_one_visit_and_one_capture():
    """The first pass of six configs under a device timer is one visit (device time is
    the chip's, which a slow spell of the host does not lengthen: no second visit in
    reverse order) in one capture, not one per config, and each config's time is its
    device time: "e", the fastest on the device, would be the slowest by the wall clock,
    which adds its dispatch."""
    truth_ms = {"a": 2.0, "b": 2.5, "c": 2.4, "d": 2.6, "e": 1.9, "f": 2.8}
    fakes = {k: Fake(ms=ms, dispatch_ms=2.0 if k == "e" else 0.0) for k, ms in truth_ms.items()}
    sweeper = _sweeper(fakes, device=True)
    configs = list(sweeper.task.plan.configs)
    got = sweeper.measure(configs, reference=configs[0])
    assert sweeper.timer.captures == 1
    for c in configs:
        m = got[config_id(c)]
        assert isinstance(m, Measurement) and not m.dropped
        assert m.min_us == pytest.approx(truth_ms[c["k"]] * 1e3)
        assert m.samples == 5  # min_samples, in the one visit
    # One config per capture after a crash (``serial_rounds``): the captures of before.
    serial = _sweeper(fakes, device=True)
    serial.serial_rounds = True
    again = serial.measure(configs, reference=configs[0])
    assert serial.timer.captures == len(configs)
    assert {cid: m.min_us for cid, m in again.items()} == {cid: m.min_us for cid, m in got.items()}


def test_a_device_timers_first_pass_keeps_long_configs_far_behind_out_of_its_captures():
    """Under a device timer the first pass screens by the wall clock, with no trace: a
    config whose calls take at least ``device_screen_above_us`` and over ``leader_window``
    times the best's keeps that timing ("c", "d"), the others are timed in a capture, on
    the device ("e" is the fastest there, though its dispatch makes its wall clock the
    slowest of the three close ones), so leaders and second looks are chosen by device
    time. Calls under the threshold are all captured, however far behind; 0 turns the
    screen off."""
    truth_ms = {"a": 1.0, "b": 1.2, "c": 2.5, "d": 4.0, "e": 0.9}
    fakes = {k: Fake(ms=ms, dispatch_ms=0.5 if k == "e" else 0.0) for k, ms in truth_ms.items()}
    sweeper = _sweeper(fakes, device=True)
    configs = list(sweeper.task.plan.configs)
    got = {c["k"]: sweeper.measure(configs, reference=configs[0])[config_id(c)] for c in configs}
    ids = {c["k"]: config_id(c) for c in configs}
    assert sweeper.timer.captured == {ids["a"], ids["b"], ids["e"]}
    assert got["e"].min_us == pytest.approx(900.0)  # device time, without the dispatch
    assert got["c"].min_us == pytest.approx(2500.0)  # wall time, calls in flight
    assert got["d"].dropped  # 4x the best: clearly slower, by its wall-clock figure
    # Calls of 10-40 us: under the threshold, all in the capture.
    short = {k: Fake(ms=ms / 100) for k, ms in truth_ms.items()}
    sweeper = _sweeper(short, device=True)
    sweeper.measure(list(sweeper.task.plan.configs), reference=configs[0])
    assert sweeper.timer.captured == set(ids.values())
    # The screen off: all in the capture.
    sweeper = _sweeper(fakes, TimingOptions(device_screen_above_us=0), device=True)
    sweeper.measure(list(sweeper.task.plan.configs), reference=configs[0])
    assert sweeper.timer.captured == set(ids.values())


def test_a_device_timer_captures_configs_that_passed_while_others_still_compile(monkeypatch):
    """Under a device timer the first pass begins while configs still compile: each 32
    configs that passed their check are captured then (no screen: the host is busy), the
    rest once all have compiled, and each config keeps its device time. The last config's
    compile here waits for a capture to end: it ends only if one began before. The fake
    compiles take no time: the pace at which configs come is set to 0 for this."""
    monkeypatch.setattr(_engine, "EARLY_PACE_S", 0.0)
    truth_ms = {f"c{i}": 2.0 + abs(i - 23) * 0.1 for i in range(40)}
    sweeper = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()}, device=True)
    ended = threading.Event()
    sweeper.timer.on_end = ended.set
    waited = []
    compile_ = _Lowered.compile

    def compile_last(self):
        if self.k == "c39":
            waited.append(ended.wait(timeout=60))
        return compile_(self)

    monkeypatch.setattr(_Lowered, "compile", compile_last)
    configs = list(sweeper.task.plan.configs)
    got = sweeper.measure(configs, reference=configs[0])
    assert waited == [True]
    assert sweeper.timer.captures == 2  # 32 configs while c39 compiled, then the other 8
    assert sweeper.timer.captured == {config_id(c) for c in configs}
    for c in configs:
        m = got[config_id(c)]
        assert isinstance(m, Measurement) and m.min_us == pytest.approx(truth_ms[c["k"]] * 1e3)
    # One config at a time (after a crash): no capture before every config has compiled.
    serial = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()}, device=True)
    serial.serial_rounds = True
    ran_at_ends = []
    serial.timer.on_end = lambda: ran_at_ends.append(len(serial.calls))
    serial.measure(configs, reference=configs[0], serial_compile=True)
    assert ran_at_ends and set(ran_at_ends) == {len(configs)}  # each after every first run


@pytest.mark.parametrize(
    "rounds, options",
    [
        (Rounds.AT_ONCE, TimingOptions()),
        # Every config runs "slowly" (at least 0 s): rounds at once, no first pass.
        (Rounds.IF_SLOW, TimingOptions(rounds_above_s=0.0)),
    ],
)
def test_no_config_is_captured_while_compiling_where_rounds_come_at_once(
    monkeypatch, rounds, options
):
    """With no first pass (rounds at once, or a whole space of slow configs), nothing is
    captured before every config has run once, however the configs come."""
    monkeypatch.setattr(_engine, "EARLY_PACE_S", 0.0)
    truth_ms = {f"c{i}": 2.0 + abs(i - 23) * 0.1 for i in range(40)}
    sweeper = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()}, options, device=True)
    ran_at_ends = []
    sweeper.timer.on_end = lambda: ran_at_ends.append(len(sweeper.calls))
    configs = list(sweeper.task.plan.configs)
    sweeper.measure(configs, reference=configs[0], rounds=rounds)
    assert ran_at_ends and set(ran_at_ends) == {len(configs)}


def test_a_whole_sweep_with_captures_while_compiling_stores_the_fastest(monkeypatch):
    """A whole sweep (first pass, rounds, pick) whose first captures run while configs
    still compile stores the fastest config, over a space whose configs are up to 2.2x
    apart, with the verdict the sweep without them reaches."""
    truth_ms = {f"c{i}": 2.0 + abs(i - 23) * 0.1 for i in range(40)}
    fakes = {k: Fake(ms=ms) for k, ms in truth_ms.items()}
    got = []
    for pace_s in (0.0, 10.0):  # captures while compiling, and none
        monkeypatch.setattr(_engine, "EARLY_PACE_S", pace_s)
        sweeper = _sweeper(fakes, device=True)
        ran_at_ends = []
        sweeper.timer.on_end = lambda s=sweeper, r=ran_at_ends: r.append(len(s.calls))
        plan = sweeper.task.plan
        outcome = _drive.drive(plan, _drive.InProcess(sweeper), progress=_drive.new_progress(plan))
        early = min(ran_at_ends) < len(truth_ms)  # a capture before every config had run
        got.append((early, outcome.best.config["k"], outcome.decision))
    assert got == [(True, "c23", "clear"), (False, "c23", "clear")]


def test_configs_that_compile_fast_are_captured_once_all_have_compiled(monkeypatch):
    """Configs coming faster than ``EARLY_PACE_S`` apart (loaded from JAX's compilation
    cache) are not captured while others still compile: they would be soon after, where a
    capture is quicker and screened. The first runs' clock here moves 1 ms a reading,
    whatever the machine's load: the configs come a few ms apart."""
    ticks = iter(range(10**9))
    clock = types.SimpleNamespace(perf_counter=lambda: next(ticks) * 1e-3)
    monkeypatch.setattr(_first_run, "time", clock)
    truth_ms = {f"c{i}": 2.0 + abs(i - 23) * 0.1 for i in range(40)}
    sweeper = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()}, device=True)
    ran_at_ends = []
    sweeper.timer.on_end = lambda: ran_at_ends.append(len(sweeper.calls))
    configs = list(sweeper.task.plan.configs)
    sweeper.measure(configs, reference=configs[0])
    assert ran_at_ends and set(ran_at_ends) == {len(configs)}


def test_the_reference_is_compiled_first_wherever_it_is_in_the_batch(monkeypatch):
    """Every other config's check waits for the reference's output: it is lowered (and
    compiled) first, though it comes last in the batch."""
    sweeper = _sweeper({k: Fake(ms=1.0) for k in "abcdef"})
    lowered = []
    lower = FakeCompiler.lower

    def noted(self, config, spec):
        lowered.append(config["k"])
        return lower(self, config, spec)

    monkeypatch.setattr(FakeCompiler, "lower", noted)
    configs = list(sweeper.task.plan.configs)
    got = sweeper.measure(configs, reference=configs[-1])
    assert lowered[0] == "f" and sorted(lowered) == list("abcdef")
    assert list(got) == [config_id(c) for c in configs]  # results in the batch's order


@pytest.mark.parametrize(
    "truth_ms",
    [
        {"a": 3.0, "b": 2.5, "c": 2.4, "d": 2.6, "e": 1.0, "f": 2.8},
        {"a": 1.0, "b": 2.5, "c": 2.4, "d": 2.6, "e": 3.0, "f": 2.8},
        {"a": 2.0, "b": 2.05, "c": 4.0, "d": 1.98, "e": 2.6, "f": 2.0, "g": 9.0},
        {f"c{i}": 2.0 + abs(i - 23) * 0.1 for i in range(40)},  # two captures a visit
    ],
)
def test_the_device_timers_shared_captures_keep_the_picks(truth_ms):
    """The same sweep timed by the wall clock, by the device timer in shared captures and
    in one capture per config stores the same config with the same verdict."""
    fakes = {k: Fake(ms=ms) for k, ms in truth_ms.items()}
    picks = set()
    for device, serial, in_flight in [
        (False, False, False),
        (True, False, False),
        (True, True, False),
        (True, False, True),
    ]:
        sweeper = _sweeper(fakes, device=device)
        sweeper.serial_rounds = serial
        if device:
            sweeper.timer.in_flight = in_flight
        plan = sweeper.task.plan
        outcome = _drive.drive(plan, _drive.InProcess(sweeper), progress=_drive.new_progress(plan))
        picks.add((outcome.best.config["k"], outcome.decision))
    assert picks == {(min(truth_ms, key=truth_ms.__getitem__), "clear")}


def test_a_device_timer_drops_by_the_visits_device_times():
    """Dropping needs the device times, which arrive when the visit's capture ends: a
    config clearly slower (over 1.5x) than the best of the visit, even one measured after
    it, is dropped; the earliest config (the default here) is never dropped, however
    slow."""
    truth_ms = {"a": 5.0, "b": 3.2, "c": 2.0, "d": 2.8, "e": 2.1, "f": 2.2}
    sweeper = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()}, device=True)
    configs = list(sweeper.task.plan.configs)
    got = {
        c["k"]: m
        for c, m in zip(
            configs, sweeper.measure(configs, reference=configs[0]).values(), strict=True
        )
    }
    assert {k for k, m in got.items() if m.dropped} == {"b"}  # 1.6x "c", measured after it
    assert not got["a"].dropped  # 2.5x, but the default and earliest
    assert got["b"].samples == got["d"].samples == 5 and not got["d"].dropped
    # A best measured in an earlier batch counts too.
    sweeper = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()}, device=True)
    got = sweeper.measure(configs, reference=configs[0], best_us=1000.0)
    assert {c["k"] for c in configs if got[config_id(c)].dropped} == {"b", "c", "d", "e", "f"}


class _Recorded(_drive.InProcess):
    """The in-process measurer, keeping the configs each re-timing gave a second look."""

    def __init__(self, sweeper: FakeSweeper) -> None:
        super().__init__(sweeper)
        self.looked: list[str] = []

    def retime(self, leaders, second):
        self.looked += [c["k"] for c in second]
        return super().retime(leaders, second)


def _drive_recorded(fakes: dict[str, Fake], *, device: bool):
    sweeper = _sweeper(fakes, device=device)
    plan = sweeper.task.plan
    measurer = _Recorded(sweeper)
    outcome = _drive.drive(plan, measurer, progress=_drive.new_progress(plan))
    return outcome, measurer.looked, sweeper


def test_under_a_device_timer_only_configs_close_behind_the_best_get_a_second_look():
    """The second look guards against a burst of work on the host during a config's first
    pass; a device timer's samples are the chip's own times, which such a burst does not
    lengthen. There only "e" (within 1.1x of the best, ``device_look_window``, and not a
    leader) gets a look; "f" (1.2x: within the leaders' 2x, not dropped), "g" and "h" do
    not enter the rounds. The wall timer gives every config the first pass measured
    outside the leaders its look, as before."""
    truth_ms = {"a": 1.5, "b": 1.0, "c": 1.02, "d": 1.04, "e": 1.08, "f": 1.2, "g": 2.5, "h": 4.0}
    fakes = {k: Fake(ms=ms) for k, ms in truth_ms.items()}
    device, device_looked, device_sweeper = _drive_recorded(fakes, device=True)
    wall, wall_looked, _ = _drive_recorded(fakes, device=False)
    assert sorted(device_looked) == ["e"]
    assert sorted(wall_looked) == ["e", "f", "g", "h"]
    # Under the device timer the far-behind configs ran their first pass only, no round:
    # "f" its screen and its capture, "g" and "h" (over 2x the best) their screen alone.
    got = {m.config["k"]: m for m in device.measurements}
    assert all(not got[k].rounds_us for k in "fgh")
    calls = device_sweeper.calls
    assert calls["g"] == calls["h"] < calls["f"] < calls["e"]
    assert device.best.config["k"] == wall.best.config["k"] == "b"


@pytest.mark.parametrize(
    "truth_ms",
    [
        {"a": 3.0, "b": 1.0, "c": 1.5, "d": 2.25, "e": 3.4, "f": 5.0},
        {"a": 1.0, "b": 1.5, "c": 2.25, "d": 3.4, "e": 5.0, "f": 7.6},
        {"a": 5.0, "b": 3.4, "c": 2.25, "d": 7.6, "e": 1.5, "f": 1.0},
    ],
)
def test_the_pick_of_configs_at_least_1_5x_apart_is_the_same_with_or_without_the_looks(
    truth_ms,
):
    fakes = {k: Fake(ms=ms) for k, ms in truth_ms.items()}
    fastest = min(truth_ms, key=truth_ms.__getitem__)
    picks = set()
    for device in (False, True):
        outcome, _, _ = _drive_recorded(fakes, device=device)
        picks.add((outcome.best.config["k"], outcome.decision))
    assert picks == {(fastest, "clear")}


def test_only_the_profiler_timer_on_a_tpu_or_gpu_takes_device_time():
    from jaxtune._tuning.sweep.children import InChildren
    from jaxtune._tuning.sweep.runner import ProcessRunner
    from jaxtune._tuning.sweep.timers import device_time

    assert device_time("auto", "tpu") and device_time("profiler", "TPU v5 lite")
    assert device_time("cupti", "cuda") and device_time("auto", "gpu")
    # On CPU the profiler's samples are the host threads' op events.
    assert not device_time("profiler", "cpu") and not device_time("auto", "cpu")
    assert not device_time("wall", "tpu") and not device_time("auto", None)
    assert not ProfilerTimer().device_time and not WallTimer().device_time
    plan = SweepPlan(kernel="k", key="k", configs=({"k": "a"},), default={"k": "a"})
    for platform, timer, expected in [("tpu", "auto", True), ("tpu", "wall", False)]:
        runner = ProcessRunner(platform=platform)
        children = InChildren(runner, dataclasses.replace(plan, timer=timer), None, None)
        assert children.device_time is expected


@pytest.mark.parametrize("where", ["calls", "capture end"])
def test_a_crash_in_a_shared_capture_is_blamed_on_the_config_running_or_on_the_captures(where):
    """The runner blames a lost child on what the events say was in flight: during a
    config's calls, that config alone; at the capture's end (the trace stopped and read),
    the capture's configs, which makes the runner ask again one config per capture."""
    from jaxtune._tuning.sweep import requests as _requests
    from jaxtune._tuning.sweep.flight import InFlight

    truth_ms = {"a": 2.0, "b": 2.5, "c": 2.4, "d": 2.6, "e": 1.9}
    suspects: list[list[str]] = []
    sweeper = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()}, device=True)
    configs = list(sweeper.task.plan.configs)
    request = _requests.Measure(todo=configs).of(_requests.sweep_request(sweeper.task))
    flight = InFlight(request)
    sweeper.emit = flight.event

    def crash() -> None:
        suspects.append(sorted(flight.suspects(hung=False, timeout_s=60)))

    if where == "calls":
        # The check's run precedes the capture; the warm-up (second call) is in it.
        sweeper.on_call = lambda k: k == "c" and sweeper.calls["c"] == 3 and crash()
        expected = [config_id({"k": "c"})]
    else:
        sweeper.timer.on_end = lambda: not suspects and crash()
        expected = sorted(config_id(c) for c in configs)
    sweeper.measure(configs, reference=configs[0])
    assert suspects == [expected]
    # One config per capture: the end of each capture is its one config's.
    suspects.clear()
    sweeper = _sweeper({k: Fake(ms=ms) for k, ms in truth_ms.items()}, device=True)
    sweeper.serial_rounds = True
    flight = InFlight(request)
    sweeper.emit = flight.event
    sweeper.timer.on_end = lambda: not suspects and crash()
    sweeper.measure(configs, reference=configs[0])
    assert suspects == [[config_id(configs[0])]]


def _rounds_of(truth_us: dict[str, float], options: TimingOptions, rounds_cap: int = 60):
    """``interleaved`` over configs whose every round's time is their true time."""
    clock = FakeClock()
    seen: dict[str, int] = {}

    def timed(configs):
        out = {}
        for c in configs:
            seen[c["k"]] = seen.get(c["k"], 0) + 1
            clock.now += truth_us[c["k"]] * 1e-6
            out[config_id(c)] = Timing(samples_us=(truth_us[c["k"]],))
        return out

    configs = [{"k": k} for k in truth_us]
    got = _rounds.interleaved(
        configs,
        timed=timed,
        compile_s={},
        space=configs,
        options=dataclasses.replace(options, max_rounds=rounds_cap, max_rounds_s=1e9),
        default=configs[0],
        clock=clock,
    )
    return {c["k"]: got[config_id(c)] for c in configs}, seen


def test_a_slow_config_over_the_drop_ratio_behind_leaves_the_rounds_at_behind_after_rounds():
    options = TimingOptions()
    # Slow kernels (every round over ``rounds_above_s``): 20 ms against 32 ms (1.6x) and
    # 26 ms (1.3x).
    got, seen = _rounds_of({"a": 20_000.0, "b": 32_000.0, "c": 26_000.0}, options)
    assert got["b"].dropped and seen["b"] == options.behind_after_rounds
    # Within the ratio: not clearly behind, so it races on until the rounds show it slower.
    assert seen["c"] > options.behind_after_rounds


def test_the_behind_rule_is_kept_to_calls_over_behind_above_s():
    """A short kernel's rounds are cheap: 2x behind, it races to the end of the rounds
    the decision takes, not out at ``behind_after_rounds``."""
    options = TimingOptions()
    got, seen = _rounds_of({"a": 100.0, "b": 200.0}, options)
    assert seen["b"] == seen["a"] >= options.rounds > options.behind_after_rounds
    # Out only as the rounds' interval shows it slower, not by the behind rule.
    assert not got["b"].behind
    assert min(got["a"].rounds_us) < min(got["b"].rounds_us)


def test_a_default_of_milliseconds_3x_behind_leaves_the_rounds_with_its_three_rounds():
    """pallas-forge's swiglu: calls of 2.7 ms (best), 3.2 ms (runner-up) and 8.3 ms (the
    default tile). The default leaves at round 3, under the 10 ms of a slow kernel's
    ``rounds_above_s``; its three rounds still give the entry its time."""
    options = TimingOptions()
    assert options.behind_above_s * 1e6 <= 2_700.0 < options.rounds_above_s * 1e6
    got, seen = _rounds_of({"default": 8_300.0, "best": 2_700.0, "next": 3_200.0}, options)
    assert got["default"].dropped and seen["default"] == options.behind_after_rounds
    assert len(got["default"].rounds_us) == options.behind_after_rounds
    assert got["default"].behind and got["default"].why_out == "clearly behind in the rounds"
    assert seen["next"] > options.behind_after_rounds  # 1.19x: the rounds' tests decide it
    assert not got["next"].behind and not got["best"].behind
    if got["next"].dropped:
        assert got["next"].why_out == "shown slower in the rounds"


def test_clearly_behind_compares_a_configs_best_round_with_anothers_worst():
    rounds = {"a": [10.0, 14.0], "b": [15.5, 16.0], "c": [22.0, 21.5]}
    # 1.5 x a's slowest round (14) is 21: only c's best round (21.5) is over it.
    assert _rounds.clearly_behind(rounds, 1.5) == {"c"}
    assert _rounds.clearly_behind(rounds, 1.5, floor_us=30.0) == set()
    assert _rounds.clearly_behind({"a": [], "b": [5.0]}, 1.5) == set()


# -- samples a round --------------------------------------------------------------------


@pytest.mark.parametrize(("above_s", "samples_a_round"), [(0.05, 1), (0.1, 2)])
def test_a_call_of_at_least_one_sample_above_s_gets_one_sample_a_round(above_s, samples_a_round):
    """60 ms calls: at the default threshold (50 ms) a round's first call is its only
    sample; with the threshold raised past them, the round takes ``round_samples`` (2)."""
    options = TimingOptions(one_sample_above_s=above_s, rounds=3, max_rounds=3)
    sweeper = _sweeper({"a": Fake(ms=60.0), "b": Fake(ms=61.0)}, options)
    configs = list(sweeper.task.plan.configs)
    sweeper.compile(configs)
    got = sweeper.retime(configs)
    for c in configs:
        m = got[config_id(c)]
        assert isinstance(m, Measurement) and len(m.rounds_us) == 3
        assert m.samples == samples_a_round * 3
        assert sweeper.calls[c["k"]] == samples_a_round * 3


def test_a_short_call_gets_at_least_round_samples_a_round():
    options = TimingOptions(rounds=3, max_rounds=3)
    sweeper = _sweeper({"a": Fake(ms=20.0), "b": Fake(ms=21.0)}, options)
    configs = list(sweeper.task.plan.configs)
    got = sweeper.retime(configs)
    for c in configs:
        assert got[config_id(c)].samples >= options.round_samples * 3


# -- the compile pipeline ---------------------------------------------------------------


def test_the_compile_pipeline_reports_every_config_to_the_waiter():
    fakes = {
        "a": Fake(ms=1.0),
        "trace": Fake(ms=1.0, trace_error=True),
        "xla": Fake(ms=1.0, compile_error=True),
        "b": Fake(ms=1.0),
        "c": Fake(ms=1.0),
    }
    sweeper = _sweeper(fakes)
    configs = list(sweeper.task.plan.configs)
    sweeper.inputs  # noqa: B018 - made before the threads start, as compile() does
    reported = []
    failures = sweeper.compiler.compile_all(configs, serial=False, spec=None, done=reported.append)
    assert sorted(cid for cid, _ in reported) == sorted(config_id(c) for c in configs)
    outcome = dict(reported)
    assert outcome[config_id({"k": "a"})] is None
    assert outcome[config_id({"k": "trace"})].stage == "compile"
    assert outcome[config_id({"k": "xla"})].stage == "compile"
    assert set(failures) == {config_id({"k": "trace"}), config_id({"k": "xla"})}


def test_a_fault_in_a_compile_thread_reaches_the_waiter_as_itself():
    """The waiter hears of the config whose compile thread faulted (it does not wait
    forever) and raises the fault, noted as jaxtune's; it is no config's failure."""
    fakes = {"a": Fake(ms=1.0), "b": Fake(ms=1.0), "c": Fake(ms=1.0)}

    class SinkError(Exception):
        pass

    def on_event(event):
        if isinstance(event, CompileFinished) and event.cid == config_id({"k": "b"}):
            raise SinkError("the event sink broke")

    sweeper = _sweeper(fakes, on_event=on_event)
    configs = list(sweeper.task.plan.configs)
    with pytest.raises(SinkError, match="the event sink broke") as caught:
        sweeper.measure(configs, reference=configs[0])
    assert any("bug in jaxtune" in note for note in caught.value.__notes__)


def test_the_lowering_thread_waits_while_two_configs_a_compiling_thread_are_lowered_ahead(
    monkeypatch,
):
    """With both compiling threads held in XLA, the lowering thread lowers the two
    configs they hold and two more for each thread (LOWERED_AHEAD), then waits
    (``lowering_paced``) until a thread takes one up; every config still compiles."""
    fakes = {f"c{i}": Fake(ms=1.0) for i in range(10)}
    sweeper = _sweeper(fakes)
    compiler = sweeper.compiler
    compiler.task = dataclasses.replace(compiler.task, compile_threads=2)
    lowered, release = [], threading.Event()
    plain_lower, plain_compile = compiler.lower, _Lowered.compile

    def lower(config, spec):
        lowered.append(config["k"])
        return plain_lower(config, spec)

    def held_compile(self):
        assert release.wait(30), "the test's compiles were never released"
        return plain_compile(self)

    monkeypatch.setattr(compiler, "lower", lower)
    monkeypatch.setattr(_Lowered, "compile", held_compile)
    configs = list(sweeper.task.plan.configs)
    sweeper.inputs  # noqa: B018 - made before the threads start, as compile() does
    reported = []
    worker = threading.Thread(
        target=compiler.compile_all,
        args=(configs,),
        kwargs={"serial": False, "spec": None, "done": reported.append},
        daemon=True,  # a regression that holds it must not hold the test run too
    )
    worker.start()
    ahead = 2 + 2 * _compile.LOWERED_AHEAD  # two held by the threads, the rest waiting
    try:
        deadline = time.monotonic() + 30
        while len(lowered) < ahead and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # long enough for a lowering thread that does not wait to go on
        assert len(lowered) == ahead
    finally:
        release.set()
        worker.join(30)
    assert not worker.is_alive()
    assert len(lowered) == len(configs)
    assert sorted(cid for cid, failure in reported if failure is None) == sorted(
        config_id(c) for c in configs
    )
    assert compiler.breakdown.finish(1.0)["lowering_paced"] > 0


@pytest.mark.parametrize(
    ("cores", "children", "threads"),
    [(1, 1, 1), (2, 1, 1), (4, 1, 3), (13, 1, 12), (64, 1, 16), (13, 2, 5), (13, 8, 1)],
)
def test_compile_threads_use_the_hosts_cores_less_the_one_that_runs(
    monkeypatch, cores, children, threads
):
    """One fewer than the cores (shared among the children of a split sweep), 1 to 16: a
    2-core machine keeps its one compiling thread, a 13-core TPU host gets 12."""
    monkeypatch.setattr(_compile, "usable_cores", lambda: cores)
    assert _compile.compile_threads(children) == threads


def test_the_children_of_a_split_sweep_share_the_cores_for_compiling(monkeypatch):
    from jaxtune._tuning.sweep import children as _children
    from jaxtune._tuning.sweep import requests as _requests
    from jaxtune._tuning.sweep import runner as _runner

    monkeypatch.setattr(_compile, "usable_cores", lambda: 13)
    sweeper = _sweeper({k: Fake(ms=1.0) for k in "abcd"})
    plan = dataclasses.replace(sweeper.task.plan, compile_threads=0)  # the default
    asked = []

    def in_child(self, service, request, order, known=None, **kwargs):
        asked.append(request.fields.plan.compile_threads)
        return {}

    monkeypatch.setattr(_children.InChildren, "in_child", in_child)
    runner = _runner.ProcessRunner(devices=[0, 1, 2])
    request = _requests.sweep_request(dataclasses.replace(sweeper.task, plan=plan))
    order = list(plan.configs)
    _children.InChildren(
        runner, plan, request, _drive.new_progress(plan), devices=runner.devices
    ).on_devices(order)
    assert asked == [3, 3, 3]  # 13 cores // 3 children, less 1
    # A plan that says how many threads keeps its word.
    asked.clear()
    plan = dataclasses.replace(plan, compile_threads=2)
    request = _requests.sweep_request(dataclasses.replace(sweeper.task, plan=plan))
    _children.InChildren(
        runner, plan, request, _drive.new_progress(plan), devices=runner.devices
    ).on_devices(order)
    assert asked == [2, 2, 2]


def test_a_config_that_fails_to_lower_compile_or_check_is_out_before_any_timing():
    """Each failure is reported as soon as known, before the first capture of the first
    pass, and the failing configs are never timed."""
    fakes = {
        "a": Fake(ms=1.0),
        "trace": Fake(ms=0.5, trace_error=True),
        "b": Fake(ms=1.1),
        "xla": Fake(ms=0.5, compile_error=True),
        "wrong": Fake(ms=0.5, wrong=True),
        "c": Fake(ms=1.2),
    }
    reported: dict[str, tuple[object, int]] = {}
    sweeper = _sweeper(fakes, device=True)
    sweeper.emit = lambda event: (
        isinstance(event, ConfigResult)
        and reported.setdefault(event.cid, (event.result, sweeper.timer.captures))
    )
    configs = list(sweeper.task.plan.configs)
    got = sweeper.measure(configs, reference=configs[0])
    when = {k: reported[config_id({"k": k})][1] for k in fakes}
    # The timed ones after the first pass's one capture (device time: one visit).
    assert when == {"a": 1, "trace": 0, "b": 1, "xla": 0, "wrong": 0, "c": 1}
    assert {k: getattr(got[config_id({"k": k})], "stage", None) for k in fakes} == {
        "a": None,
        "trace": "compile",
        "b": None,
        "xla": "compile",
        "wrong": "check",
        "c": None,
    }
    assert "trace" not in sweeper.calls and "xla" not in sweeper.calls
    assert sweeper.calls["wrong"] == 1  # the check's run only


def test_progress_shows_configs_compiled_while_they_compile(monkeypatch):
    """What a user sees while many configs compile: the live line counts them (and the
    failures), and at JAXTUNE_VERBOSE=2 a line says so every COMPILE_LINE_S seconds."""
    import io

    from jaxtune._tuning.sweep import progress as _progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    fakes = {
        "a": Fake(ms=1.0),
        "trace": Fake(ms=1.0, trace_error=True),
        "b": Fake(ms=2.0),
        "xla": Fake(ms=1.0, compile_error=True),
        "c": Fake(ms=3.0),
    }
    live = Tty()
    plan = _sweeper(fakes).task.plan
    progress = _progress.Progress("k", len(fakes), 0, live)
    sweeper = _sweeper(fakes, on_event=_progress.progress_sink(plan, progress))
    configs = list(plan.configs)
    sweeper.compile(configs)
    assert "\rjaxtune: tuning k 0/5, compiled 5/5 (2 failed)" in live.getvalue()
    # A config compiled again (by a new child after a crash) counts once.
    progress.compile_done(config_id({"k": "a"}), failed=False)
    assert progress.compiled[config_id({"k": "a"})] is False and len(progress.compiled) == 5

    monkeypatch.setattr(_progress, "COMPILE_LINE_S", 0.0)
    lines = io.StringIO()
    progress = _progress.Progress("k", len(fakes), 2, lines)
    sweeper = _sweeper(fakes, on_event=_progress.progress_sink(plan, progress))
    sweeper.compile(configs)
    said = [line for line in lines.getvalue().splitlines() if " compiled " in line]
    assert len(said) == 5 and said[-1].startswith("jaxtune: k compiled 5/5 (2 failed) in ")
    quiet = io.StringIO()  # verbose 1: one line per sweep, none about compiling
    progress = _progress.Progress("k", len(fakes), 1, quiet)
    _sweeper(fakes, on_event=_progress.progress_sink(plan, progress)).compile(configs)
    assert quiet.getvalue() == ""


def test_a_device_timer_takes_several_rounds_in_one_capture_and_the_same_pick():
    """The rounds' captures: a device timer times up to ``ahead()`` rounds in one
    capture, with its calls in flight; the stored config and each config's rounds are
    those of one round a capture. (How many rounds ``ahead`` asks for: the test below.)"""
    truth_ms = {"a": 2.0, "b": 2.05, "c": 4.0, "d": 1.98, "e": 2.6, "f": 2.0, "g": 9.0}
    fakes = {k: Fake(ms=ms) for k, ms in truth_ms.items()}
    got = []
    for many in (False, True):
        sweeper = _sweeper(fakes, device=True)
        sweeper.timer.in_flight = many
        sweeper.stopwatch.ahead = lambda many=many: 8 if many else 1
        plan = sweeper.task.plan
        outcome = _drive.drive(plan, _drive.InProcess(sweeper), progress=_drive.new_progress(plan))
        rounds = max(len(m.rounds_us) for m in outcome.measurements)
        got.append((outcome, rounds, sweeper.timer.captures))
    (one, rounds, captures), (many, rounds_many, captures_many) = got
    assert rounds == rounds_many >= 8
    assert captures - 1 == rounds  # the first pass's one visit, then one capture a round
    assert captures_many - 1 == 4  # rounds 1-2 (the second look), 3, 4-6, 7-8
    assert (
        (many.best.config, many.decision)
        == (one.best.config, one.decision)
        == (
            {"k": "d"},
            "clear",
        )
    )
    assert [m.rounds_us for m in many.measurements] == [m.rounds_us for m in one.measurements]


def test_a_device_timer_takes_enough_rounds_a_capture_to_pay_for_it():
    """``ahead``: rounds enough that the capture's own time is at most the rounds' calls'
    time, and no more than half the time limit; one before a round was timed, for the
    wall timer and after a crash."""
    fakes = {k: Fake(ms=1.0) for k in "ab"}
    stopwatch = _sweeper(fakes, device=True).stopwatch
    assert stopwatch.ahead() == 1
    stopwatch.capture_s, stopwatch.round_s = 0.3, 0.1
    assert stopwatch.ahead() == 3
    stopwatch.round_s = 0.5
    assert stopwatch.ahead() == 1
    stopwatch.capture_s, stopwatch.round_s = 60.0, stopwatch.limit_s / 5
    assert stopwatch.ahead() == 2
    stopwatch.capture_s = 0.3
    stopwatch.round_s = 0.001
    assert stopwatch.ahead() == ROUNDS_PER_CAPTURE
    stopwatch.serial_rounds = True
    assert stopwatch.ahead() == 1
    assert _sweeper(fakes).stopwatch.ahead() == 1


def test_each_configs_program_is_named_by_its_place_in_the_space_whatever_the_order():
    """JAX's compilation cache keys on the program, its module's name included: a second
    sweep that lowers the configs in another order (the lowering processes tell of them as
    they go) still finds each config's compiled program under the same name."""
    fakes = {k: Fake(ms=1.0) for k in "abcd"}
    one, two = _sweeper(fakes), _sweeper(fakes)
    configs = list(one.task.plan.configs)
    outside = {"k": "z"}  # a default outside the space
    first = [one.compiler.names.module(c) for c in [*configs, outside]]
    second = [two.compiler.names.module(c) for c in [outside, *configs[::-1]]]
    assert first == [f"jit_jaxtune_{i}" for i in range(5)]
    assert second == [first[4], *first[3::-1]]


def test_a_device_timer_readies_a_whole_first_capture_once_the_compiles_are_over(
    monkeypatch,
):
    """Before the sweep's first capture, once every config compiled and ran, a device
    timer is readied for it where it holds a whole capture's configs (on a TPU: the heap
    its stop would grow, jaxtune._tuning.sweep.heap), the seconds kept as the ``heap``
    phase; not before a capture beside the compiles, nor before a smaller one, nor one
    config a capture (after a crash)."""
    readied = []

    def ready(self, programs):
        readied.append((programs, len(self.sweeper.calls), self.captures))
        return 0.5

    monkeypatch.setattr(FakeDeviceTimer, "ready", ready)
    # No capture beside the compiles, however slowly they come on a busy machine.
    monkeypatch.setattr(_engine, "EARLY_PACE_S", 1e9)
    truth_ms = {f"c{i}": 2.0 + abs(i - 23) * 0.1 for i in range(80)}
    fakes = {k: Fake(ms=ms) for k, ms in truth_ms.items()}
    sweeper = _sweeper(fakes, device=True)
    configs = list(sweeper.task.plan.configs)
    sweeper.measure(configs, reference=configs[0])
    assert readied == [(32, 80, 0)]  # after each config's first run, before any capture
    assert sweeper.account().phases["heap"] == 0.5
    # Not again once a capture was made (as one beside the compiles is).
    sweeper.stopwatch.ready(32)
    assert readied == [(32, 80, 0)]
    # Captured beside the compiles first (their pace set to 0 here), the rest after.
    # Every config within 2x of the best (none screened out), so that more than a
    # capture's worth is left for after the compiles.
    readied.clear()
    monkeypatch.setattr(_engine, "EARLY_PACE_S", 0.0)
    # 64 configs: 32 captured beside the compiles, the other 32 after (the last config
    # comes with none left to compile).
    flat = {k: Fake(ms=2.0 + i % 10 * 0.01) for i, k in enumerate(list(fakes)[:64])}
    early = _sweeper(flat, device=True)
    captured_after = []
    visit = _first_pass._visit_screened

    def noted_visit(stopwatch, todo, options, dropping, ahead):
        captured_after.append(len(todo) - len(ahead))
        return visit(stopwatch, todo, options, dropping, ahead)

    monkeypatch.setattr(_first_pass, "_visit_screened", noted_visit)
    early.measure(configs[:64], reference=configs[0])
    assert captured_after == [32] and early.timer.captures == 2 and readied == []
    assert "heap" not in early.account().phases
    monkeypatch.setattr(_engine, "EARLY_PACE_S", 1e9)
    # Fewer configs than a capture holds; one config a capture.
    few = _sweeper({f"c{i}": Fake(ms=2.0 + i * 0.1) for i in range(12)}, device=True)
    few.measure(list(few.task.plan.configs), reference=few.task.plan.configs[0])
    serial = _sweeper(fakes, device=True)
    serial.serial_rounds = True
    serial.measure(configs, reference=configs[0])
    assert few.timer.captures >= 1 and serial.timer.captures >= 32 and readied == []
