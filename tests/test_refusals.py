"""Configs Mosaic TPU refuses, found in the traced program before compiling: never one that
JAX's TPU lowering accepts (checked against ``jax.export`` for TPU, on CPU), on JAX's own
flash attention and megablox grouped matmul. The DMA slice rule (Mosaic's own, which only
the chip applies: ``tests/tpu/test_3_refusals.py`` checks it there) refuses exactly
Tokamax's ragged dot configs whose tiles slice HBM to 64 lanes, and nothing of JAX's
kernels that copy by hand (paged attention, ragged paged attention)."""

from __future__ import annotations

import functools
import itertools
import json
import pathlib

import jax
import jax.numpy as jnp
import pytest
import ragged_dot_space
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa
from jax.experimental.pallas.ops.tpu.megablox import gmm
from test_sweep import bind, task_of

from jaxtune._core.vocabulary import config_id
from jaxtune._tuning.sweep.breakdown import Breakdown
from jaxtune._tuning.sweep.compile import Compiler
from jaxtune._tuning.sweep.refusals import checker, refusal, scoped_vmem

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


def test_the_scoped_vmem_is_the_chips_default_unless_a_flag_sets_it(monkeypatch):
    from jaxtune._tuning.sweep import refusals

    mib = 2**20
    # The chip's whole VMEM (JAX's TPU-info table may answer on CPU after a test that
    # filled it in for the CPU: it keeps its answers).
    monkeypatch.setattr(refusals, "vmem_capacity", lambda: 128 * mib)
    assert scoped_vmem("TPU v5 lite", {}) == 16 * mib
    assert scoped_vmem("TPU v6 lite", {}) == 32 * mib
    flag = {"LIBTPU_INIT_ARGS": "--foo=1 --xla_tpu_scoped_vmem_limit_kib=65536"}
    assert scoped_vmem("TPU v5 lite", flag) == 64 * mib
    name = "xla_tpu_scoped_vmem_limit_kib"
    both = {"XLA_FLAGS": f"--{name} 32768", **flag}
    assert scoped_vmem("TPU v5 lite", both) == 64 * mib  # the larger
    assert scoped_vmem("TPU v5 lite", {"XLA_FLAGS": f"-{name}=65536"}) == 64 * mib
    # A flag asking for less than the chip's default: the rule keeps the default.
    assert scoped_vmem("TPU v5 lite", {"XLA_FLAGS": f"--{name}=8192"}) == 16 * mib
    # A flag it cannot read, or a chip it does not know: no scoped limit (the whole VMEM).
    for value in ("=lots", "=-1", "=0", "", " --other=1"):
        assert scoped_vmem("TPU v5 lite", {"XLA_FLAGS": f"--{name}{value}"}) == 128 * mib, value
    assert scoped_vmem("TPU v9", {}) == 128 * mib
    monkeypatch.setattr(refusals, "vmem_capacity", lambda: None)
    assert scoped_vmem() is None  # off a TPU: no VMEM


def test_a_flag_the_backend_read_at_its_start_counts_though_unset_since(monkeypatch):
    from jaxtune._core import settings

    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setitem(settings._AT_IMPORT, "XLA_FLAGS", None)
    monkeypatch.setitem(
        settings._AT_IMPORT, "LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=65536"
    )
    assert scoped_vmem("TPU v5 lite") == 64 * 2**20


def _scoped_copy(x, *, buffer_rows):
    def kernel(x_ref, o_ref):
        def body(buf):
            buf[...] = jnp.zeros(buf.shape, buf.dtype)
            o_ref[...] = x_ref[...] + buf[:8, :]

        pl.run_scoped(body, pltpu.VMEM((buffer_rows, 128), F32))

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def _two_scopes(x, *, buffer_rows):
    def kernel(x_ref, o_ref):
        def body(buf):
            buf[...] = jnp.zeros(buf.shape, buf.dtype)
            o_ref[...] = o_ref[...] + buf[:8, :]

        o_ref[...] = x_ref[...]
        pl.run_scoped(body, pltpu.VMEM((buffer_rows, 128), F32))
        pl.run_scoped(body, pltpu.VMEM((buffer_rows, 128), F32))

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def test_a_run_scoped_vmem_allocation_counts_against_the_limit():
    x = jax.ShapeDtypeStruct((8, 128), F32)
    f = functools.partial(_scoped_copy, buffer_rows=8192)  # 4 MiB of VMEM
    jaxpr = jax.jit(f).trace(x).jaxpr
    assert "need at least 4.0 MiB" in (refusal(jaxpr, vmem_bytes=2 * 2**20) or "")
    assert refusal(jaxpr, vmem_bytes=16 * 2**20) is None
    # Two scopes one after the other, 3 MiB each, never live together: 3 MiB, not 6.
    g = functools.partial(_two_scopes, buffer_rows=6144)
    jaxpr = jax.jit(g).trace(x).jaxpr
    assert refusal(jaxpr, vmem_bytes=4 * 2**20) is None
    assert "need at least 3.0 MiB" in (refusal(jaxpr, vmem_bytes=2 * 2**20) or "")


