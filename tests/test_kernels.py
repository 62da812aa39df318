"""``jaxtune.kernels``: JAX's bundled Pallas TPU kernels as autotuned kernels, on CPU in TPU
interpret mode (as JAX runs them there), on the oldest and the newest supported JAX.

Covers docs/kernels.md, "Flash attention", "Spaces that Mosaic accepts", "Arguments passed
through" and "Packaged configs".
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import jaxtune
from jaxtune import kernels
from jaxtune.kernels import _packaged

#: Small shapes (each interpret-mode call costs a second or two on 2 cores).
SEQ = 256


def _close(a, b, tol=2e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _sds(shape, dtype="float32"):
    return jax.ShapeDtypeStruct(shape, dtype)


# -- the rules, written here from JAX's kernels and Mosaic's (8, 128) rule ----------------


def _lane_ok(block, dim):
    return dim % block == 0 and (block == dim or block % 128 == 0)


def _sublane_ok(block, dim):
    return dim % block == 0 and (block == dim or block % 8 == 0)


def _flash_breaks(config, batch, q_len, kv_len):
    """What in ``config`` JAX's flash attention or Mosaic refuses for these lengths."""
    c = config
    broken = [f"{name}={c[name]}" for name in c if not isinstance(c[name], int) or c[name] < 1]
    for name in ("block_q", "block_q_major_dkv", "block_q_dkv", "block_q_dq"):
        if not _sublane_ok(c[name], q_len):  # a query block is a sublane dimension
            broken.append(f"{name}={c[name]} for q_len {q_len}")
    for name in ("block_k_major", "block_k", "block_k_major_dkv", "block_k_dkv"):
        if not _lane_ok(c[name], kv_len):  # a key block is the bias block's lane dimension
            broken.append(f"{name}={c[name]} for kv_len {kv_len}")
    for name in ("block_k_major_dq", "block_k_dq"):
        if not _lane_ok(c[name], kv_len):
            broken.append(f"{name}={c[name]} for kv_len {kv_len}")
    if batch % c["block_b"]:
        broken.append(f"block_b={c['block_b']} for batch {batch}")
    try:  # BlockSizes' own checks: inner blocks divide outer ones
        fa.BlockSizes(**c)
    except ValueError as e:
        broken.append(str(e))
    return broken


FLASH_SHAPES = [
    (1, 256, 256),
    (2, 512, 512),
    (1, 2048, 2048),
    (4, 8192, 8192),
    (1, 512, 2048),  # cross attention: other lengths for keys
    (1, 384, 640),  # lengths that only 128 divides
    (2, 200, 1000),  # lengths no candidate divides: blocks span them
    (1, 1, 128),  # one query (decoding)
]


@pytest.mark.parametrize(("batch", "q_len", "kv_len"), FLASH_SHAPES)
def test_flash_space_holds_only_blocks_jax_and_mosaic_take(batch, q_len, kv_len):
    q, k = _sds((batch, 2, q_len, 128), "bfloat16"), _sds((batch, 2, kv_len, 128), "bfloat16")
    space = kernels.autotuned_flash_attention.space(q, k, k, causal=True)
    assert space
    assert len(space) <= 2000  # a space a sweep can list, not the millions of every field
    broken = {str(c): b for c in space if (b := _flash_breaks(c, batch, q_len, kv_len))}
    assert broken == {}
    # The forward logits block [block_q, block_k] stays within 4 MiB of float32 (VMEM),
    # unless nothing smaller fits the lengths.
    smallest = min(c["block_q"] * c["block_k"] for c in space)
    assert all(c["block_q"] * c["block_k"] <= max(smallest, 1 << 20) for c in space)
    # Every block size that divides the lengths is offered somewhere.
    fitting = [b for b in (128, 256, 512, 1024, 2048) if q_len % b == 0] or [q_len]
    assert sorted({c["block_q"] for c in space}) == fitting


@pytest.mark.parametrize(("batch", "q_len", "kv_len"), FLASH_SHAPES)
def test_flash_default_is_jaxs_own_blocks_where_the_shapes_take_them(batch, q_len, kv_len):
    q, k = _sds((batch, 2, q_len, 128)), _sds((batch, 2, kv_len, 128))
    choice = kernels.autotuned_flash_attention.config_for(q, k, k)
    assert choice.source == "default"
    jax_default = dataclasses.asdict(fa.BlockSizes.get_default(batch, 2, q_len, kv_len, 128))
    if not _flash_breaks(jax_default, batch, q_len, kv_len):
        assert choice.config == jax_default
    else:  # JAX's 128 does not fit these lengths: the smallest blocks that do
        assert choice.config == kernels.autotuned_flash_attention.space(q, k, k)[0]
        assert not _flash_breaks(choice.config, batch, q_len, kv_len)


