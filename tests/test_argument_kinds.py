"""Every kind of argument a program passes works in every flow (docs/autotuned.md, "Argument
kinds"): typed PRNG keys (keyed ``key<fry>[4]``, made at random for a sweep, carried to the
child as their implementation and bits), float8 outputs (checked in float32), numpy
float64 arrays (keyed as the float32 array jax.jit makes of them without x64), and
NamedTuples defined in the user's script and passed to a library's kernel."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import argument_kernels as ak
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.experimental import pallas as pl
from test_wire_pytrees import roundtrip

import jaxtune
from jaxtune._core.arrays import random_leaf
from jaxtune._core.vocabulary import Entry, Measurement
from jaxtune._program.locate import locate
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.sweep.check import check_outputs
from jaxtune._tuning.sweep.inputs import make_inputs

ROOT = pathlib.Path(__file__).resolve().parent.parent
X = jnp.ones((4, 8))
IMPLS = [("threefry2x32", "key<fry>"), ("rbg", "key<rbg>"), ("unsafe_rbg", "key<urbg>")]


def tuned(kernel: str, key: str, config: dict, shapes: tuple) -> Entry:
    """An entry of the user cache whose config differs from the kernel's default."""
    entry = Entry(
        kernel=kernel,
        device_kind=_lookup.device_kind(),
        key=key,
        config=config,
        time_us=1.0,
        default_config={"scale": 1.0},
        default_time_us=2.0,
        shapes=shapes,
    )
    _cache.user_cache().write([entry])
    return entry


def measured(kernel: str) -> dict[str, list]:
    """The measurements of each entry of ``kernel`` in the user cache, by key."""
    entries = _cache.user_cache().entries_for(kernel, _lookup.device_kind())
    return {e.key: list(e.measurements) for e in entries}


# -- typed PRNG keys -----------------------------------------------------------------------


@pytest.mark.parametrize(("impl", "text"), IMPLS)
def test_a_typed_key_is_keyed_by_its_implementation_and_shape(impl, text):
    key = jax.random.key(0, impl=impl)
    assert ak.keyed_noise.config_for(X, key).key == f"f32[4,8],{text}[]"
    assert ak.keyed_noise.config_for(X, jax.random.split(key, 4)).key == f"f32[4,8],{text}[4]"
    abstract = (jax.ShapeDtypeStruct(X.shape, X.dtype), jax.ShapeDtypeStruct((4,), key.dtype))
    assert ak.keyed_noise.config_for(*abstract).key == f"f32[4,8],{text}[4]"


@pytest.mark.parametrize("mode", ["off", "cached"])
def test_a_kernel_taking_a_typed_key_runs_eagerly_jitted_and_vmapped(mode, monkeypatch):
    """JAXTUNE_MODE=off runs the default config, cached mode the cached one: the same key
    for the call, jit, vmap (a key tracer) and config_for."""
    monkeypatch.setenv("JAXTUNE_MODE", mode)
    x, key = jnp.arange(8.0), jax.random.key(3)
    tuned("tests.scaled_noise", "f32[8],key<fry>[]", {"scale": 2.0}, (("f32", (8,)),))
    expected = x * (1.0 if mode == "off" else 2.0)
    for call in (ak.scaled_noise, jax.jit(ak.scaled_noise)):
        np.testing.assert_array_equal(call(x, key), expected)
    keys = jax.random.split(key, 3)
    out = jax.vmap(ak.scaled_noise, in_axes=(None, 0))(x, keys)
    np.testing.assert_array_equal(out, jnp.stack([expected] * 3))
    assert ak.scaled_noise.config_for(x, key).source == ("default" if mode == "off" else "cache")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float8_e4m3fn, jnp.float64])
