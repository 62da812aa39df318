"""Device events -> HLO ops -> kernels, with time, FLOP/s, bandwidth and roofline bound.

The executed ops come from :mod:`.events`. An op belongs to the kernel the trace's own
metadata names for it (:mod:`.recover`, for a trace read without its capture), else by
:func:`jaxtune._program.markers.owner_of`: a Pallas custom call, the innermost ``pallas_call``
frame of its name stack, the interpret-mode kernel whose scope encloses it, the innermost
``jaxtune[<id>#<digest>]`` marker; else it is a plain XLA op. Time is each op's exclusive
time, so nothing is counted twice.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from .._core import roofline as _roofline
from .._core import typed
from .._core.vocabulary import PallasKernel, RanConfig
from .._program import markers as _markers
from .events import Walk
from .hlo import HloInstruction, HloModule
from .totals import OpKind, Totals

__all__ = [
    "ASYNC_OPCODES",
    "Context",
    "KernelStat",
    "ScopeStat",
    "adopter",
    "attribute",
    "classifier",
    "kernel_ids",
    "payload_names",
    "program_key",
    "scopes",
]

Owner = _markers.Owner
Provenance = Literal["cost_estimate", "mosaic", "hint", "xla", "shapes", "mixed", "none"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KernelStat:
    """Time and throughput of one kernel (or one XLA op) over a profile.

    ``kind``: ``"pallas"``, ``"autotuned"`` or ``"xla"``. Times are µs; ``share`` is the
    fraction of all device op time. ``calls`` is, for a kernel, how often the program runs
    it per step times the steps traced; ``calls_exact`` is ``False`` when the program could
    not say (a kernel in a ``while`` loop) and the count was read off the trace, and then
    no per-call figure (flops, bytes) is derived from it. ``min_us``/``max_us`` are per
    call, given only where the trace shows each call as one run of events (not for an
    interpret-mode kernel, whose pieces interleave on host threads). ``flops``/``bytes_accessed`` are totals over all calls,
    and ``flops_source`` says where they came from: ``"cost_estimate"`` (the kernel's own),
    ``"mosaic"`` (counted from a Mosaic TPU kernel's body: its matmuls and its blocks'
    copies, :mod:`.mosaic_work`), ``"hint"`` (``@autotuned(flops=..., bytes=...)``),
    ``"xla"`` (XLA's cost analysis in the trace), ``"shapes"`` (bytes only: the operands
    and results of a Pallas kernel), ``"mixed"`` (an autotuned kernel's total over parts
    whose figures came from several of these) or ``"none"``. ``bound_by`` is
    ``"compute"``, ``"memory"`` or ``"unknown"`` against the device's peaks.
    ``compute_peak``/``memory_peak`` are the achieved FLOP/s and bytes/s as fractions of
    the device's peaks (``1.0`` is the peak); ``over_peak`` names the rates above it
    (``"flops"``, ``"bytes"``): no chip runs past its peak, so such a count overstates
    the work. ``floor_us`` is the roofline floor of all calls: the time the device needs
    for the flops and bytes at its peaks (:func:`jaxtune._core.roofline.floor_seconds`);
    ``floor_share`` that floor over ``total_us``, how close the kernel runs to it. ``config`` is the config an autotuned kernel
    ran with, and ``speedup`` what tuning measured it gained over the default config
    (``None`` when not tuned, or for a trace read without its capture).

    A kernel's ``source`` is its ``pallas_call`` site (``file:line``) and ``call_site``
    the line of the program that called into the kernel's code. A plain XLA op's row is
    one HLO instruction of one program: ``name`` and ``hlo_op`` are the instruction,
    ``program`` its module (``jit_step``), ``name_stack`` its op name, and ``calls`` its
    events.
    """

    name: str
    kind: Literal["pallas", "autotuned", "xla"]
    target: str | None = None
    hlo_op: str | None = None
    source: str | None = None
    kernel_id: str | None = None
    calls: int = 0
    calls_exact: bool = True
    total_us: float = 0.0
    mean_us: float = 0.0
    min_us: float | None = None
    max_us: float | None = None
    share: float = 0.0
    flops: float | None = None
    bytes_accessed: float | None = None
    flops_per_s: float | None = None
    bytes_per_s: float | None = None
    intensity: float | None = None
    bound_by: Literal["compute", "memory", "unknown"] = "unknown"
    flops_source: Provenance = "none"
    config: Mapping[str, Any] | None = None
    speedup: float | None = None
    name_stack: str | None = None
    program: str | None = None
    call_site: str | None = None
    compute_peak: float | None = None
    memory_peak: float | None = None
    over_peak: tuple[str, ...] = ()
    floor_us: float | None = None
    floor_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as ``report.json`` keeps it (:mod:`jaxtune._core.typed`)."""
        out: dict[str, Any] = typed.encode(self)
        return out

    def with_peaks(self, peak: _roofline.Peak | None) -> KernelStat:
        """This stat with its figures against ``peak``: the bound, the shares of the
        peaks, the rates above them and the roofline floor."""
        floor = _roofline.floor_seconds(self.flops, self.bytes_accessed, peak)
        floor_us = floor * 1e6 if floor is not None else None
        return dataclasses.replace(
            self,
            bound_by=_roofline.bound_by(self.flops, self.bytes_accessed, peak),
            compute_peak=_roofline.peak_share(self.flops_per_s, peak.flops_per_s if peak else None),
            memory_peak=_roofline.peak_share(self.bytes_per_s, peak.bytes_per_s if peak else None),
            over_peak=_roofline.over_peak(self.flops_per_s, self.bytes_per_s, peak),
            floor_us=floor_us,
            floor_share=floor_us / self.total_us if floor_us and self.total_us else None,
        )


def kernel_ids(kernels: Sequence[PallasKernel]) -> dict[str, str]:
    """Pallas kernel name -> the jaxtune kernel id it runs inside (the innermost marker of
    its scope, else ``inside``), for the names that have one id only."""
    found: dict[str, set[str | None]] = {}
    for k in kernels:
        marks = _markers.parse("/".join(k.scope))
        inside = marks[-1].kernel if marks else k.inside
        found.setdefault(k.name, set()).add(inside)
    return {
        name: only
        for name, i in found.items()
        if len(i) == 1 and (only := next(iter(i))) is not None
    }


def classifier(
    *,
    kernels: Sequence[PallasKernel] = (),
    fusions: Mapping[str, Sequence[str]] | None = None,
    claims: Mapping[tuple[int, str], tuple[str, ...]] | None = None,
    programs: Mapping[int, HloModule] | None = None,
) -> Callable[[OpKind], Owner]:
    """The owner of an executed op (memoized by its :class:`~.events.OpKind`), by
    :func:`jaxtune._program.markers.owner_of`.

    ``kernels`` are the program's Pallas calls (name, scope, ...); ``fusions`` map a fusion
    to the op names of the instructions fused into it (from the capture's HLO text; the
    program's own HLO in ``programs`` wins where the trace carries it, as instruction names
    repeat across programs): a fusion that holds ops of kernels belongs to them, never to
    an anonymous XLA row. ``claims`` name the Pallas kernel(s) of an instruction
    (``(program id, instruction)``) where the trace's own metadata says it
    (:mod:`.recover`, and each Mosaic call's payload). ``programs`` are the compiled
    programs by id (:mod:`.hlo`): an instruction XLA added without metadata (a copy of a
    loop's initial value, a copy in a kernel's loop body) belongs to the kernel whose ops
    its value goes to, when that is one kernel (:func:`adopter`), unless it is one of XLA's
    asynchronous ops (:data:`ASYNC_OPCODES`). (A program a callback ran from inside another
    program's op belongs to the op that runs it: :func:`.events.walk` sees to that.)

    A compiled (Mosaic) kernel is what its payload names (:func:`payload_names`): its
    custom call, and an op of the same ``pallas_call`` name stack, go to that one kernel.
    Its time is its calls', so it claims no ops by scope (its wrapper's own ops, such as
    a backward pass's reductions, are its autotuned kernel's), and a fusion of ops of
    several compiled kernels goes to the autotuned kernel they share (else to XLA), never
    to a row naming several. Interpret-mode kernels keep one owner naming each kernel of
    such a fusion: their ops are the kernels' own work.

    A plain XLA op's owner is its instruction in its program (:func:`program_key`).
    """
    by_payload = payload_names(programs or {})
    compiled = set(by_payload.values())
    scopes = _markers.scope_table([k for k in kernels if k.name not in compiled])
    known: dict[tuple[str, str | None, str], Owner] = {}
    memo: dict[OpKind, Owner] = {}
    ids = kernel_ids(kernels)

    def owner(stack: str, target: str | None, op: str) -> Owner:
        key = (stack, target, op if not stack else "")
        if key not in known:
            found = _markers.owner_of(stack, target, op, scopes)
            payload = by_payload.get(stack)
            if found.kind == "pallas" and payload is not None:
                found = Owner(kind="pallas", names=(payload,), kernel_id=found.kernel_id)
            known[key] = found
        return known[key]

    def fused_stacks(kind: OpKind) -> Sequence[str]:
        module = (programs or {}).get(kind.program) if kind.program is not None else None
        if module is not None and kind.op in module.fused:
            inside = (module.instructions.get(n) for n in module.fused[kind.op])
            return list(dict.fromkeys(i.op_name for i in inside if i is not None and i.op_name))
        return (fusions or {}).get(kind.op) or ()

    def named(kind: OpKind) -> Owner:
        """The kernel owner of an op by its own metadata; an ``"xla"`` one for none."""
        result = owner(kind.name_stack, kind.target, kind.op)
        claim = claims.get((kind.program, kind.op)) if claims and kind.program is not None else None
        if claim is not None:
            # An op claimed by the trace's metadata (a copy XLA added to the kernel's loop
            # body, without a name stack) is the kernel's: the same row, kernel id and all.
            only = claim[0] if len(claim) == 1 else None
            kernel_id = result.kernel_id or (ids.get(only) if only is not None else None)
            return Owner(kind="pallas", names=claim, kernel_id=kernel_id)
        parts = fused_stacks(kind) if result.kind == "xla" else ()
        fused = {o for o in (owner(stack, None, kind.op) for stack in parts) if o.kind != "xla"}
        if len(fused) == 1:
            return fused.pop()
        if fused:
            shared = {o.kernel_id for o in fused}
            kernel_id = shared.pop() if len(shared) == 1 else None
            if any(n in compiled for o in fused for n in o.names):
                if kernel_id is None:
                    return result
                return Owner(kind="autotuned", names=(kernel_id,), kernel_id=kernel_id)
            names = _markers.fused_names(o.names for o in fused)
            return Owner(kind="pallas", names=names, kernel_id=kernel_id)
        return result

    adopt = adopter(programs or {}, named)

    def classify(kind: OpKind) -> Owner:
        found = memo.get(kind)
        if found is not None:
            return found
        result = named(kind)
        if result.kind == "xla" and not kind.name_stack and kind.program is not None:
            result = adopt(kind.program, kind.op) or result
        if result.kind == "xla":
            result = Owner(kind="xla", names=(kind.op,), program=program_key(kind))
        memo[kind] = result
        return result

    return classify


def payload_names(programs: Mapping[int, HloModule]) -> dict[str, str]:
    """Name stack -> the Pallas kernel the payload of the Mosaic calls of that stack names
    (:attr:`.hlo.HloInstruction.kernel_name`: the kernel function, where the name stack
    holds only the scope around ``pallas_call``, ``flash_attention`` or
    ``flash_mha_bwd_dq_block_q_major=128_...``), for the stacks whose calls name one
    kernel."""
    found: dict[str, set[str]] = {}
    for module in programs.values():
        for ins in module.instructions.values():
            if ins.kernel_name is not None and ins.op_name:
                found.setdefault(ins.op_name, set()).add(ins.kernel_name)
    return {stack: next(iter(n)) for stack, n in found.items() if len(n) == 1}


def program_key(kind: OpKind) -> str | None:
    """What tells an XLA op's program apart in its owner: the program id, else the
    module's name."""
    return str(kind.program) if kind.program is not None else (kind.module or None)


def adopter(
    programs: Mapping[int, HloModule], named: Callable[[OpKind], Owner]
) -> Callable[[int, str], Owner | None]:
    """``(program id, instruction) -> the kernel`` of an instruction without metadata
    whose value goes, through other such instructions (tuples, copies), only to ops of one
    kernel, by ``named``; ``None`` when it goes to plain XLA ops, to several owners, or
    nowhere known. A value no instruction takes goes to the instructions that call its
    computation (:meth:`.hlo.HloModule.consumers`), so a copy in a loop body goes where the
    ``while`` goes."""
    memo: dict[tuple[int, str], frozenset[Owner | None]] = {}
    plain: Owner | None = None  # every plain XLA op, as one: it stops an adoption

    def owners_of(pid: int, module: HloModule, name: str) -> frozenset[Owner | None]:
        found: set[Owner | None] = set()
        for c in module.consumers(name):
            ins = module.instructions.get(c)
            if ins is None:
                continue
            if ins.op_name:
                o = named(_kind_of(pid, module, ins))
                found.add(plain if o.kind == "xla" else o)
            else:
                found |= memo.get((pid, c), frozenset())
        return frozenset(found)

    def reach(pid: int, module: HloModule, start: str) -> frozenset[Owner | None]:
        # Depth first without recursion (long chains of copies); an instruction met again
        # on its own path (a cycle: a damaged proto) adds nothing.
        path = [(start, iter(module.consumers(start)))]
        on_path = {start}
        while path:
            name, consumers = path[-1]
            deeper = next(
                (
                    c
                    for c in consumers
                    if c not in on_path and (pid, c) not in memo and _unnamed(module, c)
                ),
                None,
            )
            if deeper is not None:
                path.append((deeper, iter(module.consumers(deeper))))
                on_path.add(deeper)
                continue
            memo[pid, name] = owners_of(pid, module, name)
            path.pop()
            on_path.discard(name)
        return memo[pid, start]

    def adopt(pid: int, op: str) -> Owner | None:
        module = programs.get(pid)
        if module is None or not _unnamed(module, op) or _asynchronous(module, op):
            return None
        owners = memo.get((pid, op)) or reach(pid, module, op)
        if len(owners) != 1:
            return None
        (only,) = owners
        return only

    return adopt


#: Opcodes of XLA's asynchronous ops (``slice-start``/``copy-done`` are their instances):
#: XLA's data movement beside a kernel, overlapping it, never the kernel's own time.
ASYNC_OPCODES = frozenset({"async-start", "async-update", "async-done", "copy-start", "copy-done"})


def _asynchronous(module: HloModule, name: str) -> bool:
    ins = module.instructions.get(name)
    return ins is not None and (
        ins.opcode in ASYNC_OPCODES or ins.opcode.endswith(("-start", "-done", "-update"))
    )


def _unnamed(module: HloModule, name: str) -> bool:
    ins = module.instructions.get(name)
    return ins is not None and not ins.op_name


def _kind_of(pid: int, module: HloModule, ins: HloInstruction) -> OpKind:
    return OpKind(
        op=ins.name,
        module=module.name,
        name_stack=ins.op_name,
        target=ins.target,
        flops=None,
        bytes_accessed=None,
        program=pid,
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """What attribution knows beyond the trace (from the capture, or a sidecar)."""

    peak: Any = None
    host_trace: bool = False
    total_ps: int = 1
    iterations: int = 0
    per_step: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    costs: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    mosaic: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    hints: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    io_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    configs: Mapping[str, RanConfig] = dataclasses.field(default_factory=dict)
    call_sites: Mapping[str, str] = dataclasses.field(default_factory=dict)
    programs: Mapping[int, str] = dataclasses.field(default_factory=dict)
    kernel_calls: Mapping[str, int] = dataclasses.field(default_factory=dict)


def _kernel_calls(walked: Walk, ctx: Context) -> dict[str, int]:
    """On a device plane, each jaxtune kernel's calls as its busiest Pallas kernel's (a
    kernel under ``grad`` runs its forward and backward kernels once per call each)."""
    if ctx.host_trace:
        return {}
    out: dict[str, int] = {}
    for owner, t in walked.owners.items():
        if owner.kind == "pallas" and owner.kernel_id and t.kernel_calls:
            out[owner.kernel_id] = max(out.get(owner.kernel_id, 0), t.kernel_calls)
    return out


def _program_runs(t: Totals) -> int:
    """How many runs of its program the trace shows a kernel in (its events' ``run_id``s;
    0 when an event lacks one). Programs a callback ran inside it have runs of their own
    and are left out."""
    return 0 if t.runless else len(t.program_runs)


def _calls(owner: Owner, t: Totals, ctx: Context) -> tuple[int, bool]:
    """``(calls, exact)``: executions per step (from the program) x iterations (or, for a
    trace read without its capture, the runs of the program it shows) when the program
    says how often a kernel runs; else what the trace shows, exact only where one event is
    one call (a plain op, a custom call, any op on a device plane). A Pallas kernel on a
    device plane is called once per event of its custom call (its other ops, copies XLA
    added inside it, are no calls)."""
    if owner.kind == "pallas" and not ctx.host_trace and t.kernel_calls:
        return t.kernel_calls, True
    around = ctx.kernel_calls.get(owner.kernel_id or "") if owner.kind == "autotuned" else None
    if around:
        # Its own ops (outside its Pallas calls) run around each call: the kernel's calls.
        return around, True
    if owner.kind == "xla" or not ctx.host_trace or t.all_targets:
        return t.runs, True
    per_step = [ctx.per_step.get(n) for n in owner.names]
    known = [n for n in per_step if isinstance(n, int) and n > 0]
    steps = ctx.iterations or _program_runs(t)
    if steps and per_step and len(known) == len(per_step):
        return max(known) * steps, True
    return t.runs, False


def _cost(
    owner: Owner, calls: int, exact: bool, t: Totals, ctx: Context
) -> tuple[float | None, float | None, Provenance]:
    """Total flops and bytes of an owner over the profile, and where they came from: a
    per-call figure times the calls (only when the calls are exact), or XLA's own."""
    kind, name, kernel_id = owner.kind, owner.kernel, owner.kernel_id
    per_call = ctx.costs.get(name) if kind == "pallas" and name is not None else None
    hint = ctx.hints.get(kernel_id) if kind != "xla" and kernel_id is not None else None
    if exact and per_call and (per_call.get("flops") or per_call.get("bytes_accessed")):
        flops = per_call.get("flops", 0.0) * calls or None
        return flops, per_call.get("bytes_accessed", 0.0) * calls or None, "cost_estimate"
    counted = ctx.mosaic.get(name) if kind == "pallas" and name is not None else None
    if exact and counted:
        return (
            counted.get("flops", 0.0) * calls or None,
            counted.get("bytes_accessed", 0.0) * calls or None,
            "mosaic",
        )
    if exact and hint:
        return (
            hint.get("flops", 0.0) * calls or None,
            hint.get("bytes", 0.0) * calls or None,
            "hint",
        )
    if t.flops or t.bytes_accessed:
        return t.flops or None, t.bytes_accessed or None, "xla"
    io_bytes = ctx.io_bytes.get(name) if kind == "pallas" and name is not None else None
    if exact and io_bytes:
        # The operands and results' sizes: a lower bound of the bytes a call moves.
        return None, float(io_bytes * calls), "shapes"
    return None, None, "none"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _stat(owner: Owner, t: Totals, ctx: Context) -> KernelStat:
    kind, name, kernel_id = owner.kind, owner.kernel, owner.kernel_id
    op = t.first if kind == "xla" else None
    total = t.total_ps
    calls, exact = _calls(owner, t, ctx)
    flops, bytes_, provenance = _cost(owner, calls, exact, t, ctx)
    # A sum past float's range (a trace's flops near 1e308) is no figure, not infinity.
    flops, bytes_ = _finite(flops), _finite(bytes_)
    if flops is None and bytes_ is None:
        provenance = "none"
    seconds = total * 1e-12
    ran = ctx.configs.get(kernel_id) if kernel_id and kind != "xla" else None
    # Per-call extremes only where the trace's runs are the calls.
    around = kind == "autotuned" and kernel_id in ctx.kernel_calls  # runs are not calls
    extremes = (
        not around
        and t.runs
        and t.runs == calls
        and t.run_min is not None
        and t.run_max is not None
    )
    source = None
    if op is None:
        source = ctx.sources.get(name or "") or ctx.sources.get(kernel_id or "")
    stat = KernelStat(
        name=owner.label,
        kind=kind,
        target=t.target,
        hlo_op=t.first_op,
        source=source,
        kernel_id=kernel_id,
        calls=calls,
        calls_exact=exact,
        total_us=total * 1e-6,
        mean_us=total * 1e-6 / max(calls, 1),
        min_us=t.run_min * 1e-6 if extremes and t.run_min is not None else None,
        max_us=t.run_max * 1e-6 if extremes and t.run_max is not None else None,
        share=total / ctx.total_ps,
        flops=flops,
        bytes_accessed=bytes_,
        flops_per_s=_finite(flops / seconds) if flops and seconds else None,
        bytes_per_s=_finite(bytes_ / seconds) if bytes_ and seconds else None,
        intensity=_finite(flops / bytes_) if flops and bytes_ else None,
        bound_by=_roofline.bound_by(flops, bytes_, ctx.peak),
        flops_source=provenance,
        config=ran.config if ran else None,
        speedup=ran.speedup if ran else None,
        name_stack=op.name_stack if op is not None else None,
        program=_program_name(op, ctx) if op is not None else None,
        call_site=ctx.call_sites.get(name) if kind != "xla" and name is not None else None,
    )
    return stat.with_peaks(ctx.peak)


def _program_name(op: OpKind, ctx: Context) -> str | None:
    """An XLA op's program as people read it: its module's name (the trace's, else the
    HLO proto's), else its program id."""
    if op.module:
        return op.module
    if op.program is None:
        return None
    return ctx.programs.get(op.program) or str(op.program)


def attribute(
    walked: Walk,
    *,
    plane_stats: Mapping[str, Any] | None = None,
    device_kind: str | None = None,
    costs: Mapping[str, Mapping[str, float]] | None = None,
    hints: Mapping[str, Mapping[str, float]] | None = None,
    sources: Mapping[str, str] | None = None,
    kernels: Sequence[PallasKernel] = (),
    iterations: int = 0,
    autotuned: Mapping[str, int] | None = None,
    host_trace: bool = False,
    configs: Mapping[str, RanConfig] | None = None,
    programs: Mapping[int, str] | None = None,
    mosaic: Mapping[str, Mapping[str, float]] | None = None,
) -> tuple[list[KernelStat], list[KernelStat], float]:
    """``(kernels, ops, total device µs)`` of a walked plane (its owners by
    :func:`classifier`), each list sorted by share.

    ``kernels`` are the program's Pallas calls (``name``, ``scope``, ``per_step``,
    ``cost_estimate``) as the capture wrote them; ``costs`` maps a Pallas kernel name to
    its per-call ``cost_estimate``; ``hints`` a jaxtune kernel id to its per-call
    ``flops``/``bytes`` hints; ``sources`` a kernel name to its ``file:line``;
    ``autotuned`` a jaxtune kernel id to its call sites per step; ``iterations`` how many
    steps the trace holds; ``host_trace`` that the ops ran on host threads (CPU), where an
    interpret-mode kernel's events interleave and cannot be counted as calls; ``configs``
    a jaxtune kernel id to the config it ran with and its tuned ``speedup``; ``programs``
    a program id to its module's name; ``mosaic`` a Pallas kernel name to the per-call
    ``flops``/``bytes_accessed`` its Mosaic body counts to (:mod:`.mosaic_work`), used
    where the kernel declares no cost estimate.
    """
    per_step: dict[str, int | None] = dict(autotuned or {})
    all_costs = dict(costs or {})
    io_bytes = {k.name: k.io_bytes for k in kernels if k.io_bytes}
    for k in kernels:
        n, before = k.per_step, per_step.get(k.name, 0)
        per_step[k.name] = None if n is None or before is None else before + n
        if k.cost_estimate:
            all_costs.setdefault(k.name, k.cost_estimate)
    ctx = Context(
        peak=_roofline.peak_for(device_kind, plane_stats),
        host_trace=host_trace,
        total_ps=walked.total_ps or 1,
        iterations=iterations,
        per_step=per_step,
        costs=all_costs,
        mosaic=mosaic or {},
        hints=hints or {},
        sources=sources or {},
        io_bytes=io_bytes,
        configs=configs or {},
        call_sites={k.name: k.call_site for k in kernels if k.call_site is not None},
        programs=programs or {},
    )
    ctx = dataclasses.replace(ctx, kernel_calls=_kernel_calls(walked, ctx))
    stats = [_stat(o, t, ctx) for o, t in walked.owners.items() if t.events]
    stats.sort(key=lambda s: (-s.share, s.name, s.program or ""))
    return (
        [s for s in stats if s.kind != "xla"],
        [s for s in stats if s.kind == "xla"],
        ctx.total_ps * 1e-6,
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ScopeStat:
    """The plain XLA ops of one name stack in one program, together: a view of
    :attr:`Profile.ops <jaxtune.Profile>` grouped by scope (``jit(step)/jvp(mlp)/dot_general``
    holds every instruction XLA compiled from that line, fused or not). ``ops`` is how many
    instructions, ``calls`` their events in all; times are µs, ``share`` the fraction of
    all device op time. Ops without a name stack (copies XLA added) group under ``""``."""

    name_stack: str
    program: str | None
    ops: int
    calls: int
    total_us: float
    share: float
    hlo_ops: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The group as ``report.json`` keeps it (:mod:`jaxtune._core.typed`)."""
        out: dict[str, Any] = typed.encode(self)
        return out


def scopes(ops: Sequence[KernelStat]) -> list[ScopeStat]:
    """The ops grouped by (program, name stack), by share; each group's ops by share."""
    groups: dict[tuple[str | None, str], list[KernelStat]] = {}
    for op in ops:
        groups.setdefault((op.program, op.name_stack or ""), []).append(op)
    out = [
        ScopeStat(
            name_stack=stack,
            program=program,
            ops=len(members),
            calls=sum(m.calls for m in members),
            total_us=sum(m.total_us for m in members),
            share=sum(m.share for m in members),
            hlo_ops=tuple(m.name for m in sorted(members, key=lambda m: (-m.share, m.name))),
        )
        for (program, stack), members in groups.items()
    ]
    out.sort(key=lambda g: (-g.share, g.program or "", g.name_stack))
    return out
