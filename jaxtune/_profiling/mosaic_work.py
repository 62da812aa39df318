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
  dtype's size) times how often the pipeline moves it: a block is copied at the first grid
  step and at every step whose block index differs from the previous step's. The index
  map (``transform_<n>``: a few ``arith`` ops on the grid indices) is evaluated at every
  step, in the grid's order (last index fastest), so a map that clamps the index (JAX's
  causal flash kernels ``select`` block 0 for the blocks they skip) counts the copies the
  pipeline makes, not one per step. Plus each DMA the body starts itself
  (``tpu.enqueue_dma``: its source's size, times the loops and the grid). An index map
  that reads a scalar-prefetch operand, or holds an op not evaluated here, or a grid of
  more than :data:`MAX_STEPS` steps (over the indices the map reads), gives no bytes
  figure for the kernel.

A body that does not parse, or that jaxlib cannot read (no jaxlib, another MLIR
version), gives no figure, never an error.

Traces are files users share, and jaxlib's MLIR bytecode reader is not hardened: a
crafted body can abort the process that parses it. So a trace's bodies are parsed in a
short-lived child process (:func:`works`: one for all the bodies of a report); a body the
child dies on gives no figure, and the bodies after it are counted by a fresh child.
:func:`count_body` parses in this process, for bodies this process lowered itself.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._core import typed
from .._core.codec import packb, unpackb
from .._isolation.framing import FrameReader, write_frame
from .state import PROFILING_STATE

__all__ = [
    "CHILD_TIMEOUT_S",
    "MAX_CHILDREN",
    "MAX_STEPS",
    "MosaicWork",
    "body_of",
    "count_body",
    "works",
]

#: Bytes per element of the dtypes a Mosaic memref or vector names.
_DTYPE_BYTES = {
    "f64": 8, "i64": 8, "f32": 4, "i32": 4, "bf16": 2, "f16": 2, "i16": 2, "i8": 1,
    "f8E4M3FN": 1, "f8E5M2": 1, "f8E4M3B11FNUZ": 1, "f8E4M3FNUZ": 1, "f8E5M2FNUZ": 1,
    "i1": 1,
}  # fmt: skip
_SHAPED = re.compile(r"^(?:memref|vector)<((?:\d+x)*)([A-Za-z0-9]+)")
_INT = re.compile(r"^(-?\d+)\b")
_LISTS = re.compile(r"\[([0-9,\s]*)\]")

#: Most grid steps at which an index map is evaluated (over the grid indices it reads);
#: a larger grid gives no bytes figure.
MAX_STEPS = 1 << 20

#: ``arith.cmpi``'s predicates, by their number in the serialized attribute and by name.
_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")

#: How long the child counting a report's bodies may take, all of them together.
CHILD_TIMEOUT_S = 120

#: Most children started for one report's bodies: each crash costs the body it was reading
#: and a fresh child for the rest.
MAX_CHILDREN = 4

#: Most distinct bodies remembered (a program calls one kernel many times).
_MEMO_SIZE = 256
_memo: dict[bytes, MosaicWork | None] = PROFILING_STATE.keep(
    "mosaic bodies", dict, "the work counted in Mosaic kernel bodies already read, by body"
)


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


def body_of(backend_config: str | bytes) -> bytes | None:
    """The Mosaic module (MLIR bytecode) a ``tpu_custom_call``'s backend config carries."""
    try:
        doc = json.loads(backend_config)
        return base64.b64decode(doc["custom_call_config"]["body"], validate=False)
    except (ValueError, TypeError, KeyError, RecursionError, binascii.Error):
        return None


def works(bodies: Sequence[bytes]) -> list[MosaicWork | None]:
    """The work of one call of each Mosaic module in ``bodies`` (``None`` where it gives no
    figure), counted in a child process, all bodies in one (remembered per body)."""
    found: dict[bytes, MosaicWork | None] = {}
    todo: dict[bytes, bytes] = {}
    for body in bodies:
        digest = hashlib.sha256(body).digest()
        if digest in _memo:
            found[digest] = _memo[digest]
        else:
            todo[digest] = body
    if todo:
        for digest, work in zip(todo, _in_children(list(todo.values())), strict=True):
            found[digest] = work
            if len(_memo) >= _MEMO_SIZE:
                _memo.pop(next(iter(_memo)))
            _memo[digest] = work
    return [found[hashlib.sha256(body).digest()] for body in bodies]


def _in_children(bodies: list[bytes]) -> list[MosaicWork | None]:
    """Each body's work, by children: one reads them in order, answering each body as it goes;
    where one dies, the body it was reading gives none and a fresh child reads the rest."""
    out: list[MosaicWork | None] = [None] * len(bodies)
    start = 0
    for _ in range(MAX_CHILDREN):
        if start >= len(bodies):
            break
        answers, finished = _child(bodies[start:])
        out[start : start + len(answers)] = answers
        if finished:
            break
        start += len(answers) + 1
    return out


def _child(bodies: list[bytes]) -> tuple[list[MosaicWork | None], bool]:
    """``(the answers a child sent, in order, whether it read every body)``: the bodies go
    in as one msgpack list of :mod:`jaxtune._core.codec`, each answer comes back as a frame
    of :mod:`jaxtune._isolation.wire` (a :class:`MosaicWork` or ``None``), read as it comes;
    the first that is not one ends the reading."""
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    # It reads bytes and starts no backend; should anything ask for one, it is the CPU's,
    # never the chip the profiled program holds.
    env["JAX_PLATFORMS"] = "cpu"
    answers: list[MosaicWork | None] = []
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    with tempfile.TemporaryFile() as request:
        request.write(packb(list(bodies)))
        request.seek(0)
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__],
                stdin=request,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError:
            return [], True
    assert process.stdout is not None
    frames = FrameReader(process.stdout.fileno())
    try:
        while len(answers) < len(bodies):
            raw = frames.read(timeout=max(0.0, deadline - time.monotonic()))
            if raw is None:  # a body that hangs the reader: no more tries
                return answers, True
            answers.append(typed.decode(MosaicWork | None, raw, "a Mosaic body's work"))
    except (EOFError, ValueError):  # the child died (or sent no answer): a fresh one goes on
        pass
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        process.stdout.close()
    return answers, len(answers) == len(bodies)


