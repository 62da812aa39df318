from __future__ import annotations

import collections
import dataclasses
import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache

TRACES: collections.Counter[str] = collections.Counter()


@jaxtune.autotuned(configs={"chunk": [16, 32, 64]}, name="tests.blocked_sum")
def blocked_sum(x, *, chunk):
    TRACES["blocked_sum"] += 1
    return x.reshape(-1, chunk).sum(axis=1).sum()


@jaxtune.autotuned(configs={"factor": [1, 2, 3]}, check=False, name="tests.scale")
def scale(x, *, factor):
    """Its output reveals which config ran."""
    TRACES["scale"] += 1
    return x * factor


@jaxtune.autotuned(
    configs={"variant": ["good", "bad", "also_good"]},
    default={"variant": "good"},
    name="tests.sometimes_wrong",
)
def sometimes_wrong(x, *, variant):
    return x * 3.0 if variant == "bad" else x * 2.0


@jaxtune.autotuned(
    configs={"factor": [1, 2, 4]},
    prune=lambda c, x: x.shape[0] % (4 * c["factor"]) == 0,
    check=False,
    nearest=True,
    name="tests.pruned",
)
def pruned(x, *, factor):
    return x * factor


def kind():
    return _lookup.device_kind()


def entry(kernel, key, config, *, shapes=(), statics="", version=""):
    return Entry(
        kernel=kernel,
        device_kind=kind(),
        key=key,
        config=config,
        time_us=1.0,
        default_config=config,
        default_time_us=2.0,
        shapes=shapes,
        statics=statics,
        kernel_version=version,
    )


X = jnp.arange(128, dtype=jnp.float32)


# -- trace-time choice ---------------------------------------------------------------------


def test_jitted_call_traces_kernel_once_over_100_calls():
    before = TRACES["blocked_sum"]
    f = jax.jit(lambda x: blocked_sum(x) * 2)
    outs = [f(X) for _ in range(100)]
    assert TRACES["blocked_sum"] - before == 1
    np.testing.assert_allclose(outs[-1], float(X.sum()) * 2)


def test_eager_call_retraces_only_when_what_decides_the_config_changes(tmp_path, monkeypatch):
    @jaxtune.autotuned(configs={"factor": [1, 3]}, check=False, name="tests.eager_scale")
    def k(x, *, factor):
        TRACES["eager_scale"] += 1
        return x * factor

    tuned = Entry(
        kernel="tests.eager_scale",
        device_kind=kind(),
        key="f32[128]",
        config={"factor": 3},
        time_us=1.0,
        default_config={"factor": 1},
        default_time_us=2.0,
    )
    assert float(k(X)[1]) == 1.0  # nothing tuned: the default
    traces = TRACES["eager_scale"]
    for _ in range(5):
        assert float(k(X)[1]) == 1.0
    assert TRACES["eager_scale"] == traces  # jit's dispatch, no new trace

    # A cache dir that knows the key, set through os.environ between two calls.
    other = tmp_path / "tuned-cache"
    _cache.CacheStore(other).write([tuned])
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(other))
    assert float(k(X)[1]) == 3.0
    with _settings.override(mode="off"):  # no caches: the default again, in this block only
        assert float(k(X)[1]) == 1.0
    assert float(k(X)[1]) == 3.0
    with jaxtune.TuningResult.of(dataclasses.replace(tuned, config={"factor": 1})):
        assert float(k(X)[1]) == 1.0
    assert float(k(X)[1]) == 3.0
    assert float(k(X, factor=1)[1]) == 1.0  # explicit keywords bypass tuning
    # A variable changed in os.environ alone: jit's dispatch runs the shape's trace (no
    # Python before it) until jaxtune next reads the settings, here for config_for.
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "empty"))
    assert float(k(X)[1]) == 3.0
    assert k.config_for(X).source == "default"
    assert float(k(X)[1]) == 1.0
    traces = TRACES["eager_scale"]
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(other))
    jax.clear_caches()  # JAX's own way to make every jitted function trace again
    assert float(k(X)[1]) == 3.0
    assert TRACES["eager_scale"] == traces + 1


