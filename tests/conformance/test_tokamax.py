"""Tokamax's autotuning tests, ported to jaxtune's API.

Each test names the Tokamax test it comes from (openxla/tokamax at 783ea95, files under
``tokamax/_src/``). The behaviours Tokamax tests that jaxtune has no counterpart for are
listed in docs/conformance.md. Tests are written to jaxtune's contract (DESIGN.md), not to
what jaxtune does today.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import pytest

import jaxtune
from jaxtune._tuning.store.cache import slug

from . import peer_kernels as pk
from .support import entry_of

X = jnp.linspace(-3.0, 3.0, 4096, dtype=jnp.float32)
CPU = jax.devices()[0].device_kind
REPS_ARGS = (X[:256].reshape(1, 256), jnp.eye(256, dtype=jnp.float32))


def _measured(entry: jaxtune.Entry) -> list[dict]:
    return [dict(m.config) for m in entry.measurements]


def _cache_files() -> list[str]:
    root = os.environ["JAXTUNE_CACHE_DIR"]
    return sorted(
        os.path.relpath(os.path.join(d, f), root)
        for d, _, files in os.walk(root)
        for f in files
        if f.endswith(".msgpack")
    )


# -- autotuning/api_test.py -------------------------------------------------------------


def test_locate_finds_every_autotuned_kernel_a_function_reaches():
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_get_bound_args_from_callable:
    the tunable calls in a function are found with the shapes they see."""
    sites = [s for s in jaxtune.locate(pk.two_kernels, X) if s.kind == "autotuned"]
    found = {(s.kernel_id, s.key) for s in sites}
    assert found == {
        (pk.softplus.kernel_id, "f32[4096]"),
        (pk.add_k.kernel_id, "f32[4096]"),
    }


