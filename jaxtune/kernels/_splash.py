"""JAX's splash attention (``jax.experimental.pallas.ops.tpu.splash_attention``) with its
``BlockSizes`` tuned per shape and mask.

JAX builds a splash kernel from a mask and block sizes (``make_splash_mha(mask,
block_sizes=..., ...)``), then calls it on ``q``, ``k``, ``v``. The drop-ins here
(:func:`make_splash_mha` and its three siblings) take JAX's arguments and return a
:class:`SplashAttention`, called like JAX's kernel; each call runs
:func:`autotuned_splash_attention`, which builds JAX's kernel with the blocks chosen for the
call's shapes and mask, while it is traced (as JAX's is built once per set of blocks).

The mask travels as plain data (:func:`mask_spec`): it is a static argument of the kernel,
part of its key, and it must reach a sweep's child process. Masks made of JAX's
computable masks (``CausalMask``, ``ChunkedCausalMask``, ``LocalMask``) and ``FullMask``
are tuned; any other mask (``NumpyMask``, logical combinations, a dynamic ``jax.Array``
mask), and blocks given by the caller, run JAX's kernel as JAX builds it, untuned.

The space, per call (q ``[heads, q_len, head_dim]``, k and v ``[kv_heads, kv_len,
head_dim]``, or ``[kv_len, head_dim]`` for multi-query attention): ``block_q`` over the
block sizes of ``q_len``, ``block_kv`` over those of ``kv_len`` and ``block_kv_compute``
over those dividing ``block_kv`` (see :mod:`._tiles`; every block a multiple of 128 or the
whole length, as the kernels require); for the backward one query block and one key block
(each kernel's compute block equal to its block), with JAX's separate dq kernel or its
fused one (``use_fused_bwd_kernel``, which takes no dq blocks); the ``[block_q,
block_kv_compute]`` float32 logits within 4 MiB, as for flash attention. The layouts stay
JAX's (head dimension minor). The default is JAX's ``BlockSizes.get_default()`` (128
everywhere, separate dq kernel) where the lengths take it, else the space's first config.
The code is the same in JAX 0.10.2 and 0.12 but for internals (0.12 keeps the kernels'
accumulators in VMEM scratch where 0.10.2 kept them in extra outputs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

import jaxtune

from ._tiles import blocks, lane_block

__all__ = [
    "FIELDS",
    "SplashAttention",
    "autotuned_splash_attention",
    "make_splash_mha",
    "make_splash_mha_single_device",
    "make_splash_mqa",
    "make_splash_mqa_single_device",
    "mask_spec",
    "splash_legal",
]

#: The config keywords: ``BlockSizes``' block fields and ``use_fused_bwd_kernel``.
FIELDS = (
    "block_q",
    "block_kv",
    "block_kv_compute",
    "block_q_dkv",
    "block_kv_dkv",
    "block_kv_dkv_compute",
    "block_q_dq",
    "block_kv_dq",
    "use_fused_bwd_kernel",
)
#: The most elements a float32 ``[block_q, block_kv_compute]`` logits block may hold.
_LOGITS = 1 << 20
_Q_BLOCKS = ("block_q", "block_q_dkv", "block_q_dq")
_KV_BLOCKS = ("block_kv", "block_kv_compute", "block_kv_dkv", "block_kv_dkv_compute", "block_kv_dq")

HeadSpec = tuple[Any, ...]
MaskSpec = tuple[tuple[int, HeadSpec], ...]


# -- masks as plain data -------------------------------------------------------------------


def _head_spec(mask: Any) -> HeadSpec | None:
    """One head's mask as a tuple of plain values, or ``None`` for a kind not described."""
    kind = type(mask)
    q_len, kv_len = (int(n) for n in mask.shape)
    if kind is sm.CausalMask:
        return ("causal", q_len, kv_len, int(mask.offset))
    if kind is sm.ChunkedCausalMask:
        return ("chunked_causal", q_len, kv_len, int(mask.chunk_size))
    if kind is sm.LocalMask:
        left, right = mask.window_size
        return ("local", q_len, kv_len, left, right, int(mask.offset))
    if kind is sm.FullMask:
        return ("full", q_len, kv_len)
    return None