def test_settings_change_retraces_eager_calls_not_the_callers_jit(tmp_path, monkeypatch):
    @jaxtune.autotuned(
        configs={"factor": [1, 3]}, static_argnames=("plus",), check=False, name="tests.env"
    )
    def k(x, plus, *, factor):
        TRACES["env"] += 1
        return x * factor + plus

    tuned = entry("tests.env", "f32[128];plus=0", {"factor": 3}, statics="plus=0")
    _cache.CacheStore(tmp_path / "tuned").write([tuned])
    step = jax.jit(lambda x: k(x, 0))
    assert float(k(X, 0)[1]) == float(step(X)[1]) == 1.0  # nothing tuned here: the default
    traces = TRACES["env"]
    monkeypatch.setenv("JAXTUNE_VERBOSE", "2")  # decides no config: nothing re-traces
    assert float(k(X, 0)[1]) == 1.0
    assert TRACES["env"] == traces
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "tuned"))
    assert float(k(X, 0)[1]) == 3.0  # the eager call (static arguments: its Python path)
    assert float(step(X)[1]) == 1.0  # the caller's jit keeps its trace
    assert float(jax.jit(lambda x: k(x, 0))(X)[1]) == 3.0  # a new trace reads the settings
    monkeypatch.setenv("JAXTUNE_MODE", "off")
    assert float(k(X, 0)[1]) == 1.0


def test_eager_call_uses_memo_and_is_correct():
    out = blocked_sum(X)
    np.testing.assert_allclose(out, float(X.sum()))
    # The first trace after the previous test's variables were restored reads the settings,
    # sees the change and renews the eager jits (this one's too): one more trace at most.
    blocked_sum(X)
    before = TRACES["blocked_sum"]
    for _ in range(20):
        blocked_sum(X)
    assert TRACES["blocked_sum"] == before


def test_works_under_grad_with_custom_vjp():
    @jax.custom_vjp
    def total(x):
        return blocked_sum(x)

    def fwd(x):
        return blocked_sum(x), x.shape

    def bwd(shape, g):
        return (jnp.full(shape, g),)

    total.defvjp(fwd, bwd)
    grad = jax.jit(jax.grad(total))(X)
    np.testing.assert_allclose(grad, np.ones(128))
    # Plain autodiff through the kernel works too.
    np.testing.assert_allclose(jax.grad(blocked_sum)(X), np.ones(128))


def test_works_under_vmap_scan_and_shard_map():
    xs = jnp.stack([X, X * 2])
    np.testing.assert_allclose(jax.vmap(blocked_sum)(xs), [float(X.sum()), float(X.sum()) * 2])

    def body(carry, x):
        return carry + blocked_sum(x), None

    total, _ = jax.lax.scan(body, 0.0, xs)
    np.testing.assert_allclose(total, float(X.sum() * 3))

    try:
        from jax import shard_map as smap
    except ImportError:  # JAX < 0.11 keeps it under experimental
        from jax.experimental.shard_map import shard_map as smap
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    kwargs = {"mesh": mesh, "in_specs": P("d"), "out_specs": P()}
    f = jax.jit(smap(lambda x: jax.lax.psum(blocked_sum(x), "d"), **kwargs))
    np.testing.assert_allclose(f(X), float(X.sum()))


# -- modes and lookup order ----------------------------------------------------------------


def test_cached_mode_uses_cache_and_never_sweeps(fast_timing):
    assert _settings.settings().mode == "cached"
    assert scale.config_for(X).source == "default"
    assert float(scale(X)[1]) == 1.0
    assert _cache.user_cache().all_entries() == []  # cached mode never sweeps
    _cache.user_cache().write(
        [entry("tests.scale", "f32[128]", {"factor": 3}, shapes=(("f32", (128,)),))]
    )
    fresh = jnp.arange(128, dtype=jnp.float32) + 0  # same key, cache now has an entry
    choice = scale.config_for(fresh)
    assert (choice.source, dict(choice.config)) == ("cache", {"factor": 3})
    assert float(jax.jit(scale)(fresh)[1]) == 3.0


