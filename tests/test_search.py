"""Search strategies under a budget, and the tie rule of the sweep's winner
(docs/search.md, "Strategies" and "Writing a strategy")."""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.vocabulary import Failure, Measurement, config_id, measurement_from_dict
from jaxtune._tuning.sweep import drive as _sweep
from jaxtune._tuning.sweep import rounds as _rounds
from jaxtune._tuning.sweep import search as _search
from jaxtune._tuning.sweep import stats as _stats
from jaxtune._tuning.sweep.entry import make_entry
from jaxtune._tuning.sweep.samples import Timing
from jaxtune._tuning.sweep.work import SweepPlan

KNOBS = {"a": [1, 2, 4, 8], "b": [1, 2, 4, 8], "c": [16, 32, 64, 128], "d": [0, 1, 2, 3]}
SPACE = [dict(zip(KNOBS, values, strict=True)) for values in itertools.product(*KNOBS.values())]


def cost(config):
    """A known 256-config landscape: best at a=4, b=2, c=64, d=1 (cost 10), with one
    interaction term so that it is not purely separable."""
    a, b, c, d = (config[k] for k in "abcd")
    return (
        10
        + 3 * abs(math.log2(a) - 2)
        + 2 * abs(math.log2(b) - 1)
        + 4 * abs(math.log2(c) - 6)
        + abs(d - 1)
        + 0.5 * abs(math.log2(a) - math.log2(b) - 1)
    )


def fake_measure(calls, fail=()):
    def measure(configs):
        calls.append([config_id(c) for c in configs])
        out = {}
        for c in configs:
            if config_id(c) in fail:
                out[config_id(c)] = Failure(config=c, stage="compile", reason="no")
            else:
                t = cost(c)
                out[config_id(c)] = Measurement(
                    config=c, median_us=t, min_us=t, spread=0.0, samples=5, compile_s=0.0
                )
        return out

    return measure


def search(strategy, budget, *, default=None, fail=(), clock=None):
    calls = []
    kwargs = {} if clock is None else {"clock": clock}
    results, searched = _search.run_search(
        SPACE,
        default or SPACE[0],
        strategy=_search.strategy_of(strategy) if isinstance(strategy, str) else strategy,
        budget=_search.Budget.of(budget),
        measure=fake_measure(calls, fail),
        config_id=config_id,
        **kwargs,
    )
    return results, searched, calls


def best_of(results):
    return min(r.median_us for r in results.values() if isinstance(r, Measurement))


TRUE_BEST = min(cost(c) for c in SPACE)


# -- budget and strategy values -----------------------------------------------------------


def test_budget_values():
    assert _search.Budget.of(None) is None
    assert _search.Budget.of(12) == jaxtune.Budget(configs=12)
    both = jaxtune.Budget(configs=3, seconds=1.5)
    assert _search.Budget.of(both) is both


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"configs": 0}, r"Budget\(configs=0\): configs must be a positive int"),
        ({"configs": 2.5}, r"configs must be a positive int"),
        ({"configs": True}, r"configs must be a positive int"),
        ({"seconds": 0}, r"Budget\(seconds=0\): seconds must be a positive number"),
        ({"seconds": float("inf")}, r"seconds must be a positive number"),
    ],
)
def test_bad_budgets(kwargs, match):
    with pytest.raises(jaxtune.ConfigSpaceError, match=match):
        jaxtune.Budget(**kwargs)


def test_bad_budget_and_search_arguments_fail_at_decoration():
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"budget='64': expected an int"):
        jaxtune.autotuned(configs={"c": [1]}, budget="64")(lambda x, *, c: x)
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"search='grid' is not a strategy"):
        jaxtune.autotuned(configs={"c": [1]}, search="grid")(lambda x, *, c: x)
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"\(object\) is not a strategy"):
        jaxtune.autotuned(configs={"c": [1]}, search=object())(lambda x, *, c: x)


def test_protocol_accepts_user_strategies():
    class Backwards:
        name = "backwards"

        def propose(self, state):
            return state.unmeasured()[::-1][:2]

    assert isinstance(Backwards(), jaxtune.Strategy)
    _, searched, calls = search(Backwards(), 5)
    assert searched == _search.Searched(strategy="backwards", measured=5, total=256)
    # The default comes first as the reference; then the strategy's order.
    assert calls[0] == [config_id(SPACE[i]) for i in (0, 255, 254)]
    assert calls[1] == [config_id(SPACE[i]) for i in (253, 252)]