#: A first sweep of Tokamax 0.0.12's 540 ragged dot configs on the lent TPU v5e (JAX 0.10.2,
#: libtpu 0.0.42.1), each compiled: which compiled and which Mosaic refused on scoped VMEM.
CHIP_SWEEP = (
    pathlib.Path(__file__).parent.parent / "bench/results/pace_ragged_first_tpu_v5e_365bcd0.json"
)


@pytest.mark.slow
def test_the_scoped_vmem_rule_refuses_tokamax_configs_mosaic_refused_and_none_that_compiled(
    monkeypatch, cpu_as_v5e
):
    """At the v5e's 16 MiB, against what the chip did with each config: of Tokamax's
    configs Mosaic refused on scoped VMEM (46 of 0.0.12's), at least 80 % are refused
    (41: the other five need exactly 14-16 MiB, what Mosaic's own scratch tips over); of
    those that compiled, none, checked on the largest (most bytes of tiles) 60."""
    sweep = json.loads(CHIP_SWEEP.read_text())["jaxtune"]["exhaustive"]
    oom = {
        c for c, why in sweep["failures"]["compile"]["configs"].items() if "ScopedVmemOom" in why
    }
    compiled = set(sweep["timed"])
    f, _, own = ragged_dot_space.ragged_dot(monkeypatch)

    def tiles(c):
        m, k, n = c["tile_m"], c["tile_k"], c["tile_n"]
        return c["input_buffer_count"] * (m * k + k * n + m * n) + m * n * 2

    ooms = [c for c in own if config_id(c) in oom]
    kept = sorted((c for c in own if config_id(c) in compiled), key=tiles)[-60:]
    assert kept and ooms, "the installed Tokamax proposes none of the configs the chip swept"

    def refused(c):
        g = functools.partial(f, config=c)
        return refusal(jax.jit(g).trace(*ragged_dot_space.ARGS).jaxpr, vmem_bytes=16 * 2**20)

    wrongly = [(c, why) for c in kept if (why := refused(c)) is not None]
    assert not wrongly, wrongly
    caught = [c for c in ooms if "VMEM" in (refused(c) or "")]
    assert len(caught) >= 0.8 * len(ooms), (len(caught), len(ooms))


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


# -- DMA slices ---------------------------------------------------------------------------


def _dma_copy(x, *, lanes, space, interpret=False):
    """Copies ``x``'s first ``lanes`` columns by hand: a DMA from a slice of ``x`` (in
    ``space``) into VMEM."""

    def body(x_ref, o_ref, buf, sem):
        pltpu.async_copy(x_ref.at[:, pl.ds(0, lanes)], buf, sem).wait()
        o_ref[...] = buf[...]

    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct((x.shape[0], lanes), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=space)],
        scratch_shapes=[pltpu.VMEM((x.shape[0], lanes), x.dtype), pltpu.SemaphoreType.DMA],
        interpret=interpret,
    )(x)


@pytest.mark.parametrize(
    ("columns", "lanes", "space", "refused"),
    [
        (512, 64, pl.ANY, True),  # half a tile of an array in HBM
        (512, 192, pltpu.HBM, True),
        (512, 256, pl.ANY, False),  # whole tiles
        (512, 512, pl.ANY, False),
        (128, 64, pl.ANY, False),  # one tile wide: left to Mosaic
        (200, 64, pl.ANY, False),  # not whole tiles wide: left to Mosaic
        (512, 64, pltpu.VMEM, False),  # not in HBM: left to Mosaic
    ],
)
def test_a_dma_slice_of_an_hbm_array_off_the_lane_tile_is_refused(columns, lanes, space, refused):
    x = jax.ShapeDtypeStruct((64, columns), F32)
    f = functools.partial(_dma_copy, lanes=lanes, space=space)
    why = refusal(jax.jit(f).trace(x).jaxpr, vmem_bytes=V5E_VMEM)
    if refused:
        assert why is not None and f"to {lanes} along its last dimension" in why, why
        assert "Slice sizes along tiled dimensions must be aligned to tiles" in why
    else:
        assert why is None, why
    interpreted = functools.partial(f, interpret=True)
    assert refusal(jax.jit(interpreted).trace(x).jaxpr, vmem_bytes=V5E_VMEM) is None


