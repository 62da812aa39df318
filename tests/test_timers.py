"""Timers: the registry, the profiler timer's device events, and the pass timed (vjp)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hostile.traces import EPOCH_NS
from jax.profiler import ProfileData

import jaxtune
from jaxtune._core.errors import ConfigSpaceError, SettingsError
from jaxtune._tuning.sweep import timers as _timers
from jaxtune._tuning.sweep.samples import TimingOptions


def _loop(reps):
    def f(x):
        return jax.lax.fori_loop(0, reps, lambda i, c: jnp.tanh(c @ c), x)

    f.__name__ = f"jaxtune_{reps}"  # as the sweeper names each config's executable
    return jax.jit(f).lower(jax.ShapeDtypeStruct((128, 128), jnp.float32)).compile()


X = jnp.full((128, 128), 0.01, jnp.float32)


def test_the_registry_and_the_per_platform_default():
    assert _timers.resolve_timer("auto", "cpu") == "wall"
    assert _timers.resolve_timer("auto", "tpu") == "profiler"
    assert _timers.resolve_timer("auto", "gpu") == "profiler"
    assert _timers.resolve_timer("auto", "TPU v5 lite") == "profiler"  # a device kind
    assert _timers.resolve_timer("auto", "NVIDIA H100 80GB HBM3") == "profiler"
    with pytest.raises(ConfigSpaceError, match=r"cupti.*NVIDIA GPU"):
        _timers.resolve_timer("cupti", "cpu")
    with pytest.raises(ConfigSpaceError, match="not a timer"):
        _timers.resolve_timer("stopwatch", "cpu")
    assert isinstance(_timers.timer_for("auto", "cpu"), _timers.WallTimer)
    assert isinstance(_timers.timer_for("profiler", "cpu"), _timers.ProfilerTimer)


def test_the_profiler_timer_takes_each_calls_device_events_from_the_trace():
    short, long = _loop(2), _loop(16)
    run_short = lambda: jax.block_until_ready(short(X))  # noqa: E731
    run_long = lambda: jax.block_until_ready(long(X))  # noqa: E731
    run_short(), run_long()
    timer = _timers.ProfilerTimer()
    # Each measure takes its 3 samples however slow a loaded machine makes the warm-up
    # call (by default a call over ``one_sample_above_s`` gets one sample, by design).
    options = TimingOptions(one_sample_above_s=float("inf"))
    with timer.recording() as rec:
        for _ in range(3):  # interleaved, in one trace
            wall_short = rec.measure(run_short, options, samples=3, module="jit_jaxtune_2")
            wall_long = rec.measure(run_long, options, samples=3, module="jit_jaxtune_16")
    device = rec.results()
    assert len(device) == 6 and all(len(t.samples_us) == 3 for t in device)
    shorts, longs = device[0::2], device[1::2]
    # Device time: 8x the loop's work is over twice as long (the fastest of 9 calls each:
    # other work on the machine only slows calls down), and no longer than the wall clock
    # around the same calls (which adds dispatch).
    fastest = lambda ts: min(min(t.samples_us) for t in ts)  # noqa: E731
    assert fastest(longs) > 2 * fastest(shorts), (shorts, longs)
    mean = lambda t: sum(t.samples_us) / len(t.samples_us)  # noqa: E731
    assert mean(device[-2]) <= mean(wall_short) * 1.05
    assert mean(device[-1]) <= mean(wall_long) * 1.05
    # Outside a recording, measure traces its own calls.
    alone = timer.measure(run_long, options)
    assert alone.samples_us and alone.min_us > 2 * fastest(shorts)


class _FakeClock:
    """A clock that each fake call advances by its own duration, logging who ran."""

    def __init__(self):
        self.now = 0.0
        self.log: list[str] = []

    def __call__(self):
        return self.now

    def call(self, name, seconds, fail_on=None):
        def run():
            self.log.append(name)
            if fail_on is not None and self.log.count(name) >= fail_on:
                raise RuntimeError(f"{name} broke")
            self.now += seconds

        return run


def test_a_round_of_passes_interleaves_the_configs_and_sizes_its_samples_by_the_floor():
    clock = _FakeClock()
    runs = [(clock.call("a", 250e-6), None), (clock.call("b", 500e-6), None)]
    options = TimingOptions(round_floor_us=2000.0, round_max_samples=32, sample_floor_us=100.0)
    a, b = _timers._round_calls(clock, runs, options, samples=2)
    # One warm-up each, then 4 passes (2000 us over the longest sample, 500 us): each
    # config's samples add up to the floor, the shorter one's two a pass.
    assert clock.log == ["a", "b"] + ["a", "a", "b"] * 4
    assert a.wall.samples_us == pytest.approx((250.0,) * 8)
    assert b.wall.samples_us == pytest.approx((500.0,) * 4)
    assert a.warmup == b.warmup == 1 and a.batch == b.batch == 1


def test_a_short_config_raced_beside_a_long_one_gets_the_floor_of_samples():
    """Issue 44: the passes are sized by the longest config; a 120 us config beside a
    900 us one used to get 3 samples a round (one a pass), not the floor's 17."""
    clock = _FakeClock()
    runs = [(clock.call("long", 900e-6), None), (clock.call("short", 120e-6), None)]
    long, short = _timers._round_calls(clock, runs, TimingOptions(), samples=2)
    assert len(long.wall.samples_us) == 3  # ceil(2000 / 900)
    assert len(short.wall.samples_us) == 17  # ceil(2000 / 120)
    # Still interleaved: the short config's samples spread over the three passes.
    warm_ups, calls = clock.log[:2], clock.log[2:]
    assert warm_ups == ["long", "short"]
    assert calls == (["long"] + ["short"] * 6) * 2 + ["long"] + ["short"] * 5


