"""Timing effort presets (docs/autotuned.md, "Timing effort"): ``effort=`` picks how long a
sweep times each config; ``"full"``, the default, is the sweeps' timing as it always was."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest

import jaxtune
from jaxtune._tuning import options as _options
from jaxtune._tuning.sweep import samples as _samples


def _kernel(**options):
    # Outputs differ between configs: no numerics check.
    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.effort_presets", check=False, **options)
    def scaled(x, *, c):
        return x * c

    return scaled


def _options_of(kernel) -> _samples.TimingOptions:
    sig = kernel.options.bind((jnp.ones(8),), {})
    return kernel.options.bound(sig).sweep_task().plan.options


def test_the_default_effort_is_full_and_times_as_before():
    assert _options_of(_kernel()) == _samples.TimingOptions()
    assert _options_of(_kernel(effort="full")) == _samples.TimingOptions()
    assert _options.timing_options("full") is _samples.DEFAULT


@pytest.mark.parametrize("effort", ["quick", "thorough"])
def test_a_preset_changes_only_its_own_fields(effort):
    got = dataclasses.asdict(_options_of(_kernel(effort=effort)))
    full = dataclasses.asdict(_samples.TimingOptions())
    changed = {name for name in got if got[name] != full[name]}
    assert changed == set(_options.EFFORTS[effort])
    assert {name: got[name] for name in changed} == _options.EFFORTS[effort]


def test_quick_measures_less_and_thorough_more_than_full():
    quick, full, thorough = (_options.timing_options(e) for e in ("quick", "full", "thorough"))
    for field in ("min_time_s", "min_samples", "max_samples", "max_rounds", "max_rounds_s"):
        assert getattr(quick, field) < getattr(full, field) < getattr(thorough, field), field


def test_a_preset_applies_on_top_of_the_sweeps_defaults(monkeypatch):
    """The defaults are read when a sweep is planned (tests shorten them), not at import."""
    shortened = _samples.TimingOptions(warmup=1, tie_within=0.1)
    monkeypatch.setattr(_samples, "DEFAULT", shortened)
    quick = _options_of(_kernel(effort="quick"))
    assert (quick.warmup, quick.tie_within) == (1, 0.1)
    assert quick.max_rounds_s == _options.EFFORTS["quick"]["max_rounds_s"]
    assert _options_of(_kernel()) == shortened


@pytest.mark.parametrize("bad", ["fast", "", None, 1, "FULL"])
def test_an_unknown_effort_is_an_error_when_the_kernel_is_decorated(bad):
    with pytest.raises(jaxtune.ConfigSpaceError, match="effort must be one of 'quick', 'full'"):
        _kernel(effort=bad)


def test_a_quick_sweep_stores_a_decided_entry(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")  # a kernel defined in the test
    result = _kernel(effort="quick").tune(jnp.ones(1024))
    (entry,) = result.values()
    assert entry.config in ({"c": 1}, {"c": 2})
    assert entry.decision in ("clear", "tie", "undecided")
    assert {m.config["c"] for m in entry.measurements if m.ok} == {1, 2}