def test_random_floats_are_standard_normal_and_the_same_on_any_number_of_threads(dtype):
    """A float array past one stream (:data:`NORMAL_CHUNK` elements) is drawn in streams on
    several threads; its values are the same on one thread, and its spread is a standard
    normal's."""
    from jaxtune._core.arrays import NORMAL_CHUNK

    leaf = jax.ShapeDtypeStruct((3, NORMAL_CHUNK // 2 + 5), dtype)
    one = random_leaf(leaf, np.random.default_rng(7))
    many = random_leaf(leaf, np.random.default_rng(7), threads=4)
    other = random_leaf(leaf, np.random.default_rng(8), threads=4)
    assert one.dtype == np.dtype(dtype) and one.shape == leaf.shape
    np.testing.assert_array_equal(one.view(np.uint8), many.view(np.uint8))
    assert not np.array_equal(one.view(np.uint8), other.view(np.uint8))
    wide = one.astype(np.float64)
    assert abs(wide.mean()) < 0.01 and abs(wide.std() - 1) < 0.05
    # Each stream draws values of its own: no two streams repeat each other.
    flat = wide.reshape(-1)
    assert not np.array_equal(flat[:1000], flat[NORMAL_CHUNK : NORMAL_CHUNK + 1000])


@pytest.mark.parametrize(("impl", "text"), IMPLS)
def test_random_inputs_of_a_typed_key_are_keys_of_its_implementation(impl, text):
    leaf = jax.ShapeDtypeStruct((3,), jax.random.key(0, impl=impl).dtype)
    a, b = (random_leaf(leaf, np.random.default_rng(1)) for _ in range(2))
    c = random_leaf(leaf, np.random.default_rng(2))
    assert str(a.dtype) == text and a.shape == (3,)
    np.testing.assert_array_equal(jax.random.key_data(a), jax.random.key_data(b))
    assert not np.array_equal(jax.random.key_data(a), jax.random.key_data(c))
    # A sweep of abstract arguments draws them so.
    sig = ak.keyed_noise.options.bind((jax.ShapeDtypeStruct((3, 8), jnp.float32), leaf), {})
    (inputs,) = make_inputs("tests.keyed_noise", sig)
    assert inputs["key"].dtype == leaf.dtype and inputs["key"].shape == (3,)


def test_inputs_may_return_typed_keys_and_a_wrong_one_is_named():
    fry = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    sig = ak.keyed_noise.options.bind((jax.ShapeDtypeStruct((4, 8), jnp.float32), fry), {})
    (made,) = make_inputs(
        "tests.keyed_noise", sig, lambda x, k: (jnp.zeros(x.shape), jax.random.key(5))
    )
    assert made["key"].dtype == fry.dtype
    with pytest.raises(
        jaxtune.SignatureError, match=r"key<rbg>\[\] for 'key', expected key<fry>\[\]"
    ):
        make_inputs("tests.keyed_noise", sig, lambda x, k: (x, jax.random.key(5, impl="rbg")))


def test_a_pallas_kernel_taking_typed_keys_is_found_with_its_operands():
    def body(keys_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def step(keys, x):
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(body, out_shape=out, interpret=True)(keys, x)

    (site,) = locate(step, jax.random.split(jax.random.key(0), 8), jnp.ones(8))
    assert site.operands == (("key<fry>", (8,)), ("f32", (8,)))


@pytest.mark.parametrize(("impl", "text"), IMPLS)
def test_typed_keys_travel_to_the_child_as_their_implementation_and_bits(impl, text):
    keys = jax.random.split(jax.random.key(7, impl=impl), 4)
    back, (scalar,) = roundtrip((keys, [keys[0]]))
    assert back.dtype == keys.dtype and back.shape == (4,)
    np.testing.assert_array_equal(jax.random.key_data(back), jax.random.key_data(keys))
    assert scalar.dtype == keys.dtype and scalar.shape == ()
    abstract = roundtrip((keys, jax.ShapeDtypeStruct((2,), keys.dtype)), abstract=True)
    assert [(a.shape, str(a.dtype)) for a in abstract] == [((4,), text), ((2,), text)]
    assert all(isinstance(a, jax.ShapeDtypeStruct) for a in abstract)


@pytest.mark.child
def test_tune_mode_sweeps_a_kernel_taking_typed_keys_in_the_child(monkeypatch, fast_timing):
    """Default isolation: the arguments travel to the child (an inline fallback would warn,
    and the suite turns warnings into errors); every config passes the check."""
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    key = jax.random.key(0)
    ak.keyed_noise(X, key)
    jax.jit(ak.keyed_noise)(X, jax.random.split(key, 4))
    found = measured("tests.keyed_noise")
    assert set(found) == {"f32[4,8],key<fry>[]", "f32[4,8],key<fry>[4]"}
    assert all(
        len(ms) == 2 and all(isinstance(m, Measurement) for m in ms) for ms in found.values()
    )
    assert ak.keyed_noise.config_for(X, key).source == "cache"


@pytest.mark.child
def test_jaxtune_tune_and_kernel_tune_take_typed_keys(fast_timing):
    rbg = jax.random.key(0, impl="rbg")
    result = jaxtune.tune(lambda x, k: ak.keyed_noise(x, k).sum(), X, rbg)
    assert [key for _, _, key in result] == ["f32[4,8],key<rbg>[]"]
    urbg = jax.ShapeDtypeStruct((4,), jax.random.key(0, impl="unsafe_rbg").dtype)
    result = ak.keyed_noise.tune(jax.ShapeDtypeStruct((4, 8), jnp.float32), urbg)
    assert [key for _, _, key in result] == ["f32[4,8],key<urbg>[4]"]


# -- float8 and other ml_dtypes outputs -----------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2, ml_dtypes.float4_e2m1fn, jnp.bfloat16]
)
def test_narrow_float_outputs_are_compared_in_float32_at_their_own_tolerance(dtype):
    ref = jnp.linspace(-4.0, 4.0, 64).astype(dtype)
    assert check_outputs(ref, ref, "auto") is None
    # One unit in the last place further from zero: a sum added in another order, rounded.
    eps = float(ml_dtypes.finfo(dtype).eps)
    wide = np.asarray(ref.astype(jnp.float32))
    ulp = np.where(wide == 0, 0, eps * 2.0 ** np.floor(np.log2(np.abs(wide) + (wide == 0))))
    nudged = jnp.asarray(wide + np.sign(wide) * ulp).astype(dtype)
    assert check_outputs(nudged, ref, "auto") is None
    wrong = check_outputs(-ref, ref, "auto")
    assert wrong is not None and "max abs error" in wrong
    assert check_outputs(nudged, ref, {"rtol": eps, "atol": eps}) is None


def test_typed_key_outputs_are_compared_by_their_bits():
    keys = jax.random.split(jax.random.key(0), 3)
    assert check_outputs(keys, keys, "auto") is None
    other = jax.random.split(jax.random.key(1), 3)
    assert "differs from the default config's in" in check_outputs(other, keys, "auto")


@pytest.mark.child
def test_tune_mode_tunes_a_float8_kernel_in_the_child(monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    x = jnp.linspace(-3.0, 3.0, 64).reshape(8, 8)
    out = ak.to_float8(x)
    assert out.dtype == jnp.float8_e4m3fn
    np.testing.assert_array_equal(out, x.astype(jnp.float8_e4m3fn))
    (ms,) = measured("tests.to_float8").values()
    assert len(ms) == 2 and all(isinstance(m, Measurement) for m in ms), ms


# -- numpy float64 arrays without x64 -------------------------------------------------------


def test_a_numpy_float64_array_is_keyed_as_the_float32_array_jit_makes_of_it():
    assert not jax.config.jax_enable_x64
    x = np.arange(8.0)
    tuned("tests.scaled", "f32[8]", {"scale": 2.0}, (("f32", (8,)),))
    for args in ((x,), (jax.ShapeDtypeStruct((8,), np.float64),)):
        choice = ak.scaled.config_for(*args)
        assert (choice.key, choice.source, choice.config) == ("f32[8]", "cache", {"scale": 2.0})
    for call in (ak.scaled, jax.jit(ak.scaled)):
        np.testing.assert_array_equal(call(x), x * 2)
    sig = ak.scaled.options.bind((x,), {})
    call = ak.scaled.options.bound(sig).recorded_call(ak.scaled.config_for(x))
    assert (call.key, call.shapes) == ("f32[8]", (("f32", (8,)),))


# -- the whole program: `jaxtune tune -- python prog.py` ------------------------------------

PROGRAM = textwrap.dedent(
    """
    from typing import NamedTuple

    import jax
    import jax.numpy as jnp
    import numpy as np

    import argument_kernels as ak


    class Batch(NamedTuple):  # the script's own type, passed to a library's kernel
        x: jax.Array
        y: jax.Array


    @jax.jit
    def step(x, key, batch):
        noisy = ak.keyed_noise(x, key).sum()
        return noisy + ak.to_float8(x).astype(jnp.float32).sum() + ak.tree_sum(batch)


    if __name__ == "__main__":
        x = jnp.ones((4, 8))
        batch = Batch(jnp.ones(8), jnp.arange(8.0))
        print("step", step(x, jax.random.key(0), batch).shape)
        keys = jax.random.split(jax.random.key(1, impl="rbg"), 4)
        print("keys", ak.keyed_noise(x, keys).shape)
        print("float64", ak.scaled(np.ones(8)).dtype)
    """
)

KEYS = {
    ("tests.keyed_noise", "f32[4,8],key<fry>[]"),
    ("tests.keyed_noise", "f32[4,8],key<rbg>[4]"),
    ("tests.to_float8", "f32[4,8]"),
    ("tests.tree_sum", "(f32[8],f32[8])"),
    ("tests.scaled", "f32[8]"),
}


@pytest.mark.child
def test_tune_command_tunes_every_argument_kind_and_a_plain_run_uses_the_entries(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env = {**os.environ, "PYTHONPATH": path, "JAXTUNE_ISOLATION": "process"}
    command = [sys.executable, str(script)]

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args),
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )

    tuned_run = run(sys.executable, "-m", "jaxtune", "tune", "--json", "--", *command)
    assert tuned_run.returncode == 0, tuned_run.stderr[-3000:]
    doc = json.loads(tuned_run.stdout)
    assert {(t["kernel"], t["key"]) for t in doc["tuned"]} == KEYS
    assert "float64 float32" in tuned_run.stderr
    plain = run(*command, JAXTUNE_VERBOSE="1")
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stderr.count("(from cache)") == len(KEYS), plain.stderr
