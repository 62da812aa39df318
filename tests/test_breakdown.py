"""Where a sweep's time goes: phases in the outcome and the entry, calls per config."""

from __future__ import annotations

import io

import jax
import jax.numpy as jnp
import pytest
from faulty_kernels import faulty, identity
from test_sweep import bind, task_of

from jaxtune._core.codec import packb, unpackb
from jaxtune._core.errors import SweepError
from jaxtune._core.vocabulary import Entry, Measurement
from jaxtune._isolation.frames import Done, reply
from jaxtune._tuning.sweep import breakdown as _breakdown
from jaxtune._tuning.sweep import drive as _sweep
from jaxtune._tuning.sweep import progress as _progress
from jaxtune._tuning.sweep import requests as _requests
from jaxtune._tuning.sweep import runner as _runner
from jaxtune._tuning.sweep.stats import SweepOutcome


def kernel(x, *, n, tag):
    x = x * (1.0 + tag * 1e-6)  # a program of its own per tag (one program is timed once)
    for _ in range(n):
        x = jnp.sin(x)
    return x


def _wall_share(phases):
    return sum(phases.get(p, 0.0) for p in _breakdown.WALL_PHASES)


def test_an_inline_sweep_says_where_its_time_went_and_counts_each_configs_calls(fast_timing):
    x = jnp.ones(512)
    # Equal work: the leaders are re-timed in rounds.
    configs = [{"n": 8, "tag": t} for t in range(6)]
    out = _sweep.run_sweep(task_of(kernel, bind(kernel, x), configs, configs[0]))
    phases = out.phases
    assert set(phases) >= {"inputs", "compile_threads", "warmup", "first_pass", "rounds", "total"}
    assert phases["total"] > 0 and phases["compile_threads"] > 0
    # The wall-time phases and "other" add up to the total.
    assert _wall_share(phases) + phases["other"] == pytest.approx(phases["total"], abs=1e-3)
    for m in out.measurements:
        assert isinstance(m, Measurement)
        # A sample is at least one call; the first call (the check's) is no sample.
        assert m.calls >= m.samples + 1, m
    assert out.best.calls > 0 and out.default.calls > 0


def test_making_the_values_is_a_phase_of_its_own_not_other(fast_timing, monkeypatch):
    """Values made up for an argument the sweep was given only the shape of (a recording
    past its budget, a call traced under jit) take time that was once ``other``: 2.6 s of
    a 22 s grouped matmul sweep on the chip, with 64 MiB made up. Here making them takes
    at least 0.3 s, and ``inputs`` holds that."""
    import time

    from jaxtune._tuning.sweep import compile as _compile

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return made(*args, **kwargs)

    made = _compile.make_inputs
    monkeypatch.setattr(_compile, "make_inputs", slow)
    x = jax.ShapeDtypeStruct((2048, 2048), jnp.float32)
    configs = [{"n": 1, "tag": t} for t in range(2)]
    out = _sweep.run_sweep(task_of(kernel, bind(kernel, x), configs, configs[0]))
    phases = out.phases
    assert phases["inputs"] >= 0.3 and phases["other"] < 0.3, phases
    assert _wall_share(phases) + phases["other"] == pytest.approx(phases["total"], abs=1e-3)


