"""docs/autotuned.md: the default is always a candidate, whether or not it is in
``configs``, and its measurement is in the entry; kernels without array arguments, and
Python scalars, follow one rule in every mode and in ``config_for``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pass_kernels
import pytest

import jaxtune
from jaxtune._tuning.store import cache as _cache


@pytest.mark.child
def test_a_default_outside_configs_is_stored_when_it_is_the_fastest():
    """Tokamax asserts the heuristic default is always a candidate: a space whose every
    config is slower than the default (20x and 30x the work) must store the default, with
    a speedup of 1 and every measurement, the default's included."""
    x = jnp.ones(pass_kernels.SHAPE)
    result = pass_kernels.repeated.tune(x)
    ((entry),) = result.values()
    assert entry.config == {"reps": 1}
    assert entry.speedup == pytest.approx(1.0)
    assert sorted(m.config["reps"] for m in entry.measurements) == [1, 20, 30]
    by_reps = {m.config["reps"]: m.time_us for m in entry.measurements}
    # 20x and 30x the loop's work, but calls of a few hundred µs carry fixed costs too, and
    # a config clearly behind may leave after few samples: the default is clearly fastest.
    assert by_reps[1] * 2 < min(by_reps[20], by_reps[30])
    # The lookup takes the stored default as it is (no "not in its space" warning: the
    # suite turns warnings into errors).
    choice = pass_kernels.repeated.config_for(x)
    assert (choice.config, choice.source) == ({"reps": 1}, "cache")


@pytest.mark.parametrize("mode", ["off", "cached", pytest.param("tune", marks=pytest.mark.child)])
def test_a_kernel_without_array_arguments_runs_in_every_mode(mode, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", mode)
    expected = jnp.arange(4.0)  # the first config (n=1) is the default
    for call in (pass_kernels.no_arrays, jax.jit(pass_kernels.no_arrays)):
        out = call()
        if mode != "tune":
            assert jnp.array_equal(out, expected)
    static = jax.jit(pass_kernels.static_only, static_argnums=0)
    assert jnp.array_equal(pass_kernels.static_only(3), static(3))
    assert pass_kernels.no_arrays.config_for().key == ""
    assert pass_kernels.static_only.config_for(3).key == ";m=3"


def test_a_python_scalar_is_a_0d_array_in_the_call_and_in_config_for():
    """jax.jit takes a Python scalar in a non-static position as a 0-d array; so do the
    key, ``config_for`` and a kernel with static arguments (one rule)."""
    x = jnp.ones(4)
    choice = pass_kernels.scalar_and_static.config_for(x, 1.5, 2)
    assert choice.key == "f32[4],f32[];m=2"
    assert pass_kernels.scalar_and_static.config_for(x, 2, 2).key == "f32[4],s32[];m=2"
    assert jnp.array_equal(pass_kernels.scalar_and_static(x, 1.5, 2), x * 3.0)
    assert jnp.array_equal(
        jax.jit(pass_kernels.scalar_and_static, static_argnums=2)(x, 1.5, 2), x * 3.0
    )
    with pytest.raises(jaxtune.SignatureError, match="not arrays or Python scalars"):
        pass_kernels.scalar_and_static.config_for(x, "1.5", 2)


@pytest.mark.child
def test_tune_mode_sweeps_a_kernel_without_array_arguments(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    jax.jit(pass_kernels.no_arrays)()
    (entry,) = list(_cache.user_cache().entries_for("tests.no_arrays", "cpu"))
    assert entry.key == "" and len(entry.measurements) == 2


@pytest.mark.parametrize("on_miss", ["default", "warn", "error"])
def test_on_miss_says_what_a_traced_call_without_a_tuned_config_does(on_miss, monkeypatch):
    monkeypatch.setenv("JAXTUNE_ON_MISS", on_miss)
    x = jnp.ones(4)
    if on_miss == "error":
        for call in (pass_kernels.scalar_and_static, jax.jit(pass_kernels.scalar_and_static)):
            with pytest.raises(
                jaxtune.MissError,
                match=r"tests\.scalar_and_static with key f32\[4\],f32\[\];m=1 on cpu[\s\S]*jaxtune tune --",
            ):
                call(x, 1.5)
    elif on_miss == "warn":
        with pytest.warns(
            jaxtune.JaxtuneWarning, match="no tuned config for tests.scalar_and_static"
        ):
            pass_kernels.scalar_and_static(x, 1.5)
    else:
        pass_kernels.scalar_and_static(x, 1.5)  # no warning: the suite errors on warnings
    # config_for answers, whatever the setting; a scope is not a miss.
    assert pass_kernels.scalar_and_static.config_for(x, 1.5).source == "default"
    entry = jaxtune.Entry(
        kernel="tests.scalar_and_static",
        device_kind="cpu",
        key="f32[4],f32[];m=1",
        config={"n": 2},
        time_us=None,
        default_config={"n": 1},
        default_time_us=None,
    )
    with jaxtune.TuningResult.of(entry):
        assert jnp.array_equal(jax.jit(pass_kernels.scalar_and_static)(x, 1.5), x * 3.0)


def test_a_bad_on_miss_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ON_MISS", "raise")
    with pytest.raises(
        jaxtune.SettingsError, match=r"JAXTUNE_ON_MISS='raise'.*default, warn, error"
    ):
        pass_kernels.scalar_and_static(jnp.ones(4), 1.5)
