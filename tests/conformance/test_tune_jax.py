"""tune-jax's tests, ported to jaxtune's API.

Each test names the tune-jax test it comes from (rdyro/tune-jax at a9dfacc, ``tests/``).
tune-jax tunes on the first call; jaxtune does that in ``JAXTUNE_MODE=tune``, which these
ports use. The behaviours with no counterpart are listed in docs/conformance.md.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxtune

from . import peer_kernels as pk

X = jnp.linspace(-3.0, 3.0, 4096, dtype=jnp.float32)
A = jnp.arange(16 * 16, dtype=jnp.float32).reshape(16, 16) / 256


def _reps_args():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((256, 256)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((256, 256)), jnp.float32) * 0.01
    return x, w


# -- tests/test_interface.py ----------------------------------------------------------------


def test_a_bare_value_in_configs_is_refused_with_the_fix():
    """Port of tests/test_interface.py::InterfaceTest::test_scalar_hyperparam: tune-jax takes
    `hyperparams={"a": [1], "b": 2}` (a bare value is a fixed knob). jaxtune asks for a list
    and says how to write it; a one-value list is the fixed knob."""
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"configs=\{'b': \[2\]\}"):

        @jaxtune.autotuned(configs={"b": 2}, name="conformance.bare_value")
        def bare(x, *, b):
            return x

    @jaxtune.autotuned(configs={"a": [1], "b": [2]}, name="conformance.fixed_knob")
    def fixed(x, *, a, b):
        return x * a + b

    assert fixed.space(X) == [{"a": 1, "b": 2}]
    np.testing.assert_allclose(fixed(X), X + 2)


@pytest.mark.child
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_the_stored_config_is_the_fastest_measured(jit, tune_mode):
    """Port of tests/test_interface.py::InterfaceTest::test_optimal_hyperparams_field (eager
    and under `jax.jit`): the config used is the one with the best measured time. Here the
    work is proportional to the knob (8x between the extremes), so the fastest is known:
    `reps=1`, not the default `reps=8`."""
    x, w = _reps_args()
    call = jax.jit(pk.reps) if jit else pk.reps
    np.testing.assert_allclose(call(x, w), x * 2, rtol=1e-6)
    choice = pk.reps.config_for(x, w)
    assert choice.source == "cache"
    entry = choice.entry
    raced = [m for m in entry.measurements if m.ok]
    assert len(raced) == 3
    best = min(raced, key=lambda m: m.median_us)
    assert dict(entry.config) == dict(best.config) == {"reps": 1}


@pytest.mark.child
def test_the_table_lists_each_kernel_with_its_pick(fast_timing):
    """Port of tests/test_interface.py::InterfaceTest::test_tabulate_results (and
    ::test_empty's `tabulate`): the result prints as a table naming the kernel, its key
    and the config it chose."""
    result = jaxtune.tune(pk.two_kernels, X)
    table = result.table()
    for entry in result.values():
        row = next(line for line in table.splitlines() if line.startswith(entry.kernel))
        assert entry.key in row
        for name, value in entry.config.items():
            assert f"{name}={value}" in row


@pytest.mark.child
@pytest.mark.parametrize("keyword", [False, True], ids=["positional", "keyword"])
def test_a_kernel_reached_inside_jit_is_tuned_on_first_call(keyword, tune_mode, fast_timing):
    """Port of tests/test_interface.py::InterfaceTest::test_nested_within_jit and
    ::test_kws_tracers: no results before the first call of the enclosing `jax.jit`
    function, results after it; arrays passed by keyword are traced arguments too."""
    kernel = pk.split_keyword if keyword else pk.split_matmul

    @jax.jit
    def compute(a):
        return a + (kernel(a, b=a) if keyword else kernel(a, a))

    args, kwargs = ((A,), {"b": A}) if keyword else ((A, A), {})
    assert kernel.config_for(*args, **kwargs).source == "default"
    out = compute(A)
    np.testing.assert_allclose(out, A + A @ A, rtol=1e-5)
    choice = kernel.config_for(*args, **kwargs)
    assert choice.source == "cache"
    assert len(choice.entry.measurements) == len(kernel.space(*args, **kwargs))


# -- tests/test_computation.py --------------------------------------------------------------


@pytest.mark.child
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_kernel_without_array_arguments_is_tuned(jit, tune_mode):
    """Port of tests/test_computation.py::SimpleCasesTest::test_matmul_size: a function
    whose only arguments are the knobs (it builds its own arrays) is tuned like any other;
    the fastest (the smallest size, 512x less work) is used (docs/conformance.md, "Ported
    peer tests")."""
    call = jax.jit(lambda: pk.no_arrays()) if jit else pk.no_arrays
    out = call()
    assert out.shape == (32, 32)
    assert pk.no_arrays.config_for().source == "cache"


@pytest.mark.child
def test_a_jitted_function_with_static_knobs_is_tuned_per_shape(tune_mode, fast_timing):
    """Port of tests/test_computation.py::SimpleCasesTest::test_simple_mha (GPU there): a
    `jax.jit(f, static_argnames=...)` function tuned over its static knobs; a call with a
    new batch size is a new key, tuned anew."""
    wide = jnp.concatenate([A, A])
    jitted = jax.jit(lambda a: pk.split_matmul(a, A))
    np.testing.assert_allclose(jitted(A), A @ A, rtol=1e-5)
    np.testing.assert_allclose(jitted(wide), wide @ A, rtol=1e-5)
    keys = [pk.split_matmul.config_for(a, A) for a in (A, wide)]
    assert [c.source for c in keys] == ["cache", "cache"]
    assert [c.key for c in keys] == ["f32[16,16],f32[16,16]", "f32[32,16],f32[16,16]"]


# -- tests/test_mesh.py ---------------------------------------------------------------------


def _mesh(axis_type):
    return jax.make_mesh((len(jax.devices()),), ("x",), axis_types=(axis_type,))


AXIS_TYPES = [
    pytest.param(jax.sharding.AxisType.Explicit, id="explicit"),
    pytest.param(jax.sharding.AxisType.Auto, id="auto"),
]


@pytest.mark.child
@pytest.mark.parametrize("axis_type", AXIS_TYPES)
def test_tune_mode_under_a_mesh_with_sharded_inputs(axis_type, tune_mode, fast_timing):
    """Port of tests/test_mesh.py::MeshTuningTest::test_tuning_under_mesh_tracers and
    ::test_mesh_leak: a kernel reached inside `jax.jit` under `set_mesh`, with an input
    sharded over the mesh, is tuned, and the caller's mesh is the same afterwards."""
    mesh = _mesh(axis_type)
    before = jax.sharding.get_abstract_mesh()
    x = X.reshape(8, 512)
    with jax.sharding.set_mesh(mesh):
        sharded = jax.device_put(x, NamedSharding(mesh, P("x", None)))
        out = jax.jit(pk.elementwise)(sharded)
        assert out.shape == (8, 512)
        inside = jax.sharding.get_abstract_mesh()
    np.testing.assert_allclose(out, jnp.tanh(jnp.tanh(x)), rtol=1e-5)
    assert inside == mesh.abstract_mesh
    assert jax.sharding.get_abstract_mesh() == before
    assert pk.elementwise.config_for(x).source == "cache"


@pytest.mark.child
def test_eval_shape_of_abstract_arguments_tunes(tune_mode, fast_timing):
    """Port of tests/test_mesh.py::MeshTuningTest::test_custom_sharding_random_args_outer:
    `jax.eval_shape` of the tuned function with only abstract arguments gives the shape
    and leaves timing results (jaxtune builds the inputs itself)."""
    x = jax.ShapeDtypeStruct((8, 512), jnp.float32)
    out = jax.eval_shape(pk.elementwise, x)
    assert (out.shape, out.dtype) == ((8, 512), jnp.float32)
    choice = pk.elementwise.config_for(x)
    assert choice.source == "cache"
    assert all(m.ok for m in choice.entry.measurements)


@pytest.mark.child
@pytest.mark.parametrize("axis_type", AXIS_TYPES)
def test_tune_mode_inside_shard_map(axis_type, tune_mode, fast_timing):
    """Port of tests/test_mesh.py::MeshTuningTest::test_shard_map_tuning (tune-jax tunes a
    closure around `shard_map`; jaxtune's kernel sits inside it): the key is the
    per-shard shape."""
    mesh = _mesh(axis_type)
    n = len(jax.devices())
    x = jnp.tile(X.reshape(1, 4096), (n, 1))

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None))
    def sharded(block):
        return pk.elementwise(block)

    with jax.sharding.set_mesh(mesh):
        out = sharded(jax.device_put(x, NamedSharding(mesh, P("x", None))))
    np.testing.assert_allclose(out, jnp.tanh(jnp.tanh(x)), rtol=1e-5)
    assert pk.elementwise.config_for(X.reshape(1, 4096)).source == "cache"