@pytest.mark.child
@pytest.mark.parametrize("vmap", [False, True], ids=["plain", "vmap"])
def test_tune_accepts_a_lowered_function(vmap, fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_get_bound_args_from_lowered
    (and the `f_lowered` half of ::test_autotune): `jaxtune.tune` takes what
    `jax.jit(f).lower(...)` returns; under `vmap` the key is the per-example shape."""
    fn = jax.vmap(pk.softplus_loss) if vmap else pk.softplus_loss
    args = jnp.stack([X, X, X]) if vmap else X
    result = jaxtune.tune(jax.jit(fn).lower(args))
    assert [key for name, _, key in result if name == pk.softplus.kernel_id] == ["f32[4096]"]
    assert pk.softplus.config_for(X).source == "cache"


@pytest.mark.child
def test_a_kernel_reached_twice_with_one_key_is_tuned_once(fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_get_bound_args_unique:
    a kernel called twice with the same shapes is one (kernel, key) to tune."""
    result = jaxtune.tune(pk.two_kernels, X)
    assert sorted(name for name, _, _ in result) == sorted(
        [pk.softplus.kernel_id, pk.add_k.kernel_id]
    )


@pytest.mark.child
def test_tuning_a_gradient_times_forward_and_backward_and_keeps_its_values(fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_get_bound_args_vjp
    (autotuning `value_and_grad` covers the kernel's backward pass) and of
    tokamax/tokamax_test.py::TokamaxTest::test_full_example, subtest "Autotune" (the
    gradient computed inside `with result:` matches the untuned one)."""
    grad = jax.value_and_grad(pk.softplus_loss)
    untuned = jax.jit(grad)(X)
    result = jaxtune.tune(grad, X)
    entry = entry_of(result, pk.softplus)
    assert entry.timing == "vjp"
    with result:
        tuned = jax.jit(grad)(X)
    np.testing.assert_allclose(tuned[0], untuned[0], rtol=1e-5)
    np.testing.assert_allclose(tuned[1], untuned[1], rtol=1e-5)


@pytest.mark.child
def test_a_result_names_the_device_and_round_trips(tmp_path, fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotune (device
    kind, `dumps`/`loads` and `dump`/`load` round trips, the library's version recorded)
    and of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_roundtrip (a tuned call's
    description survives serialisation)."""
    result = jaxtune.tune(pk.two_kernels, X)
    assert {kind for _, kind, _ in result} == {CPU}
    assert jaxtune.TuningResult.loads(result.dumps()) == result
    loaded = jaxtune.TuningResult.load(result.save(tmp_path / "tuned.msgpack"))
    assert loaded == result
    for entry in result.values():
        assert entry.versions["jaxtune"] == jaxtune.__version__
        assert entry.versions["jax"] == jax.__version__
        assert jaxtune.Entry.from_dict(entry.to_dict()) == entry


@pytest.mark.child
def test_a_generous_timeout_still_tunes(fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotune_with_timeout
    and tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_autotune_with_timeout."""
    entry = entry_of(pk.sleep_timeout.tune(X), pk.sleep_timeout)
    assert all(m.ok for m in entry.measurements), entry.measurements
    assert dict(entry.config) in pk.sleep_timeout.space(X)


@pytest.mark.child
@pytest.mark.slow
def test_every_config_timing_out_raises_with_each_timeout():
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotune_timeout_triggered:
    each config past the timeout is recorded as a timeout, and asking for the fastest
    raises an error that holds every failure (Tokamax: an ExceptionGroup)."""
    with pytest.raises(jaxtune.TuningFailedError, match=r"ms=3000.*\n.*ms=4000") as caught:
        pk.sleep_long.tune(X)
    failures = caught.value.failures
    assert [dict(f.config) for f in failures] == [{"ms": 3000}, {"ms": 4000}]
    assert [f.stage for f in failures] == ["timeout", "timeout"]


@pytest.mark.child
def test_the_default_is_always_a_measured_candidate():
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotune_with_max_workers
    (the heuristics config is in the autotuning data) and of
    tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_autotuning_configs (the configs
    tuned are the op's configs plus its heuristics config): a default outside `configs` is
    measured, and when it is the fastest it is stored (docs/autotuned.md, "Sweeps")."""
    entry = entry_of(pk.sleep_default.tune(X), pk.sleep_default)
    assert {"ms": 0} in _measured(entry)
    assert dict(entry.config) == {"ms": 0}
    assert entry.speedup is None or entry.speedup >= 1.0


@pytest.mark.child
def test_nested_result_scopes_override_the_cache_innermost_first(fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotuning_result_context
    (scopes and their nesting): inside `with result:` its entries win over the user cache,
    the innermost scope wins, a key the inner scope lacks falls through to the outer one,
    and leaving restores what was there."""
    small, big = X[:1024], X
    (cached,) = pk.add_k.tune(big).values()  # the user cache knows `big` only
    outside = {"small": pk.add_k.config_for(small), "big": pk.add_k.config_for(big)}
    assert (outside["small"].source, outside["big"].source) == ("default", "cache")
    small_entry = dataclasses.replace(cached, key="f32[1024]", shapes=(("f32", (1024,)),))

    def scope(**configs):
        entries = {"small": small_entry, "big": cached}
        return jaxtune.TuningResult.of(
            *(dataclasses.replace(entries[n], config={"k": k}) for n, k in configs.items())
        )

    def seen():
        choices = {"small": pk.add_k.config_for(small), "big": pk.add_k.config_for(big)}
        return {name: (c.source, dict(c.config)) for name, c in choices.items()}

    outer, inner = scope(small=0, big=2), scope(small=1)
    with outer:
        assert seen() == {"small": ("scope", {"k": 0}), "big": ("scope", {"k": 2})}
        with inner:
            assert seen() == {"small": ("scope", {"k": 1}), "big": ("scope", {"k": 2})}
        assert seen() == {"small": ("scope", {"k": 0}), "big": ("scope", {"k": 2})}
    assert pk.add_k.config_for(small).source == "default"
    assert (pk.add_k.config_for(big).source, dict(pk.add_k.config_for(big).config)) == (
        "cache",
        dict(cached.config),
    )


@pytest.mark.child
def test_merged_results_keep_both_sides_and_the_right_side_wins(fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotuning_result_context
    (the "two results can be combined" half)."""
    (cached,) = pk.add_k.tune(X).values()
    other_key = dataclasses.replace(cached, key="f32[1024]", shapes=(("f32", (1024,)),))
    left = jaxtune.TuningResult.of(
        dataclasses.replace(cached, config={"k": 0}),
        dataclasses.replace(other_key, config={"k": 2}),
    )
    right = jaxtune.TuningResult.of(dataclasses.replace(cached, config={"k": 1}))
    merged = left | right
    assert set(merged) == set(left)
    assert dict(merged[pk.add_k.kernel_id, CPU, "f32[4096]"].config) == {"k": 1}
    assert dict(merged[pk.add_k.kernel_id, CPU, "f32[1024]"].config) == {"k": 2}


@pytest.mark.child
def test_a_jitted_function_follows_the_scopes_it_is_called_in(fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotuning_result_context_retraced:
    one `jax.jit` function called outside, in a scope, in a nested scope, and back out
    runs the config of wherever it is called."""
    x = jnp.zeros(8, jnp.float32)
    (cached,) = pk.add_k.tune(x).values()
    default = pk.add_k.config_for(x).config["k"]
    c0, c1 = (jaxtune.TuningResult.of(dataclasses.replace(cached, config={"k": k})) for k in (2, 3))
    f = jax.jit(lambda v: pk.add_k(v) * 1.0)
    ran = [float(f(x)[0])]
    with c0:
        ran.append(float(f(x)[0]))
        with c1:
            ran.append(float(f(x)[0]))
        ran.append(float(f(x)[0]))
    ran.append(float(f(x)[0]))
    assert ran == [default, 2, 3, 2, default]


@pytest.mark.child
def test_every_config_failing_raises_listing_each():
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotuning_error_message
    (each failing config's error is kept; none is the fastest). Also tune-jax's
    tests/test_interface.py::InterfaceTest::test_error ("No hyperparameters compiled
    successfully")."""
    with pytest.raises(jaxtune.TuningFailedError, match="every config") as caught:
        pk.always_fails.tune(X)
    lines = str(caught.value).splitlines()
    assert any("'a'" in line and "flavour a is broken" in line for line in lines), lines
    assert any("'b'" in line and "flavour b is broken" in line for line in lines), lines
    assert [dict(f.config) for f in caught.value.failures] == [
        {"flavour": "a"},
        {"flavour": "b"},
    ]
    assert all(not f.ok for f in caught.value.failures)


@pytest.mark.child
def test_tune_again_reuses_the_entry_and_retune_sweeps(monkeypatch, fast_timing):
    """Port of tokamax/_src/autotuning/api_test.py::AutotuningTest::test_autotuning_ignore_cache:
    what is known is not tuned again (Tokamax: `autotune` inside `with result:` finds
    nothing left to tune) unless asked to (`ignore_cache=True`; here `JAXTUNE_MODE=retune`):
    docs/whole-model.md, "jaxtune.tune(fn, *args, **kwargs)"."""
    jaxtune.tune(pk.softplus_loss, X)
    first = pk.softplus.config_for(X).entry
    assert first is not None
    jaxtune.tune(pk.softplus_loss, X)
    assert pk.softplus.config_for(X).entry.created == first.created  # not swept again
    monkeypatch.setenv("JAXTUNE_MODE", "retune")
    jaxtune.tune(pk.softplus_loss, X)
    assert pk.softplus.config_for(X).entry.created > first.created  # swept again


# -- ops/op_test.py -----------------------------------------------------------------------


@pytest.mark.child
def test_a_miss_uses_the_default_and_writes_nothing_until_tuned(monkeypatch, fast_timing):
    """Port of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_get_config: without an
    entry the heuristics (default) config is used and the cache stays empty; tuning stores
    a config from the space that later lookups use; `check_autotuning_cache=False` (here
    `JAXTUNE_MODE=off`) gives the default again."""
    choice = pk.reps.config_for(*REPS_ARGS)
    assert (choice.source, dict(choice.config)) == ("default", {"reps": 8})
    jax.block_until_ready(pk.reps(*REPS_ARGS))
    assert _cache_files() == []
    pk.reps.tune(*REPS_ARGS)
    assert _cache_files() == [f"{slug(CPU)}/{slug(pk.reps.kernel_id)}.msgpack"]
    choice = pk.reps.config_for(*REPS_ARGS)
    assert choice.source == "cache"
    assert dict(choice.config) in pk.reps.space(*REPS_ARGS)
    monkeypatch.setenv("JAXTUNE_MODE", "off")
    assert pk.reps.config_for(*REPS_ARGS).source == "default"


@pytest.mark.child
def test_a_miss_in_tune_mode_sweeps(tune_mode, fast_timing):
    """Port of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_default_config with
    `autotuning_cache_miss_fallback("autotune")`: the config a miss gets is a tuned one
    from the space."""
    jax.block_until_ready(pk.softplus(X))
    choice = pk.softplus.config_for(X)
    assert choice.source == "cache"
    assert dict(choice.config) in pk.softplus.space(X)


def test_a_miss_in_cached_mode_uses_the_default():
    """Port of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_default_config with
    `autotuning_cache_miss_fallback("heuristics")`."""
    choice = pk.softplus.config_for(X)
    assert (choice.source, dict(choice.config)) == ("default", {"chunk": 128})
    np.testing.assert_allclose(pk.softplus(X), jax.nn.softplus(X), rtol=1e-6)


def test_a_miss_with_on_miss_error_raises_naming_the_kernel_and_key(monkeypatch):
    """Port of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_default_config with
    `autotuning_cache_miss_fallback("error")` ("No config found"): DESIGN.md's
    `JAXTUNE_ON_MISS=error` is an error naming the kernel, the key and the command that
    tunes it, eagerly and under `jax.jit`."""
    monkeypatch.setenv("JAXTUNE_ON_MISS", "error")
    for call in (pk.softplus, jax.jit(pk.softplus)):
        with pytest.raises(jaxtune.JaxtuneError, match=r"conformance\.softplus[\s\S]*f32\[4096\]"):
            call(X)


def test_a_callable_default_is_the_heuristic_for_each_shape():
    """Port of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_heuristics_config: the
    heuristics config is computed from the arguments."""
    assert dict(pk.heuristic_default.config_for(X[:256]).config) == {"chunk": 256}
    assert dict(pk.heuristic_default.config_for(X).config) == {"chunk": 1024}
    assert pk.heuristic_default.config_for(X).source == "default"


@pytest.mark.child
def test_a_one_config_space_stores_that_config(fast_timing):
    """Port of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_autotune (autotuning a
    set of one config picks it and fills the cache)."""
    entry = entry_of(pk.one_config.tune(X), pk.one_config)
    assert dict(entry.config) == {"chunk": 64}
    assert _cache_files() == [f"{slug(CPU)}/{slug(pk.one_config.kernel_id)}.msgpack"]
    assert pk.one_config.config_for(X).source == "cache"


@pytest.mark.child
def test_under_vmap_the_key_is_the_per_example_shape(tune_mode, fast_timing):
    """Port of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_autotune_vmap (an op
    bound to vmapped arguments autotunes)."""
    xs = jnp.stack([X, -X, 2 * X])
    out = jax.jit(jax.vmap(pk.softplus))(xs)
    np.testing.assert_allclose(out, jax.nn.softplus(xs), rtol=1e-5)
    assert pk.softplus.config_for(X).source == "cache"
    assert pk.softplus.config_for(xs).source == "default"  # the batched shape is not a key


def test_keys_are_readable_and_follow_shape_and_dtype_only():
    """Port of tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_equals and ::test_hash:
    bound arguments with the same shapes are equal and hash alike, other shapes differ.
    jaxtune's key is a readable string of shapes and dtypes; values never enter it."""
    key = pk.softplus.config_for(X).key
    assert key == "f32[4096]"
    assert pk.softplus.config_for(-X + 1).key == key
    assert pk.softplus.config_for(jax.ShapeDtypeStruct((4096,), jnp.float32)).key == key
    assert pk.softplus.config_for(X[:2048]).key == "f32[2048]"
    assert pk.softplus.config_for(X.astype(jnp.bfloat16)).key == "bf16[4096]"


# -- autotuning/cache_test.py ---------------------------------------------------------------


@pytest.mark.child
@pytest.mark.parametrize("device_kind", [CPU, "not_a_real_device"])
def test_a_packaged_cache_answers_for_its_device_kind_only(
    device_kind, tmp_path, monkeypatch, fast_timing
):
    """Port of tokamax/_src/autotuning/cache_test.py::CacheTest::test_load_cache: a cache
    shipped with a library is read for the device kind it was tuned on, and is empty for
    any other."""
    (entry,) = pk.add_k.tune(X).values()
    shipped = dataclasses.replace(entry, config={"k": 3}, device_kind=device_kind)
    path = jaxtune.TuningResult.of(shipped).save(tmp_path / "shipped.msgpack")
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "empty-user-cache"))
    jaxtune.register_cache(path)
    choice = pk.add_k.config_for(X)
    if device_kind == CPU:
        assert (choice.source, dict(choice.config)) == ("packaged", {"k": 3})
        assert float(pk.add_k(X)[0]) == float(X[0]) + 3
    else:
        assert choice.source == "default"


@pytest.mark.child
def test_cache_files_are_plain_msgpack_with_a_schema(fast_timing):
    """Port of tokamax/_src/autotuning/cache_test.py::CacheTest::test_validate_json_cache_files
    (every cache file parses as plain JSON): every file jaxtune writes parses as plain
    msgpack with no extension types, and says its schema, device kind and kernel."""
    jaxtune.tune(pk.two_kernels, X)
    files = _cache_files()
    assert len(files) == 2
    root = os.environ["JAXTUNE_CACHE_DIR"]
    for name in files:
        with open(os.path.join(root, name), "rb") as f:
            data = msgpack.unpackb(f.read(), raw=False, strict_map_key=False)
        assert isinstance(data["schema"], int) and data["schema"] >= 1
        assert data["device_kind"] == CPU
        assert data["kernel"] in {pk.softplus.kernel_id, pk.add_k.kernel_id}
        assert "f32[4096]" in data["entries"]


@pytest.mark.child
def test_mode_off_ignores_every_cache(monkeypatch, tmp_path, fast_timing):
    """Port of tokamax/_src/autotuning/cache_test.py::CacheTest::test_ignore_cache and
    tokamax/_src/ops/op_test.py::BoundArgumentsTest::test_ignore_cache_overlay: with the
    cache ignored nothing is found, and it is found again afterwards."""
    result = pk.add_k.tune(X)
    jaxtune.register_cache(result.save(tmp_path / "shipped.msgpack"))
    monkeypatch.setenv("JAXTUNE_MODE", "off")
    assert pk.add_k.config_for(X).source == "default"
    monkeypatch.setenv("JAXTUNE_MODE", "cached")
    assert pk.add_k.config_for(X).source == "cache"


# -- benchmarking_test.py -------------------------------------------------------------------


@pytest.mark.child
@pytest.mark.parametrize("timer", ["wall", "profiler"])
def test_each_timer_measures_every_config_and_is_recorded(timer, monkeypatch, fast_timing):
    """Port of tokamax/_src/benchmarking_test.py::BenchmarkingTest::test_compile_benchmark
    (each registered timer gives positive times, and compile time is recorded). Tokamax's
    `cupti` timer is GPU-only there as here."""
    monkeypatch.setenv("JAXTUNE_TIMER", timer)
    entry = entry_of(pk.softplus.tune(X), pk.softplus)
    assert entry.timer == timer
    assert len(entry.measurements) == len(pk.softplus.space(X))
    for m in entry.measurements:
        assert m.ok, m
        assert m.median_us > 0 and m.min_us > 0
        assert m.compile_s > 0
        assert m.samples >= 1


@pytest.mark.child
def test_a_known_sleep_is_measured_at_least_that_long(fast_timing):
    """Port of tokamax/_src/benchmarking_test.py::BenchmarkingTest::test_benchmark_function_known_time:
    a function that sleeps in a host callback is measured at no less than its sleep."""
    entry = entry_of(pk.sleep_wall.tune(X), pk.sleep_wall)
    assert entry.timer == "wall"
    by_ms = {m.config["ms"]: m for m in entry.measurements}
    assert set(by_ms) == {20, 40}
    for ms, m in by_ms.items():
        assert m.min_us >= ms * 1000, (ms, m.min_us)
    assert dict(entry.config) == {"ms": 20}