def test_a_short_configs_samples_are_spread_over_every_pass():
    """400 us beside 130 us: 5 passes, 16 samples of the short one, 4 3 3 3 3 (not 4 4 4 4 0:
    the long one would meet the last pass's machine alone)."""
    clock = _FakeClock()
    runs = [(clock.call("long", 400e-6), None), (clock.call("short", 130e-6), None)]
    long, short = _timers._round_calls(clock, runs, TimingOptions(), samples=2)
    assert len(long.wall.samples_us) == 5 and len(short.wall.samples_us) == 16
    passes = "".join("L" if name == "long" else "s" for name in clock.log[2:]).split("L")[1:]
    assert [len(p) for p in passes] == [4, 3, 3, 3, 3]


def test_a_config_that_fails_its_warm_up_sizes_nothing_in_the_round():
    clock = _FakeClock()
    runs = [(clock.call("bad", 0.0, fail_on=1), None), (clock.call("ok", 500e-6), None)]
    bad, ok = _timers._round_calls(clock, runs, TimingOptions(), samples=2)
    assert isinstance(bad, RuntimeError)
    assert len(ok.wall.samples_us) == 4  # 2000 us / 500 us
    assert clock.log.count("bad") == 1


def test_a_round_batches_short_calls_caps_its_passes_and_keeps_slow_calls_warm_up():
    clock = _FakeClock()
    runs = [(clock.call("tiny", 20e-6), None), (clock.call("slow", 20e-3), None)]
    options = TimingOptions(round_floor_us=1e6, round_max_samples=3, sample_floor_us=100.0)
    tiny, slow = _timers._round_calls(clock, runs, options, samples=2)
    assert tiny.batch == 5 and len(tiny.wall.samples_us) == 3  # capped at round_max_samples
    # A call over SLOW_CALL_S needs no warm-up: its first call is its first sample.
    assert slow.warmup == 0 and len(slow.wall.samples_us) == 3
    assert clock.log.count("slow") == 3


def test_a_call_of_a_millisecond_or_more_has_no_warm_up_in_a_round():
    """A swiglu tile's 3 ms call: its turn's first call is a sample, two calls a round."""
    clock = _FakeClock()
    runs = [(clock.call("ms", 3e-3), None), (clock.call("us", 300e-6), None)]
    ms, us = _timers._round_calls(clock, runs, TimingOptions(), samples=2)
    assert ms.warmup == 0 and clock.log.count("ms") == len(ms.wall.samples_us) == 2
    assert us.warmup == 1 and clock.log.count("us") == len(us.wall.samples_us) + 1