def mask_spec(mask: Any) -> MaskSpec | None:
    """``mask`` as plain data, for the kernel's key and a sweep's child process: runs of
    ``(heads, head mask)`` for a ``MultiHeadMask`` of ``CausalMask``, ``ChunkedCausalMask``,
    ``LocalMask`` and ``FullMask`` heads (``((2, ("causal", 256, 256, 0)),)`` for two
    causal heads of 256 tokens); ``None`` for any other mask.

    Examples:
        >>> from jax.experimental.pallas.ops.tpu.splash_attention import CausalMask
        >>> from jax.experimental.pallas.ops.tpu.splash_attention import MultiHeadMask
        >>> from jaxtune.kernels import mask_spec
        >>> mask_spec(MultiHeadMask([CausalMask((256, 256))] * 2))
        ((2, ('causal', 256, 256, 0)),)
    """
    if type(mask) is not sm.MultiHeadMask:
        return None
    heads = [_head_spec(m) for m in mask.masks]
    runs: list[tuple[int, HeadSpec]] = []
    for head in heads:
        if head is None:
            return None
        if runs and runs[-1][1] == head:
            runs[-1] = (runs[-1][0] + 1, head)
        else:
            runs.append((1, head))
    return tuple(runs)


def _head_mask(spec: HeadSpec) -> Any:
    kind, shape = spec[0], (spec[1], spec[2])
    if kind == "causal":
        return sm.CausalMask(shape, offset=spec[3])
    if kind == "chunked_causal":
        return sm.ChunkedCausalMask(shape, chunk_size=spec[3])
    if kind == "local":
        return sm.LocalMask(shape, window_size=(spec[3], spec[4]), offset=spec[5])
    return sm.FullMask(shape)


def _mask(spec: MaskSpec) -> Any:
    """The ``MultiHeadMask`` :func:`mask_spec` describes."""
    return sm.MultiHeadMask([_head_mask(head) for count, head in spec for _ in range(count)])


# -- the space -----------------------------------------------------------------------------


def _lengths(q: Any, k: Any, is_mqa: bool) -> tuple[int, int]:
    return int(q.shape[1]), int(k.shape[0 if is_mqa else 1])


def _fits(q_block: int, kv_block: int, smallest: tuple[int, int]) -> bool:
    return q_block * kv_block <= _LOGITS or (q_block, kv_block) == smallest


def _configs(q: Any, k: Any, *args: Any, is_mqa: bool = False, **kwargs: Any) -> list[dict]:
    q_len, kv_len = _lengths(q, k, is_mqa)
    q_sizes, kv_sizes = blocks(q_len), blocks(kv_len)
    smallest = (q_sizes[0], kv_sizes[0])
    backward = [(bq, bkv) for bq in q_sizes for bkv in kv_sizes if _fits(bq, bkv, smallest)]
    out = []
    for block_q in q_sizes:
        for block_kv in kv_sizes:
            for compute in (b for b in kv_sizes if block_kv % b == 0):
                if not _fits(block_q, compute, smallest):
                    continue
                for (bq, bkv), fused in ((b, f) for b in backward for f in (False, True)):
                    out.append(
                        {
                            "block_q": block_q,
                            "block_kv": block_kv,
                            "block_kv_compute": compute,
                            "block_q_dkv": bq,
                            "block_kv_dkv": bkv,
                            "block_kv_dkv_compute": bkv,
                            "block_q_dq": None if fused else bq,
                            "block_kv_dq": None if fused else bkv,
                            "use_fused_bwd_kernel": fused,
                        }
                    )
    return out