def count_body(body: bytes) -> MosaicWork | None:
    """The work of one call of the Mosaic module ``body`` (MLIR bytecode), or ``None``
    when it does not parse or holds no kernel function, parsed in this process: only for
    a body this process made (a trace's bodies go through :func:`works`)."""
    return _count(body)


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


class _UnknownError(Exception):
    """An index map this evaluator cannot follow: no bytes figure."""


def _int_attr(attr: Any) -> int:
    text = str(attr).strip()
    if text.startswith("true"):
        return 1
    if text.startswith("false"):
        return 0
    m = _INT.match(text)
    if m is None:
        raise _UnknownError(f"attribute {text!r}")
    return int(m.group(1))


def _predicate(attr: Any) -> str:
    text = str(attr)
    m = _INT.match(text.strip())
    if m is not None and 0 <= int(m.group(1)) < len(_PREDICATES):
        return _PREDICATES[int(m.group(1))]
    for name in _PREDICATES:
        if re.search(rf"\b{name}\b", text):
            return name
    raise _UnknownError(f"predicate {text!r}")


def _nonnegative(*values: np.ndarray) -> None:
    """Unsigned ops agree with signed ones on values >= 0; others are not evaluated."""
    if any(np.any(v < 0) for v in values):
        raise _UnknownError("an unsigned op on a negative value")


