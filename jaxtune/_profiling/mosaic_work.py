"""The work a Mosaic TPU kernel does, counted from its body: FLOPs of its matmuls and the
bytes its grid pipeline moves.

A Pallas TPU kernel that declares no ``cost_estimate`` (JAX's flash attention backward
kernels) is 0 FLOPs to XLA. Its ``tpu_custom_call`` still carries its Mosaic module
(:mod:`.mosaic`), parsed here by jaxlib's own MLIR bindings with the TPU dialect registered
(as ``jax._src.tpu_custom_call`` does): parsing builds the module's operations as data and
runs nothing. Counted per call:

- **FLOPs**: ``2 x M x N x K`` of every ``tpu.matmul`` (its result's elements times the
  sizes of the lhs contracting dimensions), times the trip counts of the ``scf.for`` loops
  around it (constant bounds only), times the grid's iterations (``iteration_bounds``).
  Both branches of a condition count as taken: work a causal kernel skips is counted, as
  the kernels' own estimates count it. Only the MXU's work is counted (no elementwise
  ops); a matmul in a loop of unknown trip count gives no figure.
- **Bytes**: each blocked operand's block (``window_params``' ``window_bounds`` times its
  dtype's size) times how often the pipeline moves it: a block is copied when its index
  changes, so an operand whose index map (``transform_<n>``) reads only the outer grid
  indices moves once per step of those; plus each DMA the body starts itself
  (``tpu.enqueue_dma``: its source's size, times the loops and the grid).

A body that does not parse, or that jaxlib cannot read (no jaxlib, another MLIR
version), gives no figure, never an error.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["MosaicWork", "mosaic_work", "work_of_body"]

#: Bytes per element of the dtypes a Mosaic memref or vector names.
_DTYPE_BYTES = {
    "f64": 8, "i64": 8, "f32": 4, "i32": 4, "bf16": 2, "f16": 2, "i16": 2, "i8": 1,
    "f8E4M3FN": 1, "f8E5M2": 1, "f8E4M3B11FNUZ": 1, "f8E4M3FNUZ": 1, "f8E5M2FNUZ": 1,
    "i1": 1,
}  # fmt: skip
_SHAPED = re.compile(r"^(?:memref|vector)<((?:\d+x)*)([A-Za-z0-9]+)")
_INT = re.compile(r"^(-?\d+)\b")
_LISTS = re.compile(r"\[([0-9,\s]*)\]")

#: Most distinct bodies remembered (a program calls one kernel many times).
_MEMO_SIZE = 256
_memo: dict[bytes, MosaicWork | None] = {}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MosaicWork:
    """What one call of a Mosaic TPU kernel does, counted from its body: ``flops`` (its
    matmuls' multiply-adds x 2, ``None`` when a loop's trip count is unknown),
    ``bytes_accessed`` (its blocks' copies between HBM and VMEM, ``None`` when unknown),
    ``grid`` (its ``iteration_bounds``) and ``matmuls`` (the ``tpu.matmul`` ops of one
    grid step, loops unrolled)."""

    flops: float | None
    bytes_accessed: float | None
    grid: tuple[int, ...]
    matmuls: int

    def as_cost(self) -> dict[str, float]:
        """The figures as a cost estimate reads (``flops``, ``bytes_accessed``)."""
        out = {}
        if self.flops:
            out["flops"] = self.flops
        if self.bytes_accessed:
            out["bytes_accessed"] = self.bytes_accessed
        return out


def mosaic_work(backend_config: str | bytes) -> MosaicWork | None:
    """:func:`work_of_body` of a ``tpu_custom_call``'s backend config; ``None`` when the
    config holds no body, or its body gives no figure."""
    try:
        doc = json.loads(backend_config)
        body = doc["custom_call_config"]["body"]
        raw = base64.b64decode(body, validate=False)
    except (ValueError, TypeError, KeyError, RecursionError, binascii.Error):
        return None
    return work_of_body(raw)


def work_of_body(body: bytes) -> MosaicWork | None:
    """The work of one call of the Mosaic module ``body`` (MLIR bytecode), or ``None``
    when it does not parse or holds no kernel function (remembered per body)."""
    digest = hashlib.sha256(body).digest()
    if digest in _memo:
        return _memo[digest]
    found = _count(body)
    if len(_memo) >= _MEMO_SIZE:
        _memo.pop(next(iter(_memo)))
    _memo[digest] = found
    return found


def _count(body: bytes) -> MosaicWork | None:
    try:
        from jax._src.lib import tpu
        from jaxlib.mlir import ir
    except Exception:  # no jaxlib, or one without Mosaic: no figure
        return None
    try:
        ctx = ir.Context()
        tpu.register_dialect(ctx)
        ctx.allow_unregistered_dialects = True
        with ctx:
            module = ir.Module.parse(body)
            return _work(module)
    except Exception:  # a body this jaxlib does not read: no figure, never an error
        return None


def _name(op: Any) -> str:
    """An operation's name without the serialized form's prefix (``tpu.matmul``)."""
    name = str(op.name)
    return name.removeprefix("stable_mosaic.")


def _ops(block_owner: Any) -> Iterator[Any]:
    for region in block_owner.regions:
        for block in region.blocks:
            for op in block.operations:
                yield op.operation


def _functions(module: Any) -> dict[str, Any]:
    out = {}
    for op in module.body.operations:
        op = op.operation
        if _name(op) == "func.func" and "sym_name" in op.attributes:
            out[_text(op.attributes["sym_name"])] = op
    return out


def _text(attr: Any) -> str:
    return str(attr).strip('"')


def _ints(attr: Any) -> tuple[int, ...]:
    """The integers of ``array<i64: 16, 32>`` (or ``[1, 2]``)."""
    text = str(attr)
    inner = text.split(":", 1)[1] if text.startswith("array<") else text
    return tuple(int(x) for x in re.findall(r"-?\d+", inner))


def _shaped(type_: Any) -> tuple[tuple[int, ...], str] | None:
    m = _SHAPED.match(str(type_))
    if m is None:
        return None
    dims = tuple(int(d) for d in m.group(1).split("x") if d)
    return dims, m.group(2)


def _elements(type_: Any) -> int | None:
    shaped = _shaped(type_)
    return math.prod(shaped[0]) if shaped else None


def _nbytes(type_: Any) -> int | None:
    shaped = _shaped(type_)
    if shaped is None or shaped[1] not in _DTYPE_BYTES:
        return None
    return math.prod(shaped[0]) * _DTYPE_BYTES[shaped[1]]


def _constant(value: Any) -> int | None:
    """The integer an SSA value holds when an ``arith.constant`` defines it."""
    try:
        owner = value.owner
    except Exception:
        return None
    op = getattr(owner, "operation", owner)
    if not hasattr(op, "name") or _name(op) != "arith.constant":
        return None
    m = _INT.match(str(op.attributes["value"]))
    return int(m.group(1)) if m else None


def _trips(op: Any) -> int | None:
    """An ``scf.for``'s trip count when its bounds and step are constants."""
    lower, upper, step = (_constant(op.operands[i]) for i in range(3))
    if lower is None or upper is None or step is None or step <= 0:
        return None
    return max(0, -(-(upper - lower) // step))


def _matmul_flops(op: Any) -> int | None:
    """``2 x`` the result's elements ``x`` the contracted size of a ``tpu.matmul``."""
    lhs = _shaped(op.operands[0].type)
    out = _elements(op.results[0].type) if len(op.results) else None
    if lhs is None or out is None:
        return None
    dims = lhs[0]
    numbers = op.attributes.get("dimension_numbers", None)
    lists = _LISTS.findall(str(numbers)) if numbers is not None else []
    if lists:
        contracting = [int(x) for x in lists[0].split(",") if x.strip()]
    else:
        transposed = "transpose_lhs" in op.attributes and str(
            op.attributes["transpose_lhs"]
        ).startswith("true")
        contracting = [len(dims) - (2 if transposed else 1)]
    if not contracting or any(not 0 <= d < len(dims) for d in contracting):
        return None
    return 2 * out * math.prod(dims[d] for d in contracting)


@dataclasses.dataclass
class _Tally:
    flops: float = 0.0
    dma: float = 0.0
    matmuls: int = 0
    flops_known: bool = True
    dma_known: bool = True


def _walk(owner: Any, times: int | None, tally: _Tally) -> None:
    """Adds the work of ``owner``'s nested ops, each ``times`` over (``None``: unknown)."""
    for op in _ops(owner):
        name = _name(op)
        if name == "tpu.matmul":
            flops = _matmul_flops(op)
            tally.matmuls += 1
            if flops is None or times is None:
                tally.flops_known = False
            else:
                tally.flops += flops * times
        elif name == "tpu.enqueue_dma":
            size = _nbytes(op.operands[0].type) if len(op.operands) else None
            if size is None or times is None:
                tally.dma_known = False
            else:
                tally.dma += size * times
        if len(op.regions):
            inner = times
            if name == "scf.for":
                trips = _trips(op)
                inner = None if trips is None or times is None else times * trips
            elif name in ("scf.while", "scf.parallel"):
                inner = None
            _walk(op, inner, tally)


def _depends(function: Any, grid: int) -> set[int]:
    """The grid indices (argument positions below ``grid``) an index map's results read,
    through any op (an op's results read all its operands and what its regions read)."""
    block = function.regions[0].blocks[0]
    reads: dict[Any, set[int]] = {}
    for i, arg in enumerate(block.arguments):
        reads[arg] = {i} if i < grid else set()

    def of(value: Any) -> set[int]:
        return reads.get(value, set(range(grid)))

    def visit(ops: Iterable[Any]) -> set[int]:
        returned: set[int] = set()
        for op in ops:
            op = op.operation
            used: set[int] = set()
            for operand in op.operands:
                used |= of(operand)
            for region in op.regions:
                for inner in region.blocks:
                    for arg in inner.arguments:
                        reads[arg] = set(used)
                    used |= visit(inner.operations)
            for result in op.results:
                reads[result] = used
            if _name(op) in ("func.return", "scf.yield"):
                returned |= used
        return returned

    return visit(block.operations)


def _moves(window: Any, functions: Mapping[str, Any], bounds: tuple[int, ...]) -> int | None:
    """How often the pipeline copies one operand's block in a call: once per step of the
    grid up to the innermost index its map reads; ``None`` for an operand it does not
    pipeline (left in HBM: the body's own DMAs move it)."""
    text = str(window)
    m = re.search(r"transform_indices\s*=\s*@([\w$.]+)", text)
    if m is None:
        return None
    function = functions.get(m.group(1))
    if function is None:
        return None
    read = _depends(function, len(bounds))
    # Indices of one step are read as changing only where the grid has more than one.
    read = {i for i in read if bounds[i] > 1}
    return math.prod(bounds[: max(read) + 1]) if read else 1


def _window_bounds(window: Any) -> tuple[int, ...] | None:
    m = re.search(r"window_bounds\s*=\s*(array<[^>]*>)", str(window))
    return _ints(m.group(1)) if m else None


def _work(module: Any) -> MosaicWork | None:
    functions = _functions(module)
    kernels = [f for f in functions.values() if "iteration_bounds" in f.attributes]
    if len(kernels) != 1:
        return None
    kernel = kernels[0]
    bounds = _ints(kernel.attributes["iteration_bounds"])
    steps = math.prod(bounds)
    tally = _Tally()
    _walk(kernel, 1, tally)
    args = list(kernel.regions[0].blocks[0].arguments)
    prefetch = 0
    if "scalar_prefetch" in kernel.attributes:
        found = _INT.match(str(kernel.attributes["scalar_prefetch"]))
        prefetch = int(found.group(1)) if found else 0
    windows = (
        list(kernel.attributes["window_params"]) if "window_params" in kernel.attributes else []
    )
    operands = args[len(bounds) + prefetch : len(bounds) + prefetch + len(windows)]
    moved: float | None = tally.dma * steps if tally.dma_known else None
    for window, arg in zip(windows, operands, strict=False):
        times = _moves(window, functions, bounds)
        if times is None:
            continue  # left in HBM: its DMAs are counted where the body starts them
        shape = _window_bounds(window)
        dtype = _shaped(arg.type)
        if shape is None or dtype is None or dtype[1] not in _DTYPE_BYTES or moved is None:
            moved = None
            continue
        moved += math.prod(shape) * _DTYPE_BYTES[dtype[1]] * times
    flops = tally.flops * steps if tally.flops_known and tally.matmuls else None
    return MosaicWork(
        flops=flops or None,
        bytes_accessed=moved or None,
        grid=bounds,
        matmuls=tally.matmuls,
    )
