"""`jaxtune.locate` and `jaxtune.tune(fn, ...)`: every kernel of a program found (TPU kernels
lowered on CPU, interpret-mode and autotuned kernels through transformations, shard_map),
from a function, a traced or a lowered program, and tuned by one call.

Covers docs/whole-model.md, "jaxtune.locate", "A traced or lowered program" and
"jaxtune.tune(fn, *args, **kwargs)".
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

import jaxtune
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.bound import BoundCall
from jaxtune._tuning.store import cache as _cache


def _matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(
        o_ref.dtype
    )


def tpu_matmul(x, y, *, block=128):
    m, k = x.shape
    _, n = y.shape
    return pl.pallas_call(
        _matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // block, n // block),
        in_specs=[
            pl.BlockSpec((block, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, block), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((block, block), lambda i, j: (i, j)),
        name="tiled_matmul",
        cost_estimate=pl.CostEstimate(
            flops=2 * m * n * k, bytes_accessed=(m * k + k * n + m * n) * 4, transcendentals=0
        ),
        metadata={"block": str(block)},
    )(x, y)


def _scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def tpu_scale(x):
    return pl.pallas_call(
        _scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), name="scale_rows"
    )(x)


MATMUL_LINE = inspect.getsourcelines(tpu_matmul)[1] + 3  # the pallas_call line
SCALE_LINE = inspect.getsourcelines(tpu_scale)[1] + 1


def test_tpu_kernels_lowered_on_cpu_are_found_with_everything():
    def model(x, y, z):
        return tpu_matmul(x, y), tpu_scale(z)

    x = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    y = jax.ShapeDtypeStruct((512, 256), jnp.float32)
    z = jax.ShapeDtypeStruct((8, 128), jnp.bfloat16)
    sites = jaxtune.locate(model, x, y, z, platform="tpu")
    assert [s.name for s in sites] == ["tiled_matmul", "scale_rows"]
    mm, sc = sites
    assert mm.kind == "pallas" and mm.target == "tpu_custom_call" and mm.platform == "tpu"
    assert mm.operands == (("f32", (256, 512)), ("f32", (512, 256)))
    assert mm.results == (("f32", (256, 256)),)
    assert mm.cost_estimate["flops"] == 2 * 256 * 256 * 512
    assert mm.cost_estimate["bytes_accessed"] == (256 * 512 * 2 + 256 * 256) * 4
    assert mm.metadata == {"block": "128"}
    assert mm.source == f"{__file__}:{MATMUL_LINE}"
    assert mm.name_stack.endswith("tiled_matmul/pallas_call")
    assert sc.operands == (("bf16", (8, 128)),) and sc.results == (("bf16", (8, 128)),)
    assert sc.cost_estimate is None
    assert sc.source == f"{__file__}:{SCALE_LINE}"


@jaxtune.autotuned(configs={"chunk": [4, 8]}, name="tests.locate.rowsum")
def rowsum(x, *, chunk):
    return x.reshape(x.shape[0], -1, chunk).sum(axis=(1, 2))


@jaxtune.autotuned(configs={"factor": [1.0, 2.0]}, check=False, name="tests.locate.scale")
def scale(x, *, factor):
    return x * factor


@jaxtune.autotuned(configs={"power": [2, 3]}, check=False, name="tests.locate.power")
def power(x, *, power):
    return x**power


def interpret_double(x):
    return pl.pallas_call(
        _scale_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        interpret=True,
        name="double_interp",
    )(x)


def test_interpret_and_autotuned_kernels_found_through_transformations():
    @jax.jit
    def inner(x):
        return rowsum(x) + interpret_double(x).sum()

    def body(carry, x):
        return carry + inner(x).sum(), None

    def model(xs):
        total, _ = jax.lax.scan(body, 0.0, xs)
        per_example = jax.vmap(scale)(xs)
        grads = jax.grad(lambda v: rowsum(v).sum())(xs[0])
        return total + per_example.sum() + grads.sum()

    xs = jax.ShapeDtypeStruct((3, 4, 16), jnp.float32)
    sites = jaxtune.locate(model, xs)
    autotuned = {(s.kernel_id, s.key) for s in sites if s.kind == "autotuned"}
    assert ("tests.locate.rowsum", "f32[4,16]") in autotuned
    assert ("tests.locate.scale", "f32[4,16]") in autotuned  # vmap: the per-example shape
    interp = [s for s in sites if s.kind == "pallas"]
    assert [s.name for s in interp] == ["double_interp"] and interp[0].target is None
    found = next(s for s in sites if s.kernel_id == "tests.locate.rowsum")
    assert found.config == {"chunk": 4}
    assert found.source.endswith("test_locate.py:" + str(inspect.getsourcelines(rowsum)[1] + 2))


def test_shard_map_is_searched():
    try:
        from jax import shard_map as smap
    except ImportError:
        from jax.experimental.shard_map import shard_map as smap
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    f = smap(lambda x: scale(x), mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    sites = jaxtune.locate(f, jax.ShapeDtypeStruct((8, 4), jnp.float32))
    assert [s.kernel_id for s in sites] == ["tests.locate.scale"]


@pytest.mark.child
def test_model_with_three_kernels_is_tuned_by_one_call_then_runs_from_cache(fast_timing):
    calls = []
    # jaxtune.tune sweeps each kernel on the values reaching it, else on the arguments its
    # trace saw: each a sweep of the call.
    sweep = BoundCall.sweep

    def counting(self, *args, **kwargs):
        calls.append(self.kernel.kernel_id)
        return sweep(self, *args, **kwargs)

    def model(x):
        a = rowsum(x)  # two call sites with the same key ...
        b = rowsum(x * 2)  # ... are tuned once
        return a + b + scale(x).sum(axis=1) + power(x).sum(axis=1)

    x = jnp.arange(64.0).reshape(4, 16)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BoundCall, "sweep", counting)
        result = jaxtune.tune(model, x)
    assert sorted(calls) == ["tests.locate.power", "tests.locate.rowsum", "tests.locate.scale"]
    assert {k for k, _, _ in result} == set(calls)
    kind = _lookup.device_kind()
    for kernel in calls:
        assert _cache.user_cache().lookup(kernel, kind, "f32[4,16]") is not None
    assert all(s.config is not None for s in jaxtune.locate(model, x) if s.kind == "autotuned")
    sources = {
        s.kernel_id: rowsum.config_for(x).source
        for s in jaxtune.locate(model, x)
        if s.kind == "autotuned"
    }
    assert set(sources.values()) == {"cache"}
    # The function runs, and its kernels now come from the cache.
    np.testing.assert_allclose(jax.jit(model)(x)[0], float(model(x)[0]), rtol=1e-5)


@pytest.mark.child
def test_verbose_tune_reports_the_configs_the_program_runs_not_the_finding_trace(
    fast_timing, monkeypatch, capsys
):
    """jaxtune.tune traces the function with the default configs only to find its kernels;
    JAXTUNE_VERBOSE=1 reports what a call then runs (the tuned config), not that trace."""
    monkeypatch.setenv("JAXTUNE_VERBOSE", "1")
    x = jnp.ones((3, 37))  # a key no other test uses: each line is printed once a process
    jaxtune.tune(lambda v: power(v).sum(), x)
    assert "(from default)" not in capsys.readouterr().err
    jax.jit(lambda v: power(v).sum())(x)
    assert "jaxtune: tests.locate.power f32[3,37]: power=" in capsys.readouterr().err


@pytest.mark.child
def test_tune_reports_raw_pallas_kernels_without_a_space(fast_timing):
    def model(x):
        return interpret_double(x) + scale(x)

    with pytest.warns(jaxtune.JaxtuneWarning, match="without a tuning space: double_interp"):
        result = jaxtune.tune(model, jnp.ones((8, 4)))
    assert [s.name for s in result.untuned] == ["double_interp"]
    assert len(result) == 1


def test_functools_partial_and_already_jitted_functions():
    f = jax.jit(functools.partial(scale, factor=2.0))
    (site,) = jaxtune.locate(f, jnp.ones(3))
    assert site.kernel_id == "tests.locate.scale" and site.config == {"factor": 2.0}


def _program(x):
    return interpret_double(x) + scale(x) + rowsum(x)[:, None]


def test_a_traced_function_is_located_as_the_function_is():
    xs = jax.ShapeDtypeStruct((3, 8, 16), jnp.float32)
    f = jax.vmap(_program)
    traced = jax.jit(f).trace(xs)
    assert jaxtune.locate(traced) == jaxtune.locate(f, xs)
    sites = jaxtune.locate(traced)
    assert {(s.kernel_id, s.key) for s in sites if s.kind == "autotuned"} == {
        ("tests.locate.scale", "f32[8,16]"),  # vmap: the per-example shape
        ("tests.locate.rowsum", "f32[8,16]"),
    }
    (interp,) = [s for s in sites if s.kind == "pallas"]
    assert interp.name == "double_interp" and interp.operands == (("f32", (3, 8, 16)),)


def test_a_traced_function_lowers_for_another_platform():
    x = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    y = jax.ShapeDtypeStruct((512, 256), jnp.float32)
    traced = jax.jit(tpu_matmul).trace(x, y)
    (site,) = jaxtune.locate(traced, platform="tpu")
    assert (site.name, site.target, site.platform) == ("tiled_matmul", "tpu_custom_call", "tpu")
    assert site.operands == (("f32", (256, 512)), ("f32", (512, 256)))
    assert site.source == f"{__file__}:{MATMUL_LINE}"


def test_a_lowered_function_lists_its_kernel_sites():
    lowered = jax.jit(jax.vmap(_program)).lower(jnp.ones((3, 8, 16)))
    sites = jaxtune.locate(lowered)
    assert sorted((s.kind, s.name) for s in sites) == sorted(
        (s.kind, s.name) for s in jaxtune.locate(jax.vmap(_program), jnp.ones((3, 8, 16)))
    )
    found = {s.kernel_id: s for s in sites if s.kind == "autotuned"}
    assert found["tests.locate.scale"].key == "f32[8,16]"
    assert found["tests.locate.rowsum"].config == {"chunk": 4}
    assert all(s.platform == jax.default_backend() for s in sites)
    # No jaxpr: an interpret-mode kernel is found by its name stack, without shapes.
    (interp,) = [s for s in sites if s.kind == "pallas"]
    assert interp.name == "double_interp" and interp.target is None and interp.operands == ()
    assert jaxtune.locate(lowered, platform=jax.default_backend()) == sites


def test_a_lowered_function_keeps_its_platform():
    x = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    y = jax.ShapeDtypeStruct((512, 256), jnp.float32)
    for_tpu = jax.jit(tpu_matmul).trace(x, y).lower(lowering_platforms=("tpu",))
    assert jaxtune.locate(for_tpu) == jaxtune.locate(for_tpu, platform="tpu")
    (site,) = jaxtune.locate(for_tpu)
    assert (site.name, site.target, site.platform) == ("tiled_matmul", "tpu_custom_call", "tpu")
    assert site.operands == (("f32", (256, 512)), ("f32", (512, 256)))
    assert site.cost_estimate["flops"] == 2 * 256 * 256 * 512
    here = jax.jit(scale).lower(jnp.ones(3))
    other = "cpu" if jax.default_backend() == "tpu" else "tpu"
    with pytest.raises(jaxtune.SignatureError, match=r"already lowered for .*lowering_platforms"):
        jaxtune.locate(here, platform=other)


def test_a_staged_function_with_arguments_is_refused():
    x = jnp.ones((4, 16))
    lowered = jax.jit(_program).lower(x)
    traced = jax.jit(_program).trace(x)
    with pytest.raises(TypeError, match=r"jaxtune\.locate got a jax\.stages\.Lowered and"):
        jaxtune.locate(lowered, x)
    with pytest.raises(jaxtune.SignatureError, match=r"Call jaxtune\.tune\(the_traced\) alone"):
        jaxtune.tune(traced, x=x)
    with pytest.raises(jaxtune.SignatureError, match=r"jaxtune\.tune got a jax\.stages\.Lowered"):
        jaxtune.tune(lowered, x, retune=True)
    with pytest.raises(jaxtune.SignatureError, match=r"Compiled, which holds no StableHLO"):
        jaxtune.locate(lowered.compile())


@pytest.mark.child
def test_tune_takes_a_traced_function(fast_timing):
    xs = jnp.arange(96.0).reshape(2, 3, 16)
    with pytest.warns(jaxtune.JaxtuneWarning, match="without a tuning space: double_interp"):
        result = jaxtune.tune(jax.jit(jax.vmap(_program)).trace(xs))
    assert sorted((name, key) for name, _, key in result) == [
        ("tests.locate.rowsum", "f32[3,16]"),
        ("tests.locate.scale", "f32[3,16]"),
    ]
    assert rowsum.config_for(xs[0]).source == "cache"