def test_every_flash_config_lowers_for_tpu_forward_and_backward():
    """Mosaic's own lowering (``jax.export`` for TPU, on CPU) takes each distinct block of
    the space at a small shape, the gradient's kernels included."""
    q = _sds((1, 2, 512, 128))
    space = kernels.autotuned_flash_attention.space(q, q, q, causal=True)
    forward = sorted({(c["block_q"], c["block_k_major"], c["block_k"]) for c in space})
    backward = sorted({(c["block_q_dkv"], c["block_k_dkv"]) for c in space})
    assert len(forward) == 18 and len(backward) == 9
    for i, (bq, bkm, bk) in enumerate(forward):
        bqb, bkb = backward[i % len(backward)]
        sizes = fa.BlockSizes(bq, bkm, bk, 1, bqb, bkb, bkb, bqb, bkb, bkb, bqb)

        def loss(q, sizes=sizes):
            return fa.flash_attention(q, q, q, causal=True, block_sizes=sizes).sum()

        exported = jax.export.export(jax.jit(jax.grad(loss)), platforms=["tpu"])(q)
        assert exported.mlir_module().count("tpu_custom_call") == 3  # forward, dkv, dq


# -- tuning, results and pass-through (TPU interpret mode) ---------------------------------


def _flash_args(seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(key, (1, 2, SEQ, 128), jnp.float32) for key in keys)


@pytest.mark.child
@pytest.mark.slow
def test_flash_is_tuned_on_first_use_in_tune_mode_and_computes_what_jax_does(
    monkeypatch, fast_timing
):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    monkeypatch.setenv("JAXTUNE_BUDGET", "3")
    q, k, v = _flash_args()
    tuned = kernels.autotuned_flash_attention
    assert tuned.config_for(q, k, v, causal=True).source == "default"
    with pltpu.force_tpu_interpret_mode():
        out = kernels.flash_attention(q, k, v, causal=True)  # sweeps, in the child
        choice = tuned.config_for(q, k, v, causal=True)
        assert choice.source == "cache"
        assert choice.entry is not None and choice.entry.measured == 3
        assert choice.config in tuned.space(q, k, v, causal=True)
        reference = fa.flash_attention(q, k, v, causal=True)
        _close(out, reference)
        # The stored blocks are what ran: JAX's kernel with them agrees exactly.
        stored = fa.BlockSizes(**choice.config)
        _close(out, fa.flash_attention(q, k, v, causal=True, block_sizes=stored), 0)
        # Other configs of the space compute the same attention.
        space = tuned.space(q, k, v, causal=True)
        for config in (space[0], space[len(space) // 2], space[-1]):
            _close(tuned(q, k, v, causal=True, **config), reference)


@pytest.mark.slow
def test_flash_passes_every_other_argument_through_to_jax(monkeypatch):
    q, k, v = _flash_args(1)
    ab = jax.random.normal(jax.random.key(7), (1, 2, SEQ, SEQ), jnp.float32)
    ids = fa.SegmentIds(
        q=jnp.repeat(jnp.arange(2, dtype=jnp.int32), SEQ // 2)[None],
        kv=jnp.repeat(jnp.arange(2, dtype=jnp.int32), SEQ // 2)[None],
    )
    sizes = fa.BlockSizes(256, 256, 128, 1)  # forward blocks only, as JAX allows
    options = {"causal": True, "sm_scale": 0.3}
    tuned = kernels.autotuned_flash_attention
    with pltpu.force_tpu_interpret_mode():
        monkeypatch.setenv("JAXTUNE_MODE", "tune")  # given blocks are explicit: no sweep
        out = kernels.flash_attention(q, k, v, ab, ids, block_sizes=sizes, **options)
        _close(out, fa.flash_attention(q, k, v, ab, ids, block_sizes=sizes, **options), 0)
        assert tuned.config_for(q, k, v, ab, ids, **options).source == "default"
        monkeypatch.delenv("JAXTUNE_MODE")
        # Keyword and positional forms reach JAX alike; untuned, the blocks are JAX's.
        out = kernels.flash_attention(q, k, v, ab=ab, segment_ids=ids, sm_scale=0.3)
        _close(out, fa.flash_attention(q, k, v, ab=ab, segment_ids=ids, sm_scale=0.3), 0)
    explicit = tuned.config_for(q, k, v, ab, ids, **options, **dataclasses.asdict(sizes))
    assert explicit.source == "explicit"
    assert explicit.config == dataclasses.asdict(sizes)
    # The static arguments are part of the key.
    assert explicit.key.endswith(";causal=True,sm_scale=0.3,debug=False")


@pytest.mark.slow
def test_flash_gradient_runs_jaxs_backward_with_the_chosen_blocks():
    q, k, v = _flash_args(2)

    def loss(attention, q, k, v):
        return attention(q, k, v, causal=True).sum()

    with pltpu.force_tpu_interpret_mode():
        ours = jax.grad(lambda *a: loss(kernels.flash_attention, *a), argnums=(0, 1, 2))(q, k, v)
        theirs = jax.grad(lambda *a: loss(fa.flash_attention, *a), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(ours, theirs, strict=True):
        _close(a, b, 1e-4)


# -- the packaged cache hook ---------------------------------------------------------------


def test_no_packaged_cache_is_registered_while_the_package_ships_none(monkeypatch, tmp_path):
    registered = []
    monkeypatch.setattr(jaxtune, "register_cache", registered.append)
    monkeypatch.setattr(_packaged, "CACHE", tmp_path / "absent")
    assert _packaged.register() is False
    assert registered == []
    (tmp_path / "absent").mkdir()
    assert _packaged.register() is True
    assert registered == [tmp_path / "absent"]
