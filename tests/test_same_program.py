"""Configs that compile to the same program are timed once (docs/autotuned.md, "Sweeps"):
the one a tie would go to runs, the others share its timing, marked ``same_as`` it, and
repeated sweeps store the same config. A program that calls back into Python is never
taken for another: its text does not show the function it calls."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import pytest

import jaxtune
from jaxtune._core.errors import CacheError
from jaxtune._core.vocabulary import Measurement, measurement_from_dict
from jaxtune._tuning.explain import decision_text
from jaxtune._tuning.sweep.compile import program_digest


@pytest.fixture(autouse=True)
def _inline(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")  # kernels defined in the test
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "cache"))


def test_four_configs_of_one_program_are_timed_once_and_the_default_is_stored():
    @jaxtune.autotuned(configs={"variant": [3, 2, 1, 0]}, name="test.same.four")
    def twins(x, *, variant):
        return jnp.cumsum(x * 2.0)

    (entry,) = twins.tune(jnp.ones(4096)).values()
    assert entry.config == {"variant": 3}  # the default: the first of the space
    by = {m.config["variant"]: m for m in entry.measurements}
    timed = by[3]
    assert timed.same_as is None and not timed.dropped and timed.calls > 0
    for v in (2, 1, 0):
        twin = by[v]
        assert twin.ok and twin.dropped and twin.same_as == {"variant": 3}, twin
        assert twin.why_out == "same program as variant=3"
        # Its timing is the program's: the sweep called it once, to check its output.
        assert (twin.min_us, twin.median_us) == (timed.min_us, timed.median_us)
        assert twin.calls == 1 < timed.calls
    assert entry.decision == "single"
    assert decision_text(entry) == (
        "single: the only config that ran; 3 other configs of the same program "
        "(`jaxtune cache show test.same.four` says why)"
    )


def test_each_program_is_timed_once_by_the_config_a_tie_would_go_to():
    # Two programs (``slow`` changes what runs, ``variant`` does not), the default in
    # neither's first place: each program is timed by the default or the earliest config.
    @jaxtune.autotuned(
        configs={"variant": [0, 1, 2], "slow": [False, True]},
        default={"variant": 1, "slow": False},
        name="test.same.two",
    )
    def kernel(x, *, variant, slow):
        if slow:  # the same result, more work: sin(x) * 0 is not folded away (inf * 0)
            x = x + 0.0 * jnp.sin(x).sum()
        return x * 2.0

    (entry,) = kernel.tune(jnp.ones(2048)).values()
    twins = {(m.config["variant"], m.config["slow"]): m.same_as for m in entry.measurements if m.ok}
    assert twins == {
        (1, False): None,
        (0, False): {"variant": 1, "slow": False},
        (2, False): {"variant": 1, "slow": False},
        (0, True): None,
        (1, True): {"variant": 0, "slow": True},
        (2, True): {"variant": 0, "slow": True},
    }
    assert entry.config in ({"variant": 1, "slow": False}, {"variant": 0, "slow": True})


def test_the_digest_leaves_out_the_modules_name_and_tells_programs_apart():
    x = jax.ShapeDtypeStruct((8,), jnp.float32)

    def lowered(name, scale):
        def f(x):
            return x * scale

        f.__name__ = f.__qualname__ = name
        return jax.jit(f).lower(x), f"jit_{name}"

    one = program_digest(*lowered("jaxtune_1", 2.0))
    assert one == program_digest(*lowered("jaxtune_12", 2.0))
    assert one != program_digest(*lowered("jaxtune_1", 3.0))


def test_configs_whose_python_callbacks_differ_are_timed_each():
    @jaxtune.autotuned(configs={"ms": [1, 12]}, name="test.same.callback")
    def sleepy(x, *, ms):
        def wait(a):
            time.sleep(ms / 1e3)
            return a

        return jax.pure_callback(wait, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    (entry,) = sleepy.tune(jnp.ones(8)).values()
    by = {m.config["ms"]: m for m in entry.measurements}
    assert by[1].same_as is None and by[12].same_as is None
    # Each was timed itself: a call that sleeps 12 ms takes at least that long (taken for
    # the 1 ms config's program, it would carry that config's times).
    assert by[12].min_us >= 12e3 and by[12].calls > 1


def test_same_as_is_stored_and_read_back_and_a_wrong_one_is_refused():
    m = Measurement(
        config={"b": 2},
        median_us=5.0,
        min_us=4.0,
        spread=0.0,
        samples=5,
        compile_s=0.1,
        dropped=True,
        same_as={"b": 1},
    )
    assert measurement_from_dict(m.to_dict()) == m
    plain = Measurement(
        config={"b": 1}, median_us=5.0, min_us=4.0, spread=0.0, samples=5, compile_s=0.1
    )
    assert "same_as" not in plain.to_dict()  # entries without twins read as before
    with pytest.raises(CacheError, match="field 'same_as' should be a dict of str"):
        measurement_from_dict({**m.to_dict(), "same_as": ["b", 1]})
