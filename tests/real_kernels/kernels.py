"""JAX's bundled Pallas TPU kernels wrapped as ``@jaxtune.autotuned`` over their real knobs.

Module-level definitions, so the sweep child re-imports them by name. Shapes stay small
(see /work/shared/real-kernels.md): each call compiles in about a second in interpret mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu import flash_attention as fa
from jax.experimental.pallas.ops.tpu import matmul as mm
from jax.experimental.pallas.ops.tpu import megablox
from jax.experimental.pallas.ops.tpu import paged_attention as pa
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

import jaxtune

SEQ = 256


@jaxtune.autotuned(
    configs={"block_q": [128, 256], "block_k": [256]},
    name="real.flash_attention",
)
def flash(q, k, v, *, block_q, block_k):
    """Causal flash attention, forward; ``jax.grad`` of it runs the dkv and dq kernels."""
    sizes = fa.BlockSizes(
        block_q=block_q,
        block_k_major=block_k,
        block_k=block_k,
        block_b=1,
        block_q_major_dkv=block_q,
        block_k_major_dkv=block_k,
        block_k_dkv=block_k,
        block_q_dkv=block_q,
        block_k_major_dq=block_k,
        block_k_dq=block_k,
        block_q_dq=block_q,
    )
    return fa.flash_attention(q, k, v, causal=True, block_sizes=sizes)


def flash_loss(q, k, v):
    """A scalar of flash attention, for ``jax.grad``."""
    return flash(q, k, v).sum()


@jaxtune.autotuned(
    configs=[{"bm": 128, "bn": 128, "block_k": 128}, {"bm": 256, "bn": 256, "block_k": 256}],
    name="real.matmul",
)
def matmul(x, y, *, bm, bn, block_k):
    """The tiled TPU matmul."""
    return mm.matmul(x, y, block_shape=(bm, bn), block_k=block_k)


@jaxtune.autotuned(configs=[{"bm": 256, "bn": 256, "block_k": 256}], name="real.matmul_whole")
def matmul_whole(x, y, *, bm, bn, block_k):
    """The tiled TPU matmul with tiles spanning 256 x 256 operands (a one-step grid)."""
    return mm.matmul(x, y, block_shape=(bm, bn), block_k=block_k)


def spanning_step(q, x):
    """Flash attention with ``block_k`` spanning the sequence, and the whole-tile matmul:
    the tilings that once gave each kernel a second, stray row."""
    return flash(q, q, q).sum() + matmul_whole(x, x).sum()


def spanning_args():
    return (
        jnp.asarray(np.random.default_rng(0).standard_normal((1, 2, SEQ, 128)), jnp.float32),
        jnp.asarray(np.random.default_rng(1).standard_normal((256, 256)), jnp.float32),
    )


def group_sizes_builder(lhs, rhs, group_sizes):
    """Concrete gmm inputs: random ints are no valid group sizes (they must sum to the
    rows of ``lhs``), so the groups split the rows evenly."""
    rng = np.random.default_rng(0)
    groups = group_sizes.shape[0]
    sizes = np.full((groups,), lhs.shape[0] // groups, dtype=np.int32)
    return (
        jnp.asarray(rng.standard_normal(lhs.shape), lhs.dtype),
        jnp.asarray(rng.standard_normal(rhs.shape), rhs.dtype),
        jnp.asarray(sizes),
    )


@jaxtune.autotuned(
    configs=[{"tm": 128, "tk": 128, "tn": 128}, {"tm": 256, "tk": 256, "tn": 256}],
    inputs=group_sizes_builder,
    name="real.gmm",
)
def gmm(lhs, rhs, group_sizes, *, tm, tk, tn):
    """Megablox grouped matmul."""
    return megablox.gmm(lhs, rhs, group_sizes, tiling=(tm, tk, tn))


def paged_builder(q, k_pages, v_pages, lengths, page_indices):
    """Concrete paged-attention inputs: valid lengths and page tables."""
    rng = np.random.default_rng(0)
    batch, pages = page_indices.shape
    page_size = k_pages.shape[2]
    lengths = np.minimum(np.array([64, 100] * batch)[:batch], pages * page_size)

    def normal(a):
        return jnp.asarray(rng.standard_normal(a.shape), a.dtype)

    return (
        normal(q),
        normal(k_pages),
        normal(v_pages),
        jnp.asarray(lengths, jnp.int32),
        jnp.arange(batch * pages, dtype=jnp.int32).reshape(batch, pages),
    )


@jaxtune.autotuned(
    configs={"pages_per_compute_block": [2, 4]},
    inputs=paged_builder,
    name="real.paged_attention",
)
def paged(q, k_pages, v_pages, lengths, page_indices, *, pages_per_compute_block):
    """Paged attention over a page table."""
    return pa.paged_attention(
        q,
        k_pages,
        v_pages,
        lengths,
        page_indices,
        pages_per_compute_block=pages_per_compute_block,
    )


def _splash_kernel(heads: int, seq: int, block: int):
    mask = sm.MultiHeadMask([sm.CausalMask((seq, seq))] * heads)
    sizes = sk.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    return sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=sizes)


@jaxtune.autotuned(configs={"block": [128, 256]}, name="real.splash_attention")
def splash(q, k, v, *, block):
    """Splash attention; its block sizes go in when the kernel is built, so the kernel is
    built from the config (afresh each trace: exporting one built kernel twice fails in
    ``jax.export`` with "Too many leaves for PyTreeDef")."""
    return _splash_kernel(q.shape[0], q.shape[1], block)(q, k, v)


def flash_args():
    q = jax.random.normal(jax.random.key(0), (1, 2, SEQ, 128))
    return (q, q, q)


def matmul_args():
    x = jax.random.normal(jax.random.key(1), (256, 256))
    return (x, x)


def gmm_args():
    return group_sizes_builder(
        jax.ShapeDtypeStruct((512, 256), jnp.float32),
        jax.ShapeDtypeStruct((4, 256, 256), jnp.float32),
        jax.ShapeDtypeStruct((4,), jnp.int32),
    )


def paged_args():
    shapes = (
        jax.ShapeDtypeStruct((2, 2, 128), jnp.float32),
        jax.ShapeDtypeStruct((1, 16, 16, 128), jnp.float32),
        jax.ShapeDtypeStruct((1, 16, 16, 128), jnp.float32),
        jax.ShapeDtypeStruct((2,), jnp.int32),
        jax.ShapeDtypeStruct((2, 8), jnp.int32),
    )
    return paged_builder(*shapes)


def splash_args():
    q = jax.random.normal(jax.random.key(2), (2, SEQ, 128))
    return (q, q, q)


# -- Programs that call the kernels at a fixed config inside a nested jit (for profiles) --


@jax.jit
def flash_step(q, k, v):
    return flash.__wrapped__(q, k, v, block_q=128, block_k=256) * 2


@jax.jit
def matmul_step(x, y):
    return matmul.__wrapped__(x, y, bm=128, bn=128, block_k=128) * 2


@jax.jit
def gmm_step(lhs, rhs, group_sizes):
    return gmm.__wrapped__(lhs, rhs, group_sizes, tm=128, tk=128, tn=128) * 2


@jax.jit
def paged_step(q, k_pages, v_pages, lengths, page_indices):
    out = paged.__wrapped__(q, k_pages, v_pages, lengths, page_indices, pages_per_compute_block=4)
    return out * 2


@jax.jit
def splash_step(q, k, v):
    return jax.jit(_splash_kernel(q.shape[0], q.shape[1], 128))(q, k, v) * 2


STEPS = {
    "flash_attention": (flash_step, flash_args),
    "matmul": (matmul_step, matmul_args),
    "gmm": (gmm_step, gmm_args),
    "paged_attention": (paged_step, paged_args),
    "splash_attention": (splash_step, splash_args),
}
