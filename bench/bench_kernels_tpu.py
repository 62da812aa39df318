"""Issue 60's "Done when", measured side by side in one run on the lent TPU v5e: the kernels
of :mod:`jaxtune.kernels` with no tuning run (the packaged cache that
``tools/build_kernels_cache.py`` made, or its nearest shape) against JAX's default blocks
and against a sweep of the exact shape.

On a TPU machine from the repository root (``. tools/tpu/env.sh`` first where there is no
network; Tokamax's wheels for part ``tokamax``, docs/development.md)::

    python3 bench/bench_kernels_tpu.py --json OUT.json
    python3 bench/bench_kernels_tpu.py --dry --packaged /tmp/kc/cache --json OUT.json  # CPU

Parts (``--only``), in one process, which holds the chip (sweeps run in it); the user
cache is a fresh directory, so that only the packaged layer (and ``--packaged DIR``)
answers before the exact sweeps:

- ``nnx``: tests/tpu/nnx_model.py's Flax NNX + optax training step (``BENCH``: 4 layers,
  d_model 1024, 8 heads of 128, sequence 2048, batch 4) with
  :func:`jaxtune.kernels.flash_attention` (causal, ``sm_scale = 1 / sqrt(head_dim)``) as
  its attention: JAX's default blocks, the drop-in's own lookup (packaged or nearest: the
  source is reported), and the config ``jaxtune.tune(train_step, ...)`` stores for the exact
  shape (``--exact-budget`` configs). Goals: default / lookup >= 1.7, lookup / exact <= 1.05.
- ``gmm``: an MoE-like grouped matmul (bf16 ``[8192, 2048] @ [8, 2048, 4096]``, skewed
  group sizes ``[3072, 1536, 1024, 1024, 512, 512, 384, 128]``, bench_values.py's) through
  :func:`jaxtune.kernels.gmm`: JAX's ``(128, 128, 128)``, the drop-in's lookup, and the
  exact shape's best (``autotuned_gmm.tune`` on these group sizes over its whole space).
  Goals: default / lookup >= 3, lookup / exact <= 1.10.
- ``tokamax``: Tokamax's shipped TPU v5e ragged_dot configs
  (``tokamax/data/autotuning/tpu_v5_lite/pallas_mosaic_tpu_ragged_dot.json``) at two of its
  shapes, on its own group sizes, run by Tokamax's ``PallasMosaicTpuRaggedDot``, against
  the drop-in's lookup at the same arrays (and JAX's default tiling). Goal: Tokamax's no
  faster than ours.
- ``rpa``: JAX's ragged paged attention (bf16, 16 sequences, 32 query heads over 8 kv
  heads of 128, pages of 32 tokens, a 2048-token context, 512 query tokens: 12 decodes and
  4 prefill chunks, ``vmem_limit_bytes`` 64 MiB as vLLM's TPU backend gives it) through
  :func:`jaxtune.kernels.ragged_paged_attention`: the untuned drop-in's output against
  JAX's kernel's (equal) and JAX's reference's (close), a sweep of
  ``autotuned_ragged_paged_attention`` on this batch (``RPA_BUDGET``), then JAX's own
  blocks against the tuned pick. JAX's kernel does not run in TPU interpret mode, so under
  ``--dry`` the part says so and is skipped (it tries first).

Every time is one executable calling its kernel (or training step) in a loop, timed by the
wall clock, the variants taking turns over interleaved rounds; the fastest round counts,
and each ratio comes with its range over the rounds (each round's ratio).
``--dry`` runs every part on CPU in TPU interpret mode at tiny shapes (mechanics only, no
figure), with Tokamax's heuristics config standing in for its shipped one.

On the chip, ``tools/tpu/batch_session.sh kernelsbench:330`` runs it. Run:
python bench/bench_kernels_tpu.py --json OUT.json [--only nnx,gmm,tokamax,rpa]
[--packaged DIR] [--exact-budget N] [--dry]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DRY = "--dry" in sys.argv
if DRY:
    os.environ["JAX_PLATFORMS"] = "cpu"
# The process holds the chip: its sweeps run in it. The user cache is fresh, so that what
# answers before the exact sweeps is the packaged cache (or its nearest shape) alone.
os.environ.setdefault("JAXTUNE_ISOLATION", "inline")
os.environ["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtune-bench-kernels-")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

if DRY:
    from jax.experimental.pallas import tpu as pltpu

    pltpu.set_tpu_interpret_mode()

#: Rounds the variants take turns over, and calls (or steps) a timed run makes.
ROUNDS, CALLS, STEPS = (2, 1, 1) if DRY else (10, 20, 5)
#: The grouped matmul of part ``gmm``: (tokens, d_in, d_out, group sizes).
GMM = (
    (512, 256, 256, (256, 128, 64, 64))
    if DRY
    else (8192, 2048, 4096, (3072, 1536, 1024, 1024, 512, 512, 384, 128))
)
#: Tokamax's shapes compared (as its JSON keys name them): lhs, rhs.
TOKAMAX_SHAPES = (
    (("bf16[8192,4096]", "bf16[8,4096,14336]"), ("bf16[4096,4096]", "bf16[8,4096,4096]"))
    if not DRY
    else ()
)
TOKAMAX_JSON = "data/autotuning/tpu_v5_lite/pallas_mosaic_tpu_ragged_dot.json"
#: The batch of part ``rpa``: (q heads, kv heads, head dim, page size, pages per sequence,
#: each sequence's query tokens, each sequence's context), decodes first as vLLM orders them.
RPA = (
    (8, 2, 128, 16, 8, (1, 1, 30, 32), (9, 100, 40, 128))
    if DRY
    else (
        32,
        8,
        128,
        32,
        64,
        (1,) * 12 + (200, 128, 100, 72),
        (37, 129, 260, 511, 700, 901, 1024, 1300, 1555, 1800, 2000, 2048, 200, 1500, 612, 72),
    )
)
#: The sweep's budget for part ``rpa``: 16 of the 42 configs its space holds at that batch,
#: picked by the model search (a budget in seconds would walk the space in order, smallest
#: blocks first, and could stop before the large ones).
RPA_BUDGET = "3" if DRY else "16"
#: The VMEM part ``rpa`` gives the kernel: what vLLM's TPU backend asks for past TPU v4 (at
#: Mosaic's default scope, 16 MiB on a v5e, JAX's own blocks for this batch, 64 pages of 32
#: tokens, would fill it with their KV buffers alone).
RPA_VMEM = 64 << 20


def interleaved(runs: dict[str, Callable[[], Any]], per_run: int) -> dict[str, list[float]]:
    """Seconds a call (or step) of each variant in each of :data:`ROUNDS` rounds, in which
    every variant runs once, in turn; a run makes ``per_run`` calls."""
    rounds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            start = time.perf_counter()
            jax.block_until_ready(run())
            rounds[name].append((time.perf_counter() - start) / per_run)
    return rounds


def _fastest(rounds: dict[str, list[float]]) -> dict[str, float]:
    return {name: min(times) for name, times in rounds.items()}


def _ratios(
    rounds: dict[str, list[float]], pairs: dict[str, tuple[str, str]]
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Each pair's ratio of fastest rounds, and the range of its ratio round by round (a
    round's ``a`` over the same round's ``b``): with 10 rounds, the range holds the
    rounds' median ratio with 99.8 % confidence (a sign test), so a ratio whose range
    straddles a goal has not shown it."""
    best = _fastest(rounds)
    ratios = {name: best[a] / best[b] for name, (a, b) in pairs.items()}
    ranges = {}
    for name, (a, b) in pairs.items():
        paired = [x / y for x, y in zip(rounds[a], rounds[b], strict=True)]
        ranges[name] = [min(paired), max(paired)]
    return ratios, ranges


