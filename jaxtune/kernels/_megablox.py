"""JAX's megablox grouped matmuls (``jax.experimental.pallas.ops.tpu.megablox``): ``gmm``
and ``tgmm`` with their ``tiling=(tm, tk, tn)`` tuned per shape.

:func:`autotuned_gmm` and :func:`autotuned_tgmm` are the ``@jaxtune.autotuned`` kernels
(JAX's arguments, and ``tm``, ``tk``, ``tn`` as config keywords); :func:`gmm` and
:func:`tgmm` are the drop-ins with JAX's signatures. ``gmm`` is JAX's differentiable one
(``megablox.gmm``, whose backward runs ``gmm`` and ``tgmm`` with the same tiling); ``tgmm``
is the kernel module's (``megablox.gmm.tgmm``; the package exports only ``gmm``). Their code
is the same in JAX 0.10.2 and 0.12 but for type annotations (``preferred_element_type`` is
a ``jnp.dtype`` there, a ``DTypeLike`` here).

The space, for each call's shapes: ``tm`` over the block sizes of the rows ``m`` (JAX needs
``m`` divisible by ``tm``), ``tk`` over those of the contraction ``k``, ``tn`` over those of
the output width ``n`` (see :mod:`._tiles`), keeping the (8, 128) rule (``tm`` is a sublane
dimension, ``tk`` and ``tn`` lane dimensions), whole blocks only, and the blocks a kernel
keeps in VMEM (two buffers of each input block and of the output block, and the float32
accumulator) within :data:`VMEM` (the scoped VMEM Mosaic gives a kernel by default on a TPU
v5e). The default is JAX's ``(128, 128, 128)`` where the shapes take it, else the space's
first config (its smallest blocks).

``group_sizes`` are values the work depends on: the grid visits the row tiles the groups
cover. A sweep runs on the program's own group sizes wherever it has them (your arrays in
tune mode or ``kernel.tune``, the values ``jaxtune tune --`` records); without them (shapes
only, as in tune mode inside ``jax.jit``), on groups that split the rows evenly, never on
random integers (which would leave most rows in no group).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu import megablox

import jaxtune
from jaxtune._tuning.space import ArgumentsError

from ._tiles import VMEM, blocks, lane_block, sublane_block

__all__ = [
    "JAX_TILING",
    "VMEM",
    "autotuned_gmm",
    "autotuned_tgmm",
    "gmm",
    "gmm_legal",
    "tgmm",
    "tgmm_legal",
]

#: The kernel module (``megablox.gmm`` is the package's differentiable function, which
#: shadows the module's name).
_KERNELS = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")
#: JAX's differentiable ``gmm`` (a ``jax.custom_vjp``) under a ``jax.jit`` of its own:
#: JAX 0.12 lowers a custom_vjp called straight inside the kernel's scope to a call whose
#: location is ``eval_jaxpr:`` around the name stack, where ``jaxtune.tune`` and
#: ``jaxtune.locate`` do not see the kernel's marker; a jit's call carries the name stack
#: plainly, as in JAX 0.10.2. The jit costs nothing once compiled (XLA inlines it).
_GMM = jax.jit(megablox.gmm, static_argnums=(3, 4, 7, 8))
#: JAX's default tiling of both kernels.
JAX_TILING = (128, 128, 128)
_NAMES = ("tm", "tk", "tn")

Tiling = tuple[int, int, int] | Callable[[int, int, int], tuple[int, int, int] | None] | None


def _bytes(a: Any) -> int:
    return int(np.dtype(a.dtype).itemsize)


def _ranks(**arrays: tuple[Any, int]) -> None:
    """Raises JAX's kernels' own message (``Expected 2-tensor for 'lhs' but got
    3-tensor.``) as an :class:`~jaxtune._tuning.space.ArgumentsError` for an array of
    another rank, before a callback reads its dimensions."""
    for name, (a, rank) in arrays.items():
        got = len(getattr(a, "shape", ()))
        if got != rank:
            raise ArgumentsError(f"Expected {rank}-tensor for '{name}' but got {got}-tensor.")


def _gmm_dims(lhs: Any, rhs: Any, transpose_rhs: bool) -> tuple[int, int, int]:
    """``(m, k, n)`` of a ``gmm`` call, as JAX's kernel reads them."""
    _ranks(lhs=(lhs, 2), rhs=(rhs, 3))
    return int(lhs.shape[0]), int(lhs.shape[1]), int(rhs.shape[1 if transpose_rhs else 2])