def test_a_config_that_raises_in_a_round_leaves_it_and_the_others_finish():
    clock = _FakeClock()
    runs = [(clock.call("ok", 300e-6), None), (clock.call("bad", 300e-6, fail_on=3), None)]
    options = TimingOptions(round_floor_us=1500.0)
    ok, bad = _timers._round_calls(clock, runs, options, samples=2)
    assert isinstance(bad, RuntimeError) and "bad broke" in str(bad)
    assert len(ok.wall.samples_us) == 5
    assert clock.log.count("bad") == 3  # no call after the one that raised


def test_the_profiler_timer_times_a_round_of_passes_from_the_trace():
    short, long = _loop(2), _loop(16)
    runs = [
        (lambda: jax.block_until_ready(short(X)), "jit_jaxtune_2"),
        (lambda: jax.block_until_ready(long(X)), "jit_jaxtune_16"),
    ]
    for run, _ in runs:
        run()
    timer = _timers.ProfilerTimer()
    with timer.recording() as rec:
        walls = rec.round(runs, TimingOptions(round_floor_us=0.0), samples=15)
    device = rec.results()
    assert [len(t.samples_us) for t in walls] == [15, 15]
    assert [len(t.samples_us) for t in device] == [15, 15]
    # 8x the loop's work: noise only adds time, so the fastest samples compare. Fifteen
    # samples each: on a loaded 2-core host all five of the short loop's (0.1 ms of work)
    # once took 3 ms or more, preempted each time (the full suite beside a helper's sweep).
    assert device[1].min_us > 2 * device[0].min_us


def test_device_timings_match_calls_per_module_and_refuse_a_short_trace():
    wall = _timers.Timing(samples_us=(1.0, 1.0))
    calls = [
        _timers._Calls(module="a", warmup=1, batch=2, wall=wall),
        _timers._Calls(module="b", warmup=1, batch=1, wall=wall),
    ]
    ex = [("a", i, 10.0e3) for i in range(5)] + [("b", 10 + i, 30.0e3) for i in range(3)]
    a, b = _timers.device_timings(calls, sorted(ex, key=lambda e: e[1]))
    assert a.samples_us == (10.0, 10.0) and b.samples_us == (30.0, 30.0)
    with pytest.raises(RuntimeError, match="fewer than"):
        _timers.device_timings(calls, ex[:3])


#: A GPU-shaped trace as the profiler timer reads it: module events on the device plane's
#: ``XLA Modules`` line (another line, and the host's call events, left out), the line at
#: epoch scale as real ones are, and starts and durations finer than 256 ns (the float
#: resolution of an absolute epoch-scale time).
DEVICE_TRACE = """
planes {
  id: 1 name: "/device:GPU:0"
  lines { id: 1 name: "XLA Modules" timestamp_ns: EPOCH_NS
    events { metadata_id: 1 offset_ps: 0 duration_ps: 5000000 }
    events { metadata_id: 2 offset_ps: 5000100 duration_ps: 8000100 }
    events { metadata_id: 1 offset_ps: 13000300 duration_ps: 1000300 }
    events { metadata_id: 2 offset_ps: 14000700 duration_ps: 8000900 } }
  lines { id: 2 name: "XLA Ops" timestamp_ns: EPOCH_NS
    events { metadata_id: 3 offset_ps: 0 duration_ps: 7 } }
  event_metadata { key: 1 value { id: 1 name: "jit_jaxtune_2(11)" } }
  event_metadata { key: 2 value { id: 2 name: "jit_jaxtune_16(12)" } }
  event_metadata { key: 3 value { id: 3 name: "fusion" } }
}
planes {
  id: 2 name: "/host:CPU"
  lines { id: 1 name: "python" timestamp_ns: EPOCH_NS
    events { metadata_id: 1 offset_ps: 0 duration_ps: 90000000 } }
  event_metadata { key: 1 value { id: 1 name: "PjitFunction(jit(jaxtune_2))" } }
}
""".replace("EPOCH_NS", str(EPOCH_NS))

