"""The lookup never hands a kernel a config that cannot run it (docs/autotuned.md, "Lookup
order").

Nearest-shape fallback is opt-in and takes only a config of the new shape's pruned space; a
cached config outside the kernel's current space is skipped with one warning; a static
argument's default does not split keys; ``retune`` mode reports an exact entry as ``cache``;
user callbacks that raise, and config values that cannot be stored, are jaxtune errors that
name the kernel.
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import matmul as tpu_matmul

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache


def kind():
    return _lookup.device_kind()


def entry(kernel, key, config, *, shapes=(), statics=""):
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
    )


def _fits(c, x, y):
    return c["block_k"] <= x.shape[1] and x.shape[1] % c["block_k"] == 0


# JAX's own TPU matmul: block_k larger than K gives a grid with no k step, so the output is
# never written (NaN in interpret mode). No prune: the space is the user's only guard.
@jaxtune.autotuned(
    configs={"block_k": [256, 1024]}, default={"block_k": 256}, name="tests.safety.tpu_matmul"
)
def tpu_mm(x, y, *, block_k):
    return tpu_matmul.matmul(x, y, block_shape=(128, 128), block_k=block_k)


@jaxtune.autotuned(
    configs={"block_k": [128, 256, 1024]},
    default={"block_k": 128},
    prune=_fits,
    nearest=True,
    name="tests.safety.tpu_matmul_nearest",
)
def tpu_mm_nearest(x, y, *, block_k):
    return tpu_matmul.matmul(x, y, block_shape=(128, 128), block_k=block_k)


def _operands(k):
    kx, ky = jax.random.split(jax.random.key(k))
    return jax.random.normal(kx, (128, k)), jax.random.normal(ky, (k, 128))


@pytest.mark.child
@pytest.mark.slow
def test_tpu_matmul_tuned_at_another_shape_is_not_borrowed_by_default(fast_timing):
    x1, y1 = _operands(1024)
    x2, y2 = _operands(512)
    with pltpu.force_tpu_interpret_mode():
        (tuned,) = tpu_mm.tune(x1, y1).values()  # the default isolation: a child process
        assert {m.config["block_k"] for m in tuned.measurements if m.ok} == {256, 1024}
        # The entry the issue saw stored (the sweep's own pick depends on timing).
        _cache.user_cache().write([dataclasses.replace(tuned, config={"block_k": 1024})])
        exact = tpu_mm.config_for(x1, y1)
        assert (exact.source, dict(exact.config)) == ("cache", {"block_k": 1024})

        choice = tpu_mm.config_for(x2, y2)
        assert (choice.source, dict(choice.config)) == ("default", {"block_k": 256})
        out = jax.jit(tpu_mm)(x2, y2)
    assert not np.isnan(np.asarray(out)).any()
    np.testing.assert_allclose(out, x2 @ y2, rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_tpu_matmul_opted_into_nearest_borrows_only_what_prune_accepts(monkeypatch):
    x2, y2 = _operands(512)
    name = "tests.safety.tpu_matmul_nearest"
    big = (("f32", (128, 1024)), ("f32", (1024, 128)))
    _cache.user_cache().write(
        [entry(name, "f32[128,1024],f32[1024,128]", {"block_k": 1024}, shapes=big)]
    )
    with pltpu.force_tpu_interpret_mode():
        choice = tpu_mm_nearest.config_for(x2, y2)
        assert (choice.source, dict(choice.config)) == ("default", {"block_k": 128})
        out = jax.jit(tpu_mm_nearest)(x2, y2)
        np.testing.assert_allclose(out, x2 @ y2, rtol=1e-4, atol=1e-3)

        # As near, and valid here: this one is borrowed.
        small = (("f32", (128, 256)), ("f32", (256, 128)))
        _cache.user_cache().write(
            [entry(name, "f32[128,256],f32[256,128]", {"block_k": 256}, shapes=small)]
        )
        choice = tpu_mm_nearest.config_for(x2, y2)
        assert (choice.source, dict(choice.config)) == ("nearest", {"block_k": 256})
        out = jax.jit(tpu_mm_nearest)(x2, y2)
    np.testing.assert_allclose(out, x2 @ y2, rtol=1e-4, atol=1e-3)


@jaxtune.autotuned(configs={"factor": [1, 2, 3]}, check=False, name="tests.safety.scale")
def scale(x, *, factor):
    return x * factor


def _far_entry():
    return entry("tests.safety.scale", "f32[100]", {"factor": 2}, shapes=(("f32", (100,)),))


def test_nearest_is_off_unless_the_kernel_or_jaxtune_nearest_opts_in(monkeypatch):
    x = jnp.ones((64,), jnp.float32)
    _cache.user_cache().write([_far_entry()])
    assert scale.config_for(x).source == "default"
    assert float(jax.jit(scale)(x)[0]) == 1.0
    monkeypatch.setenv("JAXTUNE_NEAREST", "1")
    choice = scale.config_for(x)
    assert (choice.source, dict(choice.config)) == ("nearest", {"factor": 2})
    # A function jitted before the change keeps its trace; a new one reads the settings.
    assert float(jax.jit(lambda a: scale(a))(x)[0]) == float(scale(x)[0]) == 2.0
    monkeypatch.setenv("JAXTUNE_NEAREST", "0")
    assert scale.config_for(x).source == "default"


@pytest.mark.parametrize("raw", ["yes", "2", "true"])
def test_jaxtune_nearest_bad_value_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("JAXTUNE_NEAREST", raw)
    with pytest.raises(jaxtune.SettingsError, match=r"JAXTUNE_NEAREST=.*allowed values: 0, 1"):
        _settings.settings()


def test_nearest_option_must_be_a_bool():
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"nearest must be True or False"):

        @jaxtune.autotuned(configs={"factor": [1]}, nearest="yes", name="tests.safety.bad")
        def bad(x, *, factor):
            return x * factor


def test_nearest_takes_only_a_config_of_the_new_shapes_space():
    # A callable space: chunk 8 exists for 64 elements, not for 16.
    @jaxtune.autotuned(
        configs=lambda x: [{"chunk": c} for c in (2, 4, 8) if c * 4 <= x.shape[0]],
        nearest=True,
        name="tests.safety.shaped_space",
    )
    def shaped(x, *, chunk):
        return x.reshape(-1, chunk).sum(axis=1)

    _cache.user_cache().write(
        [entry("tests.safety.shaped_space", "f32[64]", {"chunk": 8}, shapes=(("f32", (64,)),))]
    )
    choice = shaped.config_for(jnp.ones((16,), jnp.float32))
    assert (choice.source, dict(choice.config)) == ("default", {"chunk": 2})


# -- cached configs checked against the space -------------------------------------------------


@jaxtune.autotuned(configs={"chunk": [2, 4]}, name="tests.safety.chunked")
def chunked(x, *, chunk):
    return x.reshape(-1, chunk).sum(axis=1)


@pytest.mark.parametrize("bad", [8, True, "4", 4.0], ids=["outside", "bool", "str", "float"])
def test_cached_config_outside_the_space_is_skipped_with_one_warning(bad):
    x = jnp.arange(16, dtype=jnp.float32)
    _cache.user_cache().write([entry("tests.safety.chunked", "f32[16]", {"chunk": bad})])
    with pytest.warns(
        jaxtune.JaxtuneWarning, match=r"tests\.safety\.chunked.*f32\[16\].*chunk="
    ) as seen:
        choice = chunked.config_for(x)
        out = jax.jit(chunked)(x)
        jax.jit(lambda a: chunked(a) + 1)(x)  # another trace: no second warning
        chunked.config_for(x)
    assert len([w for w in seen if issubclass(w.category, jaxtune.JaxtuneWarning)]) == 1
    assert (choice.source, dict(choice.config)) == ("default", {"chunk": 2})
    np.testing.assert_allclose(out, np.arange(16).reshape(-1, 2).sum(axis=1))


@pytest.mark.child
def test_in_tune_mode_a_skipped_entry_is_a_miss_that_sweeps_and_replaces_it(
    monkeypatch, fast_timing
):
    x = jnp.arange(16, dtype=jnp.float32)
    _cache.user_cache().write([entry("tests.safety.chunked", "f32[16]", {"chunk": 64})])
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    with pytest.warns(jaxtune.JaxtuneWarning, match=r"config chunk=64 is not in its space"):
        out = jax.jit(chunked)(x)
    stored = _cache.user_cache().lookup("tests.safety.chunked", kind(), "f32[16]")
    assert stored.config["chunk"] in (2, 4) and len(stored.measurements) == 2
    assert out.shape == (16 // stored.config["chunk"],)


def test_skipped_user_entry_falls_through_to_the_packaged_layer(tmp_path):
    x = jnp.arange(16, dtype=jnp.float32)
    packaged = jaxtune.TuningResult.of(entry("tests.safety.chunked", "f32[16]", {"chunk": 4}))
    jaxtune.register_cache(packaged.save(tmp_path / "packaged.msgpack"))
    _cache.user_cache().write([entry("tests.safety.chunked", "f32[16]", {"chunk": 16})])
    with pytest.warns(jaxtune.JaxtuneWarning, match="not in its space"):
        choice = chunked.config_for(x)
    assert (choice.source, dict(choice.config)) == ("packaged", {"chunk": 4})


def test_scoped_config_outside_the_space_is_skipped_with_one_warning():
    x = jnp.arange(16, dtype=jnp.float32)
    outer = jaxtune.TuningResult.of(entry("tests.safety.chunked", "f32[16]", {"chunk": 4}))
    inner = jaxtune.TuningResult.of(entry("tests.safety.chunked", "f32[16]", {"chunk": 32}))
    with outer, inner, pytest.warns(jaxtune.JaxtuneWarning, match="scope entry") as seen:
        choice = chunked.config_for(x)
        chunked.config_for(x)
    assert len(seen) == 1
    assert (choice.source, dict(choice.config)) == ("scope", {"chunk": 4})


def test_stored_tuple_dtype_and_enum_values_in_the_space_are_used():
    space = {
        "tile": [(2,), (4,)],
        "acc": [np.dtype("float32"), jnp.bfloat16],
        "precision": [jax.lax.Precision.DEFAULT, jax.lax.Precision.HIGHEST],
    }

    @jaxtune.autotuned(configs=space, name="tests.safety.typed")
    def typed(x, *, tile, acc, precision):
        return x.reshape(-1, *tile).astype(acc).sum(axis=1)

    config = {"tile": (4,), "acc": jnp.bfloat16, "precision": jax.lax.Precision.HIGHEST}
    _cache.user_cache().write([entry("tests.safety.typed", "f32[16]", config)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice = typed.config_for(jnp.arange(16, dtype=jnp.float32))
    assert (choice.source, dict(choice.config)) == ("cache", config)


# -- static-argument defaults ------------------------------------------------------------------


@jaxtune.autotuned(
    configs={"factor": [1, 2]}, static_argnames=("scale",), check=False, name="tests.safety.st"
)
def with_static(x, scale=1.0, *, factor):
    return x * factor * scale


def test_static_argument_default_does_not_split_keys():
    x = jnp.ones((8,), jnp.float32)
    keys = {
        with_static.config_for(x).key,
        with_static.config_for(x, 1.0).key,
        with_static.config_for(x, scale=1.0).key,
    }
    assert keys == {"f32[8];scale=1.0"}
    _cache.user_cache().write([entry("tests.safety.st", "f32[8];scale=1.0", {"factor": 2})])
    for call in (
        lambda: with_static(x),
        lambda: with_static(x, 1.0),
        lambda: with_static(x, scale=1.0),
    ):
        assert float(call()[0]) == 2.0
    assert float(jax.jit(lambda a: with_static(a))(x)[0]) == 2.0
    assert with_static.config_for(x, 3.0).key == "f32[8];scale=3.0"


# -- retune mode -------------------------------------------------------------------------------


def test_retune_mode_config_for_reports_an_exact_entry_as_cache(monkeypatch):
    x = jnp.ones((64,), jnp.float32)
    _cache.user_cache().write(
        [entry("tests.safety.scale", "f32[64]", {"factor": 3}, shapes=(("f32", (64,)),))]
    )
    monkeypatch.setenv("JAXTUNE_MODE", "retune")
    choice = scale.config_for(x)
    assert (choice.source, dict(choice.config)) == ("cache", {"factor": 3})


# -- user callbacks and values that cannot be stored --------------------------------------------


def _boom(*args, **kwargs):
    return 1 // 0


@pytest.mark.parametrize("where", ["prune", "configs", "default"])
def test_a_raising_callback_is_a_config_space_error_naming_the_kernel(where):
    options = {"configs": {"chunk": [2, 4]}}
    options[where] = _boom
    kernel = jaxtune.autotuned(**options, name=f"tests.safety.raises_{where}")(
        lambda x, *, chunk: x * chunk
    )
    x = jnp.ones((8,), jnp.float32)
    detail = {"prune": r"config chunk=2", "configs": r"f32\[8\]", "default": r"f32\[8\]"}[where]
    message = (
        rf"{where}.* of kernel 'tests\.safety\.raises_{where}' raised ZeroDivisionError.*{detail}"
    )
    with pytest.raises(jaxtune.ConfigSpaceError, match=message) as info:
        kernel.config_for(x)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(jaxtune.ConfigSpaceError):
        jax.jit(kernel)(x)


@pytest.mark.parametrize(
    "value", [2**70, -(2**64), object(), (1, 2**65)], ids=["big", "small", "object", "tuple"]
)
def test_a_value_that_cannot_be_stored_is_an_error_at_decoration(value):
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"cannot be stored"):

        @jaxtune.autotuned(configs={"chunk": [2, value]}, name="tests.safety.unstorable")
        def unstorable(x, *, chunk):
            return x


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (float("nan"), "is or holds NaN"),
        ((1.0, float("nan")), "is or holds NaN"),
        (np.int64(3), r"Pass 3 \(a Python int"),
        (np.float32(0.5), r"Pass 0.5 \(a Python float"),
    ],
    ids=["nan", "nan in a tuple", "numpy int", "numpy float"],
)
def test_nan_and_numpy_scalars_are_refused_with_the_fix(value, says):
    """A NaN config is never equal to itself, so a stored one could never be matched to the
    space again (it was stored, then skipped with a warning on every lookup); a numpy
    scalar is told to become the Python number it holds."""
    with pytest.raises(jaxtune.ConfigSpaceError, match=says):

        @jaxtune.autotuned(configs={"scale": [1.0, value]}, name="tests.safety.nan")
        def scaled(x, *, scale):
            return x


def test_a_value_that_cannot_be_stored_from_a_callable_space_is_an_error_when_built():
    @jaxtune.autotuned(configs=lambda x: [{"chunk": 2**70}], name="tests.safety.unstorable_fn")
    def unstorable(x, *, chunk):
        return x

    with pytest.raises(
        jaxtune.ConfigSpaceError, match=r"tests\.safety\.unstorable_fn.*cannot be stored"
    ):
        unstorable.config_for(jnp.ones((8,), jnp.float32))