def _tgmm_dims(lhs: Any, rhs: Any) -> tuple[int, int, int]:
    """``(m, k, n)`` of a ``tgmm`` call (lhs ``[k, m]``, rhs ``[m, n]``)."""
    _ranks(lhs=(lhs, 2), rhs=(rhs, 2))
    return int(lhs.shape[1]), int(lhs.shape[0]), int(rhs.shape[1])


def _whole(config: Mapping[str, Any], m: int, k: int, n: int) -> bool:
    """Whether ``(tm, tk, tn)`` are whole blocks Mosaic takes: ``tm`` along a sublane
    dimension (the rows of the lhs and output blocks), ``tk`` and ``tn`` along lane
    dimensions (the lhs block's columns, the output block's columns)."""
    tm, tk, tn = (config.get(name) for name in _NAMES)
    if not (isinstance(tm, int) and isinstance(tk, int) and isinstance(tn, int)):
        return False
    return sublane_block(tm, m) and lane_block(tk, k) and lane_block(tn, n)


def _space(m: int, k: int, n: int, vmem: Callable[[int, int, int], int]) -> list[dict[str, int]]:
    """Every whole tiling of ``(m, k, n)`` whose blocks fit :data:`VMEM` (the smallest
    tiling whatever its size), smallest blocks first."""
    tilings = [(tm, tk, tn) for tm in blocks(m) for tk in blocks(k) for tn in blocks(n)]
    smallest = tilings[0]
    return [dict(zip(_NAMES, t, strict=True)) for t in tilings if vmem(*t) <= VMEM or t == smallest]


def _pick_default(
    space: list[dict[str, int]], legal: Callable[[dict[str, int]], bool]
) -> dict[str, int]:
    jax_default = dict(zip(_NAMES, JAX_TILING, strict=True))
    return jax_default if legal(jax_default) else space[0]


# -- gmm -----------------------------------------------------------------------------------


def _gmm_vmem(lhs: Any, rhs: Any, out_bytes: int) -> Callable[[int, int, int], int]:
    def vmem(tm: int, tk: int, tn: int) -> int:
        inputs = tm * tk * _bytes(lhs) + tk * tn * _bytes(rhs)
        return 2 * inputs + 2 * tm * tn * out_bytes + 4 * tm * tn

    return vmem


def _gmm_configs(
    lhs: Any,
    rhs: Any,
    *args: Any,
    preferred_element_type: str = "float32",
    transpose_rhs: bool = False,
    **kwargs: Any,
) -> list[dict[str, int]]:
    out_bytes = np.dtype(preferred_element_type).itemsize
    return _space(*_gmm_dims(lhs, rhs, transpose_rhs), _gmm_vmem(lhs, rhs, out_bytes))


def gmm_legal(
    config: Mapping[str, Any],
    lhs: Any,
    rhs: Any,
    *args: Any,
    transpose_rhs: bool = False,
    **kwargs: Any,
) -> bool:
    """Whether ``config`` is a tiling ``gmm`` and Mosaic take for these shapes: ``tm``
    divides the rows (a multiple of 8 or all of them), ``tk`` and ``tn`` divide the
    contraction and the output width (multiples of 128 or all of it). The ``prune`` of
    :func:`autotuned_gmm`."""
    return _whole(config, *_gmm_dims(lhs, rhs, transpose_rhs))


def _gmm_default(lhs: Any, rhs: Any, *args: Any, **kwargs: Any) -> dict[str, int]:
    space = _gmm_configs(lhs, rhs, *args, **kwargs)
    return _pick_default(space, lambda c: gmm_legal(c, lhs, rhs, *args, **kwargs))


def _gmm_flops(lhs: Any, rhs: Any, *args: Any, transpose_rhs: bool = False, **kwargs: Any) -> float:
    m, k, n = _gmm_dims(lhs, rhs, transpose_rhs)
    return 2.0 * m * k * n