#: A CPU-shaped trace: the calling thread's call events, and the op events (one
#: ``run_id`` per execution) on a ``tf_XLA`` line that starts 1 us later.
HOST_TRACE = """
planes {
  id: 2 name: "/host:CPU"
  lines { id: 1 name: "python" timestamp_ns: EPOCH_NS
    events { metadata_id: 1 offset_ps: 0 duration_ps: 2000000 }
    events { metadata_id: 1 offset_ps: 10000000 duration_ps: 2000000 } }
  lines { id: 2 name: "tf_XLACpuClient/1" timestamp_ns: EPOCH_NS_LATER
    events { metadata_id: 2 offset_ps: 0 duration_ps: 3000500
      stats { metadata_id: 1 int64_value: 1 } stats { metadata_id: 2 str_value: "jit_jaxtune_2" } }
    events { metadata_id: 2 offset_ps: 9000000 duration_ps: 500
      stats { metadata_id: 1 int64_value: 2 } stats { metadata_id: 2 str_value: "jit_jaxtune_2" } } }
  event_metadata { key: 1 value { id: 1 name: "PjitFunction(jit(jaxtune_2))" } }
  event_metadata { key: 2 value { id: 2 name: "dot.1" } }
  stat_metadata { key: 1 value { id: 1 name: "run_id" } }
  stat_metadata { key: 2 value { id: 2 name: "hlo_module" } }
}
""".replace("EPOCH_NS_LATER", str(EPOCH_NS + 1000)).replace("EPOCH_NS", str(EPOCH_NS))


def test_the_profiler_timer_reads_an_epoch_scale_trace_to_the_picosecond(tmp_path):
    """The timer reads traces with jaxtune's reader: times from the trace's earliest line,
    so that starts and durations at epoch scale keep their picoseconds."""
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "t.xplane.pb").write_bytes(
        ProfileData.text_proto_to_serialized_xspace(DEVICE_TRACE)
    )
    ex = _timers._executions(tmp_path / "gpu")
    assert [m for m, _, _ in ex] == ["jit_jaxtune_2", "jit_jaxtune_16"] * 2
    assert [s for _, s, _ in ex] == pytest.approx([0.0, 5000.1, 13000.3, 14000.7], abs=1e-9)
    assert [d for _, _, d in ex] == pytest.approx([5000.0, 8000.1, 1000.3, 8000.9], abs=1e-9)
    one, two = _timers.Timing(samples_us=(1.0,)), _timers.Timing(samples_us=(1.0, 1.0))
    calls = [
        _timers._Calls(module="jit_jaxtune_2", warmup=1, batch=1, wall=one),
        _timers._Calls(module="jit_jaxtune_16", warmup=0, batch=1, wall=two),
    ]
    short, long = _timers.device_timings(calls, ex)
    assert short.samples_us == pytest.approx((1.0003,), abs=1e-12)
    assert long.samples_us == pytest.approx((8.0001, 8.0009), abs=1e-12)

    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "t.xplane.pb").write_bytes(
        ProfileData.text_proto_to_serialized_xspace(HOST_TRACE)
    )
    # Each call runs from its event's start to the end of its last op: the first call's
    # op ends 1 us (the lines' offset) + 3.0005 us after it starts; the second call's op
    # ends within the call's own event.
    ex = _timers._executions(tmp_path / "cpu")
    assert [m for m, _, _ in ex] == ["jit_jaxtune_2"] * 2
    assert [x for _, *times in ex for x in times] == pytest.approx(
        [0.0, 4000.5, 10000.0, 2000.0], abs=1e-9
    )


def test_a_directory_without_a_trace_is_a_timer_error(tmp_path):
    with pytest.raises(RuntimeError, match="wrote no trace"):
        _timers._executions(tmp_path)
    with pytest.raises(RuntimeError, match="empty trace"):
        _timers._executions(b"")


