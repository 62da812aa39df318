"""Configs Mosaic TPU refuses, found in the traced program before compiling: never one that
JAX's TPU lowering accepts (checked against ``jax.export`` for TPU, on CPU), on JAX's own
flash attention and megablox grouped matmul."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas.ops.tpu import flash_attention as fa
from jax.experimental.pallas.ops.tpu.megablox import gmm
from test_sweep import bind, task_of

from jaxtune._tuning.sweep.breakdown import Breakdown
from jaxtune._tuning.sweep.compile import Compiler
from jaxtune._tuning.sweep.refusals import checker, refusal

F32 = jnp.float32
V5E_VMEM = 128 * 2**20


def _flash(bq, bk):
    def f(q, k, v):
        sizes = fa.BlockSizes(block_q=bq, block_k_major=bk, block_k=bk, block_b=1)
        return fa.flash_attention(q, k, v, causal=True, block_sizes=sizes)

    q = jax.ShapeDtypeStruct((1, 2, 512, 128), F32)
    return f, (q, q, q)


def _gmm(tm, tk, tn):
    def f(lhs, rhs, groups):
        return gmm(lhs, rhs, groups, tiling=(tm, tk, tn))

    args = (
        jax.ShapeDtypeStruct((512, 256), F32),
        jax.ShapeDtypeStruct((4, 256, 256), F32),
        jax.ShapeDtypeStruct((4,), jnp.int32),
    )
    return f, args


CASES = [
    (_flash, (4, 128)),
    (_flash, (8, 128)),
    (_flash, (128, 512)),
    (_gmm, (8, 64, 128)),
    (_gmm, (64, 256, 64)),
    (_gmm, (128, 128, 128)),
    (_gmm, (8, 256, 256)),
]


def _lowers_for_tpu(f, args) -> tuple[bool, str]:
    try:
        jax.export.export(jax.jit(f), platforms=["tpu"])(*args)
    except Exception as e:
        return False, str(e)
    return True, ""


@pytest.mark.parametrize(("make", "config"), CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_a_config_is_refused_only_where_tpu_lowering_refuses_it(make, config):
    f, args = make(*config)
    why = refusal(jax.jit(f).trace(*args).jaxpr, vmem_bytes=V5E_VMEM)
    lowers, error = _lowers_for_tpu(f, args)
    if why is not None:
        assert not lowers, f"{config} refused ({why}) but lowers for TPU"
        assert "(8, 128) rule" in why
    else:
        # Whatever the lowering refuses for the tile rule, the filter refused first.
        assert lowers or "divisible by 8 and 128" not in error, error


def test_blocks_and_scratch_past_the_vmem_are_refused():
    f, args = _gmm(128, 128, 128)
    jaxpr = jax.jit(f).trace(*args).jaxpr
    # Blocks of 64 KiB each: past a VMEM of 100 KiB, not past none known or the v5e's.
    assert "VMEM" in (refusal(jaxpr, vmem_bytes=100 * 2**10) or "")
    assert refusal(jaxpr, vmem_bytes=None) is None
    assert refusal(jaxpr, vmem_bytes=V5E_VMEM) is None


def _copy(x, *, rows, interpret):
    return pl.pallas_call(
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // rows,),
        in_specs=[pl.BlockSpec((rows, 256), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((rows, 256), lambda i: (i, 0)),
        interpret=interpret,
    )(x)


@pytest.mark.parametrize("interpret", [False, True])
def test_a_refused_config_fails_before_lowering_and_interpret_mode_refuses_none(interpret):
    x = jnp.ones((32, 256), F32)
    kernel = functools.partial(_copy, interpret=interpret)
    configs = [{"rows": 4}, {"rows": 16}]
    compiler = Compiler(
        task_of(kernel, bind(kernel, x), configs, configs[1]),
        emit=lambda event: None,
        breakdown=Breakdown(),
    )
    compiler.refuse = functools.partial(refusal, vmem_bytes=None)
    failures = compiler.compile(configs, serial=True)
    refused = {cid for cid, f in failures.items() if f.reason.startswith("refused before")}
    if interpret:  # JAX's interpreter runs any block: nothing refused, both compile
        assert failures == {}
    else:  # rows=4 breaks the rule; rows=16 gets to the lowering (which CPU refuses)
        assert refused == {"rows=4"}, failures
        assert "rows=16" in failures


def test_nothing_is_refused_off_a_tpu():
    assert jax.default_backend() != "tpu"
    assert checker() is None


def test_a_kernel_in_tpu_interpret_mode_is_never_refused():
    from jax.experimental.pallas import tpu as pltpu

    f, args = _gmm(8, 64, 64)  # refused when lowered for Mosaic (above)
    with pltpu.force_tpu_interpret_mode():
        jaxpr = jax.jit(f).trace(*args).jaxpr
    assert refusal(jaxpr, vmem_bytes=1) is None
    assert refusal(jax.jit(f).trace(*args).jaxpr, vmem_bytes=1) is not None