def _print(
    part: str, times: dict[str, float], ratios: dict[str, float], ranges: dict[str, list[float]]
) -> None:
    shown = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in times.items())
    told = ", ".join(
        f"{k} {v:.3f} (rounds {ranges[k][0]:.3f}-{ranges[k][1]:.3f})" for k, v in ratios.items()
    )
    print(f"{part}: {shown}; {told}", flush=True)


# -- nnx -----------------------------------------------------------------------------------


def nnx_part(exact_budget: int) -> dict[str, Any]:
    from flax import nnx
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    import jaxtune
    from jaxtune.kernels import autotuned_flash_attention, flash_attention
    from tests.tpu import nnx_model

    class KernelsBlock(nnx_model.Block):
        """nnx_model's block, its attention :func:`jaxtune.kernels.flash_attention`."""

        def __call__(self, x: jax.Array, config: dict[str, int] | None) -> jax.Array:
            b, s, d = x.shape
            h = self.heads
            qkv = self.qkv(self.norm1(x)).reshape(b, s, 3, h, d // h).astype(jnp.bfloat16)
            q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
            blocks = None if config is None else fa.BlockSizes(**config)
            scale = 1.0 / math.sqrt(d // h)
            y = flash_attention(q, k, v, causal=True, sm_scale=scale, block_sizes=blocks)
            x = x + self.out(y.transpose(0, 2, 1, 3).reshape(b, s, d).astype(x.dtype))
            return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))

    class KernelsTransformer(nnx_model.Transformer):
        def __init__(self, size: nnx_model.Size, *, rngs: nnx.Rngs) -> None:
            self.embed = nnx.Embed(size.vocab, size.d_model, rngs=rngs)
            self.blocks = nnx.List([KernelsBlock(size, rngs=rngs) for _ in range(size.layers)])
            self.norm = nnx.LayerNorm(size.d_model, rngs=rngs)
            self.head = nnx.Linear(size.d_model, size.vocab, rngs=rngs)

    size = (
        nnx_model.Size(layers=1, d_model=256, heads=2, seq=256, batch=1, vocab=256)
        if DRY
        else nnx_model.BENCH
    )
    import optax

    model = KernelsTransformer(size, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, size.vocab, (size.batch, size.seq)), jnp.int32)

    head_dim = size.d_model // size.heads
    q = jax.ShapeDtypeStruct((size.batch, size.heads, size.seq, head_dim), jnp.bfloat16)
    scale = 1.0 / math.sqrt(head_dim)
    default = dataclasses.asdict(
        fa.BlockSizes.get_default(size.batch, size.heads, size.seq, size.seq, head_dim)
    )
    looked = autotuned_flash_attention.config_for(q, q, q, causal=True, sm_scale=scale)
    print(f"nnx: the drop-in's lookup answers from {looked.source}: {dict(looked.config)}")
    args = (graphdef, state, tokens)
    # Compiled now, before the exact sweep writes the user cache: the lookup's config.
    steps = {
        "default": nnx_model.step_with(default).lower(*args).compile(),
        "lookup": nnx_model.train_step.lower(*args).compile(),
    }
    os.environ["JAXTUNE_BUDGET"] = str(exact_budget)
    start = time.perf_counter()
    result = jaxtune.tune(nnx_model.train_step, *args, retune=True)
    tune_s = time.perf_counter() - start
    (entry,) = [e for e in result.values() if e.kernel == "jaxtune.kernels.flash_attention"]
    steps["exact"] = nnx_model.step_with(dict(entry.config)).lower(*args).compile()

    chain = {"state": state}

    def run(step: Any) -> Callable[[], Any]:
        def go() -> Any:
            for _ in range(STEPS):
                chain["state"], loss = step(graphdef, chain["state"], tokens)
            return loss

        return go

    runs = {name: run(step) for name, step in steps.items()}
    for go in runs.values():  # warm-up
        jax.block_until_ready(go())
    rounds = interleaved(runs, STEPS)
    times = _fastest(rounds)
    ratios, ranges = _ratios(
        rounds,
        {"default_over_lookup": ("default", "lookup"), "lookup_over_exact": ("lookup", "exact")},
    )
    _print("nnx", times, ratios, ranges)
    return {
        "size": dataclasses.asdict(size),
        "lookup_source": looked.source,
        "lookup_key": looked.key,
        "configs": {
            "default": default,
            "lookup": dict(looked.config),
            "exact": dict(entry.config),
        },
        "ms_per_step": {k: v * 1e3 for k, v in times.items()},
        "ratios": ratios,
        "ratio_ranges": ranges,
        "goals": {"default_over_lookup": ">= 1.7", "lookup_over_exact": "<= 1.05"},
        "exact_tune_s": tune_s,
        "exact_measured": f"{entry.measured} of {entry.space_size}",
        "exact_decision": entry.decision_text(),
    }