def test_off_mode_ignores_caches(monkeypatch):
    _cache.user_cache().write([entry("tests.scale", "f32[128]", {"factor": 3})])
    monkeypatch.setenv("JAXTUNE_MODE", "off")
    choice = scale.config_for(X)
    assert (choice.source, dict(choice.config)) == ("default", {"factor": 1})
    assert float(jax.jit(lambda x: scale(x))(X)[1]) == 1.0


@pytest.mark.child
def test_tune_mode_sweeps_on_miss_then_hits(monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    y = jnp.ones((256,), jnp.float32)
    out = jax.jit(blocked_sum)(y)  # sweeps at trace time
    np.testing.assert_allclose(out, 256.0)
    stored = _cache.user_cache().lookup("tests.blocked_sum", kind(), "f32[256]")
    assert stored is not None
    assert len(stored.measurements) == 3
    assert stored.default_time_us is not None
    created = stored.created
    jax.jit(lambda a: blocked_sum(a) + 1)(y)  # a hit: no new sweep
    assert _cache.user_cache().lookup("tests.blocked_sum", kind(), "f32[256]").created == created
    assert blocked_sum.config_for(y).source == "cache"


@pytest.mark.child
def test_a_sweep_while_the_step_traces_does_not_make_the_step_trace_again(monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    y = jnp.ones((384,), jnp.float32)
    traced = []

    @jax.jit
    def step(a):
        traced.append(1)
        return blocked_sum(a) * 2

    for _ in range(3):
        np.testing.assert_allclose(step(y), 768.0)  # the first call sweeps, at trace time
    assert _cache.user_cache().lookup("tests.blocked_sum", kind(), "f32[384]") is not None
    assert len(traced) == 1  # the cache write renewed the eager jits only
    before = TRACES["blocked_sum"]
    np.testing.assert_allclose(blocked_sum(y), 384.0)  # eager: looks the new entry up
    assert TRACES["blocked_sum"] == before + 1
    assert blocked_sum.config_for(y).source == "cache"


@pytest.mark.child
def test_retune_mode_sweeps_even_on_hit_and_overwrites(monkeypatch, fast_timing):
    y = jnp.ones((512,), jnp.float32)
    old = entry("tests.blocked_sum", "f32[512]", {"chunk": 16})
    _cache.user_cache().write([old])
    monkeypatch.setenv("JAXTUNE_MODE", "retune")
    jax.jit(blocked_sum)(y)
    new = _cache.user_cache().lookup("tests.blocked_sum", kind(), "f32[512]")
    assert new.created > old.created
    assert len(new.measurements) == 3
    # Once per process: another trace of the same key does not sweep again.
    jax.jit(lambda a: blocked_sum(a) * 1)(y)
    assert (
        _cache.user_cache().lookup("tests.blocked_sum", kind(), "f32[512]").created == new.created
    )


def test_every_source_is_reachable(monkeypatch):
    x = jnp.ones((64,), jnp.float32)
    assert scale.config_for(x).source == "default"
    assert scale.config_for(x, factor=2).source == "explicit"
    assert dict(scale.config_for(x, factor=2).config) == {"factor": 2}

    # nearest (opted into): a tuned entry for another shape of the same rank and dtype
    _cache.user_cache().write(
        [entry("tests.scale", "f32[100]", {"factor": 2}, shapes=(("f32", (100,)),))]
    )
    assert scale.config_for(x).source == "default"
    monkeypatch.setenv("JAXTUNE_NEAREST", "1")
    near = scale.config_for(x)
    assert (near.source, dict(near.config)) == ("nearest", {"factor": 2})

    # packaged: a registered read-only layer
    packaged = jaxtune.TuningResult.of(entry("tests.scale", "f32[64]", {"factor": 3}))
    path = packaged.save(_settings.settings().cache_dir.parent / "packaged.msgpack")
    jaxtune.register_cache(path)
    assert scale.config_for(x).source == "packaged"

    # cache beats packaged
    _cache.user_cache().write([entry("tests.scale", "f32[64]", {"factor": 1})])
    assert scale.config_for(x).source == "cache"

    # scope beats everything but explicit
    with jaxtune.TuningResult.of(entry("tests.scale", "f32[64]", {"factor": 2})):
        choice = scale.config_for(x)
        assert (choice.source, dict(choice.config)) == ("scope", {"factor": 2})
        assert scale.config_for(x, factor=3).source == "explicit"


def test_scope_retraces_jitted_functions():
    x = jnp.ones((32,), jnp.float32)
    f = jax.jit(lambda a: scale(a))
    assert float(f(x)[0]) == 1.0
    with jaxtune.TuningResult.of(entry("tests.scale", "f32[32]", {"factor": 3})):
        assert float(f(x)[0]) == 3.0
        with jaxtune.TuningResult.of(entry("tests.scale", "f32[32]", {"factor": 2})):
            assert float(f(x)[0]) == 2.0
        assert float(f(x)[0]) == 3.0
    assert float(f(x)[0]) == 1.0


def test_explicit_keyword_bypasses_tuning(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    assert float(scale(X, factor=2)[1]) == 2.0
    assert float(jax.jit(functools.partial(scale, factor=3))(X)[1]) == 3.0
    assert _cache.user_cache().all_entries() == []


def test_nearest_respects_prune():
    x = jnp.ones((8,), jnp.float32)  # prune keeps factor 1 and 2 only
    _cache.user_cache().write(
        [entry("tests.pruned", "f32[16]", {"factor": 4}, shapes=(("f32", (16,)),))]
    )
    assert pruned.config_for(x).source == "default"
    _cache.user_cache().write(
        [entry("tests.pruned", "f32[32]", {"factor": 2}, shapes=(("f32", (32,)),))]
    )
    choice = pruned.config_for(x)
    assert (choice.source, dict(choice.config)) == ("nearest", {"factor": 2})


def test_version_mismatch_is_a_miss():
    @jaxtune.autotuned(configs={"factor": [1, 2]}, check=False, name="tests.versioned", version=2)
    def versioned(x, *, factor):
        return x * factor

    _cache.user_cache().write([entry("tests.versioned", "f32[128]", {"factor": 2}, version="1")])
    assert versioned.config_for(X).source == "default"
    _cache.user_cache().write([entry("tests.versioned", "f32[128]", {"factor": 2}, version="2")])
    assert versioned.config_for(X).source == "cache"


# -- sweeping --------------------------------------------------------------------------------


@pytest.mark.child
def test_wrong_config_is_rejected_by_auto_check(fast_timing):
    result = sometimes_wrong.tune(jnp.ones((64,), jnp.float32))
    (e,) = result.values()
    by_variant = {m.config["variant"]: m for m in e.measurements}
    bad = by_variant["bad"]
    assert isinstance(bad, jaxtune.Failure)
    assert bad.stage == "check"
    assert "differs from the default config's" in bad.reason
    assert isinstance(by_variant["good"], jaxtune.Measurement)
    assert e.config["variant"] in ("good", "also_good")


def test_all_configs_failing_raises_with_every_reason(fast_timing, monkeypatch):
    # The kernel is defined in the test, so it could not travel to the child.
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")

    @jaxtune.autotuned(configs={"n": [3, 5]}, name="tests.always_fails")
    def always_fails(x, *, n):
        return x.reshape(n, -1)

    with pytest.raises(jaxtune.TuningFailedError) as info:
        always_fails.tune(jnp.ones((4,)))
    message = str(info.value)
    assert "every config of tests.always_fails failed for f32[4]" in message
    assert "n=3: compile:" in message and "n=5: compile:" in message


def test_tune_mode_falls_back_with_warning_when_all_fail(monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")  # a kernel defined in the test

    @jaxtune.autotuned(configs={"n": [3, 5]}, name="tests.always_fails_2")
    def always_fails(x, *, n):
        return x.reshape(n, -1)

    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    with pytest.warns(jaxtune.JaxtuneWarning, match="could not tune tests.always_fails_2"):
        _, choice = always_fails._choose(always_fails.options.bind((jnp.ones(4),), {}), traced=True)
    assert choice.source == "default"


@pytest.mark.child
def test_tune_with_shape_dtype_structs_and_bf16(fast_timing):
    spec = jax.ShapeDtypeStruct((64,), jnp.bfloat16)
    result = blocked_sum.tune(spec)
    (e,) = result.values()
    assert e.key == "bf16[64]"
    assert all(isinstance(m, jaxtune.Measurement) for m in e.measurements)


def test_inputs_callable_is_used_and_validated(fast_timing, monkeypatch):
    # `seen` is observed in this process, so the sweep runs here.
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    seen = []

    def make(x):
        seen.append(x.shape)
        return (jnp.sort(jnp.arange(x.shape[0], dtype=x.dtype)[::-1]),)

    @jaxtune.autotuned(configs={"chunk": [8, 16]}, inputs=make, name="tests.with_inputs")
    def needs_sorted(x, *, chunk):
        return x.reshape(-1, chunk).max(axis=1)

    needs_sorted.tune(jax.ShapeDtypeStruct((32,), jnp.float32))
    assert seen == [(32,)]

    @jaxtune.autotuned(
        configs={"chunk": [8, 16]}, inputs=lambda x: (jnp.ones((5,)),), name="tests.bad_inputs"
    )
    def bad_inputs(x, *, chunk):
        return x

    with pytest.raises(
        jaxtune.SignatureError,
        match=r"inputs\(\.\.\.\) returned f32\[5\] for 'x', expected f32\[32\]",
    ):
        bad_inputs.tune(jax.ShapeDtypeStruct((32,), jnp.float32))


def test_static_arguments_enter_key_and_reach_kernel(fast_timing):
    @jaxtune.autotuned(
        configs={"chunk": [8, 16]}, static_argnames=("transpose",), name="tests.static"
    )
    def with_static(x, transpose, *, chunk):
        y = x.T if transpose else x
        return y.reshape(-1, chunk).sum(1)

    x = jnp.ones((4, 8))
    choice = with_static.config_for(x, True)
    assert choice.key == "f32[4,8];transpose=True"
    np.testing.assert_allclose(with_static(x, True), np.full(4, 8.0))
    np.testing.assert_allclose(jax.jit(with_static, static_argnums=1)(x, False), np.full(4, 8.0))


def test_callable_space_and_default_depend_on_shapes():
    @jaxtune.autotuned(
        configs=lambda x: [{"chunk": c} for c in (4, 8, 16, 32) if c <= x.shape[0]],
        default=lambda x: {"chunk": min(8, x.shape[0])},
        name="tests.callable_space",
    )
    def k(x, *, chunk):
        return x.reshape(-1, chunk).sum(1)

    assert k.space(jnp.ones(8)) == [{"chunk": 4}, {"chunk": 8}]
    assert dict(k.config_for(jnp.ones(8)).config) == {"chunk": 8}
    assert k.config_for(jnp.ones(8), chunk=4).source == "explicit"
    np.testing.assert_allclose(k(jnp.ones(16)), np.full(2, 8.0))


def test_custom_key_function():
    @jaxtune.autotuned(
        configs={"factor": [1, 2]},
        check=False,
        name="tests.custom_key",
        key=lambda x: f"rows={x.shape[0] // 64 * 64}",
    )
    def k(x, *, factor):
        return x * factor

    assert k.config_for(jnp.ones(130)).key == "rows=128"


def test_cost_hint():
    from jaxtune.examples.pallas_matmul import matmul

    hint = matmul.cost_hint(jnp.ones((64, 32)), jnp.ones((32, 16)))
    assert hint == {"flops": 2.0 * 64 * 32 * 16, "bytes": (64 * 32 + 32 * 16 + 64 * 16) * 4.0}


# -- bad input ------------------------------------------------------------------------------


def test_error_empty_space_after_pruning():
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"no config of .* is left after pruning"):
        pruned(jnp.ones((6,)))


def test_error_config_key_not_accepted():
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"sets 'tile', which .* does not accept"):

        @jaxtune.autotuned(configs={"tile": [1, 2]})
        def k(x, *, chunk):
            return x


def test_error_default_keys_differ():
    with pytest.raises(
        jaxtune.ConfigSpaceError,
        match=r"default \{'tile': 1\} .* has keys \['tile'\], but the space's keys are \['chunk'\]",
    ):

        @jaxtune.autotuned(configs={"chunk": [1, 2]}, default={"tile": 1})
        def k(x, *, chunk, tile=0):
            return x


def test_error_unhashable_static_argument():
    @jaxtune.autotuned(configs={"factor": [1]}, static_argnames=("dims",), name="tests.unhash")
    def k(x, dims, *, factor):
        return x

    with pytest.raises(
        jaxtune.SignatureError, match=r"static argument dims=\[1, 2\] is unhashable"
    ):
        k(jnp.ones(2), [1, 2])


def test_error_non_array_argument_without_static_argnames():
    @jaxtune.autotuned(configs={"factor": [1]}, name="tests.nonarray")
    def k(x, mode, *, factor):
        return x

    with pytest.raises(
        jaxtune.SignatureError, match=r"argument 'mode' is a str .* add 'mode' to static_argnames"
    ):
        k.config_for(jnp.ones(2), "fast")
    # A call goes straight to jit's dispatch (eager calls cost what jit's do): jit's own
    # error, which names the argument and static_argnames.
    with pytest.raises(TypeError, match=r"(?s)args\[1\].*static_argnames"):
        k(jnp.ones(2), "fast")


@pytest.mark.parametrize("bad", ["strict", 1e-3, {"rtol": 1e-3, "tol": 1}, {"rtol": -1}])
def test_error_check_of_wrong_type(bad):
    with pytest.raises(jaxtune.ConfigSpaceError, match="check"):

        @jaxtune.autotuned(configs={"factor": [1]}, check=bad)
        def k(x, *, factor):
            return x


def test_error_bare_decorator():
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"write @jaxtune.autotuned\(configs="):

        @jaxtune.autotuned
        def k(x, *, factor):
            return x


def test_error_invalid_mode(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "always")
    with pytest.raises(
        jaxtune.SettingsError,
        match="JAXTUNE_MODE='always' is not valid; allowed values: off, cached, tune, retune",
    ):
        scale(jnp.ones(3))


def test_a_warning_names_the_users_line_even_from_inside_jit(monkeypatch):
    """A lookup's warning is raised deep in JAX's tracing of the caller's function: it
    names the line of this file that called the jitted function, not jaxtune's or JAX's."""
    monkeypatch.setenv("JAXTUNE_ON_MISS", "warn")

    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.warned_where")
    def warned_where(x, *, c):
        return x * c

    with pytest.warns(jaxtune.JaxtuneWarning, match="no tuned config") as record:
        line = inspect.currentframe().f_lineno + 1
        jax.jit(lambda x: warned_where(x) + 1)(jnp.ones(5))
    assert (record[0].filename, record[0].lineno) == (__file__, line)


def test_an_unnamed_kernel_defined_in_main_warns_once_with_how_to_name_it():
    import warnings

    namespace = {"__name__": "__main__"}
    exec("def unnamed_main_kernel(x, *, c):\n    return x * c\n", namespace)
    fn = namespace["unnamed_main_kernel"]
    with pytest.warns(jaxtune.JaxtuneWarning) as record:
        first = jaxtune.autotuned(configs={"c": [1, 2]})(fn)
        jaxtune.autotuned(configs={"c": [1, 2]})(fn)
    assert len(record) == 1
    assert first.kernel_id == "__main__.unnamed_main_kernel"
    message = str(record[0].message)
    assert "cached under '__main__.unnamed_main_kernel'" in message
    assert 'name="mylib.unnamed_main_kernel"' in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jaxtune.autotuned(configs={"c": [1, 2]}, name="lib.named")(fn)