def test_how_many_configs_each_strategy_measures():
    count = _search.configs_to_measure
    assert count(_search.Exhaustive(), None, 500) == 500
    assert count(_search.Auto(), None, 40) == 40
    assert count(_search.Auto(), None, 500) == _search.DEFAULT_CONFIGS
    assert count(_search.Random(), jaxtune.Budget(configs=10), 500) == 10
    assert count(_search.Random(), jaxtune.Budget(seconds=5), 500) == 500
    assert count(_search.Model(), jaxtune.Budget(configs=900), 500) == 500


# -- each strategy on a known landscape ----------------------------------------------------


def test_exhaustive_measures_every_config_in_order():
    results, searched, calls = search("exhaustive", None)
    assert calls == [[config_id(c) for c in SPACE]]
    assert (searched.measured, searched.total) == (256, 256)
    assert best_of(results) == TRUE_BEST


def test_random_is_seeded_budgeted_and_starts_at_the_default():
    _, searched, calls = search("random", 20, default=SPACE[7])
    assert searched.measured == 20 and len(calls[0]) == 20
    assert calls[0][0] == config_id(SPACE[7])
    assert search("random", 20, default=SPACE[7])[2] == calls  # deterministic
    other = search(_search.Random(seed=1), 20, default=SPACE[7])[2]
    assert set(other[0]) != set(calls[0])


def test_coordinate_descends_from_the_default_to_the_optimum():
    results, searched, calls = search("coordinate", None)
    assert best_of(results) == TRUE_BEST
    assert searched.measured < 256
    # After the default, every batch is the unmeasured one-knob neighbours of the best so far.
    measured = {calls[0][0]: results[calls[0][0]].median_us}
    for batch in calls[1:]:
        center = min(measured, key=measured.get)
        center_config = next(c for c in SPACE if config_id(c) == center)
        for cid in batch:
            config = next(c for c in SPACE if config_id(c) == cid)
            assert sum(config[k] != center_config[k] for k in KNOBS) == 1
        measured.update({cid: results[cid].median_us for cid in batch})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_model_reaches_near_the_best_with_a_quarter_of_the_space(seed):
    results, searched, _ = search(_search.Model(seed=seed), 64)
    assert searched.measured == 64
    assert best_of(results) <= 1.10 * TRUE_BEST


def test_auto_is_exhaustive_when_the_budget_covers_the_space_and_model_above():
    _, searched, calls = search("auto", 300)
    assert len(calls) == 1 and searched.measured == 256 and searched.strategy == "auto"
    results, searched, calls = search("auto", 64)
    assert searched.measured == 64 and len(calls) > 1
    assert best_of(results) <= 1.10 * TRUE_BEST


def test_failed_configs_count_as_slow_and_the_search_goes_on():
    fail = {config_id(c) for c in SPACE if c["a"] == 4}
    results, searched, _ = search("model", 64, fail=fail)
    assert searched.measured == 64
    assert best_of(results) == min(cost(c) for c in SPACE if c["a"] != 4)


def test_the_model_learns_from_failures_and_stops_proposing_configs_like_them():
    # Every config with c=128 fails (as a tile too large for VMEM would); the random start
    # (16 configs) meets some of them, and after it the model proposes none.
    fail = {config_id(c) for c in SPACE if c["c"] == 128}
    results, searched, calls = search(_search.Model(seed=1), 64, fail=fail)
    start = len(calls[0])  # the random start's batch
    proposed = [cid for batch in calls for cid in batch]
    after_start = proposed[start:]
    assert any(cid in fail for cid in proposed[:start])  # the start met the failing knob
    assert searched.measured == 64
    assert not any(cid in fail for cid in after_start), [c for c in after_start if c in fail]
    # (Without the second fit, where failures only counted as slow, one was proposed after.)
    assert best_of(results) <= 1.10 * min(cost(c) for c in SPACE if c["c"] != 128)


def test_a_seconds_budget_stops_the_search():
    ticks = itertools.count()
    _, searched, calls = search(
        "exhaustive", jaxtune.Budget(seconds=3), clock=lambda: float(next(ticks))
    )
    # The clock advances a second per reading (the start, then before each batch): at
    # 1 s and 2 s a batch of 8 runs, at 3 s the budget is spent.
    assert [len(batch) for batch in calls] == [8, 8]
    assert searched.measured == sum(len(b) for b in calls)


def test_a_default_outside_the_space_is_measured_but_not_counted():
    outside = {"a": 3, "b": 3, "c": 3, "d": 3}
    _, searched, calls = search("random", 4, default=outside)
    assert calls[0][0] == config_id(outside) and len(calls[0]) == 5
    assert searched.measured == 4


# -- the tie rule ----------------------------------------------------------------------------


def timed(config, samples):
    t = Timing(samples_us=tuple(samples))
    return _rounds.measurement(config, t, 0.0)


