"""Configs that compile to the same program are timed once (docs/autotuned.md, "Sweeps"):
the one a tie would go to runs, the others share its timing, marked ``same_as`` it, and
repeated sweeps store the same config. A program that calls back into Python is the
same program only where its callbacks are the same functions holding the same values
(TPU interpret mode's simulator among them); one whose callbacks hold what cannot be
described is never taken for another."""

from __future__ import annotations

import functools
import math
import time

import jax
import jax.numpy as jnp
import pytest

import jaxtune
from jaxtune._core.errors import CacheError
from jaxtune._core.vocabulary import Measurement, config_id, measurement_from_dict
from jaxtune._tuning.explain import decision_text
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.sweep.same_program import program_digest

F32 = jnp.float32


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
        assert (twin.min_us, twin.time_us) == (timed.min_us, timed.time_us)
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
    # Why a twin is out names its program's config with the knobs in the space's order,
    # as every other text for people does (config_id sorts them), read back from the cache too.
    (stored,) = [e for e in _cache.user_cache().all_entries() if e.kernel == "test.same.two"]
    for found in (entry, stored):
        (twin,) = [m for m in found.measurements if m.config == {"variant": 0, "slow": False}]
        assert twin.why_out == "same program as variant=1, slow=False"
    # A twin shows its program's timing as it ended (after the rounds), and its own
    # compile time (it compiled nothing: it called its program's executable).
    by_id = {config_id(m.config): m for m in entry.measurements}
    for m in entry.measurements:
        if m.same_as is not None:
            timed = by_id[config_id(m.same_as)]
            assert (m.time_us, m.min_us, m.low_us, m.high_us) == (
                timed.time_us,
                timed.min_us,
                timed.low_us,
                timed.high_us,
            )
            assert m.compile_s != timed.compile_s


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


@pytest.mark.parametrize("timer", ["wall", "profiler"])
def test_a_twin_calls_its_programs_executable_on_the_wall_clock(monkeypatch, timer):
    # XLA would build the same executable again; a trace (the profiler timer) tells calls
    # apart by their executable's name, so there each config keeps its own.
    compiled: list[str] = []
    compile_ = jax.stages.Lowered.compile

    def counted(self, *args, **kwargs):
        if "jit_jaxtune_" in self.as_text().splitlines()[0]:
            compiled.append(self.as_text().splitlines()[0])
        return compile_(self, *args, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", counted)

    @jaxtune.autotuned(
        configs={"variant": [0, 1, 2], "slow": [False, True]},
        name=f"test.same.shared.{timer}",
        timer=timer,
    )
    def kernel(x, *, variant, slow):
        if slow:  # the same result, more work (see above)
            x = x + 0.0 * jnp.sin(x).sum()
        return x * 2.0

    (entry,) = kernel.tune(jnp.ones(2048)).values()
    assert len(compiled) == (2 if timer == "wall" else 6), compiled
    twins = [m for m in entry.measurements if m.same_as is not None]
    assert len(twins) == 4 and all(m.ok and m.calls == 1 for m in twins), entry.measurements


def _scaled(a, *, scale):
    return (a * scale).astype(a.dtype)


def _round_trip(a, *, scale):
    """``a``, scaled and scaled back (exact for powers of two): the same result, other work."""
    return (a * scale / scale).astype(a.dtype)


def _called_back(callback):
    """The digest of a module that calls ``callback`` on its argument."""

    def f(x):
        return jax.pure_callback(callback, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    f.__name__ = f.__qualname__ = "jaxtune_1"
    return program_digest(jax.jit(f).lower(jax.ShapeDtypeStruct((8,), F32)), "jit_jaxtune_1")


def test_a_callback_is_part_of_the_program_by_what_it_holds():
    twice = _called_back(functools.partial(_scaled, scale=2.0))
    assert twice is not None
    assert twice == _called_back(functools.partial(_scaled, scale=2.0))
    assert twice != _called_back(functools.partial(_scaled, scale=3.0))
    assert twice != _called_back(functools.partial(_scaled, scale=2))  # an int, not a float
    assert twice != _called_back(lambda a: _scaled(a, scale=2.0))


def test_a_callback_holding_what_cannot_be_described_is_never_the_same_program():
    class Scaler:  # its state is not looked into
        def __init__(self, scale):
            self.scale = scale

        def __call__(self, a):
            return _scaled(a, scale=self.scale)

    assert _called_back(Scaler(2.0)) is None
    assert _called_back(Scaler(2.0).__call__) is None
    # A builtin bound to an object holds that object's state; a module's is its name.
    # (The callbacks are only lowered here, never called.)
    assert _called_back(functools.partial(_scaled, scale={1: 2.0}.get)) is None
    assert _called_back(functools.partial(_scaled, scale=math.sqrt)) is not None


def test_configs_whose_callbacks_are_the_same_are_timed_once():
    @jaxtune.autotuned(configs={"variant": [0, 1], "scale": [2.0, 4.0]}, name="test.same.cb")
    def kernel(x, *, variant, scale):  # `variant` changes nothing
        callback = functools.partial(_round_trip, scale=scale)
        return jax.pure_callback(callback, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    (entry,) = kernel.tune(jnp.ones(64)).values()
    twins = {(m.config["variant"], m.config["scale"]): m.same_as for m in entry.measurements}
    assert twins == {
        (0, 2.0): None,
        (1, 2.0): {"variant": 0, "scale": 2.0},
        (0, 4.0): None,
        (1, 4.0): {"variant": 0, "scale": 4.0},
    }


def _copied(x, *, rows, vmem_mb):
    """A Pallas TPU copy whose ``rows`` set its blocks and ``vmem_mb`` only Mosaic's VMEM
    limit, which JAX's TPU interpreter does not use."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    return pl.pallas_call(
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2.0),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // rows,),
        in_specs=[pl.BlockSpec((rows, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, 128), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=vmem_mb << 20),
    )(x)


def test_tpu_interpret_mode_configs_are_one_program_when_only_mosaics_settings_differ():
    # The interpreter runs every DMA and buffer through Python callbacks (SourceInfo in
    # them: where each came from, left out): without describing them no interpret-mode
    # kernel would ever share a program.
    from jax.experimental.pallas import tpu as pltpu

    x = jax.ShapeDtypeStruct((64, 128), F32)

    def digest(rows, vmem_mb):
        call = functools.partial(_copied, rows=rows, vmem_mb=vmem_mb)
        call.__name__ = "jaxtune_3"  # type: ignore[attr-defined]
        with pltpu.force_tpu_interpret_mode():
            lowered = jax.jit(call).lower(x)
        assert "callback" in lowered.as_text()
        return program_digest(lowered, "jit_jaxtune_3")

    small = digest(8, 16)
    assert small is not None
    assert small == digest(8, 32)
    assert small != digest(16, 16)


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
