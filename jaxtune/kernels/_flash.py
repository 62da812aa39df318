"""JAX's flash attention (``jax.experimental.pallas.ops.tpu.flash_attention``) with its
``BlockSizes`` tuned per shape.

:func:`autotuned_flash_attention` is the ``@jaxtune.autotuned`` kernel: JAX's arguments, and
the eleven ``BlockSizes`` fields as config keywords. :func:`flash_attention` is the drop-in:
JAX's signature, tuned blocks when ``block_sizes`` is left out, the caller's blocks (untuned)
when it is given. The kernel's code and ``BlockSizes`` are the same in JAX 0.10.2 and 0.12.

The space, for each call's shapes (q ``[batch, heads, q_len, head_dim]``, k and v
``[batch, heads, kv_len, head_dim]``):

- forward: ``block_q`` over the block sizes of ``q_len``, ``block_k_major`` over those of
  ``kv_len`` and ``block_k`` over those dividing ``block_k_major`` (see :mod:`._tiles`);
  ``block_b`` stays at JAX's 1 (a caller may pass it);
- backward: one query block and one key block shared by both backward kernels, each kernel's
  inner block equal to its outer one (``block_q_major_dkv = block_q_dkv = block_q_dq`` and
  ``block_k_major_dkv = block_k_dkv = block_k_major_dq = block_k_dq``), which keeps the space
  to hundreds of configs where the eleven fields apart would make millions;
- every config keeps the rules of JAX's kernel and of Mosaic (:func:`legal`), and the
  ``[block_q, block_k]`` float32 logits of the forward (and of the backward blocks) stay
  within :data:`LOGITS`, so that they fit the scoped VMEM Mosaic gives a kernel by default
  (16 MiB on TPU v5e) beside their exponentials and the blocks.

The default is JAX's own (``BlockSizes.get_default``: 128 everywhere), where the shapes
allow it; else the space's first config (its smallest blocks).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.vocabulary import Choice
from jaxtune._tuning import record as _record
from jaxtune._tuning.eager import EagerCalls
from jaxtune._tuning.space import ArgumentsError

from ._tiles import blocks, lane_block, sublane_block

__all__ = ["FIELDS", "LOGITS", "autotuned_flash_attention", "flash_attention", "legal"]

#: ``BlockSizes``' fields, in its order: the config keywords.
FIELDS = tuple(f.name for f in dataclasses.fields(fa.BlockSizes))
#: The most elements a float32 ``[block_q, block_k]`` logits block may hold (4 MiB).
LOGITS = 1 << 20
#: The fields of each of JAX's three kernels, as (major, minor) pairs along q and along k.
_BACKWARD_Q = ("block_q_major_dkv", "block_q_dkv", "block_q_dq")
_BACKWARD_K = ("block_k_major_dkv", "block_k_dkv", "block_k_major_dq", "block_k_dq")


def _lengths(q: Any, k: Any) -> tuple[int, int, int]:
    """Batch, query length and key length of a call.

    Raises:
        ArgumentsError: ``q`` or ``k`` is not ``[batch, heads, length, head_dim]`` (a
            :class:`jaxtune.SignatureError`).
    """
    for name, a in (("q", q), ("k", k)):
        if len(getattr(a, "shape", ())) != 4:
            raise ArgumentsError(
                f"flash_attention: {name} must be [batch, heads, length, head_dim] (4 "
                f"dimensions); got {name} of shape {tuple(getattr(a, 'shape', ()))}"
            )
    return int(q.shape[0]), int(q.shape[2]), int(k.shape[2])


def _fits(q_block: int, k_block: int, smallest: tuple[int, int]) -> bool:
    """Whether a ``[q_block, k_block]`` logits block is within :data:`LOGITS` (or is the
    smallest the shapes allow, which is kept whatever its size)."""
    return q_block * k_block <= LOGITS or (q_block, k_block) == smallest


def _configs(q: Any, k: Any, *args: Any, **kwargs: Any) -> list[dict[str, int]]:
    """The space for a call's shapes (see the module's docstring), smallest blocks first."""
    _, q_len, kv_len = _lengths(q, k)
    q_sizes, k_sizes = blocks(q_len), blocks(kv_len)
    smallest = (q_sizes[0], k_sizes[0])
    backward = [(bq, bk) for bq in q_sizes for bk in k_sizes if _fits(bq, bk, smallest)]
    out = []
    for block_q in q_sizes:
        for major in k_sizes:
            for minor in (b for b in k_sizes if major % b == 0):
                if not _fits(block_q, minor, smallest):
                    continue
                forward = {"block_q": block_q, "block_k_major": major, "block_k": minor}
                for bq, bk in backward:
                    config = {
                        **forward,
                        "block_b": 1,
                        **dict.fromkeys(_BACKWARD_Q, bq),
                        **dict.fromkeys(_BACKWARD_K, bk),
                    }
                    out.append({name: config[name] for name in FIELDS})
    return out


def legal(config: Mapping[str, Any], q: Any, k: Any, *args: Any, **kwargs: Any) -> bool:
    """Whether ``config`` is a ``BlockSizes`` that JAX's kernels and Mosaic take for these
    shapes: every block divides its sequence length; a block along a lane dimension (the
    key blocks: the bias block's last dimension) is a multiple of 128 or the whole length,
    one along a sublane dimension (the query blocks) a multiple of 8 or the whole length;
    each inner block divides its outer one; ``block_b`` divides the batch.

    The ``prune`` of :func:`autotuned_flash_attention`, so that a config borrowed from a
    nearest tuned shape is never one these shapes cannot run.
    """
    batch, q_len, kv_len = _lengths(q, k)
    c = config
    if any(not isinstance(c.get(name), int) for name in FIELDS):
        return False
    pairs = (
        (c["block_k_major"], c["block_k"]),
        (c["block_q_major_dkv"], c["block_q_dkv"]),
        (c["block_k_major_dkv"], c["block_k_dkv"]),
        (c["block_k_major_dq"], c["block_k_dq"]),
    )
    return (
        0 < c["block_b"] <= batch
        and batch % c["block_b"] == 0
        and all(sublane_block(c[name], q_len) for name in ("block_q", *_BACKWARD_Q))
        and all(lane_block(c[name], kv_len) for name in ("block_k_major", "block_k"))
        and all(lane_block(c[name], kv_len) for name in _BACKWARD_K)
        and all(major % minor == 0 for major, minor in pairs)
    )


def _default(q: Any, k: Any, *args: Any, **kwargs: Any) -> dict[str, int]:
    """JAX's default blocks for these shapes where they are legal, else the space's first."""
    batch, q_len, kv_len = _lengths(q, k)
    heads, head_dim = int(q.shape[1]), int(q.shape[3])
    jax_default = dataclasses.asdict(
        fa.BlockSizes.get_default(batch, heads, q_len, kv_len, head_dim)
    )
    if legal(jax_default, q, k):
        return jax_default
    return _configs(q, k)[0]


def _flops(q: Any, k: Any, *args: Any, causal: bool = False, **kwargs: Any) -> float:
    """The forward's matmul FLOPs (two per query-key pair and head dimension, twice),
    about half of them under a causal mask."""
    batch, q_len, kv_len = _lengths(q, k)
    full = 4.0 * batch * int(q.shape[1]) * q_len * kv_len * int(q.shape[3])
    return full / 2 if causal else full


def _inputs(
    q: Any, k: Any, v: Any, ab: Any = None, segment_ids: Any = None, **kwargs: Any
) -> dict[str, Any]:
    """Values for a sweep without the program's own: normal floats for q, k, v and the
    bias, and one segment (all zeros) for segment ids, so no integer is made up at random
    (segment ids mask work, they never change how much is done)."""
    rng = np.random.default_rng(0)

    def leaf(a: Any) -> Any:
        if np.issubdtype(np.dtype(a.dtype), np.integer):
            return np.zeros(a.shape, a.dtype)
        return rng.standard_normal(a.shape).astype(a.dtype)

    args = {"q": q, "k": k, "v": v, "ab": ab, "segment_ids": segment_ids}
    return {name: jax.tree_util.tree_map(leaf, a) for name, a in args.items()}


@jaxtune.autotuned(
    configs=_configs,
    prune=legal,
    default=_default,
    static_argnames=("causal", "sm_scale", "debug"),
    inputs=_inputs,
    flops=_flops,
    nearest=True,
    version="1",
    name="jaxtune.kernels.flash_attention",
)
def autotuned_flash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    ab: jax.Array | None = None,
    segment_ids: fa.SegmentIds | None = None,
    *,
    causal: bool = False,
    sm_scale: float = 1.0,
    debug: bool = False,
    block_q: int,
    block_k_major: int,
    block_k: int,
    block_b: int,
    block_q_major_dkv: int | None,
    block_k_major_dkv: int | None,
    block_k_dkv: int | None,
    block_q_dkv: int | None,
    block_k_major_dq: int | None,
    block_k_dq: int | None,
    block_q_dq: int | None,
) -> jax.Array:
    """JAX's flash attention with its ``BlockSizes`` fields as config keywords.

    Takes JAX's arguments (``q``, ``k``, ``v`` ``[batch, heads, length, head_dim]``, an
    optional bias ``ab`` and ``segment_ids``; ``causal``, ``sm_scale`` and ``debug`` are
    static) and the eleven ``BlockSizes`` fields, which jaxtune fills in: tuned per shape,
    dtype, static values and device, JAX's default blocks when nothing is known. Passing
    any field yourself bypasses tuning for that call (the others take the default's value).
    Use it for :meth:`~jaxtune.Autotuned.tune`, :meth:`~jaxtune.Autotuned.config_for` and
    :meth:`~jaxtune.Autotuned.space`; :func:`flash_attention` is the drop-in with JAX's
    signature.

    Examples:
        >>> import jax
        >>> from jaxtune.kernels import autotuned_flash_attention
        >>> q = jax.ShapeDtypeStruct((1, 2, 256, 128), "float32")
        >>> len(autotuned_flash_attention.space(q, q, q, causal=True))
        24
        >>> autotuned_flash_attention.config_for(q, q, q).config["block_q"]
        128
    """
    sizes = fa.BlockSizes(
        block_q=block_q,
        block_k_major=block_k_major,
        block_k=block_k,
        block_b=block_b,
        block_q_major_dkv=block_q_major_dkv,
        block_k_major_dkv=block_k_major_dkv,
        block_k_dkv=block_k_dkv,
        block_q_dkv=block_q_dkv,
        block_k_major_dq=block_k_major_dq,
        block_k_dq=block_k_dq,
        block_q_dq=block_q_dq,
    )
    return fa.flash_attention(
        q, k, v, ab, segment_ids, causal=causal, sm_scale=sm_scale, block_sizes=sizes, debug=debug
    )


def flash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    ab: jax.Array | None = None,
    segment_ids: fa.SegmentIds | None = None,
    *,
    causal: bool = False,
    sm_scale: float = 1.0,
    block_sizes: fa.BlockSizes | None = None,
    debug: bool = False,
) -> jax.Array:
    """Drop-in for ``jax.experimental.pallas.ops.tpu.flash_attention.flash_attention``,
    with tuned block sizes.

    Same signature and results as JAX's. With ``block_sizes`` left out (``None``, JAX's
    default too), the blocks come from jaxtune's lookup (the user cache, a packaged cache,
    a tuned nearby shape, in tune mode a sweep), else JAX's default blocks: see
    :func:`autotuned_flash_attention`. A call at a ``sm_scale`` nothing is known for
    (JAX's default of 1.0, say) takes the blocks known for its shapes at
    ``1 / sqrt(head_dim)``, the packaged table's scale (the scale changes no block's work),
    as explicit blocks; ``JAXTUNE_MODE=retune`` sweeps its own scale instead. With
    ``block_sizes`` given, those blocks run as given, untuned (explicit config keywords).
    Every other argument reaches JAX's kernel unchanged. On CPU, run it in TPU interpret
    mode as JAX's
    (``pltpu.force_tpu_interpret_mode()``); jaxtune carries the mode into its sweeps.

    Examples:
        >>> import jax
        >>> from jax.experimental.pallas import tpu as pltpu
        >>> from jaxtune.kernels import flash_attention
        >>> q = jax.random.normal(jax.random.key(0), (1, 2, 256, 128))
        >>> with pltpu.force_tpu_interpret_mode():
        ...     out = flash_attention(q, q, q, causal=True)
        >>> out.shape
        (1, 2, 256, 128)
    """
    # An argument left out and one given as None make different keys: leave out what the
    # caller left out, so that the drop-in and the kernel called alike share their entries.
    given = {"ab": ab, "segment_ids": segment_ids}
    arrays = {name: value for name, value in given.items() if value is not None}
    options = {"causal": causal, "sm_scale": sm_scale, "debug": debug}
    if block_sizes is not None:
        if not isinstance(block_sizes, fa.BlockSizes):
            raise TypeError(
                "flash_attention: block_sizes must be a "
                "jax.experimental.pallas.ops.tpu.flash_attention.BlockSizes or None (tuned); "
                f"got {block_sizes!r}"
            )
        blocks = dataclasses.asdict(block_sizes)
        return autotuned_flash_attention(q, k, v, **arrays, **options, **blocks)
    # Through the kernel's kind of eager jit: the lookups below run when it traces (once per
    # shapes, static values and cache state), not on every eager call.
    return _EAGER.call(q, k, v, **arrays, **options)


def _looked_up(
    q: Any,
    k: Any,
    v: Any,
    ab: Any = None,
    segment_ids: Any = None,
    *,
    causal: bool,
    sm_scale: float,
    debug: bool,
) -> jax.Array:
    """The drop-in's call with the blocks its lookup gives (:func:`_blocks_at_the_usual_scale`
    first). ``JAXTUNE_VERBOSE`` names where blocks taken at the usual scale came from, and
    that scale, on the call's own key."""
    given = {"ab": ab, "segment_ids": segment_ids}
    options = {"causal": causal, "debug": debug}
    options |= {name: value for name, value in given.items() if value is not None}
    usual = 1.0 / math.sqrt(q.shape[-1])
    found = _blocks_at_the_usual_scale(q, k, v, sm_scale, usual, options)
    if found is None:
        return autotuned_flash_attention(q, k, v, sm_scale=sm_scale, **options)
    key, known = found
    _record.report(
        autotuned_flash_attention.kernel_id, key, known, via=f", tuned at sm_scale={usual:.6g}"
    )
    with _record.unreported():  # not "explicit": the line above says where they came from
        return autotuned_flash_attention(q, k, v, sm_scale=sm_scale, **options, **known.config)