def test_confidence_interval_narrows_with_samples():
    rng = np.random.default_rng(0)
    few = Timing(samples_us=tuple(100 + rng.standard_normal(9)))
    many = Timing(samples_us=tuple(100 + rng.standard_normal(400)))
    assert few.interval[0] <= few.median_us <= few.interval[1]
    assert (many.interval[1] - many.interval[0]) < (few.interval[1] - few.interval[0]) / 3


def test_a_small_space_goes_straight_into_the_rounds_and_a_larger_one_has_a_first_pass():
    x = jnp.ones(4096)
    sig = twins.options.bind((x,), {})
    task = twins.options.bound(sig).sweep_task()
    timer = NoisyTimer(0)
    outcome = _sweep.run_sweep(task, timer=timer)
    # Four configs, one batch: every one was timed in the rounds, none by a first pass.
    assert all(m.rounds_us for m in outcome.measurements)
    small = dataclasses.replace(task.plan.options, first_pass_above=3)
    task = dataclasses.replace(task, plan=dataclasses.replace(task.plan, options=small))
    outcome = _sweep.run_sweep(task, timer=NoisyTimer(0))
    # Above first_pass_above: a first pass, then only the leaders are re-timed.
    assert not all(m.rounds_us for m in outcome.measurements)
    assert any(m.rounds_us for m in outcome.measurements)
    assert (outcome.decision, dict(outcome.best.config)) == ("tie", {"variant": 3})


def test_retimed_leaders_keep_their_rounds_and_the_entry_round_trips_them():
    configs = ({"k": 0}, {"k": 1})
    plan = SweepPlan(kernel="k", key="f32[8]", configs=configs, default=configs[0])
    drift = [1.0, 1.6, 0.7, 1.2, 0.9, 1.4, 0.8, 1.1, 1.3, 0.6]
    per_round = {cid: [t * d for d in drift] for cid, t in {"a": 100.0, "b": 90.0}.items()}
    results = {
        config_id(c): _rounds.measurement(c, Timing(samples_us=tuple(r)), 0.0, tuple(r))
        for c, r in zip(configs, per_round.values(), strict=True)
    }
    outcome = _stats.finish(plan, results, retimed=set(results))
    assert (dict(outcome.best.config), outcome.decision) == ({"k": 1}, "clear")
    # What the child sends and the cache stores keeps the rounds.
    again = measurement_from_dict(outcome.best.to_dict())
    assert again == outcome.best and again.rounds_us == tuple(per_round["b"])
    plain = _rounds.measurement(configs[0], Timing(samples_us=(1.0, 2.0)), 0.0)
    assert "rounds_us" not in plain.to_dict()


@jaxtune.autotuned(configs={"variant": [3, 2, 1, 0]}, name="tests.search.twins")
def twins(x, *, variant):
    """Every config compiles to a program of its own (a constant apart, within the check's
    tolerance) doing the same work: the leaders always tie. Configs of one program are
    timed once (tests/test_same_program.py)."""
    return jnp.cumsum(x * (2.0 + variant * 1e-6))


class NoisyTimer:
    """The Timer protocol with samples drawn from one seeded distribution for every config:
    configs that differ only by noise, as reproducible as a test must be."""

    device_time = False

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def measure(self, run, options, *, best_us=None, samples=None):
        run()
        n = samples or 20
        return Timing(samples_us=tuple(100.0 + 3.0 * self.rng.standard_normal(n)))


@pytest.mark.parametrize("seed", range(6))
def test_repeated_sweeps_of_tied_configs_report_a_tie_and_store_the_same_config(seed):
    x = jnp.ones(4096)
    sig = twins.options.bind((x,), {})
    task = twins.options.bound(sig).sweep_task()
    outcome = _sweep.run_sweep(task, timer=NoisyTimer(seed))
    entry = make_entry(task.plan, outcome, "cpu", "")
    # The noise alone makes one config fastest, differently per seed; the tie rule stores
    # the default (here the earliest config of the space) every time: a tie, or, when the
    # default has the best estimate and the others are shown not faster, a clear win.
    assert dict(entry.config) == {"variant": 3}
    assert entry.decision in ("tie", "clear") and entry.tie == (entry.decision == "tie")
    low, high = entry.speedup_range
    assert low <= 1.0 <= high


# -- budgeted sweeps of real kernels --------------------------------------------------------


@jaxtune.autotuned(
    configs={"rows": [1, 2, 4, 8, 16, 32], "scale": [1, 2]}, name="tests.search.grid"
)
def grid(x, *, rows, scale):
    return (x.reshape(rows, -1) * scale).sum(axis=0).sum() / scale