def splash_legal(
    config: Mapping[str, Any], q: Any, k: Any, *args: Any, is_mqa: bool = False, **kwargs: Any
) -> bool:
    """Whether ``config`` is a ``BlockSizes`` JAX's splash kernels and Mosaic take for these
    shapes: every block divides its length and is a multiple of 128 or the whole length;
    each compute block divides its block; the dq blocks are given exactly when the
    backward is not fused. The ``prune`` of :func:`autotuned_splash_attention`."""
    q_len, kv_len = _lengths(q, k, is_mqa)
    c = config
    fused = c.get("use_fused_bwd_kernel")
    if not isinstance(fused, bool) or (c.get("block_q_dq") is None) != fused:
        return False
    given = [n for n in FIELDS[:-1] if not (fused and n in ("block_q_dq", "block_kv_dq"))]
    if not all(isinstance(c.get(n), int) for n in given):
        return False
    return (
        all(lane_block(c[n], q_len) for n in _Q_BLOCKS if n in given)
        and all(lane_block(c[n], kv_len) for n in _KV_BLOCKS if n in given)
        and c["block_kv"] % c["block_kv_compute"] == 0
        and c["block_kv_dkv"] % c["block_kv_dkv_compute"] == 0
    )


def _default(q: Any, k: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    sizes = sk.BlockSizes.get_default()
    jax_default = {name: getattr(sizes, name) for name in FIELDS}
    if splash_legal(jax_default, q, k, *args, **kwargs):
        return jax_default
    return _configs(q, k, *args, **kwargs)[0]


def _inputs(
    q: Any, k: Any, v: Any, segment_ids: Any = None, sinks: Any = None, **kwargs: Any
) -> dict[str, Any]:
    """Values for a sweep without the program's: normal floats, one segment."""
    rng = np.random.default_rng(0)

    def leaf(a: Any) -> Any:
        if np.issubdtype(np.dtype(a.dtype), np.integer):
            return np.zeros(a.shape, a.dtype)
        return rng.standard_normal(a.shape).astype(a.dtype)

    args = {"q": q, "k": k, "v": v, "segment_ids": segment_ids, "sinks": sinks}
    return {name: jax.tree_util.tree_map(leaf, a) for name, a in args.items()}


@jaxtune.autotuned(
    configs=_configs,
    prune=splash_legal,
    default=_default,
    static_argnames=(
        "mask",
        "is_mqa",
        "head_shards",
        "q_seq_shards",
        "save_residuals",
        "mask_value",
        "attn_logits_soft_cap",
        "downcast_smem_data",
        "residual_checkpoint_name",
        "interpret",
    ),
    inputs=_inputs,
    nearest=True,
    version="1",
    name="jaxtune.kernels.splash_attention",
)
def autotuned_splash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: sk.SegmentIds | None = None,
    sinks: jax.Array | None = None,
    *,
    mask: MaskSpec,
    is_mqa: bool = False,
    head_shards: int = 1,
    q_seq_shards: int = 1,
    save_residuals: bool = False,
    mask_value: float = sk.DEFAULT_MASK_VALUE,
    attn_logits_soft_cap: float | None = None,
    downcast_smem_data: bool = True,
    residual_checkpoint_name: str | None = None,
    interpret: bool = False,
    block_q: int,
    block_kv: int,
    block_kv_compute: int,
    block_q_dkv: int,
    block_kv_dkv: int,
    block_kv_dkv_compute: int,
    block_q_dq: int | None,
    block_kv_dq: int | None,
    use_fused_bwd_kernel: bool,
) -> Any:
    """JAX's splash attention for a mask given as plain data (:func:`mask_spec`), with its
    ``BlockSizes`` as config keywords.

    Takes the kernel call's arrays (``q``, ``k``, ``v``, optional ``segment_ids`` and
    ``sinks``), the mask's :func:`mask_spec` and the options of JAX's
    ``make_splash_mha`` (all static), builds JAX's kernel with the blocks jaxtune fills in
    and calls it. Passing any block yourself bypasses tuning. :func:`make_splash_mha` and
    its siblings are the drop-ins with JAX's signatures.

    Examples:
        >>> import jax
        >>> from jax.experimental.pallas.ops.tpu.splash_attention import CausalMask
        >>> from jax.experimental.pallas.ops.tpu.splash_attention import MultiHeadMask
        >>> from jaxtune.kernels import autotuned_splash_attention, mask_spec
        >>> q = jax.ShapeDtypeStruct((2, 256, 128), "float32")
        >>> spec = mask_spec(MultiHeadMask([CausalMask((256, 256))] * 2))
        >>> len(autotuned_splash_attention.space(q, q, q, mask=spec))
        48
    """
    sizes = sk.BlockSizes(
        block_q=block_q,
        block_kv=block_kv,
        block_kv_compute=block_kv_compute,
        block_q_dkv=block_q_dkv,
        block_kv_dkv=block_kv_dkv,
        block_kv_dkv_compute=block_kv_dkv_compute,
        block_q_dq=block_q_dq,
        block_kv_dq=block_kv_dq,
        use_fused_bwd_kernel=use_fused_bwd_kernel,
    )
    kernel = sk.make_splash_mha(
        _mask(mask),
        block_sizes=sizes,
        is_mqa=is_mqa,
        save_residuals=save_residuals,
        mask_value=mask_value,
        attn_logits_soft_cap=attn_logits_soft_cap,
        downcast_smem_data=downcast_smem_data,
        head_shards=head_shards,
        q_seq_shards=q_seq_shards,
        residual_checkpoint_name=residual_checkpoint_name,
        interpret=interpret,
    )
    given = {"segment_ids": segment_ids, "sinks": sinks}
    return kernel(q, k, v, **{name: a for name, a in given.items() if a is not None})