def _blocks_at_the_usual_scale(
    q: Any, k: Any, v: Any, sm_scale: float, usual: float, options: Mapping[str, Any]
) -> tuple[str, Choice] | None:
    """The call's key and the lookup of the blocks known for these shapes at ``usual`` (``1
    / sqrt(head_dim)``, the packaged table's scale), for a call at another scale that
    nothing is known for (JAX's default of 1.0 among them): the scale multiplies the logits
    and changes no block's work, but it is a static argument, part of the key. ``None``
    (the call's own lookup) where the call's scale is that scale, has a config of its own,
    nothing is known at that scale either, or the mode is ``retune`` (which sweeps the
    call's own key)."""
    if sm_scale == usual or _settings.settings().mode == "retune":
        return None
    kernel = autotuned_flash_attention
    own = kernel.config_for(q, k, v, sm_scale=sm_scale, **options)
    if own.source != "default":
        return None
    known = kernel.config_for(q, k, v, sm_scale=usual, **options)
    return None if known.source == "default" else (own.key, known)


#: The drop-in's eager calls: one jit, renewed as the kernel's own is (a cache, a scope or
#: a setting that decides the config changed), whose trace does the lookups.
_EAGER = EagerCalls(
    autotuned_flash_attention, _looked_up, _looked_up, ("causal", "sm_scale", "debug"), fast=False
)