def _even_groups(groups: int, rows: int) -> np.ndarray:
    """Group sizes that split ``rows`` as evenly as they can, summing to ``rows``."""
    sizes = np.full((groups,), rows // groups, np.int32)
    sizes[: rows % groups] += 1
    return sizes


def _made_inputs(
    lhs: Any, rhs: Any, group_sizes: Any, group_offset: Any, existing_out: Any, rows: int
) -> dict[str, Any]:
    """Values for a sweep without the program's: normal floats, group sizes splitting
    ``rows`` evenly, group offset 0 and a zero output to add to."""
    rng = np.random.default_rng(0)
    return {
        "lhs": rng.standard_normal(lhs.shape).astype(lhs.dtype),
        "rhs": rng.standard_normal(rhs.shape).astype(rhs.dtype),
        "group_sizes": _even_groups(group_sizes.shape[0], rows),
        "group_offset": None if group_offset is None else np.zeros((), np.int32),
        "existing_out": None
        if existing_out is None
        else np.zeros(existing_out.shape, existing_out.dtype),
    }


def _gmm_inputs(
    lhs: Any,
    rhs: Any,
    group_sizes: Any,
    group_offset: Any = None,
    existing_out: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Values for a sweep without the program's (:func:`_made_inputs`), the groups
    splitting ``lhs``'s rows."""
    return _made_inputs(lhs, rhs, group_sizes, group_offset, existing_out, lhs.shape[0])


@jaxtune.autotuned(
    configs=_gmm_configs,
    prune=gmm_legal,
    default=_gmm_default,
    static_argnames=("preferred_element_type", "transpose_rhs", "interpret"),
    inputs=_gmm_inputs,
    flops=_gmm_flops,
    nearest=True,
    version="1",
    name="jaxtune.kernels.gmm",
)
def autotuned_gmm(
    lhs: jax.Array,
    rhs: jax.Array,
    group_sizes: jax.Array,
    group_offset: jax.Array | None = None,
    existing_out: jax.Array | None = None,
    *,
    preferred_element_type: str = "float32",
    transpose_rhs: bool = False,
    interpret: bool = False,
    tm: int,
    tk: int,
    tn: int,
) -> jax.Array:
    """JAX's megablox ``gmm`` (``lhs[rows of group i] @ rhs[i]`` for each group) with its
    tiling ``(tm, tk, tn)`` as config keywords.

    Takes JAX's arrays (``lhs`` ``[m, k]``, ``rhs`` ``[groups, k, n]`` or
    ``[groups, n, k]`` with ``transpose_rhs``, ``group_sizes`` int32 ``[groups]`` summing to
    at most ``m``, optional ``group_offset`` and ``existing_out``) and its static options,
    ``preferred_element_type`` given by its dtype's name (``"float32"``, ``"bfloat16"``:
    plain data, so that a sweep's child process receives it). jaxtune fills in the tiling;
    passing ``tm``/``tk``/``tn`` yourself bypasses tuning. :func:`gmm` is the drop-in with
    JAX's signature.

    Examples:
        >>> import jax
        >>> from jaxtune.kernels import autotuned_gmm
        >>> lhs = jax.ShapeDtypeStruct((8192, 2048), "bfloat16")
        >>> rhs = jax.ShapeDtypeStruct((8, 2048, 4096), "bfloat16")
        >>> sizes = jax.ShapeDtypeStruct((8,), "int32")
        >>> autotuned_gmm.config_for(lhs, rhs, sizes).config
        {'tm': 128, 'tk': 128, 'tn': 128}
    """
    tiling = (tm, tk, tn)
    dtype = jnp.dtype(preferred_element_type)
    return _GMM(
        lhs, rhs, group_sizes, dtype, tiling, group_offset, existing_out, transpose_rhs, interpret
    )


# -- tgmm ----------------------------------------------------------------------------------


def _tgmm_vmem(lhs: Any, rhs: Any, out_bytes: int) -> Callable[[int, int, int], int]:
    def vmem(tm: int, tk: int, tn: int) -> int:
        inputs = tm * tk * _bytes(lhs) + tm * tn * _bytes(rhs)
        return 2 * inputs + 2 * tk * tn * out_bytes + 4 * tk * tn

    return vmem


def _tgmm_configs(
    lhs: Any, rhs: Any, *args: Any, preferred_element_type: str = "float32", **kwargs: Any
) -> list[dict[str, int]]:
    out_bytes = np.dtype(preferred_element_type).itemsize
    return _space(*_tgmm_dims(lhs, rhs), _tgmm_vmem(lhs, rhs, out_bytes))


def tgmm_legal(config: Mapping[str, Any], lhs: Any, rhs: Any, *args: Any, **kwargs: Any) -> bool:
    """Whether ``config`` is a tiling ``tgmm`` and Mosaic take for these shapes (lhs
    ``[k, m]``, rhs ``[m, n]``): ``tm`` divides the rows ``m`` (a multiple of 8 or all of
    them), ``tk`` and ``tn`` divide ``k`` and ``n`` (multiples of 128 or all of it). The
    ``prune`` of :func:`autotuned_tgmm`."""
    return _whole(config, *_tgmm_dims(lhs, rhs))


def _tgmm_default(lhs: Any, rhs: Any, *args: Any, **kwargs: Any) -> dict[str, int]:
    space = _tgmm_configs(lhs, rhs, *args, **kwargs)
    return _pick_default(space, lambda c: tgmm_legal(c, lhs, rhs))


def _tgmm_flops(lhs: Any, rhs: Any, *args: Any, **kwargs: Any) -> float:
    m, k, n = _tgmm_dims(lhs, rhs)
    return 2.0 * m * k * n


def _tgmm_inputs(
    lhs: Any,
    rhs: Any,
    group_sizes: Any,
    group_offset: Any = None,
    existing_out: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """As :func:`_gmm_inputs`, the rows being ``lhs``'s columns."""
    return _made_inputs(lhs, rhs, group_sizes, group_offset, existing_out, lhs.shape[1])


@jaxtune.autotuned(
    configs=_tgmm_configs,
    prune=tgmm_legal,
    default=_tgmm_default,
    static_argnames=("preferred_element_type", "num_actual_groups", "interpret"),
    inputs=_tgmm_inputs,
    flops=_tgmm_flops,
    nearest=True,
    version="1",
    name="jaxtune.kernels.tgmm",
)
def autotuned_tgmm(
    lhs: jax.Array,
    rhs: jax.Array,
    group_sizes: jax.Array,
    group_offset: jax.Array | None = None,
    existing_out: jax.Array | None = None,
    *,
    preferred_element_type: str = "float32",
    num_actual_groups: int | None = None,
    interpret: bool = False,
    tm: int,
    tk: int,
    tn: int,
) -> jax.Array:
    """JAX's megablox ``tgmm`` (``lhs[:, rows of group i] @ rhs[rows of group i]`` for each
    group: the weight gradient of :func:`gmm`) with its tiling ``(tm, tk, tn)`` as config
    keywords.

    Takes JAX's arrays (``lhs`` ``[k, m]``, ``rhs`` ``[m, n]``, ``group_sizes`` int32
    ``[groups]``, optional ``group_offset`` and ``existing_out``) and its static options,
    ``preferred_element_type`` by its dtype's name; returns ``[groups, k, n]``. jaxtune
    fills in the tiling; passing ``tm``/``tk``/``tn`` yourself bypasses tuning.
    :func:`tgmm` is the drop-in with JAX's signature.

    Examples:
        >>> import jax
        >>> from jaxtune.kernels import autotuned_tgmm
        >>> lhs = jax.ShapeDtypeStruct((256, 512), "float32")
        >>> rhs = jax.ShapeDtypeStruct((512, 256), "float32")
        >>> sizes = jax.ShapeDtypeStruct((4,), "int32")
        >>> len(autotuned_tgmm.space(lhs, rhs, sizes))
        12
    """
    dtype = jnp.dtype(preferred_element_type)
    return _KERNELS.tgmm(
        lhs,
        rhs,
        group_sizes,
        dtype,
        (tm, tk, tn),
        group_offset,
        num_actual_groups,
        existing_out,
        interpret=interpret,
    )


# -- the drop-ins --------------------------------------------------------------------------


def _explicit(tiling: Tiling, m: int, k: int, n: int) -> dict[str, int]:
    """The config keywords for a tiling the caller gave: a tuple, or JAX's look-up
    function of ``(m, k, n)`` (called as JAX calls it); empty for ``None`` (tuned)."""
    if tiling is None:
        return {}
    if callable(tiling):
        found = tiling(m, k, n)
        if found is None:  # JAX's own message
            raise ValueError(f"No tuned tiling found for (m, k, n) = ({m}, {k}, {n})")
        tiling = found
    if (
        isinstance(tiling, str | bytes)
        or not isinstance(tiling, Sequence)
        or len(tiling) != 3
        or not all(
            isinstance(t, int | np.integer) and not isinstance(t, bool) and t > 0 for t in tiling
        )
    ):
        raise TypeError(
            "tiling must be None (tuned), three positive ints (tm, tk, tn), or a function of "
            f"(m, k, n) that returns them; got {tiling!r}"
        )
    return dict(zip(_NAMES, (int(t) for t in tiling), strict=True))


def _given(**arrays: Any) -> dict[str, Any]:
    """The optional arrays the caller gave. An argument left out and one given as ``None``
    make different keys: the drop-ins leave out what their caller left out, so that they
    and the kernels called alike share entries."""
    return {name: value for name, value in arrays.items() if value is not None}


def gmm(
    lhs: jax.Array,
    rhs: jax.Array,
    group_sizes: jax.Array,
    preferred_element_type: Any = jnp.float32,
    tiling: Tiling = None,
    group_offset: jax.Array | None = None,
    existing_out: jax.Array | None = None,
    transpose_rhs: bool = False,
    interpret: bool = False,
) -> jax.Array:
    """Drop-in for ``jax.experimental.pallas.ops.tpu.megablox.gmm``, with a tuned tiling.

    Same arguments and results as JAX's (differentiable: JAX's backward runs ``gmm`` and
    ``tgmm`` with the same tiling), with one difference: ``tiling`` defaults to ``None``,
    the tuned tiling (jaxtune's lookup, in tune mode a sweep on the call's own group sizes;
    JAX's ``(128, 128, 128)`` while nothing is tuned), where JAX's defaults to
    ``(128, 128, 128)``. A tiling given (a tuple, or JAX's look-up function of
    ``(m, k, n)``) runs as given, untuned. Every other argument reaches JAX's kernel
    unchanged. On CPU pass ``interpret=True`` or run in TPU interpret mode, as for JAX's.

    Examples:
        >>> import jax.numpy as jnp
        >>> from jaxtune.kernels import gmm
        >>> lhs, rhs = jnp.ones((512, 256)), jnp.ones((4, 256, 256))
        >>> sizes = jnp.array([128, 256, 64, 64], jnp.int32)
        >>> gmm(lhs, rhs, sizes, interpret=True).shape
        (512, 256)
    """
    explicit = _explicit(tiling, *_gmm_dims(lhs, rhs, transpose_rhs))
    return autotuned_gmm(
        lhs,
        rhs,
        group_sizes,
        **_given(group_offset=group_offset, existing_out=existing_out),
        preferred_element_type=jnp.dtype(preferred_element_type).name,
        transpose_rhs=transpose_rhs,
        interpret=interpret,
        **explicit,
    )


def tgmm(
    lhs: jax.Array,
    rhs: jax.Array,
    group_sizes: jax.Array,
    preferred_element_type: Any = jnp.float32,
    tiling: Tiling = None,
    group_offset: jax.Array | None = None,
    num_actual_groups: int | None = None,
    existing_out: jax.Array | None = None,
    interpret: bool = False,
) -> jax.Array:
    """Drop-in for JAX's megablox ``tgmm`` (``jax.experimental.pallas.ops.tpu.megablox.gmm``
    module's), with a tuned tiling.

    Same arguments and results as JAX's but for ``tiling``, which defaults to ``None``, the
    tuned tiling, as in :func:`gmm`; a tiling given runs as given, untuned.

    Examples:
        >>> import jax.numpy as jnp
        >>> from jaxtune.kernels import tgmm
        >>> lhs, rhs = jnp.ones((256, 512)), jnp.ones((512, 256))
        >>> sizes = jnp.array([128, 256, 64, 64], jnp.int32)
        >>> tgmm(lhs, rhs, sizes, interpret=True).shape
        (4, 256, 256)
    """
    explicit = _explicit(tiling, *_tgmm_dims(lhs, rhs))
    return autotuned_tgmm(
        lhs,
        rhs,
        group_sizes,
        **_given(group_offset=group_offset, existing_out=existing_out),
        preferred_element_type=jnp.dtype(preferred_element_type).name,
        num_actual_groups=num_actual_groups,
        interpret=interpret,
        **explicit,
    )