# -- gmm -----------------------------------------------------------------------------------


def _gmm_arrays(tokens: int, d_in: int, d_out: int, groups: int) -> tuple[Any, Any]:
    # Drawn on the device: Tokamax's largest rhs holds 470M values.
    k1, k2 = jax.random.split(jax.random.key(0))
    dtype = jnp.float32 if DRY else jnp.bfloat16
    lhs = jax.random.normal(k1, (tokens, d_in), dtype)
    rhs = jax.random.normal(k2, (groups, d_in, d_out), dtype)
    return lhs, rhs


def _gmm_call(tiling: tuple[int, int, int] | None, dtype: Any = jnp.float32) -> Callable[..., Any]:
    from jaxtune.kernels import gmm

    def call(lhs: Any, rhs: Any, sizes: Any) -> Any:
        return gmm(lhs, rhs, sizes, preferred_element_type=dtype, tiling=tiling)

    return call


def _looped(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    """``fn`` called :data:`CALLS` times in one compiled loop (tests/tpu/truth.py's), compiled
    now (a lookup's config is the one it finds now)."""
    from tests.tpu.truth import looped

    compiled = looped(fn, CALLS).lower(*args).compile()
    return functools.partial(compiled, *args)


def gmm_part() -> dict[str, Any]:
    from jaxtune.kernels import autotuned_gmm

    tokens, d_in, d_out, sizes = GMM
    lhs, rhs = _gmm_arrays(tokens, d_in, d_out, len(sizes))
    group_sizes = jnp.asarray(sizes, jnp.int32)
    args = (lhs, rhs, group_sizes)
    looked = autotuned_gmm.config_for(*args)
    print(f"gmm: the drop-in's lookup answers from {looked.source}: {dict(looked.config)}")
    runs = {
        "default": _looped(_gmm_call((128, 128, 128)), args),
        "lookup": _looped(_gmm_call(None), args),
    }
    space = len(autotuned_gmm.space(*args))
    os.environ["JAXTUNE_BUDGET"] = str(space)  # the whole space: the exact shape's best
    start = time.perf_counter()
    (entry,) = autotuned_gmm.tune(*args).values()
    tune_s = time.perf_counter() - start
    exact = tuple(entry.config[n] for n in ("tm", "tk", "tn"))
    runs["exact"] = _looped(_gmm_call(exact), args)
    for go in runs.values():
        jax.block_until_ready(go())
    rounds = interleaved(runs, CALLS)
    times = _fastest(rounds)
    ratios, ranges = _ratios(
        rounds,
        {"default_over_lookup": ("default", "lookup"), "lookup_over_exact": ("lookup", "exact")},
    )
    _print("gmm", times, ratios, ranges)
    return {
        "shape": {"lhs": [tokens, d_in], "rhs": [len(sizes), d_in, d_out]},
        "group_sizes": list(sizes),
        "lookup_source": looked.source,
        "configs": {
            "default": [128, 128, 128],
            "lookup": dict(looked.config),
            "exact": list(exact),
        },
        "ms_per_call": {k: v * 1e3 for k, v in times.items()},
        "ratios": ratios,
        "ratio_ranges": ranges,
        "goals": {"default_over_lookup": ">= 3", "lookup_over_exact": "<= 1.10"},
        "exact_tune_s": tune_s,
        "exact_measured": f"{entry.measured} of {entry.space_size}",
        "exact_decision": entry.decision_text(),
    }


# -- tokamax -------------------------------------------------------------------------------


def _shape_of(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split("[", 1)[1].rstrip("]").split(","))


def tokamax_part() -> dict[str, Any]:
    import tokamax
    from absl import flags as absl_flags

    absl_flags.FLAGS(sys.argv[:1])  # Tokamax reads absl flags; ours are not theirs
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu as rd

    if DRY:  # interpret mode, past Tokamax's device check (as bench_tokamax_tpu.py does)
        from tests.ragged_dot_space import v5e_info_for_cpu

        found = v5e_info_for_cpu()
        if found is not None:
            found[0].setdefault("cpu", found[1])
        rd.PallasMosaicTpuRaggedDot.supported_on = lambda self, device: True  # type: ignore[method-assign]
    op = rd.PallasMosaicTpuRaggedDot(interpret=DRY)
    shipped_file = pathlib.Path(tokamax.__file__).parent / TOKAMAX_JSON
    cases = []
    if DRY:
        tokens, d_in, d_out, sizes = GMM
        lhs, rhs = _gmm_arrays(tokens, d_in, d_out, len(sizes))
        gs = jnp.asarray(sizes, jnp.int32)
        config = dataclasses.asdict(op.bind(lhs, rhs, group_sizes=gs).heuristics_config)
        cases.append(("dry: Tokamax's heuristics config", lhs, rhs, gs, config, None))
    else:
        shipped = json.loads(shipped_file.read_text())
        for key_text, configs in shipped.items():
            key = json.loads(key_text)
            if key["return_residuals"] or (key["lhs"], key["rhs"]) not in TOKAMAX_SHAPES:
                continue
            (config_text, record), *_ = configs.items()
            lhs_shape, rhs_shape = _shape_of(key["lhs"]), _shape_of(key["rhs"])
            lhs, rhs = _gmm_arrays(lhs_shape[0], lhs_shape[1], rhs_shape[2], rhs_shape[0])
            gs = jnp.asarray(key["group_sizes"], jnp.int32)
            label = f"{key['lhs']} @ {key['rhs']}, group sizes {key['group_sizes']}"
            cases.append((label, lhs, rhs, gs, json.loads(config_text), record))
    from jaxtune.kernels import autotuned_gmm

    out = []
    for label, lhs, rhs, gs, config, record in cases:
        args = (lhs, rhs, gs)
        looked = autotuned_gmm.config_for(*args)
        tile = op.replace(config=rd.Config(**config))

        def tokamax_call(lhs: Any, rhs: Any, gs: Any, tile: Any = tile) -> Any:
            return tile(lhs, rhs, group_sizes=gs)

        ours = tuple(looked.config[n] for n in ("tm", "tk", "tn"))
        runs = {
            "tokamax_shipped": _looped(tokamax_call, args),
            "ours_lookup": _looped(_gmm_call(None), args),
            "ours_bf16_out": _looped(_gmm_call(ours, lhs.dtype), args),
            "jax_default": _looped(_gmm_call((128, 128, 128)), args),
        }
        for go in runs.values():
            jax.block_until_ready(go())
        rounds = interleaved(runs, CALLS)
        times = _fastest(rounds)
        ratios, ranges = _ratios(
            rounds,
            {
                "tokamax_over_ours": ("tokamax_shipped", "ours_lookup"),
                "tokamax_over_ours_bf16_out": ("tokamax_shipped", "ours_bf16_out"),
            },
        )
        _print(f"tokamax {label[:60]}", times, ratios, ranges)
        out.append(
            {
                "case": label,
                "tokamax_config": config,
                "tokamax_recorded_ms": None
                if record is None
                else min(record["evaluation_times_ms"]),
                "ours_source": looked.source,
                "ours_config": dict(looked.config),
                "ms_per_call": {k: v * 1e3 for k, v in times.items()},
                "ratios": ratios,
                "ratio_ranges": ranges,
                "goal": "tokamax_over_ours >= 1 (Tokamax's no faster)",
            }
        )
    return {
        "file": str(shipped_file),
        "version": getattr(tokamax, "__version__", None),
        "cases": out,
    }


# -- rpa -----------------------------------------------------------------------------------


def _rpa_batch() -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arrays of :data:`RPA`'s batch (pages scattered at random over the cache, as a
    serving engine hands them out) and its static options."""
    q_heads, kv_heads, head_dim, page_size, pages_per_seq, q_lens, kv_lens = RPA
    seqs, dtype = len(q_lens), jnp.float32 if DRY else jnp.bfloat16
    k1, k2 = jax.random.split(jax.random.key(0))
    q = jax.random.normal(k1, (sum(q_lens), q_heads, head_dim), dtype)
    kv_pages = jax.random.normal(
        k2, (seqs * pages_per_seq, page_size, 2 * kv_heads, head_dim), dtype
    )
    order = np.random.default_rng(0).permutation(seqs * pages_per_seq)
    args = (
        q,
        kv_pages,
        jnp.asarray(kv_lens, jnp.int32),
        jnp.asarray(order.reshape(seqs, pages_per_seq), jnp.int32),
        jnp.asarray(np.concatenate([[0], np.cumsum(q_lens)]), jnp.int32),
        jnp.asarray([seqs], jnp.int32),
    )
    return args, {"sm_scale": head_dim**-0.5, "vmem_limit_bytes": RPA_VMEM}


def _max_diff(a: Any, b: Any) -> float:
    return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))


def _close(a: Any, b: Any) -> bool:
    """Whether two attention outputs agree within bfloat16's precision."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return bool(np.allclose(a, b, rtol=2e-2, atol=2e-2))


