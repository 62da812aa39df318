"""Calls spent where the decision needs them (docs/search.md, "Calls where the decision needs
them"; docs/isolation.md, "One long-lived child"): a slow kernel's whole space goes straight
into the rounds, without a first pass."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from test_sweep import bind, task_of

from jaxtune._core.vocabulary import Measurement
from jaxtune._tuning.sweep import drive as _sweep
from jaxtune._tuning.sweep import requests as _requests
from jaxtune._tuning.sweep.samples import TimingOptions
from jaxtune._tuning.sweep.work import Rounds


def kernel(x, *, n, tag):
    x = x * (1.0 + tag * 1e-6)  # a program of its own per tag (one program is timed once)
    for _ in range(n):
        x = jnp.sin(x)
    return x


CONFIGS = [{"n": 4, "tag": t} for t in range(6)]  # more than first_pass_above


@pytest.mark.parametrize("slow", [True, False])
def test_a_slow_kernels_whole_space_skips_the_first_pass(slow, fast_timing):
    # "Slow" is a first call of at least rounds_above_s: 0 makes every kernel slow.
    options = TimingOptions(
        **{
            **{f: getattr(fast_timing, f) for f in fast_timing.__slots__},
            "rounds_above_s": 0.0 if slow else 1e9,
        }
    )
    x = jnp.ones(256)
    task = task_of(kernel, bind(kernel, x), CONFIGS, CONFIGS[0], options=options)
    out = _sweep.run_sweep(task)
    assert ("first_pass" in out.phases) is not slow
    measured = [m for m in out.measurements if isinstance(m, Measurement)]
    assert len(measured) == len(CONFIGS)
    if slow:  # every config raced from the first round
        assert all(len(m.rounds_us) >= 1 for m in measured)
        assert min(m.calls for m in measured) >= 1 + TimingOptions().round_samples


def test_the_slow_rounds_request_travels():
    request = _requests.Measure(todo=[{"n": 1}], rounds=Rounds.IF_SLOW)
    wire = request.of(_fake_request()).to_wire()
    assert _requests.read_request(wire).fields.work == request
    assert wire["fields"]["work"]["rounds"] == "if slow"


def _fake_request():
    from jaxtune._isolation.frames import Request

    return Request(
        op="measure", handler=_requests.HANDLER, ref=None, fields=_requests.SweepFields(task_id="t")
    )


@pytest.mark.parametrize("isolation", ["process", "inline"])
def test_jaxtune_tune_starts_the_child_before_it_looks_for_kernels(isolation, monkeypatch):
    """`jaxtune.tune` starts the sweep child ahead of need in every mode (the
    kernels are found meanwhile); with inline isolation there is no child to start."""
    import jaxtune
    from jaxtune._program import locate as _locate
    from jaxtune._tuning import tune as _tune
    from jaxtune._tuning.sweep import runner as _runner

    events = []
    monkeypatch.setenv("JAXTUNE_ISOLATION", isolation)
    monkeypatch.setattr(
        _runner.ProcessRunner, "prestart", lambda self, fn=None: events.append("start")
    )
    real = _locate.locate

    def locate(*args, **kwargs):
        events.append("locate")
        return real(*args, **kwargs)

    monkeypatch.setattr(_tune, "locate", locate)
    jaxtune.tune(lambda x: x + 1, jnp.ones(4))
    assert events == (["start", "locate"] if isolation == "process" else ["locate"])
