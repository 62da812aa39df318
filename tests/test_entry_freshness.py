"""Stale entries (docs/cache.md, "Stale entries: another toolchain, a grown space, renamed
keys"): an entry tuned with another JAX/jaxlib/libtpu, or whose space now holds configs its
sweep never measured, is re-tuned in tune mode and used with one warning in cached mode while
its config is in the space; an entry whose config keys are not the space's is ignored with one
warning, in any mode."""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import pytest

import jaxtune
from jaxtune._core import versions as _versions
from jaxtune._core.errors import JaxtuneWarning
from jaxtune._core.vocabulary import Entry, Measurement, Stale, StaleReason
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache

X = jnp.arange(64, dtype=jnp.float32)
KEY = "f32[64]"
OLD_TOOLCHAIN = {"jax": "0.0.1", "jaxlib": "0.0.1", "libtpu": None, "jaxtune": "0.0.1"}


@pytest.fixture(autouse=True)
def _inline(monkeypatch):
    """The kernels are made per test (closures): they are swept in this process."""
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")


def _kernel(name, values, key="factor"):
    @jaxtune.autotuned(configs={key: values}, default={key: values[0]}, check=False, name=name)
    def scale(x, **config):
        return x * next(iter(config.values()))

    return scale


def _measured(config):
    return Measurement(
        config=config, median_us=1.0, min_us=1.0, spread=0.0, samples=3, compile_s=0.0
    )


def _entry(name, config, *, measured, versions=None):
    return Entry(
        kernel=name,
        device_kind=_lookup.device_kind(),
        key=KEY,
        config=config,
        time_us=1.0,
        default_config=measured[0],
        default_time_us=2.0,
        measurements=tuple(_measured(c) for c in measured),
        versions=dict(_versions.toolchain()) if versions is None else versions,
        space_size=len(measured),
        shapes=(("float32", (64,)),),
        created=1.0,
    )


def _stale_warnings(caught, name):
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, JaxtuneWarning) and name in str(w.message)
    ]


def _stored(name):
    return _cache.user_cache().lookup(name, _lookup.device_kind(), KEY)


def test_tune_mode_retunes_an_entry_tuned_with_another_toolchain(monkeypatch, fast_timing):
    name = "tests.fresh.toolchain_tune"
    k = _kernel(name, [1, 2, 3])
    old = _entry(name, {"factor": 2}, measured=[{"factor": v} for v in (1, 2, 3)])
    _cache.user_cache().write([dataclasses.replace(old, versions=OLD_TOOLCHAIN)])
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    jax.jit(k)(X)
    new = _stored(name)
    assert new.created > old.created  # swept again
    assert new.versions["jax"] == _versions.toolchain()["jax"]
    assert len(new.measurements) == 3


def test_cached_mode_uses_a_toolchain_stale_entry_and_warns_once(monkeypatch, capsys):
    name = "tests.fresh.toolchain_cached"
    k = _kernel(name, [1, 2, 3])
    old = _entry(name, {"factor": 3}, measured=[{"factor": v} for v in (1, 2, 3)])
    _cache.user_cache().write([dataclasses.replace(old, versions=OLD_TOOLCHAIN)])
    monkeypatch.setenv("JAXTUNE_MODE", "cached")
    monkeypatch.setenv("JAXTUNE_VERBOSE", "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float(jax.jit(k)(X)[1]) == 3.0  # the stale entry's config runs
        assert float(jax.jit(lambda a: k(a) + 0)(X)[1]) == 3.0
        choice = k.config_for(X)
    said = _stale_warnings(caught, name)
    assert len(said) == 1, said
    assert "jax 0.0.1, now" in said[0] and "JAXTUNE_MODE=tune" in said[0]
    assert "jaxtune tune -- python" in said[0]
    assert choice.source == "cache" and choice.stale is not None
    assert choice.stale.reason is StaleReason.TOOLCHAIN and "another toolchain" in choice.stale.text
    assert "stale: tuned with another toolchain" in capsys.readouterr().err
    # A recording keeps the words and the reason, so that `cache check` reads no words.
    call = k.options.bound(k.options.bind((X,), {})).recorded_call(choice)
    assert (call.stale, call.stale_reason) == (choice.stale.text, StaleReason.TOOLCHAIN)
    assert _stored(name).created == old.created  # never swept


def test_a_value_added_to_the_space_is_tuned_in_tune_mode(monkeypatch, fast_timing):
    name = "tests.fresh.grown_tune"
    k = _kernel(name, [1, 2, 3, 4])
    old = _entry(name, {"factor": 2}, measured=[{"factor": v} for v in (1, 2, 3)])
    _cache.user_cache().write([old])
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    jax.jit(k)(X)
    new = _stored(name)
    assert new.created > old.created
    assert {m.config["factor"] for m in new.measurements} == {1, 2, 3, 4}


def test_a_grown_space_without_measurements_is_told_by_its_size(monkeypatch, fast_timing):
    name = "tests.fresh.grown_stripped"
    k = _kernel(name, [1, 2, 3, 4])
    old = dataclasses.replace(
        _entry(name, {"factor": 2}, measured=[{"factor": v} for v in (1, 2, 3)]),
        measurements=(),
    )
    _cache.user_cache().write([old])
    monkeypatch.setenv("JAXTUNE_MODE", "cached")
    with pytest.warns(JaxtuneWarning, match="1 new config in the space"):
        stale = k.config_for(X).stale
    assert stale == Stale(
        reason=StaleReason.NEW_CONFIGS, text="1 new config in the space since it was tuned"
    )
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    jax.jit(k)(X)
    assert _stored(name).created > old.created


def test_cached_mode_uses_an_entry_of_a_grown_space_and_warns_once(monkeypatch):
    name = "tests.fresh.grown_cached"
    k = _kernel(name, [1, 2, 3, 4, 5])
    old = _entry(name, {"factor": 3}, measured=[{"factor": v} for v in (1, 2, 3)])
    _cache.user_cache().write([old])
    monkeypatch.setenv("JAXTUNE_MODE", "cached")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float(jax.jit(k)(X)[1]) == 3.0
        assert float(jax.jit(lambda a: k(a) * 1)(X)[1]) == 3.0
    said = _stale_warnings(caught, name)
    assert len(said) == 1, said
    assert "2 new configs in the space" in said[0] and "JAXTUNE_MODE=tune" in said[0]
    # A removed value is not stale: the stored config beat every config still there.
    smaller = _kernel("tests.fresh.shrunk", [1, 2, 3])
    _cache.user_cache().write(
        [
            _entry(
                "tests.fresh.shrunk", {"factor": 2}, measured=[{"factor": v} for v in (1, 2, 3, 4)]
            )
        ]
    )
    choice = smaller.config_for(X)
    assert choice.source == "cache" and choice.stale is None


@pytest.mark.parametrize("mode", ["cached", "tune"])
def test_renamed_config_keys_are_ignored_with_one_warning(monkeypatch, fast_timing, mode):
    name = f"tests.fresh.renamed_{mode}"
    k = _kernel(name, [1, 2, 3], key="scale_by")
    old = _entry(name, {"factor": 3}, measured=[{"factor": v} for v in (1, 2, 3)])
    _cache.user_cache().write([old])
    monkeypatch.setenv("JAXTUNE_MODE", mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.jit(k)(X)
        jax.jit(lambda a: k(a) + 0)(X)
    said = _stale_warnings(caught, name)
    assert len(said) == 1, said
    assert "has the keys factor" in said[0] and "space has scale_by" in said[0]