@pytest.mark.child
@pytest.mark.parametrize("strategy", ["random", "coordinate", "model", "auto"])
def test_budgeted_sweep_records_strategy_and_counts(fast_timing, strategy, capsys, monkeypatch):
    monkeypatch.setenv("JAXTUNE_VERBOSE", "2")
    kernel = jaxtune.autotuned(
        configs={"rows": [1, 2, 4, 8, 16, 32], "scale": [1, 2]},
        name=f"tests.search.grid_{strategy}",
        search=strategy,
        budget=5,
    )(grid.__wrapped__)
    (entry,) = kernel.tune(jnp.ones(256)).values()
    assert (entry.search, entry.measured, entry.space_size) == (strategy, 5, 12)
    assert entry.summary()["measured"] == 5
    err = capsys.readouterr().err
    assert f"[5/5 of 12 configs, {strategy} search]" in err
    assert f"5 configs of 12 ({strategy} search)" in err


@pytest.mark.child
def test_jaxtune_budget_is_the_default_budget(fast_timing, monkeypatch):
    monkeypatch.setenv("JAXTUNE_BUDGET", "3")
    (entry,) = grid.tune(jnp.ones(64)).values()
    assert (entry.search, entry.measured, entry.space_size) == ("auto", 3, 12)
    with _settings.override(budget="100s"):
        (entry,) = grid.tune(jnp.ones(128)).values()
    assert entry.measured == 12


@jaxtune.autotuned(
    configs={"rows": [1, 2, 4, 8, 16, 32], "scale": [1, 2]},
    name="tests.search.descent",
    search="coordinate",
    budget=jaxtune.Budget(configs=7),
)
def descent(x, *, rows, scale):
    return (x.reshape(rows, -1) * scale).sum(axis=0).sum() / scale


@pytest.mark.child
def test_budgeted_sweep_in_the_child_process(fast_timing, monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    (entry,) = descent.tune(jnp.ones(512)).values()
    assert (entry.search, entry.measured, entry.space_size) == ("coordinate", 7, 12)
    assert all(m.ok for m in entry.measurements)


def test_a_config_listed_twice_is_measured_once():
    twice = [SPACE[0], SPACE[1], SPACE[0], SPACE[2]]
    calls = []
    _, searched = _search.run_search(
        twice,
        SPACE[0],
        strategy=_search.Exhaustive(),
        budget=None,
        measure=fake_measure(calls),
        config_id=config_id,
    )
    assert calls == [[config_id(SPACE[i]) for i in (0, 1, 2)]]
    assert (searched.measured, searched.total) == (3, 3)


@pytest.mark.child
def test_a_small_space_is_decided_in_one_request_to_the_child(monkeypatch):
    from jaxtune._isolation.process import ChildProcess

    ops = []
    exchange = ChildProcess.exchange

    def counting(self, message, *args, **kw):
        ops.append(message.to_wire()["op"])
        return exchange(self, message, *args, **kw)

    monkeypatch.setattr(ChildProcess, "exchange", counting)
    (entry,) = twins.tune(jnp.ones(2048)).values()
    # Measured and decided in the same request: no separate re-timing of leaders.
    assert ops == ["measure"]
    assert all(m.rounds_us for m in entry.measurements)


def test_a_budgeted_search_of_a_huge_space_scores_only_a_sample_each_round(monkeypatch):
    # 10^5 configs, the default budget: the model must not score (nor build features of)
    # every config each round (10^6 took minutes that way).
    knobs = {"a": list(range(10)), "b": list(range(100)), "c": list(range(100))}
    space = [dict(zip(knobs, v, strict=True)) for v in itertools.product(*knobs.values())]
    rows: list[int] = []
    features = _search._features

    def spy(configs):
        rows.append(len(configs))
        return features(configs)

    monkeypatch.setattr(_search, "_features", spy)

    def measure(configs):
        return {
            config_id(c): Measurement(
                config=c,
                median_us=1.0 + c["a"] + c["b"] / 10 + c["c"] / 100,
                min_us=1.0,
                spread=0.0,
                samples=5,
                compile_s=0.0,
            )
            for c in configs
        }

    results, searched = _search.run_search(
        space,
        space[-1],
        strategy=_search.Auto(),
        budget=None,
        measure=measure,
        config_id=config_id,
    )
    assert searched.measured == _search.DEFAULT_CONFIGS and searched.total == len(space)
    assert rows and max(rows) <= _search.MODEL_POOL + _search.DEFAULT_CONFIGS, max(rows)
    # Still a search, not a random draw: it found a config near the best corner.
    best = min((r for r in results.values() if r.ok), key=lambda r: r.median_us)
    assert best.config["a"] <= 1