@pytest.mark.child
@pytest.mark.slow
def test_a_child_sweep_stores_its_breakdown_in_the_entry(monkeypatch, fast_timing, capfd):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    monkeypatch.setenv("JAXTUNE_VERBOSE", "2")
    x = jnp.ones(256)
    sig = faulty.options.bind((x,), {})
    task = faulty.options.bound(
        sig, [{"mode": "ok"}, {"mode": "fast"}], {"mode": "ok"}
    ).sweep_task()
    outcome = _runner.ProcessRunner().sweep(task)
    phases = outcome.phases
    # The child's phases and the parent's (its start, the arguments' transfer) meet here.
    assert set(phases) >= {"start", "transfer", "compile_threads", "warmup", "rounds", "total"}
    assert _wall_share(phases) <= phases["total"] + 1e-3
    assert all(m.calls > m.samples for m in outcome.measurements)
    # The child's rounds are heard while they run (two configs: timed in rounds at once).
    assert "round 1, 2 configs racing in" in capfd.readouterr().err
    (entry,) = identity.tune(x).values()
    assert entry.phases["total"] > 0
    assert all(m.calls > 0 for m in entry.measurements)
    again = Entry.from_dict(entry.to_dict())
    assert again.phases == entry.phases
    assert [m.calls for m in again.measurements] == [m.calls for m in entry.measurements]


def test_entries_without_a_breakdown_read_as_before():
    old = {
        "kernel": "k",
        "device_kind": "cpu",
        "key": "f32[8]",
        "config": {"c": 1},
        "time_us": 1.0,
        "default_config": {"c": 1},
        "default_time_us": 1.0,
        "measurements": [
            {
                "ok": True,
                "config": {"c": 1},
                "median_us": 1.0,
                "min_us": 1.0,
                "spread": 0.0,
                "samples": 3,
                "compile_s": 0.1,
            }
        ],
    }
    entry = Entry.from_dict(old)
    assert entry.phases == {} and entry.measurements[0].calls == 0
    assert "calls" not in entry.measurements[0].to_dict()


def test_verbose_2_prints_the_breakdown_and_each_configs_calls():
    stream = io.StringIO()
    m = Measurement(
        config={"c": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.25, calls=7
    )
    phases = {"start": 0.5, "compile_threads": 1.0, "rounds": 2.0, "other": 0.1, "total": 2.6}
    outcome = SweepOutcome(measurements=(m,), best=m, default=m, phases=phases)
    for verbose in (1, 2):
        progress = _progress.Progress("k f32[8]", 1, verbose, stream)
        progress.finish(outcome)
    text = stream.getvalue()
    assert text.count("time (s): start 0.50, compile threads 1.00, rounds 2.00") == 1
    assert "c=1: 7 calls, compile 0.25 s" in text


def test_accounts_add_up_and_travel_as_records():
    b = _breakdown.Breakdown()
    b.merge(_breakdown.Account(phases={"rounds": 1.5}, calls={"c=1": 3, "c=2": 2}))
    b.merge(_breakdown.Account(phases={"rounds": 0.5}, calls={"c=1": 1}))
    account = b.take()
    assert account == _breakdown.Account(phases={"rounds": 2.0}, calls={"c=1": 4, "c=2": 2})
    assert b.take() == _breakdown.Account()
    m = Measurement(
        config={"c": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=3, compile_s=0.1
    )
    answer = unpackb(packb(_requests.results_answer({"c=1": m}, account).to_wire()))
    assert answer["body"]["breakdown"] == {"phases": {"rounds": 2.0}, "calls": {"c=1": 4, "c=2": 2}}
    read = _requests.read_answer(reply(answer))
    assert read.breakdown == account and read.results == {"c=1": m}
    assert _requests.read_answer(_requests.results_answer({})).breakdown is None


@pytest.mark.parametrize(
    "breakdown, where",
    [
        ({"phases": {"rounds": "slow"}}, r"breakdown.phases\['rounds'\]: expected float"),
        ({"calls": {"c=1": 2.5}}, r"breakdown.calls\['c=1'\]: expected int"),
        ({"calls": {"c=1": True}}, r"breakdown.calls\['c=1'\]: expected int"),
        (["not", "an", "account"], r"breakdown: expected a Account"),
    ],
)
def test_a_damaged_account_in_an_answer_is_refused_by_field(breakdown, where):
    body = {**_requests.results_answer({}).body, "breakdown": breakdown}
    with pytest.raises(SweepError, match="the jaxtune child's sweep answer: Answered." + where):
        _requests.read_answer(Done(body=body))