def rpa_part() -> dict[str, Any]:
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as rpa

    from jaxtune.kernels import autotuned_ragged_paged_attention, ragged_paged_attention
    from jaxtune.kernels._ragged_paged import NAMES, jax_block_sizes

    args, options = _rpa_batch()
    jax_blocks = jax_block_sizes(args[0], args[1], args[3])
    if DRY:  # JAX's kernel in TPU interpret mode, before anything else: it may not run
        try:  # (with blocks given: off a TPU, JAX's own look-up refuses to pick them)
            jax.block_until_ready(rpa.ragged_paged_attention(*args, **options, **jax_blocks))
        except Exception as e:
            last = [line for line in str(e).splitlines() if line.strip()][-1:]
            why = f"{type(e).__name__}: {last[0].strip() if last else ''}"[:400]
            reason = f"JAX's ragged paged attention does not run in TPU interpret mode ({why})"
            print(f"rpa: chip only, skipped: {reason}", flush=True)
            return {"skipped": reason}
    # (a) Untuned, the drop-in is JAX's kernel with JAX's blocks: equal outputs; both close
    # to JAX's reference (plain jnp, one sequence at a time).
    ours = ragged_paged_attention(*args, **options)
    theirs = rpa.ragged_paged_attention(*args, **options)
    reference = rpa.ref_ragged_paged_attention(*args, sm_scale=options["sm_scale"])
    checks: dict[str, Any] = {
        "dropin_vs_jax_max_abs_diff": _max_diff(ours, theirs),
        "jax_vs_reference_max_abs_diff": _max_diff(theirs, reference),
    }
    print(f"rpa: JAX's blocks {jax_blocks}; checks {checks}", flush=True)
    # (b) A sweep on this batch, in this process (which holds the chip).
    os.environ["JAXTUNE_BUDGET"] = RPA_BUDGET
    start = time.perf_counter()
    (entry,) = autotuned_ragged_paged_attention.tune(*args, **options).values()
    tune_s = time.perf_counter() - start
    tuned = {name: entry.config[name] for name in NAMES}
    picked = rpa.ragged_paged_attention(*args, **options, **tuned)
    checks["tuned_vs_jax_max_abs_diff"] = _max_diff(picked, theirs)
    # Every row is a query token of the batch here (no padding), so whole outputs compare:
    # the drop-in exactly (the same kernel), the pick and JAX's reference within bf16's.
    checks["ok"] = checks["dropin_vs_jax_max_abs_diff"] == 0.0 and all(
        _close(a, b) for a, b in ((picked, theirs), (theirs, reference))
    )

    def call(blocks: dict[str, int]) -> Callable[..., Any]:
        def go(*arrays: Any) -> Any:
            return rpa.ragged_paged_attention(*arrays, **options, **blocks)

        return go

    # (c) JAX's own blocks (its call with none given) against the tuned pick.
    runs = {"jax_default": _looped(call({}), args), "tuned": _looped(call(tuned), args)}
    for go in runs.values():
        jax.block_until_ready(go())
    rounds = interleaved(runs, CALLS)
    times = _fastest(rounds)
    ratios, ranges = _ratios(rounds, {"default_over_tuned": ("jax_default", "tuned")})
    _print("rpa", times, ratios, ranges)
    swept = f"{entry.measured} of {entry.space_size} measured in {tune_s:.1f} s"
    verdict = "ok" if checks["ok"] else "FAILED"
    print(f"rpa: tuned {tuned} ({swept}), checks {verdict}", flush=True)
    *_, pages_per_seq, q_lens, kv_lens = RPA
    return {
        "shape": {
            "q": list(args[0].shape),
            "kv_pages": list(args[1].shape),
            "pages_per_seq": pages_per_seq,
            "dtype": str(args[0].dtype),
        },
        "q_lens": list(q_lens),
        "kv_lens": list(kv_lens),
        "vmem_limit_bytes": RPA_VMEM,
        "configs": {"jax_default": jax_blocks, "tuned": tuned},
        "checks": checks,
        "ms_per_call": {k: v * 1e3 for k, v in times.items()},
        "ratios": ratios,
        "ratio_ranges": ranges,
        "tune_s": tune_s,
        "measured": swept,
        "decision": entry.decision_text(),
        "values": {n: list(a.summary or ()) for n, a in entry.values.arguments.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=pathlib.Path, required=True)
    parser.add_argument("--only", default="nnx,gmm,tokamax")
    parser.add_argument("--dry", action="store_true", help="CPU, TPU interpret mode, tiny shapes")
    parser.add_argument(
        "--packaged",
        type=pathlib.Path,
        action="append",
        default=[],
        help="a packaged cache directory to register beside the package's",
    )
    parser.add_argument(
        "--exact-budget",
        type=int,
        default=None,
        help="configs the NNX step's exact flash sweep measures (64; dry 3)",
    )
    args = parser.parse_args()
    import warnings

    warnings.simplefilter("ignore")
    import jaxtune
    from jaxtune.kernels import _packaged

    for path in args.packaged:
        jaxtune.register_cache(path)
    dev = jax.devices()[0]
    out: dict[str, Any] = {
        "device": dev.device_kind,
        "jax": jax.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "packaged": [str(p) for p in ([_packaged.CACHE] if _packaged.CACHE.is_dir() else [])]
        + [str(p) for p in args.packaged],
        "rounds": ROUNDS,
        "calls_per_run": {"kernels": CALLS, "nnx_steps": STEPS},
    }
    parts: dict[str, Callable[[], dict[str, Any]]] = {
        "nnx": lambda: nnx_part(args.exact_budget or (3 if args.dry else 64)),
        "gmm": gmm_part,
        "tokamax": tokamax_part,
        "rpa": rpa_part,
    }
    failed = 0
    for name in args.only.split(","):
        start = time.perf_counter()
        try:
            out[name] = parts[name]()
        except Exception as e:  # a part failing keeps the others' figures
            failed += 1
            out[name] = {"error": f"{type(e).__name__}: {e}"[:3000]}
            print(f"{name} failed: {out[name]['error'][:800]}", flush=True)
        out[name]["wall_s"] = time.perf_counter() - start
        print(f"{name} done in {out[name]['wall_s']:.1f} s", flush=True)
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