# -- the drop-ins --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SplashAttention:
    """What the drop-in ``make_splash_*`` functions return: call it as JAX's splash kernel,
    ``attention(q, k, v, segment_ids=None, sinks=None)``.

    For a mask :func:`mask_spec` describes and no ``block_sizes``, each call runs
    :func:`autotuned_splash_attention` (tuned blocks); otherwise JAX's kernel, built once as
    JAX builds it (``kernel``). Unlike JAX's ``SplashAttentionKernel`` it is not a pytree:
    pass it to ``shard_map`` and ``jax.jit`` by closure, not as an argument.
    """

    #: The mask as plain data, or ``None`` (JAX's kernel runs).
    spec: MaskSpec | None
    #: The options of ``make_splash_mha`` but the mask and the blocks.
    options: tuple[tuple[str, Any], ...]
    #: JAX's kernel, built when the blocks are not tuned; ``None`` when they are.
    kernel: Callable[..., Any] | None

    def __call__(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        segment_ids: sk.SegmentIds | None = None,
        sinks: jax.Array | None = None,
    ) -> Any:
        given = {"segment_ids": segment_ids, "sinks": sinks}
        arrays = {name: a for name, a in given.items() if a is not None}
        if self.kernel is not None:
            return self.kernel(q, k, v, **arrays)
        assert self.spec is not None
        return autotuned_splash_attention(q, k, v, **arrays, mask=self.spec, **dict(self.options))


def _make(mask: Any, block_sizes: sk.BlockSizes | None, options: dict[str, Any]) -> SplashAttention:
    spec = mask_spec(mask)
    if spec is not None and block_sizes is None:
        return SplashAttention(spec=spec, options=tuple(options.items()), kernel=None)
    kernel = sk.make_splash_mha(mask, block_sizes=block_sizes, **options)
    return SplashAttention(spec=spec, options=tuple(options.items()), kernel=kernel)


