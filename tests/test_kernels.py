"""``jaxtune.kernels``: JAX's bundled Pallas TPU kernels as autotuned kernels, on CPU in TPU
interpret mode (as JAX runs them there), on the oldest and the newest supported JAX; ragged
paged attention, which does not run in interpret mode, through lowering for TPU.

Covers docs/kernels.md, "Flash attention", "Grouped matmul (megablox)", "Splash attention",
"Ragged paged attention", "Group sizes: the program's values", "Spaces that Mosaic
accepts", "Arguments passed through", "On CPU, and on JAX 0.10.2 and 0.12" and "Packaged
configs".
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa
from jax.experimental.pallas.ops.tpu import megablox
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

import jaxtune
from jaxtune import kernels
from jaxtune._tuning.sweep import intervals
from jaxtune.kernels import _flash, _packaged

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Small shapes (each interpret-mode call costs a second or two on 2 cores).
SEQ = 256
#: JAX's megablox kernel module (the package's ``gmm`` attribute is the function).
GMM_KERNELS = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")


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


def test_flash_names_the_argument_a_bad_call_gets_wrong():
    """Not the callback's fault: a q of another rank is the caller's error, named as such
    (JAX's own says "not enough values to unpack"), as are blocks that are no BlockSizes."""
    q = jnp.ones((1, 2, SEQ, 128))
    for call in (kernels.flash_attention, kernels.autotuned_flash_attention):
        with pytest.raises(jaxtune.SignatureError, match=r"q must be \[batch, heads, length"):
            call(q[0], q[0], q[0])
    with pytest.raises(jaxtune.SignatureError, match=r"got k of shape \(2, 256, 128\)"):
        kernels.flash_attention(q, q[0], q)
    with pytest.raises(TypeError, match=r"block_sizes must be a .*BlockSizes or None"):
        kernels.flash_attention(q, q, q, block_sizes="fast")


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


@pytest.mark.child
@pytest.mark.slow
def test_a_call_at_another_scale_takes_the_blocks_tuned_at_the_usual_one(
    monkeypatch, fast_timing, capsys
):
    """The packaged table is tuned at ``sm_scale = 1 / sqrt(head_dim)``; a call at JAX's
    default scale of 1.0 (another key) that nothing is known for takes the blocks known for
    its shapes at that scale (from the cache, or here a scope holding blocks other than
    JAX's), and computes JAX's attention at its own scale."""
    monkeypatch.setenv("JAXTUNE_BUDGET", "2")
    q, k, v = _flash_args(4)
    usual = 1.0 / math.sqrt(q.shape[-1])
    tuned = kernels.autotuned_flash_attention
    default = tuned.config_for(q, k, v, causal=True).config
    ran: list[dict] = []
    jax_flash = _flash.fa.flash_attention

    def spy(*args, block_sizes, **kwargs):
        ran.append(dataclasses.asdict(block_sizes))
        return jax_flash(*args, block_sizes=block_sizes, **kwargs)

    monkeypatch.setattr(_flash.fa, "flash_attention", spy)
    monkeypatch.setenv("JAXTUNE_MODE", "cached")
    with pltpu.force_tpu_interpret_mode():
        kernels.flash_attention(q, k, v, causal=True)  # nothing known yet: JAX's blocks
        assert ran[-1] == default
        (entry,) = tuned.tune(q, k, v, causal=True, sm_scale=usual).values()
        assert tuned.config_for(q, k, v, causal=True).source == "default"  # sm_scale=1.0
        monkeypatch.setenv("JAXTUNE_VERBOSE", "1")  # which blocks ran, and from where
        capsys.readouterr()
        out = kernels.flash_attention(q, k, v, causal=True)  # the same call, traced again
        assert ran[-1] == dict(entry.config)  # the cache's entry at the usual scale
        (told,) = [line for line in capsys.readouterr().err.splitlines() if "jaxtune:" in line]
        # The call's own key (scale 1.0), the blocks, and where they came from: not "explicit".
        assert (
            told.startswith("jaxtune: jaxtune.kernels.flash_attention ") and "sm_scale=1.0" in told
        )
        assert f"block_q={entry.config['block_q']}" in told, told
        assert told.endswith(f"(from cache, tuned at sm_scale={usual:.6g})"), told
        monkeypatch.delenv("JAXTUNE_VERBOSE")
        _close(out, jax_flash(q, k, v, causal=True))  # JAX's scale of 1.0, JAX's result
        other = next(c for c in tuned.space(q, k, v, causal=True) if c != default)
        with jaxtune.TuningResult.of(dataclasses.replace(entry, config=other)):
            kernels.flash_attention(q, k, v, causal=True)
            assert ran[-1] == other  # the scope's, at the usual scale
            kernels.flash_attention(q, k, v, causal=False)  # nothing known: JAX's blocks
            assert ran[-1] == tuned.config_for(q, k, v).config
        monkeypatch.setenv("JAXTUNE_MODE", "off")  # defaults only, whatever is known
        kernels.flash_attention(q, k, v, causal=True)
        assert ran[-1] == default


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


@pytest.mark.child
@pytest.mark.slow
def test_a_training_step_tunes_flash_forward_and_backward(monkeypatch, fast_timing):
    """``jaxtune.tune`` of a gradient finds the kernel behind the drop-in and times the
    forward and both backward kernels; the gradient then runs JAX's backward kernels with
    the stored blocks."""
    monkeypatch.setenv("JAXTUNE_BUDGET", "2")
    q, k, v = _flash_args(3)

    def loss(attention, q, k, v, **blocks):
        return (attention(q, k, v, causal=True, **blocks) ** 2).sum()

    grad = jax.grad(loss, argnums=(1, 2, 3))
    with pltpu.force_tpu_interpret_mode():
        result = jaxtune.tune(functools.partial(grad, kernels.flash_attention), q, k, v)
        ((kernel, _, key), entry) = next(iter(result.items()))
        assert kernel == "jaxtune.kernels.flash_attention"
        choice = kernels.autotuned_flash_attention.config_for(q, k, v, causal=True)
        assert (key, choice.source, choice.config) == (choice.key, "cache", entry.config)
        assert entry.timing == "vjp"
        assert entry.config in kernels.autotuned_flash_attention.space(q, k, v, causal=True)
        ours = grad(kernels.flash_attention, q, k, v)
        sizes = fa.BlockSizes(**entry.config)
        theirs = grad(fa.flash_attention, q, k, v, block_sizes=sizes)
    for a, b in zip(ours, theirs, strict=True):
        _close(a, b, 0)


# -- megablox gmm and tgmm ------------------------------------------------------------------


def _tiling_breaks(config, m, k, n):
    """What in ``config`` megablox or Mosaic refuses: ``tm`` divides the rows (JAX) along a
    sublane dimension, ``tk`` and ``tn`` are whole lane blocks of ``k`` and ``n``."""
    broken = []
    if not _sublane_ok(config["tm"], m):
        broken.append(f"tm={config['tm']} for m {m}")
    if not _lane_ok(config["tk"], k):
        broken.append(f"tk={config['tk']} for k {k}")
    if not _lane_ok(config["tn"], n):
        broken.append(f"tn={config['tn']} for n {n}")
    return broken


GMM_SHAPES = [  # (m, k, n, groups, dtype)
    (512, 256, 256, 4, "float32"),
    (8192, 2048, 4096, 8, "bfloat16"),  # a MoE layer: the VMEM bound leaves out big tiles
    (4096, 5120, 1408, 64, "bfloat16"),  # widths only 128 divides
    (200, 96, 72, 2, "float32"),  # dimensions no candidate divides: tiles span them
]


@pytest.mark.parametrize(("m", "k", "n", "groups", "dtype"), GMM_SHAPES)
@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_gmm_space_holds_only_tilings_megablox_and_mosaic_take(
    m, k, n, groups, dtype, transpose_rhs
):
    lhs = _sds((m, k), dtype)
    rhs = _sds((groups, n, k) if transpose_rhs else (groups, k, n), dtype)
    sizes = _sds((groups,), "int32")
    tuned = kernels.autotuned_gmm
    space = tuned.space(lhs, rhs, sizes, transpose_rhs=transpose_rhs)
    assert space
    assert {str(c): b for c in space if (b := _tiling_breaks(c, m, k, n))} == {}
    for c in space:  # input blocks double-buffered, the output too, a float32 accumulator
        item = np.dtype(dtype).itemsize
        vmem = 2 * (c["tm"] * c["tk"] + c["tk"] * c["tn"]) * item + 12 * c["tm"] * c["tn"]
        assert vmem <= 16 << 20 or c == space[0]
    choice = tuned.config_for(lhs, rhs, sizes, transpose_rhs=transpose_rhs)
    assert choice.source == "default"
    if not _tiling_breaks({"tm": 128, "tk": 128, "tn": 128}, m, k, n):
        assert choice.config == {"tm": 128, "tk": 128, "tn": 128}  # JAX's default
    else:
        assert choice.config == space[0]
    # tgmm of the same problem (lhs [k, m], rhs [m, n]) keeps the same rules.
    t_space = kernels.autotuned_tgmm.space(_sds((k, m), dtype), _sds((m, n), dtype), sizes)
    assert {str(c): b for c in t_space if (b := _tiling_breaks(c, m, k, n))} == {}


def test_every_gmm_tiling_lowers_for_tpu():
    """Mosaic's lowering (``jax.export`` for TPU, on CPU) takes every tiling of the space,
    for ``gmm`` and its gradient (``gmm`` and ``tgmm``)."""
    lhs, rhs, sizes = _sds((512, 256)), _sds((4, 256, 256)), _sds((4,), "int32")
    space = kernels.autotuned_gmm.space(lhs, rhs, sizes)
    assert len(space) == 12
    for c in space:

        def loss(lhs, rhs, sizes, tiling=(c["tm"], c["tk"], c["tn"])):
            return (megablox.gmm(lhs, rhs, sizes, tiling=tiling) ** 2).sum()

        step = jax.jit(jax.grad(loss, argnums=(0, 1)))
        exported = jax.export.export(step, platforms=["tpu"])(lhs, rhs, sizes)
        assert exported.mlir_module().count("tpu_custom_call") == 3  # gmm, its two grads


#: Skewed group sizes summing to the rows, as a router gives them.
GROUPS = (300, 40, 0, 172)


def _gmm_args(seed=0, k=256):
    k1, k2 = jax.random.split(jax.random.key(seed))
    lhs = jax.random.normal(k1, (512, k), jnp.float32)
    rhs = jax.random.normal(k2, (len(GROUPS), k, 256), jnp.float32)
    return lhs, rhs, jnp.array(GROUPS, jnp.int32)


@pytest.mark.child
@pytest.mark.slow
def test_gmm_is_tuned_on_first_use_on_the_callers_group_sizes(monkeypatch):
    # Default timing: the test compares speeds (fast_timing is for tests that do not).
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    monkeypatch.setenv("JAXTUNE_BUDGET", "3")
    # A contraction of 512: JAX's default tiling is about 4x the best in interpret mode,
    # where at 256 it was 1.4-1.9x, too close to tell apart on a busy machine.
    lhs, rhs, sizes = _gmm_args(k=512)
    tuned = kernels.autotuned_gmm
    out = kernels.gmm(lhs, rhs, sizes, interpret=True)  # sweeps in the child, on `sizes`
    choice = tuned.config_for(lhs, rhs, sizes, interpret=True)
    assert choice.source == "cache"
    entry = choice.entry
    assert entry is not None and entry.measured == 3
    assert entry.values.arguments["group_sizes"].source == "caller"
    assert "sum 512" in entry.values.arguments["group_sizes"].summary[0]
    reference = megablox.gmm(lhs, rhs, sizes, interpret=True)
    _close(out, reference, 1e-4)
    stored = (choice.config["tm"], choice.config["tk"], choice.config["tn"])
    _close(out, megablox.gmm(lhs, rhs, sizes, tiling=stored, interpret=True), 0)
    space = tuned.space(lhs, rhs, sizes, interpret=True)
    for config in (space[0], space[-1]):
        _close(tuned(lhs, rhs, sizes, interpret=True, **config), reference, 1e-4)
    # The configs measured really differ on these sizes, and the stored one is not shown
    # 1.5x slower than any of them (docs/development.md: a test's margin; a tighter figure
    # is a benchmark's), side by side on the caller's sizes (interleaved rounds in this
    # process), by the 99 % interval of the per-round ratios: on a busy machine the rounds
    # of tilings near each other swing past 1.1x (XLA's CPU threads meet the other work).
    measured = [dict(m.config) for m in entry.measurements if m.ok]
    rounds = _interleaved(
        [functools.partial(tuned, lhs, rhs, sizes, interpret=True, **c) for c in measured]
    )
    # Each tiling's fastest round for how far apart they are: other work only adds time.
    fastest = [min(r) for r in rounds]
    assert max(fastest) / min(fastest) >= 1.5, (measured, fastest)
    stored = rounds[measured.index(dict(choice.config))]
    for config, times in zip(measured, rounds, strict=True):
        _, low, _ = intervals.ratio_interval(stored, times, intervals.SLOWER_LEVEL)
        assert low is not None and low <= 1.5, (choice.config, config, measured, fastest)


def _interleaved(calls, rounds=12):
    """Each call's time in each of ``rounds`` interleaved rounds (one call each a round,
    after a warm-up of each)."""
    for call in calls:
        jax.block_until_ready(call())
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(rounds):
        for i, call in enumerate(calls):
            start = time.perf_counter()
            jax.block_until_ready(call())
            times[i].append(time.perf_counter() - start)
    return times


@pytest.mark.child
@pytest.mark.slow
def test_a_jitted_step_is_tuned_on_its_group_sizes_and_never_on_random_ones(
    monkeypatch, fast_timing
):
    """``jaxtune.tune(step, *arrays)`` sweeps the kernel behind the drop-in on the group
    sizes that reach it inside the step; on shapes alone, on the kernel's ``inputs=``
    (even groups), never on random integers (no warning about made-up integers, which
    would be an error here)."""
    monkeypatch.setenv("JAXTUNE_BUDGET", "2")
    lhs, rhs, sizes = _gmm_args(1)

    def step(lhs, rhs, sizes):
        return kernels.gmm(lhs, rhs, sizes, interpret=True).sum()

    for args, source in (
        ((lhs, rhs, sizes), "caller"),
        (tuple(_sds(a.shape, a.dtype) for a in (lhs, rhs, sizes)), "inputs="),
    ):
        (entry,) = jaxtune.tune(step, *args, retune=True).values()
        assert entry.kernel == "jaxtune.kernels.gmm"
        assert entry.measured == 2
        about = entry.values.arguments["group_sizes"]
        assert about.source == source
        if source == "caller":  # the step's own group sizes, (300, 40, 0, 172)
            assert about.summary == ("s32[4] 0..300 sum 512 median 106, 1 zero",)
    assert entry.config in kernels.autotuned_gmm.space(lhs, rhs, sizes, interpret=True)


@pytest.mark.slow
def test_gmm_and_tgmm_pass_every_other_argument_through_to_jax(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")  # given tilings are explicit: no sweep
    lhs, rhs, sizes = _gmm_args(2)
    rhs_t = rhs.swapaxes(1, 2).astype(jnp.bfloat16)
    offset = jnp.array(1, jnp.int32)  # this shard holds groups 1..3
    existing = jnp.ones((512, 256), jnp.bfloat16)
    args = (lhs.astype(jnp.bfloat16), rhs_t[1:], sizes)
    options = {"group_offset": offset, "existing_out": existing, "transpose_rhs": True}
    out = kernels.gmm(*args, jnp.bfloat16, (256, 128, 256), interpret=True, **options)
    want = megablox.gmm(*args, jnp.bfloat16, (256, 128, 256), interpret=True, **options)
    assert out.dtype == want.dtype == jnp.bfloat16
    _close(out.astype(jnp.float32), want.astype(jnp.float32), 0)
    # JAX's look-up function of (m, k, n) is called as JAX calls it; None is JAX's error.
    seen = []

    def lookup(*mkn):
        seen.append(mkn)
        return (128, 128, 128)

    kernels.gmm(*args, tiling=lookup, interpret=True)
    assert seen == [(512, 256, 256)]
    with pytest.raises(ValueError, match=r"No tuned tiling found for \(m, k, n\)"):
        kernels.gmm(*args, tiling=lambda m, k, n: None, interpret=True)
    for bad in ("auto", (128, 128), (128, 0, 128), (128.0, 128, 128)):  # named, not int()'s
        with pytest.raises(TypeError, match=r"tiling must be None \(tuned\), three positive"):
            kernels.gmm(*args, tiling=bad, interpret=True)
    # Arrays of another rank: JAX's own message (a ValueError, as JAX's), not a callback's
    # IndexError, from the drop-ins and the kernels behind them alike.
    lhs_, rhs_, sizes_ = args
    for call in (kernels.gmm, kernels.autotuned_gmm):
        with pytest.raises(ValueError, match=r"Expected 3-tensor for 'rhs' but got 2-tensor"):
            call(lhs_, rhs_[0], sizes_, interpret=True)
    with pytest.raises(jaxtune.SignatureError, match=r"Expected 2-tensor for 'lhs' but got 3"):
        kernels.tgmm(lhs_[None], rhs_[0], sizes_, interpret=True)
    # tgmm: the rows are lhs's columns; num_actual_groups and the offset pass through.
    t_args = (lhs.T, rhs[0], sizes)
    t_options = {"group_offset": offset, "num_actual_groups": 2, "interpret": True}
    out = kernels.tgmm(*t_args, jnp.float32, (128, 256, 128), **t_options)
    want = GMM_KERNELS.tgmm(*t_args, jnp.float32, (128, 256, 128), **t_options)
    assert out.shape == want.shape == (2, 256, 256)
    _close(out, want, 0)
    # Nothing was swept: the given tilings were explicit.
    for tuned, call in (
        (kernels.autotuned_gmm, (*args, *options.values())),
        (kernels.autotuned_tgmm, t_args),
    ):
        assert tuned.config_for(*call[:3]).source == "default"
    explicit = kernels.autotuned_gmm.config_for(*args, tm=256, tk=128, tn=256)
    assert (explicit.source, explicit.config) == ("explicit", {"tm": 256, "tk": 128, "tn": 256})
    # A dtype travels by name: plain data in the key and to a sweep's child.
    assert kernels.autotuned_gmm.config_for(*args, preferred_element_type="bfloat16").key.endswith(
        ";preferred_element_type='bfloat16',transpose_rhs=False,interpret=False"
    )


@pytest.mark.slow
def test_gmm_gradient_runs_jaxs_backward_with_the_chosen_tiling():
    lhs, rhs, sizes = _gmm_args(3)
    lhs, rhs = lhs[:256, :128], rhs[:2, :128, :128]  # fewer tiles: three kernels run
    sizes = jnp.array([200, 56], jnp.int32)

    def loss(matmul, lhs, rhs):
        return (matmul(lhs, rhs, sizes, interpret=True) ** 2).sum()

    ours = jax.grad(lambda *a: loss(kernels.gmm, *a), argnums=(0, 1))(lhs, rhs)
    theirs = jax.grad(lambda *a: loss(megablox.gmm, *a), argnums=(0, 1))(lhs, rhs)
    for a, b in zip(ours, theirs, strict=True):
        _close(a, b, 0)


# -- splash attention ----------------------------------------------------------------------


def _splash_breaks(config, q_len, kv_len):
    """What in ``config`` JAX's splash kernels or Mosaic refuse for these lengths."""
    c = config
    fused = c["use_fused_bwd_kernel"]
    broken = []
    if fused != (c["block_q_dq"] is None) or fused != (c["block_kv_dq"] is None):
        broken.append("dq blocks given with the fused backward, or missing without it")
    for name in ("block_q", "block_q_dkv", "block_q_dq"):
        if c[name] is not None and not _lane_ok(c[name], q_len):
            broken.append(f"{name}={c[name]} for q_len {q_len}")
    for name in ("block_kv", "block_kv_compute", "block_kv_dkv", "block_kv_dkv_compute"):
        if not _lane_ok(c[name], kv_len):
            broken.append(f"{name}={c[name]} for kv_len {kv_len}")
    if c["block_kv_dq"] is not None and not _lane_ok(c["block_kv_dq"], kv_len):
        broken.append(f"block_kv_dq={c['block_kv_dq']} for kv_len {kv_len}")
    if c["block_kv"] % c["block_kv_compute"] or c["block_kv_dkv"] % c["block_kv_dkv_compute"]:
        broken.append("a compute block that does not divide its block")
    try:
        sk.BlockSizes(**c)
    except ValueError as e:
        broken.append(str(e))
    return broken


def _causal(heads, q_len, kv_len=None):
    return sm.MultiHeadMask([sm.CausalMask((q_len, kv_len or q_len))] * heads)


@pytest.mark.parametrize(
    ("q_len", "kv_len", "is_mqa"),
    [
        (256, 256, False),
        (2048, 2048, False),
        (8192, 8192, True),
        (512, 1536, False),
        (384, 200, True),
    ],
)
def test_splash_space_holds_only_blocks_jax_and_mosaic_take(q_len, kv_len, is_mqa):
    q = _sds((4, q_len, 128), "bfloat16")
    k = _sds((kv_len, 128) if is_mqa else (4, kv_len, 128), "bfloat16")
    spec = kernels.mask_spec(_causal(4, q_len, kv_len))
    tuned = kernels.autotuned_splash_attention
    space = tuned.space(q, k, k, mask=spec, is_mqa=is_mqa)
    assert space
    assert {str(c): b for c in space if (b := _splash_breaks(c, q_len, kv_len))} == {}
    assert {c["use_fused_bwd_kernel"] for c in space} == {False, True}
    choice = tuned.config_for(q, k, k, mask=spec, is_mqa=is_mqa)
    jax_default = {f: getattr(sk.BlockSizes.get_default(), f) for f in choice.config}
    if not _splash_breaks(jax_default, q_len, kv_len):
        assert choice.config == jax_default
    else:
        assert choice.config == space[0]


def test_splash_masks_travel_as_plain_data_and_others_are_not_tuned():
    masks = [
        sm.CausalMask((256, 256), offset=3),
        sm.ChunkedCausalMask((256, 256), chunk_size=64),
        sm.LocalMask((256, 256), window_size=(32, None), offset=0),
        sm.FullMask((256, 256)),
    ]
    spec = kernels.mask_spec(sm.MultiHeadMask(masks + masks[-1:]))
    assert spec == (
        (1, ("causal", 256, 256, 3)),
        (1, ("chunked_causal", 256, 256, 64)),
        (1, ("local", 256, 256, 32, None, 0)),
        (2, ("full", 256, 256)),
    )
    from jaxtune._core.codec import packb, unpackb

    assert unpackb(packb(spec)) == spec  # plain msgpack data: it reaches a sweep's child
    dense = np.tril(np.ones((256, 256), np.bool_))
    for other in (
        sm.MultiHeadMask([sm.NumpyMask(dense)]),
        dense[None],
        sm.MultiHeadMask([sm.CausalMask((256, 256)) | sm.LocalMask((256, 256), (8, 8), 0)]),
    ):
        assert kernels.mask_spec(other) is None
        attention = kernels.make_splash_mha(other, head_shards=1, q_seq_shards=1)
        assert attention.kernel is not None  # JAX's kernel, as JAX builds it


def test_every_splash_block_lowers_for_tpu():
    """Mosaic's lowering (``jax.export`` for TPU, on CPU) takes the distinct blocks of a
    space, forward and backward (fused and not)."""
    q = _sds((2, 256, 128))
    spec = kernels.mask_spec(_causal(2, 256))
    space = kernels.autotuned_splash_attention.space(q, q, q, mask=spec)
    fields = ("block_q", "block_kv", "block_kv_compute")
    backward_fields = ("block_q_dkv", "block_kv_dkv", "use_fused_bwd_kernel")
    forward = sorted({tuple(c[f] for f in fields) for c in space})
    backward = sorted({tuple(c[f] for f in backward_fields) for c in space})
    assert len(forward) == 6 and len(backward) == 8
    for i, bwd in enumerate(backward):
        config = next(
            c
            for c in space
            if tuple(c[f] for f in fields) == forward[i % len(forward)]
            and tuple(c[f] for f in backward_fields) == bwd
        )

        def loss(q, config=config):
            call = kernels.autotuned_splash_attention
            return (call(q, q, q, mask=spec, **config) ** 2).sum()

        exported = jax.export.export(jax.jit(jax.grad(loss)), platforms=["tpu"])(q)
        assert exported.mlir_module().count("tpu_custom_call") == (2 if bwd[2] else 3)


def _splash_args(seed=0, heads=2):
    keys = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(key, (heads, SEQ, 128), jnp.float32) for key in keys)


@pytest.mark.child
@pytest.mark.slow
def test_splash_is_tuned_on_first_use_in_tune_mode_and_computes_what_jax_does(
    monkeypatch, fast_timing
):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    monkeypatch.setenv("JAXTUNE_BUDGET", "3")
    q, k, v = _splash_args()
    mask = _causal(2, SEQ)
    attention = kernels.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    tuned = kernels.autotuned_splash_attention
    with pltpu.force_tpu_interpret_mode():
        out = attention(q, k, v)  # sweeps, in the child
        choice = tuned.config_for(q, k, v, mask=attention.spec)
        assert choice.source == "cache"
        assert choice.entry is not None and choice.entry.measured == 3
        reference = sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1)(q, k, v)
        _close(out, reference)
        stored = sk.BlockSizes(**choice.config)
        theirs = sk.make_splash_mha(mask, block_sizes=stored, head_shards=1, q_seq_shards=1)
        _close(out, theirs(q, k, v), 0)