def test_a_timers_trace_stops_into_memory_and_the_profiler_can_start_again(tmp_path):
    """On this toolchain's JAX, the timer stops the trace through JAX's session, keeping
    it in memory: no file is written (JAX's stop_trace would write the XSpace and a gzipped
    JSON trace), the calls are read from it as from the file, and a trace can be started
    and stopped again, by the timer and by JAX's own functions."""
    f = jax.jit(lambda x: jnp.tanh(x @ x))
    x = jnp.ones((64, 64))
    f(x).block_until_ready()
    for where in (tmp_path / "a", tmp_path / "b"):
        jax.profiler.start_trace(str(where))
        for _ in range(3):
            f(x).block_until_ready()
        got = _timers._stop_trace(where)
        assert isinstance(got, bytes), "JAX's session was not found: the trace was written"
        assert not where.exists() or not any(p.is_file() for p in where.rglob("*"))
        assert len(_timers._executions(got)) == 3
    jax.profiler.start_trace(str(tmp_path / "c"))
    f(x).block_until_ready()
    jax.profiler.stop_trace()
    assert len(_timers._executions(tmp_path / "c")) == 1
    with pytest.raises(RuntimeError, match="No profile started"):
        jax.profiler.stop_trace()


@jaxtune.autotuned(configs={"reps": [2, 16]}, name="tests.timers.loop", timer="profiler")
def loop(x, *, reps):
    return jax.lax.fori_loop(0, reps, lambda i, c: jnp.tanh(c @ c), x)


@pytest.mark.child
def test_a_sweep_with_the_profiler_timer_in_the_child_records_it(fast_timing):
    (entry,) = loop.tune(X).values()
    assert (entry.timer, entry.timing, dict(entry.config)) == ("profiler", "forward", {"reps": 2})
    assert entry.summary()["timer"] == "profiler"
    # Where the timing phases' time went: the traces' own cost, split, and the device's.
    phases = entry.phases
    assert phases["captures"] >= phases["capture_stop"] + phases["capture_read"]
    assert min(phases["capture_stop"], phases["capture_read"], phases["device"]) > 0


@pytest.mark.child
def test_jaxtune_timer_sets_the_default_and_bad_values_are_named(fast_timing, monkeypatch):
    kernel = jaxtune.autotuned(configs={"reps": [2, 16]}, name="tests.timers.env")(loop.__wrapped__)
    monkeypatch.setenv("JAXTUNE_TIMER", "profiler")
    (entry,) = kernel.tune(X).values()
    assert entry.timer == "profiler"
    monkeypatch.setenv("JAXTUNE_TIMER", "sundial")
    with pytest.raises(SettingsError, match="JAXTUNE_TIMER"):
        kernel.tune(X)
    with pytest.raises(ConfigSpaceError, match="timer must be"):
        jaxtune.autotuned(configs={"reps": [1]}, timer="sundial")(loop.__wrapped__)
    with pytest.raises(ConfigSpaceError, match="timing must be"):
        jaxtune.autotuned(configs={"reps": [1]}, timing="backward")(loop.__wrapped__)


# -- the pass timed ------------------------------------------------------------------------


def _heavy_backward(x, *, variant):
    """Forward cost the same for both variants; variant 1's backward is far heavier."""

    @jax.custom_vjp
    def f(x):
        return jnp.tanh(x @ x)

    def fwd(x):
        return f(x), x

    def bwd(x, g):
        # The same gradient either way (the numerics check compares them); variant 1
        # does 40 times the work for it.
        reps = 1 if variant == 0 else 40
        junk = jax.lax.fori_loop(0, reps, lambda i, c: jnp.tanh(c @ x), g)
        return (g * 2.0 + 0.0 * junk.sum(),)

    f.defvjp(fwd, bwd)
    return f(x)


# Variant 1 comes first: timed forward only, the two tie and variant 1 wins; timed forward
# and backward, variant 0 is clearly faster.
heavy = jaxtune.autotuned(configs={"variant": [1, 0]}, name="tests.timers.heavy")(_heavy_backward)
heavy_vjp = jaxtune.autotuned(
    configs={"variant": [1, 0]}, name="tests.timers.heavy_vjp", timing="vjp"
)(_heavy_backward)

Y = jnp.asarray(np.random.default_rng(0).standard_normal((128, 128), np.float32) * 0.05)