@pytest.fixture
def cpu_as_v5e(monkeypatch):
    ragged_dot_space.cpu_as_v5e(monkeypatch)


def test_tokamax_ragged_dot_configs_that_slice_hbm_to_64_lanes_are_refused_and_no_others(
    monkeypatch, cpu_as_v5e
):
    """Tokamax's kernel copies lhs [m, k] tiles of ``tile_k`` columns and rhs [g, k, n]
    tiles of ``tile_n`` columns from HBM by hand: a tile of 64 breaks the rule (on the chip
    Mosaic refused each of them after a full compile), 128 and more do not. One config per
    pair of ``tile_k`` and ``tile_n`` among Tokamax's own configs and configs of 64-lane
    tiles (Tokamax 0.0.12 proposes them, 0.0.17 no longer does), the other fields from
    Tokamax's configs in turn; of the whole of Tokamax 0.0.12's 540, 165 are refused."""
    f, _, own = ragged_dot_space.ragged_dot(monkeypatch)
    tiles = {(c["tile_k"], c["tile_n"]) for c in own}
    tiles |= set(itertools.product((64, 128), (64, 128, 512)))
    for i, (k, n) in enumerate(sorted(tiles)):
        config = {**own[i * 7 % len(own)], "tile_k": k, "tile_n": n}
        g = functools.partial(f, config=config)
        why = refusal(jax.jit(g).trace(*ragged_dot_space.ARGS).jaxpr, vmem_bytes=V5E_VMEM)
        if 64 in (k, n):
            assert why is not None and "to 64 along its last dimension" in why, (config, why)
        else:
            assert why is None, (config, why)


def _paged_attention(pages_per_compute_block, dtype=jnp.bfloat16):
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    def f(q, k, v, lengths, pages):
        return paged_attention(
            q, k, v, lengths, pages, pages_per_compute_block=pages_per_compute_block
        )

    heads, kv_heads, dim, page, pages_per_seq, batch = 8, 2, 256, 16, 32, 4
    args = (
        jax.ShapeDtypeStruct((batch, heads, dim), dtype),
        jax.ShapeDtypeStruct((kv_heads, batch * pages_per_seq, page, dim), dtype),
        jax.ShapeDtypeStruct((kv_heads, batch * pages_per_seq, page, dim), dtype),
        jax.ShapeDtypeStruct((batch,), jnp.int32),
        jax.ShapeDtypeStruct((batch, pages_per_seq), jnp.int32),
    )
    return f, args


def _ragged_paged_attention(kv_pages_per_block, queries_per_block, dtype=jnp.bfloat16):
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import (
        ragged_paged_attention,
    )

    def f(q, kv, kv_lens, pages, cu_q_lens, num_seqs):
        return ragged_paged_attention(
            q,
            kv,
            kv_lens,
            pages,
            cu_q_lens,
            num_seqs,
            num_kv_pages_per_block=kv_pages_per_block,
            num_queries_per_block=queries_per_block,
        )

    tokens, heads, kv_heads, dim, page, seqs, pages_per_seq = 256, 8, 2, 256, 16, 4, 16
    args = (
        jax.ShapeDtypeStruct((tokens, heads, dim), dtype),
        jax.ShapeDtypeStruct((seqs * pages_per_seq, page, 2 * kv_heads, dim), dtype),
        jax.ShapeDtypeStruct((seqs,), jnp.int32),
        jax.ShapeDtypeStruct((seqs, pages_per_seq), jnp.int32),
        jax.ShapeDtypeStruct((seqs + 1,), jnp.int32),
        jax.ShapeDtypeStruct((1,), jnp.int32),
    )
    return f, args


@pytest.mark.parametrize(
    ("make", "config"),
    [
        (_paged_attention, (1,)),
        (_paged_attention, (4,)),
        (_paged_attention, (8,)),
        (_ragged_paged_attention, (4, 32)),
        (_ragged_paged_attention, (8, 64)),
        (_ragged_paged_attention, (16, 128)),
        (_gmm, (128, 128, 128)),
        (_gmm, (64, 256, 256)),
    ],
    ids=lambda c: getattr(c, "__name__", str(c)),
)
def test_jaxs_kernels_that_copy_by_hand_are_not_refused_at_valid_configs(make, config, cpu_as_v5e):
    f, args = make(*config)
    jaxpr = jax.jit(f).trace(*args).jaxpr
    assert refusal(jaxpr, vmem_bytes=V5E_VMEM) is None
    lowers, error = _lowers_for_tpu(f, args)
    assert lowers, error