def make_splash_mha(
    mask: Any,
    *,
    block_sizes: sk.BlockSizes | None = None,
    is_mqa: bool = False,
    save_residuals: bool = False,
    mask_value: float = sk.DEFAULT_MASK_VALUE,
    attn_logits_soft_cap: float | None = None,
    downcast_smem_data: bool = True,
    head_shards: int,
    q_seq_shards: int,
    residual_checkpoint_name: str | None = None,
    interpret: bool = False,
) -> SplashAttention:
    """Drop-in for ``jax.experimental.pallas.ops.tpu.splash_attention.make_splash_mha``,
    with tuned block sizes.

    Same arguments as JAX's; the :class:`SplashAttention` it returns is called as JAX's
    kernel and returns what JAX's returns. With ``block_sizes`` left out (JAX's default too)
    and a mask :func:`mask_spec` describes, each call's blocks come from jaxtune's lookup
    (JAX's default blocks while nothing is tuned; in tune mode a sweep): see
    :func:`autotuned_splash_attention`. With ``block_sizes`` given, or another mask, JAX's
    kernel runs as JAX builds it, untuned. Every other argument reaches JAX's kernel
    unchanged. On CPU, run it in TPU interpret mode, as JAX's.

    Examples:
        >>> import jax
        >>> from jax.experimental.pallas import tpu as pltpu
        >>> from jax.experimental.pallas.ops.tpu.splash_attention import CausalMask
        >>> from jax.experimental.pallas.ops.tpu.splash_attention import MultiHeadMask
        >>> from jaxtune.kernels import make_splash_mha
        >>> mask = MultiHeadMask([CausalMask((256, 256))] * 2)
        >>> attention = make_splash_mha(mask, head_shards=1, q_seq_shards=1)
        >>> q = jax.random.normal(jax.random.key(0), (2, 256, 128))
        >>> with pltpu.force_tpu_interpret_mode():
        ...     out = attention(q, q, q)
        >>> out.shape
        (2, 256, 128)
    """
    options = {
        "is_mqa": is_mqa,
        "save_residuals": save_residuals,
        "mask_value": mask_value,
        "attn_logits_soft_cap": attn_logits_soft_cap,
        "downcast_smem_data": downcast_smem_data,
        "head_shards": head_shards,
        "q_seq_shards": q_seq_shards,
        "residual_checkpoint_name": residual_checkpoint_name,
        "interpret": interpret,
    }
    return _make(mask, block_sizes, options)


def make_splash_mqa(
    mask: Any,
    *,
    block_sizes: sk.BlockSizes | None = None,
    save_residuals: bool = False,
    mask_value: float = sk.DEFAULT_MASK_VALUE,
    attn_logits_soft_cap: float | None = None,
    downcast_smem_data: bool = True,
    head_shards: int,
    q_seq_shards: int,
    residual_checkpoint_name: str | None = None,
    interpret: bool = False,
) -> SplashAttention:
    """Drop-in for JAX's ``make_splash_mqa`` (multi-query: k and v ``[kv_len, head_dim]``),
    with tuned block sizes, as :func:`make_splash_mha`."""
    return make_splash_mha(
        mask,
        block_sizes=block_sizes,
        is_mqa=True,
        save_residuals=save_residuals,
        mask_value=mask_value,
        attn_logits_soft_cap=attn_logits_soft_cap,
        downcast_smem_data=downcast_smem_data,
        head_shards=head_shards,
        q_seq_shards=q_seq_shards,
        residual_checkpoint_name=residual_checkpoint_name,
        interpret=interpret,
    )


def make_splash_mha_single_device(
    mask: Any, *, block_sizes: sk.BlockSizes | None = None, **options: Any
) -> SplashAttention:
    """Drop-in for JAX's ``make_splash_mha_single_device``: :func:`make_splash_mha` with
    one head shard and one query shard."""
    return make_splash_mha(
        mask, block_sizes=block_sizes, **{"head_shards": 1, "q_seq_shards": 1, **options}
    )


def make_splash_mqa_single_device(
    mask: Any, *, block_sizes: sk.BlockSizes | None = None, **options: Any
) -> SplashAttention:
    """Drop-in for JAX's ``make_splash_mqa_single_device``: multi-query attention with one
    head shard and one query shard."""
    options = {"head_shards": 1, "q_seq_shards": 1, **options, "is_mqa": True}
    return make_splash_mha(mask, block_sizes=block_sizes, **options)