def _divisor(b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise _UnknownError("a division by zero")
    return b


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = np.abs(a) // np.abs(_divisor(b))
    return np.where((a < 0) != (b < 0), -q, q)


def _compare(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if name.startswith("u"):
        _nonnegative(a, b)
        name = "s" + name[1:]
    return {
        "eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal,
        "sgt": np.greater, "sge": np.greater_equal,
    }[name](a, b).astype(np.int64)  # fmt: skip


def _shift(a: np.ndarray, b: np.ndarray, left: bool) -> np.ndarray:
    if np.any((b < 0) | (b > 62)):
        raise _UnknownError("a shift out of range")
    return a << b if left else a >> b


#: The binary ``arith`` ops evaluated, on int64 values (an index map's are small).
_SIGNED: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "addi": np.add,
    "subi": np.subtract,
    "muli": np.multiply,
    "divsi": _trunc_div,
    "floordivsi": lambda a, b: a // _divisor(b),
    "ceildivsi": lambda a, b: -((-a) // _divisor(b)),
    "remsi": lambda a, b: a - _trunc_div(a, b) * b,
    "minsi": np.minimum,
    "maxsi": np.maximum,
    "andi": np.bitwise_and,
    "ori": np.bitwise_or,
    "xori": np.bitwise_xor,
    "shli": lambda a, b: _shift(a, b, left=True),
    "shrsi": lambda a, b: _shift(a, b, left=False),
}
#: Unsigned ops, evaluated as their signed twins where both values are >= 0.
_UNSIGNED = {"divui": "divsi", "remui": "remsi", "minui": "minsi", "maxui": "maxsi"}
_UNSIGNED["shrui"] = "shrsi"


def _binary(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if name in _UNSIGNED:
        _nonnegative(a, b)
        name = _UNSIGNED[name]
    return _SIGNED[name](a, b)


#: Casts that keep an index's value (the grid's indices and blocks are small and >= 0).
_CASTS = frozenset(("index_cast", "index_castui", "extsi", "extui", "trunci"))


def _evaluate(function: Any, indices: list[np.ndarray]) -> list[np.ndarray]:
    """The results of the index map ``function`` at every grid step, given each read grid
    index's value per step (``indices``; the map's other arguments, a scalar-prefetch
    operand or a grid index not read, are not bound: reading one raises :class:`_UnknownError`).
    Only ``arith`` ops on integers are evaluated; any other op raises :class:`_UnknownError`."""
    block = function.regions[0].blocks[0]
    values: dict[Any, np.ndarray] = dict(zip(block.arguments, indices, strict=False))

    def of(value: Any) -> np.ndarray:
        if value not in values:
            raise _UnknownError("an argument that is not a grid index")
        return values[value]

    for op in block.operations:
        op = op.operation
        name = _name(op)
        dialect, _, short = name.partition(".")
        if name == "func.return":
            return [of(v) for v in op.operands]
        if dialect != "arith" or len(op.regions) or len(op.results) != 1:
            raise _UnknownError(name)
        args = [of(v) for v in op.operands]
        if short == "constant":
            out = np.asarray(_int_attr(op.attributes["value"]), dtype=np.int64)
        elif (short in _SIGNED or short in _UNSIGNED) and len(args) == 2:
            out = _binary(short, *args)
        elif short == "cmpi" and len(args) == 2:
            out = _compare(_predicate(op.attributes["predicate"]), *args)
        elif short == "select" and len(args) == 3:
            out = np.where(args[0] != 0, args[1], args[2])
        elif short in _CASTS and len(args) == 1:
            out = args[0]
        else:
            raise _UnknownError(name)
        values[op.results[0]] = out
    raise _UnknownError("an index map without a return")


def _copies(function: Any, bounds: tuple[int, ...]) -> int | None:
    """How often the pipeline copies a block whose index map is ``function``: at the first
    grid step and at each step whose block index differs from the previous step's;
    ``None`` when the map cannot be evaluated here.

    Only the grid up to the innermost index the map reads is walked: the inner indices it
    does not read repeat each block index over consecutive steps, which adds no change."""
    read = _depends(function, len(bounds))
    outer = bounds[: max(read) + 1] if read else ()
    steps = math.prod(outer)
    if steps > MAX_STEPS:
        return None
    grid = np.indices(outer, dtype=np.int64).reshape(len(outer), steps)  # last index fastest
    try:
        with np.errstate(all="raise"):
            results = _evaluate(function, [grid[i] for i in range(len(outer))])
    except (_UnknownError, ArithmeticError, ValueError, TypeError, KeyError, IndexError):
        return None
    if not results or steps <= 1:
        return 1
    stacked = np.stack([np.broadcast_to(r, (steps,)) for r in results])
    return 1 + int(np.any(stacked[:, 1:] != stacked[:, :-1], axis=0).sum())


_NOT_PIPELINED = -1


def _moves(window: Any, functions: Mapping[str, Any], bounds: tuple[int, ...]) -> int | None:
    """How often the pipeline copies one operand's block in a call (:func:`_copies`);
    :data:`_NOT_PIPELINED` for an operand it does not pipeline (no index map: left in HBM,
    the body's own DMAs move it); ``None`` when unknown."""
    text = str(window)
    m = re.search(r"transform_indices\s*=\s*@([\w$.]+)", text)
    if m is None:
        return _NOT_PIPELINED
    function = functions.get(m.group(1))
    if function is None:
        return None
    return _copies(function, bounds)


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
        if times == _NOT_PIPELINED:
            continue  # left in HBM: its DMAs are counted where the body starts them
        shape = _window_bounds(window)
        dtype = _shaped(arg.type)
        if (
            times is None
            or shape is None
            or dtype is None
            or dtype[1] not in _DTYPE_BYTES
            or moved is None
        ):
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


def _serve() -> None:
    """The child of :func:`works`: the bodies as a msgpack list on stdin, one frame per
    body on stdout (its work, or ``None``), each sent before the next is read. Whatever
    jaxlib prints goes to stderr, apart from the answers."""
    sys.stdout.flush()
    answers = os.dup(1)
    os.dup2(2, 1)
    bodies = typed.decode(tuple[bytes, ...], unpackb(sys.stdin.buffer.read()), "bodies")
    for body in bodies:
        work = count_body(body)
        write_frame(answers, None if work is None else typed.encode(work))


if __name__ == "__main__":
    _serve()