@pytest.mark.child
def test_timing_vjp_times_forward_and_backward():
    (entry,) = heavy_vjp.tune(Y).values()
    assert (entry.timing, dict(entry.config)) == ("vjp", {"variant": 0})


@pytest.mark.child
def test_jaxtune_tune_of_a_gradient_times_the_backward_pass_too():
    result = jaxtune.tune(jax.grad(lambda x: heavy(x).sum()), Y)
    (entry,) = result.values()
    assert (entry.timing, dict(entry.config)) == ("vjp", {"variant": 0})
    # The forward-and-backward entry also answers the forward alone: nothing is swept.
    (again,) = jaxtune.tune(lambda x: heavy(x).sum(), Y).values()
    assert again == entry
    # Re-tuned from its forward alone, the same kernel times the forward.
    (entry,) = jaxtune.tune(lambda x: heavy(x).sum(), Y, retune=True).values()
    assert entry.timing == "forward"


@jaxtune.autotuned(configs={"chunk": [32, 128]}, name="tests.timers.backward_kernel")
def backward_kernel(g, x, *, chunk):
    """The backward of ``forward_kernel``, a kernel with its own space."""
    return (g * jnp.cos(x).reshape(-1, chunk).reshape(x.shape),)


@jaxtune.autotuned(configs={"chunk": [64, 256]}, name="tests.timers.forward_kernel")
def forward_kernel(x, *, chunk):
    @jax.custom_vjp
    def f(x):
        return jnp.sin(x.reshape(-1, chunk)).reshape(x.shape)

    f.defvjp(lambda x: (f(x), x), lambda x, g: backward_kernel(g, x))
    return f(x)


@pytest.mark.child
def test_a_backward_kernel_with_its_own_space_is_tuned_with_its_own_inputs():
    x = jnp.linspace(0.0, 1.0, 1024, dtype=jnp.float32)
    result = jaxtune.tune(jax.value_and_grad(lambda x: forward_kernel(x).sum()), x)
    passes = {kernel: e.timing for (kernel, _, _), e in result.items()}
    # The forward kernel timed forward and backward; its backward kernel, which only
    # runs inside the backward pass, timed as the call it is.
    assert passes == {
        "tests.timers.forward_kernel": "vjp",
        "tests.timers.backward_kernel": "forward",
    }
    (key,) = [k for (kernel, _, k) in result if kernel == "tests.timers.backward_kernel"]
    assert key == "f32[1024],f32[1024]"


# -- calls in flight (a device timer's calls on a TPU) -----------------------------------


class _Started:
    """A startable fake run: ``start`` logs the call and advances the clock by its
    dispatch, ``wait`` logs the wait; the ``fail_at``-th call's outputs raise when waited
    for (a device error), the ``refuse_at``-th call raises when started."""

    def __init__(self, clock, name, seconds, *, nbytes=4, fail_at=None, refuse_at=None):
        self.clock, self.name, self.seconds = clock, name, seconds
        self.nbytes, self.fail_at, self.refuse_at = nbytes, fail_at, refuse_at
        self.started = self.waited = 0
        self.most_in_flight = 0

    def __call__(self):
        return self.wait(self.start())

    def start(self):
        self.started += 1
        self.clock.log.append(self.name)
        if self.refuse_at is not None and self.started >= self.refuse_at:
            raise RuntimeError(f"{self.name} refused")
        self.clock.now += self.seconds
        self.most_in_flight = max(self.most_in_flight, self.started - self.waited)
        return (self.started, np.zeros(self.nbytes, np.uint8))

    def wait(self, out):
        self.waited += 1
        if self.fail_at is not None and out[0] >= self.fail_at:
            raise FloatingPointError(f"{self.name} read out of bounds")
        return out


