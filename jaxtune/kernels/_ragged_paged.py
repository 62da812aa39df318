"""JAX's ragged paged attention (``jax.experimental.pallas.ops.tpu.ragged_paged_attention``)
with its two block sizes tuned per shape, on the program's own batch.

:func:`autotuned_ragged_paged_attention` is the ``@jaxtune.autotuned`` kernel: JAX's
arguments, and ``num_kv_pages_per_block`` and ``num_queries_per_block`` as config keywords.
:func:`ragged_paged_attention` is the drop-in with JAX's signature. The kernel's code is
the same in JAX 0.10.2 and 0.12.1; its table module (``tuned_block_sizes.py``) reads the
device kind more leniently in 0.12.1 (a regular expression where 0.10.2 asserts the form
``TPU vN``), with the same tables.

The space, for each call's shapes (q ``[tokens, q_heads, head_dim]``, kv pages
``[pages, page_size, 2 * kv_heads, head_dim]``, page indices ``[max_num_seqs,
pages_per_seq]``): ``num_kv_pages_per_block`` over the powers of two up to 128, each capped
at ``pages_per_seq`` (JAX's static validation asks for ``0 < n <= pages_per_seq``),
``num_queries_per_block`` over the powers of two from 8 to 256, each capped at the token
count, keeping what a config holds in VMEM (:func:`vmem_bytes`) within the call's
``vmem_limit_bytes``, or :data:`~jaxtune.kernels._tiles.VMEM` when it gives none.
``vmem_limit_bytes`` is not tuned: it changes no work, only which blocks compile, and
the VMEM a kernel may take is the caller's to give; it stays the caller's static
argument, part of the key, and bounds the space.

The default is what JAX's kernel picks by itself: ``get_tuned_block_sizes`` (its table for
the chip, else its fallback, 128 pages and 32 queries, each capped by the shapes) on the
heads per block JAX's kernel computes. Off a TPU, where JAX's look-up refuses to answer
(``TPU version must be 4 or higher``), the default is that fallback.

``kv_lens``, ``page_indices``, ``cu_q_lens`` and ``num_seqs`` are values the work depends
on: the kernel walks each sequence's pages and queries. A sweep runs on the program's
own values wherever it has them (your arrays in tune mode or ``kernel.tune``, the values
``jaxtune tune --`` records); without them, on :func:`batch_values` (every sequence at the
full context, the query tokens split evenly), which the entry names as ``inputs=``, never
on random integers.

The output's rows past ``cu_q_lens[num_seqs]`` (a batch's padding) hold whatever the
kernel's scratch held, which differs between block sizes; jaxtune's output check compares
whole outputs, so it is off for this kernel (``check=False``). The bench
(``bench/bench_kernels_tpu.py --only rpa``) compares the valid rows on the chip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as _jax
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import tuned_block_sizes

import jaxtune

from ._tiles import VMEM

__all__ = [
    "FALLBACK",
    "KV_PAGES",
    "NAMES",
    "QUERIES",
    "autotuned_ragged_paged_attention",
    "batch_values",
    "jax_block_sizes",
    "legal",
    "ragged_paged_attention",
    "vmem_bytes",
]

#: The config keywords, JAX's own argument names.
NAMES = ("num_kv_pages_per_block", "num_queries_per_block")
#: Candidate pages per block, each capped at the call's pages per sequence.
KV_PAGES = (1, 2, 4, 8, 16, 32, 64, 128)
#: Candidate queries per block, each capped at the call's token count.
QUERIES = (8, 16, 32, 64, 128, 256)
#: JAX's block sizes for a TPU v5 or newer without a table entry, ``(pages, queries)``,
#: before the shapes cap them; the default off a TPU.
FALLBACK = (128, 32)


def _shapes(q: Any, kv_pages: Any, page_indices: Any) -> dict[str, int]:
    tokens, q_heads, head_dim = (int(d) for d in q.shape)
    _, page_size, combined, _ = (int(d) for d in kv_pages.shape)
    seqs, pages_per_seq = (int(d) for d in page_indices.shape)
    return {
        "tokens": tokens,
        "q_heads": q_heads,
        "combined": combined,
        "head_dim": head_dim,
        "page_size": page_size,
        "seqs": seqs,
        "pages_per_seq": pages_per_seq,
    }


def _heads_per_block(q: Any, kv_pages: Any) -> tuple[int, int]:
    """``(q heads, combined kv heads)`` of one kernel block, as JAX's kernel computes them
    (it refuses head counts Mosaic cannot tile, with JAX's message)."""
    q_heads, combined = int(q.shape[1]), int(kv_pages.shape[2])
    found = _jax.get_min_heads_per_blk(q_heads, combined, q.dtype, kv_pages.dtype)
    return int(found[0]), int(found[1])


def jax_block_sizes(q: Any, kv_pages: Any, page_indices: Any) -> dict[str, int]:
    """The blocks JAX's kernel picks by itself for these shapes on this process's device:
    its ``get_tuned_block_sizes``, called as the kernel calls it; off a TPU, where that
    refuses, JAX's fallback :data:`FALLBACK` capped by the shapes, as JAX caps it."""
    s = _shapes(q, kv_pages, page_indices)
    q_per_block, combined_per_block = _heads_per_block(q, kv_pages)
    try:
        pages, queries = tuned_block_sizes.get_tuned_block_sizes(
            q.dtype,
            kv_pages.dtype,
            q_per_block,
            combined_per_block // 2,
            s["head_dim"],
            s["page_size"],
            s["tokens"],
            s["pages_per_seq"],
        )
    except NotImplementedError:  # not a TPU v4 or newer: JAX's lookup has no answer
        pages = min(s["pages_per_seq"], FALLBACK[0])
        queries = min(s["tokens"], FALLBACK[1])
    return dict(zip(NAMES, (int(pages), int(queries)), strict=True))


def vmem_bytes(config: Mapping[str, int], q: Any, kv_pages: Any) -> int:
    """What a config keeps in VMEM, after JAX's kernel: the two buffers of key and value
    pages it copies in, the query and output blocks (two buffers each), the float32
    accumulator and its two softmax statistics (128 lanes a row), and the float32 logits
    of one kv head with their exponentials."""
    pages, queries = config[NAMES[0]], config[NAMES[1]]
    page_size, head_dim = int(kv_pages.shape[1]), int(kv_pages.shape[3])
    q_per_block, combined_per_block = _heads_per_block(q, kv_pages)
    group = int(q.shape[1]) // (int(kv_pages.shape[2]) // 2)  # q heads per kv head
    kv_item, q_item = np.dtype(kv_pages.dtype).itemsize, np.dtype(q.dtype).itemsize
    kv_buffers = 2 * pages * page_size * combined_per_block * head_dim * kv_item
    q_and_out = 2 * 2 * queries * q_per_block * head_dim * q_item
    accumulator = queries * q_per_block * head_dim * 4
    statistics = 2 * (combined_per_block // 2) * queries * group * 128 * 4
    logits = 2 * queries * group * pages * page_size * 4
    return kv_buffers + q_and_out + accumulator + statistics + logits


def legal(
    config: Mapping[str, Any],
    q: Any,
    kv_pages: Any,
    kv_lens: Any,
    page_indices: Any,
    *args: Any,
    vmem_limit_bytes: int | None = None,
    **kwargs: Any,
) -> bool:
    """Whether ``config`` holds block sizes JAX's kernel takes for these shapes (its static
    validation: ``0 < num_kv_pages_per_block <= pages_per_seq``, ``num_queries_per_block``
    positive) and whose VMEM (:func:`vmem_bytes`) fits ``vmem_limit_bytes``, or
    :data:`~jaxtune.kernels._tiles.VMEM` when the call gives none. The ``prune`` of
    :func:`autotuned_ragged_paged_attention`."""
    pages, queries = (config.get(name) for name in NAMES)
    if not (isinstance(pages, int) and isinstance(queries, int)):
        return False
    pages_per_seq = int(page_indices.shape[1])
    if not (0 < pages <= pages_per_seq and queries > 0):
        return False
    return vmem_bytes(config, q, kv_pages) <= (vmem_limit_bytes or VMEM)


def _configs(
    q: Any, kv_pages: Any, kv_lens: Any, page_indices: Any, *args: Any, **kwargs: Any
) -> list[dict[str, int]]:
    """The candidates for a call's shapes (see the module's docstring), smallest blocks
    first; ``prune`` keeps those that fit."""
    s = _shapes(q, kv_pages, page_indices)
    _heads_per_block(q, kv_pages)  # JAX's refusal of untileable heads, before any config
    pages = sorted({min(p, s["pages_per_seq"]) for p in KV_PAGES})
    queries = sorted({min(n, s["tokens"]) for n in QUERIES})
    return [dict(zip(NAMES, (p, n), strict=True)) for p in pages for n in queries]


def _default(
    q: Any, kv_pages: Any, kv_lens: Any, page_indices: Any, *args: Any, **kwargs: Any
) -> dict[str, int]:
    return jax_block_sizes(q, kv_pages, page_indices)


def batch_values(
    q: Any, kv_pages: Any, kv_lens: Any, page_indices: Any, cu_q_lens: Any, num_seqs: Any
) -> dict[str, np.ndarray]:
    """Integer values of a valid batch for these shapes, for a sweep without the program's:
    as many sequences as the shapes hold (at most one per token), the query tokens split
    evenly between them, every sequence at the full context (``pages_per_seq`` pages), each
    on pages of its own where the cache holds enough. They pass JAX's
    ``dynamic_validate_inputs``."""
    s = _shapes(q, kv_pages, page_indices)
    total_pages = int(kv_pages.shape[0])
    context = s["pages_per_seq"] * s["page_size"]
    seqs = max(1, min(s["seqs"], s["tokens"]))
    q_lens = np.full((seqs,), s["tokens"] // seqs, np.int64)
    q_lens[: s["tokens"] % seqs] += 1
    q_lens = np.minimum(q_lens, context)  # a query may not outrun its context
    lens = np.zeros((s["seqs"],), np.int32)
    lens[:seqs] = context
    cu = np.zeros((s["seqs"] + 1,), np.int32)
    cu[1 : seqs + 1] = np.cumsum(q_lens)
    cu[seqs + 1 :] = cu[seqs]
    pages = np.arange(s["seqs"] * s["pages_per_seq"]) % total_pages
    return {
        "kv_lens": lens,
        "page_indices": pages.reshape(s["seqs"], s["pages_per_seq"]).astype(np.int32),
        "cu_q_lens": cu,
        "num_seqs": np.array([seqs], np.int32),
    }


def _inputs(
    q: Any,
    kv_pages: Any,
    kv_lens: Any,
    page_indices: Any,
    cu_q_lens: Any,
    num_seqs: Any,
    **kwargs: Any,
) -> dict[str, Any]:
    """Values for a sweep without the program's: normal floats for the queries and pages,
    :func:`batch_values` for the rest."""
    rng = np.random.default_rng(0)
    return {
        "q": rng.standard_normal(q.shape).astype(q.dtype),
        "kv_pages": rng.standard_normal(kv_pages.shape).astype(kv_pages.dtype),
        **batch_values(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs),
    }


@jaxtune.autotuned(
    configs=_configs,
    prune=legal,
    default=_default,
    static_argnames=(
        "sm_scale",
        "sliding_window",
        "soft_cap",
        "mask_value",
        "k_scale",
        "v_scale",
        "vmem_limit_bytes",
    ),
    inputs=_inputs,
    check=False,
    nearest=True,
    version="1",
    name="jaxtune.kernels.ragged_paged_attention",
)
def autotuned_ragged_paged_attention(
    q: jax.Array,
    kv_pages: jax.Array,
    kv_lens: jax.Array,
    page_indices: jax.Array,
    cu_q_lens: jax.Array,
    num_seqs: jax.Array,
    *,
    sm_scale: float = 1.0,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    mask_value: float | None = _jax.DEFAULT_MASK_VALUE,
    k_scale: float | None = None,
    v_scale: float | None = None,
    vmem_limit_bytes: int | None = None,
    num_kv_pages_per_block: int,
    num_queries_per_block: int,
) -> jax.Array:
    """JAX's ragged paged attention (a batch of sequences, prefill and decode mixed, over a
    paged KV cache) with its two block sizes as config keywords.

    Takes JAX's arrays (``q`` ``[tokens, q_heads, head_dim]``, ``kv_pages`` ``[pages,
    page_size, 2 * kv_heads, head_dim]``, int32 ``kv_lens`` ``[max_num_seqs]``,
    ``page_indices`` ``[max_num_seqs, pages_per_seq]``, ``cu_q_lens`` ``[max_num_seqs + 1]``
    and ``num_seqs`` ``[1]``) and its static options, and ``num_kv_pages_per_block`` and
    ``num_queries_per_block``, which jaxtune fills in: tuned per shape, static values and
    device on the program's batch, JAX's own pick while nothing is tuned. Passing either
    yourself bypasses tuning (the other takes JAX's pick). :func:`ragged_paged_attention`
    is the drop-in with JAX's signature. JAX's kernel runs on a TPU only (not in interpret
    mode): on CPU, ask for configs and spaces, or lower for TPU.

    Examples:
        >>> import jax
        >>> from jaxtune.kernels import autotuned_ragged_paged_attention as rpa
        >>> q = jax.ShapeDtypeStruct((512, 32, 128), "bfloat16")
        >>> kv_pages = jax.ShapeDtypeStruct((1024, 32, 16, 128), "bfloat16")
        >>> lens = jax.ShapeDtypeStruct((16,), "int32")
        >>> pages = jax.ShapeDtypeStruct((16, 64), "int32")
        >>> cu = jax.ShapeDtypeStruct((17,), "int32")
        >>> seqs = jax.ShapeDtypeStruct((1,), "int32")
        >>> rpa.config_for(q, kv_pages, lens, pages, cu, seqs).config  # off a TPU
        {'num_kv_pages_per_block': 64, 'num_queries_per_block': 32}
    """
    return _jax.ragged_paged_attention(
        q,
        kv_pages,
        kv_lens,
        page_indices,
        cu_q_lens,
        num_seqs,
        sm_scale=sm_scale,
        sliding_window=sliding_window,
        soft_cap=soft_cap,
        mask_value=mask_value,
        k_scale=k_scale,
        v_scale=v_scale,
        num_kv_pages_per_block=num_kv_pages_per_block,
        num_queries_per_block=num_queries_per_block,
        vmem_limit_bytes=vmem_limit_bytes,
    )


def ragged_paged_attention(
    q: jax.Array,
    kv_pages: jax.Array,
    kv_lens: jax.Array,
    page_indices: jax.Array,
    cu_q_lens: jax.Array,
    num_seqs: jax.Array,
    *,
    sm_scale: float = 1.0,
    sliding_window: int | None = None,
    soft_cap: float | None = None,
    mask_value: float | None = _jax.DEFAULT_MASK_VALUE,
    k_scale: float | None = None,
    v_scale: float | None = None,
    num_kv_pages_per_block: int | None = None,
    num_queries_per_block: int | None = None,
    vmem_limit_bytes: int | None = None,
) -> jax.Array:
    """Drop-in for ``jax.experimental.pallas.ops.tpu.ragged_paged_attention
    .ragged_paged_attention``, with tuned block sizes.

    Same signature and results as JAX's. With ``num_kv_pages_per_block`` and
    ``num_queries_per_block`` left out (``None``, JAX's default too), the blocks come from
    jaxtune's lookup (the user cache, a packaged cache, a tuned nearby shape, in tune mode
    a sweep on the call's own batch), else JAX's own pick: see
    :func:`autotuned_ragged_paged_attention`. Both given run as given, untuned. One
    difference: one of them given runs with that value and JAX's pick for the other, where
    JAX's kernel ignores a lone value and looks both up. Every other argument reaches JAX's
    kernel unchanged. Runs on a TPU only, as JAX's (it does not run in TPU interpret mode).

    Examples:
        >>> import jax
        >>> from jaxtune.kernels import ragged_paged_attention
        >>> def attend(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs):
        ...     args = (q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs)
        ...     return ragged_paged_attention(*args, sm_scale=128**-0.5)
        >>> shapes = [((64, 8, 128), "bfloat16"), ((64, 16, 4, 128), "bfloat16")]
        >>> shapes += [((4,), "int32"), ((4, 8), "int32"), ((5,), "int32"), ((1,), "int32")]
        >>> args = [jax.ShapeDtypeStruct(*s) for s in shapes]
        >>> jax.eval_shape(attend, *args).shape
        (64, 8, 128)
    """
    given = {
        name: value
        for name, value in zip(NAMES, (num_kv_pages_per_block, num_queries_per_block), strict=True)
        if value is not None
    }
    return autotuned_ragged_paged_attention(
        q,
        kv_pages,
        kv_lens,
        page_indices,
        cu_q_lens,
        num_seqs,
        sm_scale=sm_scale,
        sliding_window=sliding_window,
        soft_cap=soft_cap,
        mask_value=mask_value,
        k_scale=k_scale,
        v_scale=v_scale,
        vmem_limit_bytes=vmem_limit_bytes,
        **given,
    )
