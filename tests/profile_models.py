"""Models profiled by the tests, importable by the profiling child."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

import jaxtune


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def _tiled(body, name, x, cost=None):
    block = (32, x.shape[1])
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 32,),
        in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
        out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
        interpret=True,
        name=name,
        cost_estimate=cost,
    )(x)


def double_it(x):
    return _tiled(_double, "double_it", x)


def add_one(x):
    cost = pl.CostEstimate(flops=x.size, transcendentals=0, bytes_accessed=2 * x.size * 4)
    return _tiled(_add_one, "add_one", x, cost)


@jaxtune.profiled(iters=3)
def model(x):
    """Two interpret-mode Pallas kernels (one called at two sites) and XLA ops between."""
    y = jnp.sin(x) @ x
    z = double_it(y)
    w = jnp.tanh(z) * 3
    v = add_one(w)
    return double_it(jnp.cos(v)).sum()


@jaxtune.autotuned(
    configs={"chunk": [64, 128]},
    name="tests.profile.rowsum",
    flops=lambda x: float(x.size),
    bytes=lambda x: float(x.size * 4),
)
def rowsum(x, *, chunk):
    return x.reshape(x.shape[0], -1, chunk).sum(axis=(1, 2))


def with_autotuned(x):
    return rowsum(jnp.exp(x)) * 2


def _matmuls(reps):
    def body(x_ref, w_ref, o_ref):
        h = x_ref[...]
        for _ in range(reps):
            h = jnp.tanh(h @ w_ref[...])
        o_ref[...] = h

    return body


def _pallas_matmuls(x, reps, block, name):
    n = x.shape[1]
    return pl.pallas_call(
        _matmuls(reps),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // block,),
        in_specs=[
            pl.BlockSpec((block, n), lambda i: (i, 0)),
            pl.BlockSpec((n, n), lambda i: (0, 0)),
        ],
        out_specs=pl.BlockSpec((block, n), lambda i: (i, 0)),
        interpret=True,
        name=name,
    )(x, x)


@jaxtune.autotuned(configs={"block": [64, 128]}, name="tests.profile.heavy")
def heavy(x, *, block):
    return _pallas_matmuls(x, 32, block, "heavy_matmuls")


@jaxtune.autotuned(configs={"block": [64, 128]}, name="tests.profile.medium")
def medium(x, *, block):
    return _pallas_matmuls(x, 2, block, "medium_matmuls")


@jaxtune.autotuned(configs={"block": [8, 4]}, name="tests.profile.tiny")
def tiny(v, *, block):
    return _tiled_add(v, block)


def _tiled_add(v, block):
    return pl.pallas_call(
        _add_one,
        out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype),
        grid=(v.shape[0] // block,),
        in_specs=[pl.BlockSpec((block, v.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((block, v.shape[1]), lambda i: (i, 0)),
        interpret=True,
        name="tiny_add",
    )(v)


def three_kernels(x, v):
    """Three autotuned Pallas kernels: about 14 : 1 : 0 in compute (so noise cannot swap them)."""
    return heavy(x).sum() + medium(x).sum() + tiny(v).sum()


def _add_twice(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...] * 2


@jax.jit
def direct_step(x):
    """A Pallas kernel called straight from the jitted function, so no scope but the whole
    program's surrounds it; run it in TPU interpret mode."""
    block = pl.BlockSpec((128, x.shape[1]), lambda i: (i, 0))
    added = pl.pallas_call(
        _add_twice,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 128,),
        in_specs=[block, block],
        out_specs=block,
    )(x, jnp.sin(x))
    return jnp.cos(added)


def rowsum_loss(x):
    return (rowsum(x) ** 2).sum()


def rowsum_grad_step(x):
    """A differentiated step, defined at module level so that it can travel to a child."""
    return jax.grad(rowsum_loss)(x)


# -- a training step the way model code writes one (docs/profiling.md, "Attribution") ------

ATTN_SEQ, ATTN_MODEL, ATTN_HEADS = 128, 64, 2


def _attention(q, k, v):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    sizes = fa.BlockSizes(
        block_q=128,
        block_k_major=128,
        block_k=128,
        block_b=1,
        block_q_major_dkv=128,
        block_k_major_dkv=128,
        block_k_dkv=128,
        block_q_dkv=128,
        block_k_major_dq=128,
        block_k_dq=128,
        block_q_dq=128,
    )
    return fa.flash_attention(q, k, v, causal=True, sm_scale=0.125, block_sizes=sizes)  # CALL


def _attention_loss(params, x):
    """One pre-norm attention block and a dense head: two matmuls of one name stack
    (``jvp()/dot_general``), JAX's flash attention forward, and under ``jax.grad`` its dkv
    and dq kernels."""
    qkv_w, out_w = params
    h = x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    heads = ATTN_MODEL // ATTN_HEADS
    qkv = (h @ qkv_w).reshape(1, ATTN_SEQ, 3, ATTN_HEADS, heads)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    y = _attention(q, k, v).transpose(0, 2, 1, 3).reshape(1, ATTN_SEQ, ATTN_MODEL)
    return jnp.mean((x + y @ out_w) ** 2)


def attention_step(params, x):
    """A training step: loss, gradients and an SGD update. Run it in TPU interpret mode."""
    loss, grads = jax.value_and_grad(_attention_loss)(params, x)
    return [p - 0.01 * g for p, g in zip(params, grads, strict=True)], loss


def attention_args():
    key = jax.random.key(3)
    a, b, c = jax.random.split(key, 3)
    params = [
        jax.random.normal(a, (ATTN_MODEL, 3 * ATTN_MODEL)) * 0.1,
        jax.random.normal(b, (ATTN_MODEL, ATTN_MODEL)) * 0.1,
    ]
    return params, jax.random.normal(c, (1, ATTN_SEQ, ATTN_MODEL))


def dies_in_the_child(x):
    """Kills the profiling child while it traces (a real segfault); in any other process
    (no ``JAXTUNE_PARENT_PID``) it is a plain function."""
    import os
    import signal

    if os.environ.get("JAXTUNE_PARENT_PID"):
        os.kill(os.getpid(), signal.SIGSEGV)
    return x * 2