def test_calls_in_flight_are_waited_for_oldest_first_and_bounded_by_their_outputs_bytes():
    from jaxtune._tuning.sweep.in_flight import IN_FLIGHT, IN_FLIGHT_BYTES, InFlight

    clock = _FakeClock()
    small = _Started(clock, "small", 1e-4)
    flight = InFlight()
    for _ in range(20):
        flight.call("small", small)
    assert small.most_in_flight == IN_FLIGHT + 1  # the newest, before the oldest's wait
    assert flight.drain() == {} and small.waited == small.started == 20
    # Outputs of a third of the budget: three in flight (a fourth started before the
    # oldest is waited for).
    large = _Started(clock, "large", 1e-4, nbytes=IN_FLIGHT_BYTES // 3)
    flight = InFlight()
    for _ in range(6):
        flight.call("large", large)
    assert large.most_in_flight == 4 and flight.drain() == {}


def test_a_call_that_fails_in_flight_is_its_configs_failure_and_the_others_finish():
    from jaxtune._tuning.sweep.in_flight import InFlight

    clock = _FakeClock()
    ok, bad = _Started(clock, "ok", 1e-4), _Started(clock, "bad", 1e-4, fail_at=2)
    flight = InFlight()
    for _ in range(4):
        flight.call("ok", ok)
        flight.call("bad", bad)
    failed = flight.drain()
    assert list(failed) == ["bad"] and "out of bounds" in str(failed["bad"])
    assert ok.waited == 4
    # A call refused when started raises at once.
    refused = _Started(clock, "refused", 1e-4, refuse_at=1)
    with pytest.raises(RuntimeError, match="refused"):
        InFlight().call("refused", refused)


def test_a_round_in_flight_makes_the_same_calls_and_blames_a_failure_on_its_config():
    """In flight, a round starts the same calls in the same order as waiting for each
    (the device's times come from the trace); a device error found when waiting is the
    config's failure, and the other config's calls are all made."""
    options = TimingOptions(round_floor_us=2000.0, round_max_samples=32, sample_floor_us=100.0)
    logs = []
    for flight in (None, _timers.InFlight()):
        clock = _FakeClock()
        runs = [(_Started(clock, "a", 250e-6), None), (_Started(clock, "b", 500e-6), None)]
        a, b = _timers._round_calls(clock, runs, options, samples=2, flight=flight)
        logs.append(clock.log)
        assert len(a.wall.samples_us) == 8 and len(b.wall.samples_us) == 4
    assert logs[0] == logs[1]
    clock = _FakeClock()
    runs = [
        (_Started(clock, "ok", 300e-6), None),
        (_Started(clock, "bad", 300e-6, fail_at=3), None),
    ]
    ok, bad = _timers._round_calls(
        clock, runs, TimingOptions(round_floor_us=1500.0), samples=2, flight=_timers.InFlight()
    )
    assert isinstance(bad, FloatingPointError) and len(ok.wall.samples_us) == 5


def test_a_measure_in_flight_makes_as_many_calls_as_its_warm_up_says():
    """One call waited for sizes the batch and the count (min_time_s of calls, at least
    min_samples); the rest start back to back. A device error among them is raised."""
    options = TimingOptions(warmup=2, min_samples=5, max_samples=200, min_time_s=0.002)
    clock = _FakeClock()
    run = _Started(clock, "k", 40e-6)  # 100 us floor: batches of 3; 2 ms: 17 samples
    calls = _timers._flight_calls(clock, run, options, None, "jit_k")
    assert (calls.warmup, calls.batch, len(calls.wall.samples_us)) == (2, 3, 17)
    assert run.started == 2 + 3 * 17
    # A round's measure of a slow call: its warm-up is its first sample.
    slow = _Started(clock, "slow", 3e-3)
    calls = _timers._flight_calls(clock, slow, options, 2, "jit_slow")
    assert calls.warmup == 0 and slow.started == 2 == len(calls.wall.samples_us)
    broken = _Started(clock, "broken", 40e-6, fail_at=5)
    with pytest.raises(FloatingPointError):
        _timers._flight_calls(clock, broken, options, None, "jit_broken")


def test_the_profiler_timers_screen_times_calls_in_flight_with_no_trace(monkeypatch):
    """``screen`` (a device timer's first pass, for calls far behind the best) starts the
    calls back to back as a measure in flight would, by the wall clock, and starts no
    trace; a run that cannot be started apart is timed one call at a time."""
    monkeypatch.setattr(jax.profiler, "start_trace", lambda *a, **k: pytest.fail("a trace"))
    options = TimingOptions(warmup=2, min_samples=5, max_samples=200, min_time_s=0.002)
    clock = _FakeClock()
    run = _Started(clock, "k", 600e-6)
    timing = _timers.ProfilerTimer(clock).screen(run, options)
    assert run.started == 1 + 1 + 5 and timing.samples_us == pytest.approx((600.0,) * 5)
    plain = _timers.ProfilerTimer(clock).screen(clock.call("plain", 600e-6), options)
    assert plain.min_us == pytest.approx(600.0)


def test_a_configs_calls_failing_in_flight_are_its_failure_not_jaxtunes(monkeypatch):
    """Several calls of a config fail when waited for, each with its own error: the one
    raised and the one kept as the config's are the same (else the sweep would take it
    for a fault of its own and stop)."""
    from jaxtune._tuning.sweep import compile as _compile

    clock = _FakeClock()
    made = [0]

    def compiled(inputs):
        made[0] += 1
        clock.now += 1e-4
        return made[0]

    def block(n):
        if n >= 2:  # the warm-up works, then the device fails each call
            raise FloatingPointError(f"call {n}: device error")
        return n

    monkeypatch.setattr(_compile, "block", block)
    raised: dict = {}
    run = _compile.Run("cid", compiled, inputs=lambda: None, raised=raised, calls=[0, 0])
    with pytest.raises(FloatingPointError) as got:
        _timers._flight_calls(clock, run, TimingOptions(), 2, "jit_x")
    assert raised["cid"] is got.value


def test_a_call_refused_when_started_leaves_no_call_in_flight():
    clock = _FakeClock()
    run = _Started(clock, "k", 1e-4, refuse_at=5)
    with pytest.raises(RuntimeError, match="refused"):
        _timers._flight_calls(clock, run, TimingOptions(), 8, "jit_k")
    assert run.waited == run.started - 1  # all but the refused one


def test_calls_in_flight_keep_to_the_bytes_whatever_config_came_first():
    from jaxtune._tuning.sweep.in_flight import IN_FLIGHT_BYTES, InFlight

    clock = _FakeClock()
    small, large = (
        _Started(clock, "s", 1e-4),
        _Started(clock, "l", 1e-4, nbytes=IN_FLIGHT_BYTES // 2),
    )
    flight = InFlight()
    flight.call("s", small)
    for _ in range(10):
        flight.call("l", large)
    assert large.most_in_flight == 3  # two within the budget, a third started before a wait
    assert flight.drain() == {}


def test_a_config_that_failed_in_a_recordings_round_is_not_called_in_its_later_rounds():
    """Several rounds in one trace: a config that failed in one round keeps its failure in
    the later ones without a call (its calls in the trace would be read as another
    round's samples)."""
    clock = _FakeClock()
    ok, bad = _Started(clock, "ok", 300e-6), _Started(clock, "bad", 300e-6, fail_at=3)
    rec = _timers.Recording(_timers.ProfilerTimer(clock), in_flight=True)
    runs = [(ok, "jit_ok"), (bad, "jit_bad")]
    options = TimingOptions(round_floor_us=1500.0)
    first = rec.round(runs, options, samples=2)
    calls_bad = bad.started
    second = rec.round(runs, options, samples=2)
    assert isinstance(first[1], FloatingPointError) and second[1] is first[1]
    assert bad.started == calls_bad and ok.started > 6
    assert [c.module for c in rec.calls] == ["jit_ok", "jit_ok"]


def test_only_a_device_timer_takes_several_rounds_a_capture():
    """The profiler timer on CPU (host events, not device time) keeps one round a capture."""
    from jaxtune._tuning.sweep.measure import Stopwatch

    stopwatch = Stopwatch.__new__(Stopwatch)
    stopwatch.timer, stopwatch.serial_rounds = _timers.ProfilerTimer(), False
    stopwatch.capture_s, stopwatch.round_s = 0.3, 0.01
    assert not stopwatch.timer.device_time and stopwatch.ahead() == 1