@pytest.mark.slow
def test_splash_passes_every_other_argument_through_to_jax(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")  # nothing here may sweep
    q, k, v = _splash_args(1)
    k1, v1 = k[0], v[0]  # multi-query: one key and value head
    ids = sk.SegmentIds(
        q=jnp.repeat(jnp.arange(2, dtype=jnp.int32), SEQ // 2),
        kv=jnp.repeat(jnp.arange(2, dtype=jnp.int32), SEQ // 2),
    )
    mask = sm.MultiHeadMask([sm.LocalMask((SEQ, SEQ), (64, 0), 0)] * 2)
    options = {"attn_logits_soft_cap": 20.0, "head_shards": 1, "q_seq_shards": 1}
    sizes = sk.BlockSizes(128, 256, 128, 128, 128, 128, use_fused_bwd_kernel=True)
    with pltpu.force_tpu_interpret_mode():
        ours = kernels.make_splash_mqa(mask, block_sizes=sizes, **options)(q, k1, v1, ids)
        theirs = sk.make_splash_mqa(mask, block_sizes=sizes, **options)(q, k1, v1, ids)
        _close(ours, theirs, 0)
        monkeypatch.delenv("JAXTUNE_MODE")  # untuned, JAX's default blocks
        attention = kernels.make_splash_mha_single_device(mask, save_residuals=True)
        out, (lse,) = attention(q, k, v, segment_ids=ids)
        want, (want_lse,) = sk.make_splash_mha_single_device(mask, save_residuals=True)(
            q, k, v, segment_ids=ids
        )
        _close(out, want, 0)
        _close(lse, want_lse, 0)
    spec = kernels.mask_spec(mask)
    choice = kernels.autotuned_splash_attention.config_for(q, k1, v1, ids, mask=spec, is_mqa=True)
    assert choice.source == "default"  # nothing was swept for the given blocks
    assert "is_mqa=True" in choice.key


# -- whole programs ------------------------------------------------------------------------


def test_locate_finds_the_kernel_behind_each_drop_in_lowered_for_tpu():
    """A program that calls a drop-in holds its ``@autotuned`` kernel, as ``jaxtune.tune``
    and ``jaxtune.locate`` find it, on JAX 0.10.2 and 0.12 alike (JAX 0.12 hides the
    marker of a ``custom_vjp`` called straight in a kernel's scope: ``gmm``'s)."""
    q = _sds((1, 2, 256, 128))
    lhs, rhs, sizes = _sds((512, 256)), _sds((4, 256, 256)), _sds((4,), "int32")
    splash_q = _sds((2, 256, 128))
    attention = kernels.make_splash_mha(_causal(2, 256), head_shards=1, q_seq_shards=1)
    programs = {
        "jaxtune.kernels.flash_attention": (
            lambda q: kernels.flash_attention(q, q, q).sum(),
            (q,),
        ),
        "jaxtune.kernels.gmm": (lambda *a: kernels.gmm(*a).sum(), (lhs, rhs, sizes)),
        "jaxtune.kernels.tgmm": (
            lambda lhs, rhs, sizes: kernels.tgmm(lhs.T, rhs[0], sizes).sum(),
            (lhs, rhs, sizes),
        ),
        "jaxtune.kernels.splash_attention": (lambda q: attention(q, q, q).sum(), (splash_q,)),
    }
    for kernel, (program, args) in programs.items():
        sites = jaxtune.locate(program, *args, platform="tpu")
        assert [s.name for s in sites if s.kind == "autotuned"] == [kernel]
        assert any(s.target == "tpu_custom_call" for s in sites)


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


# -- ragged paged attention (runs on a TPU only: checked here through lowering) -------------

#: JAX's kernel module, and the module that picks its blocks from a device's table.
RPA = importlib.import_module("jax.experimental.pallas.ops.tpu.ragged_paged_attention.kernel")
RPA_TABLE = importlib.import_module(
    "jax.experimental.pallas.ops.tpu.ragged_paged_attention.tuned_block_sizes"
)
RPA_NAMES = ("num_kv_pages_per_block", "num_queries_per_block")
#: What serving stacks give the kernel (vLLM's TPU backend asks for 64 MiB past TPU v4).
SERVING_VMEM = 64 << 20


def _blocks(pages, queries):
    return dict(zip(RPA_NAMES, (pages, queries), strict=True))


def _rpa_shapes(tokens, q_heads, kv_heads, page_size, seqs, pages_per_seq, dtype="bfloat16"):
    """A call's arguments as shapes: q, kv pages (a page of its own for every sequence's
    every page), kv lens, page indices, cumulative query lengths, sequence count."""
    return (
        _sds((tokens, q_heads, 128), dtype),
        _sds((seqs * pages_per_seq, page_size, 2 * kv_heads, 128), dtype),
        _sds((seqs,), "int32"),
        _sds((seqs, pages_per_seq), "int32"),
        _sds((seqs + 1,), "int32"),
        _sds((1,), "int32"),
    )


def _tpu(device_kind="TPU v5 lite"):
    """A context in which Mosaic lowers for ``device_kind`` on this CPU-only machine (its
    lowering asks the chip's generation)."""
    device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=1, platform="tpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)


def _fake_chip(monkeypatch, device_kind):
    """JAX's block table sees a chip of ``device_kind`` (it reads ``jax.devices()``)."""
    chip = type("Device", (), {"device_kind": device_kind})()
    monkeypatch.setattr(
        RPA_TABLE, "jax", type("Jax", (), {"devices": staticmethod(lambda: [chip])})
    )


RPA_SHAPES = [  # (tokens, q heads, kv heads, page size, max seqs, pages per seq)
    (512, 32, 8, 32, 16, 64),  # the bench's: a prefill and decode mix, 2048-token context
    (1024, 32, 8, 32, 16, 16),  # a shape of JAX's v5 table
    (64, 8, 2, 16, 4, 8),
    (16, 8, 1, 128, 16, 4),  # decode only: one token a sequence
    (300, 12, 2, 16, 8, 20),  # counts no power of two divides
]


@pytest.mark.parametrize("shape", RPA_SHAPES)
@pytest.mark.parametrize("vmem_limit_bytes", [None, SERVING_VMEM])
def test_rpa_space_holds_only_blocks_jax_validates_that_fit_the_vmem_asked(shape, vmem_limit_bytes):
    args = _rpa_shapes(*shape)
    tokens, _, _, page_size, _, pages_per_seq = shape
    tuned = kernels.autotuned_ragged_paged_attention
    space = tuned.space(*args, vmem_limit_bytes=vmem_limit_bytes)
    assert space
    for c in space:  # JAX's own static validation takes every config
        RPA.static_validate_inputs(*args, vmem_limit_bytes=vmem_limit_bytes, **c)
        # The two buffers of kv pages alone, which JAX's kernel allocates, fit the scope.
        _, combined = RPA.get_min_heads_per_blk(
            shape[1], 2 * shape[2], *(a.dtype for a in args[:2])
        )
        pages = 2 * c["num_kv_pages_per_block"] * page_size * combined * 128 * 2
        assert pages <= (vmem_limit_bytes or 16 << 20)
    # From one page a block up to the sequence's pages; queries from the candidates or all.
    offered = {c["num_kv_pages_per_block"] for c in space}
    assert max(offered) <= pages_per_seq and 1 in offered
    assert {c["num_queries_per_block"] for c in space} <= {8, 16, 32, 64, 128, 256, tokens}
    # What JAX's validation refuses, the prune refuses.
    for bad in (
        {**space[0], "num_kv_pages_per_block": pages_per_seq + 1},
        {**space[0], "num_queries_per_block": 0},
    ):
        with pytest.raises(ValueError, match="must be"):
            RPA.static_validate_inputs(*args, **bad)
        assert not kernels._ragged_paged.legal(bad, *args)


def test_rpa_space_takes_every_block_of_jaxs_own_tables_at_a_serving_vmem():
    """JAX's tables (TPU v5e and v6e, tuned with the 64 MiB serving stacks give the kernel)
    pick blocks the VMEM bound keeps: it leaves out no block JAX's own tuning found best."""
    legal = kernels._ragged_paged.legal
    checked = 0
    for device, table in RPA_TABLE.TUNED_BLOCK_SIZES.items():
        for key, (pages, queries) in table.items():
            q_dtype, kv_dtype, q_heads, kv_heads, _, page_size, tokens, context = key
            if context % page_size:
                continue  # a context no lookup reaches (the key rounds it to a power of two)
            args = _rpa_shapes(tokens, q_heads, kv_heads, page_size, 4, context // page_size)
            per_block = RPA.get_min_heads_per_blk(q_heads, 2 * kv_heads, q_dtype, kv_dtype)
            if per_block != (q_heads, 2 * kv_heads):
                continue  # JAX's kernel splits these heads: the key names its blocks, not a call
            config = dict(
                zip(
                    RPA_NAMES, (min(pages, context // page_size), min(queries, tokens)), strict=True
                )
            )
            assert legal(config, *args, vmem_limit_bytes=SERVING_VMEM), (device, key)
            checked += 1
    assert checked > 500


@pytest.mark.parametrize(
    ("device_kind", "shape", "want"),
    [
        ("TPU v5 lite", (1024, 8, 1, 16, 16, 16), (8, 32)),  # JAX's v5 table
        ("TPU v5 lite", (1024, 32, 8, 32, 16, 16), (16, 32)),  # JAX's v5 table
        ("TPU v5 lite", (512, 32, 8, 32, 16, 64), (64, 32)),  # not in it: 128 pages capped
        ("TPU v6 lite", (2048, 8, 2, 128, 16, 8), (8, 64)),  # JAX's v6 table
        ("TPU v4", (512, 32, 8, 32, 16, 64), (32, 32)),  # JAX's v4 blocks
        (None, (16, 8, 1, 128, 16, 4), (4, 16)),  # off a TPU: JAX's fallback, capped
    ],
)
def test_rpa_default_is_the_block_jaxs_kernel_picks_itself(monkeypatch, device_kind, shape, want):
    args = _rpa_shapes(*shape)
    if device_kind is not None:
        _fake_chip(monkeypatch, device_kind)
    else:
        with pytest.raises(NotImplementedError):  # what JAX's lookup does off a TPU
            RPA_TABLE.get_tuned_block_sizes("bfloat16", "bfloat16", 8, 1, 128, 128, 16, 4)
    assert kernels._ragged_paged.jax_block_sizes(*args[:2], args[3]) == dict(
        zip(RPA_NAMES, want, strict=True)
    )


def test_an_untuned_rpa_call_lowers_to_jaxs_own_kernel(monkeypatch):
    """Untuned, the drop-in runs the kernel JAX's call builds by itself on that chip: the
    same Mosaic kernel, byte for byte, lowered for a TPU v5e through ``jax.export``."""
    _fake_chip(monkeypatch, "TPU v5 lite")
    args = _rpa_shapes(1024, 8, 1, 16, 16, 16)

    def kernel_of(attention, **blocks):
        def call(*a):
            return attention(*a, sm_scale=0.08, **blocks)

        with _tpu():
            text = jax.export.export(jax.jit(call), platforms=["tpu"])(*args).mlir_module()
        (config,) = re.findall(r'backend_config = "([^"]*)"', text)
        return config

    theirs = kernel_of(RPA.ragged_paged_attention)
    assert kernel_of(kernels.ragged_paged_attention) == theirs
    # The comparison tells blocks apart: JAX's v5 table picks (8, 32) here, where its
    # fallback off the table (and off a TPU) would be (16, 32).
    assert kernel_of(RPA.ragged_paged_attention, **_blocks(8, 32)) == theirs
    assert kernel_of(RPA.ragged_paged_attention, **_blocks(16, 32)) != theirs
    # Blocks given run as given; one alone runs with JAX's pick for the other.
    explicit = kernel_of(kernels.ragged_paged_attention, **_blocks(4, 32))
    assert explicit != theirs
    assert kernel_of(kernels.ragged_paged_attention, num_kv_pages_per_block=4) == explicit


def test_every_rpa_config_lowers_for_tpu():
    """Mosaic's lowering (``jax.export`` for a TPU v5e, on CPU) takes every config of a
    space; only the chip's compile checks what lowering does not (VMEM, layouts)."""
    args = _rpa_shapes(64, 8, 2, 16, 4, 8)
    space = kernels.autotuned_ragged_paged_attention.space(*args)
    assert len(space) == 16
    for c in space:

        def call(*a, c=c):
            return kernels.autotuned_ragged_paged_attention(*a, **c)

        with _tpu():
            exported = jax.export.export(jax.jit(call), platforms=["tpu"])(*args)
        assert exported.mlir_module().count("tpu_custom_call") == 1


def test_locate_finds_the_rpa_kernel_behind_the_drop_in_lowered_for_tpu():
    """As for the other drop-ins, on JAX 0.10.2 and 0.12 alike: ``jaxtune.tune`` and
    ``jaxtune.locate`` see the ``@autotuned`` kernel inside a program that calls the drop-in."""
    args = _rpa_shapes(64, 8, 2, 16, 4, 8)
    with _tpu():
        sites = jaxtune.locate(
            lambda *a: kernels.ragged_paged_attention(*a).sum(), *args, platform="tpu"
        )
    assert [s.name for s in sites if s.kind == "autotuned"] == [
        "jaxtune.kernels.ragged_paged_attention"
    ]
    assert [s.target for s in sites if s.kind == "pallas"] == ["tpu_custom_call"]


@pytest.mark.parametrize("shape", RPA_SHAPES)
def test_rpa_made_values_are_a_batch_jaxs_kernel_takes(shape):
    """Without the program's values, a sweep runs on a valid batch (JAX's
    ``dynamic_validate_inputs`` passes), never on random integers."""
    args = _rpa_shapes(*shape)
    made = kernels._ragged_paged._inputs(*args)
    values = [
        made[n] for n in ("q", "kv_pages", "kv_lens", "page_indices", "cu_q_lens", "num_seqs")
    ]
    for value, abstract in zip(values, args, strict=True):
        assert (value.shape, value.dtype) == (abstract.shape, abstract.dtype)
    RPA.dynamic_validate_inputs(*values)
    tokens, seqs = shape[0], min(shape[0], shape[4])
    assert int(made["num_seqs"][0]) == seqs
    assert int(made["cu_q_lens"][seqs]) == min(tokens, seqs * shape[3] * shape[5])
    assert (made["kv_lens"][:seqs] == shape[3] * shape[5]).all()


def _rpa_batch(seed=0):
    """A small mixed batch: a prefill of 30 tokens, a decode, a chunk of 9, an empty slot."""
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.standard_normal((64, 8, 128)), jnp.float32)
    kv_pages = jnp.asarray(rng.standard_normal((32, 16, 4, 128)), jnp.float32)
    kv_lens = jnp.array([100, 7, 40, 0], jnp.int32)
    page_indices = jnp.arange(32, dtype=jnp.int32).reshape(4, 8)
    cu_q_lens = jnp.array([0, 30, 31, 40, 40], jnp.int32)
    return q, kv_pages, kv_lens, page_indices, cu_q_lens, jnp.array([3], jnp.int32)


def test_rpa_sweeps_on_the_callers_batch_and_runs_the_pick(monkeypatch, fast_timing):
    """The plumbing, with JAX's kernel (which runs on a TPU only) replaced by a stand-in
    that records the blocks it receives, in this process: a sweep runs on the caller's
    ``kv_lens``, ``page_indices``, ``cu_q_lens`` and ``num_seqs``, or on shapes alone on the
    kernel's ``inputs=`` (a warning about made-up integers would fail here); the drop-in
    then passes the stored blocks and the caller's options to JAX's function."""
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    monkeypatch.setenv("JAXTUNE_BUDGET", "3")
    seen = []

    def stand_in(*arrays, num_kv_pages_per_block, num_queries_per_block, **options):
        seen.append(((num_kv_pages_per_block, num_queries_per_block), options))
        q, _, kv_lens, _, cu_q_lens, num_seqs = arrays
        return q * (kv_lens.sum() + cu_q_lens[num_seqs[0]]).astype(q.dtype)

    monkeypatch.setattr(RPA, "ragged_paged_attention", stand_in)
    batch = _rpa_batch()
    tuned = kernels.autotuned_ragged_paged_attention
    (entry,) = tuned.tune(*batch, sm_scale=0.1).values()
    assert entry.kernel == "jaxtune.kernels.ragged_paged_attention"
    assert entry.measured == 3 and entry.space_size == 16
    about = entry.values.arguments
    assert {about[n].source for n in ("kv_lens", "page_indices", "cu_q_lens", "num_seqs")} == {
        "caller"
    }
    assert about["kv_lens"].summary == ("s32[4] 0..100 sum 147 median 23.5, 1 zero",)
    assert about["num_seqs"].summary == ("s32[1] 3..3",)
    assert entry.config in tuned.space(*batch, sm_scale=0.1)
    seen.clear()
    kernels.ragged_paged_attention(*batch, sm_scale=0.1, soft_cap=30.0)
    kernels.ragged_paged_attention(*batch, sm_scale=0.1)
    stored = tuple(entry.config[n] for n in RPA_NAMES)
    (_, options), (blocks, _) = seen
    assert blocks == stored
    assert options["soft_cap"] == 30.0 and options["sm_scale"] == 0.1
    assert tuned.config_for(*batch, sm_scale=0.1).source == "cache"
    # Shapes only: the kernel's made batch, named as such in the entry.
    shapes = [_sds(a.shape, a.dtype) for a in batch]
    (entry,) = jaxtune.tune(lambda *a: kernels.ragged_paged_attention(*a).sum(), *shapes).values()
    assert {entry.values.arguments[n].source for n in ("kv_lens", "cu_q_lens")} == {"inputs="}


def test_rpa_drop_in_has_jaxs_signature():
    ours = inspect.signature(kernels.ragged_paged_attention).parameters
    theirs = inspect.signature(RPA.ragged_paged_attention).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [
        (p.name, p.kind, p.default) for p in theirs.values()
    ]


@pytest.mark.child
@pytest.mark.slow
def test_rpa_bench_case_is_chip_only_off_a_tpu(tmp_path):
    """``bench/bench_kernels_tpu.py --dry --only rpa`` tries JAX's kernel in TPU interpret
    mode, says the case runs on the chip only and why, and skips it (exit 0)."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            "bench/bench_kernels_tpu.py",
            "--dry",
            "--only",
            "rpa",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "rpa: chip only, skipped: JAX's ragged paged attention does not run in TPU interpret mode"
        in done.stdout
    )
    skipped = json.loads(out.read_text())["rpa"]["skipped"]
    assert "interpret mode" in skipped and "Error" in skipped
