"""Kernel side. Configs Mosaic TPU will refuse, found in a config's traced program before it is
lowered and compiled: a large space's refused configs then cost a trace each, not a compile.

Each rule reads the traced program's ``pallas_call`` equations (the block specs of their
``grid_mapping``, the DMAs of their kernels) and is conservative: it refuses only what JAX's Pallas TPU lowering
(``jax/_src/pallas/mosaic/lowering.py``) or Mosaic itself refuses, so a config that
compiles is never dropped.

- **The (8, 128) rule.** A block of rank 2 or more in VMEM must have its last dimension a
  multiple of 128 or the array's, and its second-last a multiple of 8 or the array's: the
  check JAX's lowering makes (JAX 0.10.2 and 0.12 alike), only for blocks whose every
  dimension is a plain block size (``Blocked``), of a numeric dtype, in the default or
  VMEM memory space; any other block is left to the lowering.
- **VMEM.** The blocks in VMEM, one buffer each (Mosaic keeps two of a block that moves
  over the grid: one is a lower bound), the kernel's VMEM scratch, and the largest VMEM
  allocation of one ``run_scoped`` in its body (kernels that copy by hand keep their
  buffers there), against the kernel's ``vmem_limit_bytes`` when it sets one, else the
  scoped VMEM Mosaic gives a kernel by default (:func:`scoped_vmem`: 16 MiB on a TPU v5e,
  32 MiB on a v6e, or what ``--xla_tpu_scoped_vmem_limit_kib`` in ``LIBTPU_INIT_ARGS`` or
  ``XLA_FLAGS`` sets where that is more), else the chip's whole VMEM (JAX's
  ``pltpu.get_tpu_info()``). Tiles' padding and Mosaic's own scratch are not counted.
  Mosaic refuses such configs only after a full compile (``CompileTimeScopedVmemOom``:
  20.8 s for a megablox tiling on the chip); of Tokamax 0.0.12's 540 ragged dot configs,
  this rule refuses 41 of the 46 Mosaic refused so, and none of the 329 that compiled
  (all checked once; ``tests/test_refusals.py`` keeps the 60 largest).
- **DMA slices.** A kernel that copies by hand (``dma_start`` and ``dma_wait``, as
  ``pltpu.make_async_copy`` and ``sync_copy`` bind them) slices its refs without block
  specs. Mosaic lays out an array in HBM in tiles of 128 lanes along its last dimension
  and refuses a slice of it whose size there is not a multiple of the tile ("Slice sizes
  along tiled dimensions must be aligned to tiles"): a DMA's source or destination in HBM
  (or ``ANY``) of rank 2 or more, whose last dimension is a multiple of 128 and over 128,
  sliced there (``ref.at[..., pl.ds(start, size)]``, every transform an indexer) to a
  static size that is not a multiple of 128, is refused. Refs in VMEM or SMEM, sub-tile
  arrays, integer indices, strided or dynamic sizes, other transforms (bitcasts,
  reshapes) and kernels for the SparseCore are left to Mosaic.

Block shapes that do not divide the array are not refused: Mosaic pads the edge blocks,
and whether a kernel needs whole blocks is the kernel's own business (its ``prune``).
Used only where the sweep compiles for a TPU and not in interpret mode.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..._core.settings import FLAG_VARIABLES, changed_since_jax_import

__all__ = ["checker", "checker_for", "refusal", "scoped_vmem", "vmem_capacity"]


def refusal(jaxpr: Any, *, vmem_bytes: int | None) -> str | None:
    """Why Mosaic would refuse the program of closed or open ``jaxpr``, or ``None``
    (``vmem_bytes``: the VMEM a kernel that sets no limit of its own may use,
    :func:`scoped_vmem`; ``None`` where unknown: no VMEM rule)."""
    for eqn in _pallas_calls(getattr(jaxpr, "jaxpr", jaxpr)):
        if eqn.params.get("interpret"):  # run by JAX's interpreter: Mosaic never sees it
            continue
        name = eqn.params.get("name", "pallas_call")
        mapping = eqn.params["grid_mapping"]
        vmem = 0
        for bm in mapping.block_mappings:
            sizes = _block_sizes(bm)
            if sizes is None:
                continue
            array = tuple(bm.array_aval.shape)
            if len(sizes) >= 2 and not _fits_tiles(sizes, array):
                return (
                    f"refused before compiling: block {sizes} of {bm.origin} (array "
                    f"{array}) in kernel {name} breaks Mosaic's (8, 128) rule: the last "
                    "two block dimensions must be multiples of 8 and 128, or equal the "
                    "array's"
                )
            vmem += math.prod(sizes) * np.dtype(bm.array_aval.dtype).itemsize
        unaligned = _unaligned_dma(eqn)
        if unaligned is not None:
            return f"refused before compiling: kernel {name}'s {unaligned}"
        vmem += _scratch_bytes(eqn, mapping) + _run_scoped_bytes(eqn)
        limit = getattr(eqn.params.get("compiler_params"), "vmem_limit_bytes", None)
        limit = limit or vmem_bytes
        if limit and vmem > limit:
            return (
                f"refused before compiling: kernel {name}'s blocks, scratch and scoped "
                f"buffers need at least {vmem / 2**20:.1f} MiB of VMEM, over the "
                f"{limit / 2**20:.1f} MiB it may use (a kernel's vmem_limit_bytes, or "
                "--xla_tpu_scoped_vmem_limit_kib in LIBTPU_INIT_ARGS, raises it)"
            )
    return None


def checker() -> Callable[[Any], str | None] | None:
    """The check of a traced program (its jaxpr) where this process compiles for a TPU,
    else ``None``: on CPU and GPU nothing is refused."""
    import jax

    if jax.default_backend() != "tpu":
        return None
    return checker_for(scoped_vmem())


def checker_for(vmem: int | None) -> Callable[[Any], str | None]:
    """The check of a traced program for a TPU chip whose kernels may use ``vmem`` bytes of
    VMEM unless they set a limit (:func:`scoped_vmem`; ``None``: no VMEM rule), wherever it
    runs (a process lowering for the chip's topology)."""

    def check(jaxpr: Any) -> str | None:
        try:
            return refusal(jaxpr, vmem_bytes=vmem)
        except Exception:  # a program this reading does not know: left to Mosaic
            return None

    return check


def vmem_capacity() -> int | None:
    """The VMEM of this process's TPU chip in bytes, as JAX knows it; ``None`` elsewhere."""
    try:
        from jax.experimental.pallas import tpu as pltpu

        return int(pltpu.get_tpu_info().vmem_capacity_bytes)
    except Exception:  # not a TPU, or a JAX without the table: no VMEM rule
        return None


#: The scoped VMEM Mosaic gives a kernel that sets no ``vmem_limit_bytes``, by device kind.
_SCOPED_VMEM = {"TPU v5 lite": 16 << 20, "TPU v6 lite": 32 << 20}
#: The libtpu flag that sets the scoped VMEM, in KiB.
_SCOPED_FLAG = re.compile(r"-{1,2}xla_tpu_scoped_vmem_limit_kib(?:[=\s]+(\S*))?")


def scoped_vmem(kind: str | None = None, environ: Mapping[str, str] | None = None) -> int | None:
    """The VMEM in bytes a kernel that sets no ``vmem_limit_bytes`` may use on this
    process's TPU chip (``kind``: a device kind instead), as the refusal rule reads it: the
    chip's default (:data:`_SCOPED_VMEM`), or what ``--xla_tpu_scoped_vmem_limit_kib`` in
    ``LIBTPU_INIT_ARGS`` or ``XLA_FLAGS`` sets where that is more (now or when JAX was
    imported: the backend reads them at its start), else the chip's whole VMEM
    (:func:`vmem_capacity`); ``None`` off a TPU. The rule only ever takes the larger
    figure, so that it stays conservative: a flag this cannot read (no value, not a
    positive number) counts as no scoped limit."""
    environ = os.environ if environ is None else environ
    capacity = vmem_capacity()
    if kind is None:
        if capacity is None:
            return None
        import jax

        kind = jax.devices()[0].device_kind
    texts = [environ.get(k, "") for k in FLAG_VARIABLES]
    if environ is os.environ:  # the backend read them at its start: a later change too
        texts += [then or "" for _, then, _ in changed_since_jax_import()]
    default = _SCOPED_VMEM.get(kind, capacity)
    found = []
    for value in _SCOPED_FLAG.findall(" ".join(texts)):
        if not value.isdigit() or int(value) <= 0:  # a flag this does not read
            return capacity
        found.append(int(value) << 10)
    if not found or default is None:
        return default if not found else capacity
    return max(default, *found)


def _fits_tiles(sizes: tuple[int, ...], array: tuple[int, ...]) -> bool:
    last, second = sizes[-1], sizes[-2]
    return (last == array[-1] or last % 128 == 0) and (second == array[-2] or second % 8 == 0)


def _block_sizes(bm: Any) -> tuple[int, ...] | None:
    """A block mapping's sizes where every rule here applies to it, else ``None``."""
    from jax.experimental import pallas as pl

    space = getattr(bm.block_aval, "memory_space", None)
    if space is not None and str(space).lower().rsplit(".", 1)[-1] not in ("vmem", "default"):
        return None
    dtype = bm.array_aval.dtype
    if not isinstance(dtype, np.dtype):  # PRNG keys and other extended dtypes
        return None
    if len(bm.block_shape) != len(bm.array_aval.shape):
        return None
    blocked = getattr(pl, "Blocked", None)
    sizes = []
    for dim in bm.block_shape:
        if blocked is not None and type(dim) is blocked:
            dim = dim.block_size
        if type(dim) is not int:  # squeezed, Element, bounded: left to the lowering
            return None
        sizes.append(dim)
    return tuple(sizes)


#: The DMA primitives whose source and destination refs Mosaic slices (both the start and
#: the wait lower their refs' transforms to ``tpu.memref_slice``).
_DMAS = ("dma_start", "dma_wait")

#: The lanes of Mosaic's tiles along an array's last dimension (of rank 2 or more).
_LANES = 128


def _unaligned_dma(eqn: Any) -> str | None:
    """What breaks Mosaic's tile rule for DMA slices in ``eqn``'s kernel (a ``pallas_call``
    for the TensorCore), or ``None``."""
    if not _on_tensor_core(eqn):
        return None
    for inner in _equations(eqn.params["jaxpr"]):
        tree = inner.params.get("tree")
        if inner.primitive.name not in _DMAS or tree is None:
            continue
        src, dst = tree.unflatten(inner.invars)[:2]
        for role, ref in (("source", src), ("destination", dst)):
            sliced = _unaligned_lanes(ref)
            if sliced is not None:
                size, shape = sliced
                return (
                    f"{inner.primitive.name} slices its {role}, an HBM array of shape "
                    f"{shape}, to {size} along its last dimension, which breaks Mosaic's "
                    f"rule for slices of tiled arrays: a slice's size along the last "
                    f'dimension must be a multiple of the {_LANES}-lane tile ("Slice sizes '
                    'along tiled dimensions must be aligned to tiles")'
                )
    return None


def _unaligned_lanes(ref: Any) -> tuple[int, tuple[int, ...]] | None:
    """The static size a DMA's ``ref`` (a ref with transforms) is sliced to along the last
    dimension of its array in HBM, with the array's shape, where that size breaks the
    tile rule; ``None`` wherever this reading is not sure."""
    transforms, base = getattr(ref, "transforms", None), getattr(ref, "ref", None)
    aval = getattr(base, "aval", None)
    if not transforms or aval is None:
        return None
    shape = tuple(getattr(aval, "shape", ()))
    dtype = getattr(aval, "dtype", None)
    if (
        len(shape) < 2
        or shape[-1] <= _LANES
        or shape[-1] % _LANES
        or _space(aval) not in ("any", "hbm")
        or not isinstance(dtype, np.dtype)  # PRNG keys and other extended dtypes
        or dtype == np.bool_
        or dtype.itemsize > 4
    ):
        return None
    size = None
    for transform in transforms:
        indices = getattr(transform, "indices", None)
        if (
            type(transform).__name__ != "NDIndexer"
            or not indices
            or tuple(transform.int_indexer_shape) != ()
            or len(indices) != len(transform.shape)
        ):
            return None
        last = indices[-1]
        if type(last).__name__ != "Slice" or last.stride != 1:
            return None
        if isinstance(last.size, bool) or not isinstance(last.size, int | np.integer):
            return None
        size = int(last.size)
    if size is None or size % _LANES == 0:
        return None
    return size, shape


def _on_tensor_core(eqn: Any) -> bool:
    """Whether ``eqn``'s kernel runs on the TensorCore (a SparseCore lays out its arrays
    in other tiles)."""
    mesh = eqn.params.get("mesh")
    if mesh is not None and "TensorCore" not in type(mesh).__name__:
        return False
    kind = getattr(eqn.params.get("compiler_params"), "kernel_type", None)
    return kind is None or str(kind).rsplit(".", 1)[-1].lower() in ("tc", "tensorcore")


def _space(aval: Any) -> str:
    """A ref's memory space as a lower-case name (``any``, ``hbm``, ``vmem``...)."""
    return str(getattr(aval, "memory_space", "")).lower().rsplit(".", 1)[-1]


def _equations(jaxpr: Any) -> Iterator[Any]:
    """Every equation of ``jaxpr`` and of the jaxprs its equations hold (branches, loop
    bodies, scoped allocations)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def _vmem_bytes(variables: Any) -> int:
    """Bytes of the refs among ``variables`` (a jaxpr's inputs) that live in VMEM."""
    total = 0
    for var in variables:
        aval = var.aval
        dtype = getattr(aval, "dtype", None)
        if _space(aval) == "vmem" and isinstance(dtype, np.dtype):
            total += math.prod(aval.shape) * dtype.itemsize
    return total


def _scratch_bytes(eqn: Any, mapping: Any) -> int:
    """Bytes of the kernel's VMEM scratch operands (the last of its jaxpr's inputs)."""
    count = getattr(mapping, "num_scratch_operands", 0)
    return _vmem_bytes(eqn.params["jaxpr"].invars[-count:]) if count else 0


def _run_scoped_bytes(eqn: Any) -> int:
    """Bytes of VMEM the largest ``run_scoped`` in ``eqn``'s kernel allocates (only its
    own allocations: a lower bound whether or not others are live beside it)."""
    return max(
        (
            _vmem_bytes(inner.params["jaxpr"].invars)
            for inner in _equations(eqn.params["jaxpr"])
            if inner.primitive.name == "run_scoped"
        ),
        default=0,
    )


def _pallas_calls(jaxpr: Any) -> Iterator[Any]:
    """Every ``pallas_call`` equation of ``jaxpr`` and the jaxprs its equations hold."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
            continue
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _pallas_calls(inner)
