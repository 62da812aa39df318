"""Device events -> HLO ops -> kernels, with time, FLOP/s, bandwidth and roofline bound.

The executed ops come from :mod:`.events`. An op belongs to the kernel the trace's own
metadata names for it (:mod:`.recover`, for a trace read without its capture), else by
:func:`jaxtune._markers.owner_of`: a Pallas custom call, the innermost ``pallas_call``
frame of its name stack, the interpret-mode kernel whose scope encloses it, the innermost
``jaxtune[<id>#<digest>]`` marker; else it is a plain XLA op. Time is each op's exclusive
time, so nothing is counted twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .. import _markers
from . import roofline as _roofline
from .events import OpEvent as OpEvent
from .events import op_events as op_events
from .events import program_ids as program_ids

__all__ = [
    "Context",
    "KernelStat",
    "OpEvent",
    "attribute",
    "classify",
    "op_events",
    "program_ids",
]

Owner = _markers.Owner
Provenance = Literal["cost_estimate", "hint", "xla", "shapes", "none"]


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
    ``"hint"`` (``@autotuned(flops=..., bytes=...)``), ``"xla"`` (XLA's cost analysis in
    the trace), ``"shapes"`` (bytes only: the operands and results of a Pallas kernel) or
    ``"none"``. ``bound_by`` is ``"compute"``, ``"memory"`` or
    ``"unknown"`` against the device's peaks.
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

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def classify(
    events: Sequence[OpEvent],
    *,
    kernels: Sequence[Mapping[str, Any]] = (),
    fusions: Mapping[str, Sequence[str]] | None = None,
    pallas_prefixes: Mapping[str, str] | None = None,
    claims: Mapping[tuple[int, str], str] | None = None,
) -> None:
    """Sets each event's ``owner`` by :func:`jaxtune._markers.owner_of`.

    ``kernels`` are the program's Pallas calls (name, scope, ...); ``fusions`` map a fusion
    to the op names of the instructions fused into it: a fusion that holds ops of kernels
    belongs to them (one owner naming every kernel, ``"a + b"``, when there are several),
    never to an anonymous XLA row. ``claims`` name the Pallas kernel of an instruction
    (``(program id, instruction)``) where the trace's own metadata says it
    (:mod:`.recover`). A program run from inside another program's op (what an
    interpret-mode ``io_callback`` does) belongs to that op.
    """
    scopes = _markers.scope_table(kernels)
    prefixes = sorted((pallas_prefixes or {}).items(), key=lambda kv: -len(kv[0]))
    known: dict[tuple[str, str | None, str], Owner] = {}

    def owner(stack: str, target: str | None, op: str) -> Owner:
        memo = (stack, target, op if not stack else "")
        if memo not in known:
            known[memo] = _markers.owner_of(stack, target, op, scopes, prefixes)
        return known[memo]

    for e in events:  # in time order, so a parent is classified before its children
        if e.parent is not None and (not e.name_stack or e.parent.program != e.program):
            # Ops XLA added without metadata (copies inside a loop body), and programs a
            # callback ran, belong to the op that runs them.
            e.owner = e.parent.owner
            continue
        e.owner = owner(e.name_stack, e.target, e.op)
        claim = claims.get((e.program, e.op)) if claims and e.program is not None else None
        if claim is not None:
            e.owner = ("pallas", claim, e.owner[2])
            continue
        parts = (fusions or {}).get(e.op)
        if e.owner[0] == "xla" and parts:
            inner = {owner(stack, None, e.op) for stack in parts}
            named = sorted({o for o in inner if o[0] != "xla"}, key=lambda o: o[1])
            if len(named) == 1:
                e.owner = named[0]
            elif named:
                e.owner = ("pallas", " + ".join(o[1] for o in named), None)


def _runs(events: Sequence[OpEvent]) -> dict[Owner, list[int]]:
    """Each owner's calls as seen in the trace: runs of consecutive top-level events of
    one kernel, in time order (every event of a plain XLA op is a call of its own)."""
    runs: dict[Owner, list[int]] = {}
    previous: Owner | None = None
    for e in events:
        if e.parent is not None and e.parent.owner == e.owner:
            if runs.get(e.owner):
                runs[e.owner][-1] += e.exclusive_ps
            continue
        if e.owner[0] == "xla" or e.owner != previous:
            runs.setdefault(e.owner, []).append(0)
        runs[e.owner][-1] += e.exclusive_ps
        previous = e.owner
    return runs


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """What attribution knows beyond the trace (from the capture, or a sidecar)."""

    peak: Any = None
    host_trace: bool = False
    total_ps: int = 1
    iterations: int = 0
    per_step: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    costs: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    hints: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)
    io_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)


def _program_runs(group: Sequence[OpEvent]) -> int:
    """How many runs of its program the trace shows a kernel in (its events' ``run_id``s;
    0 when an event lacks one). Programs a callback ran inside it have runs of their own
    and are left out."""
    own = [e for e in group if e.parent is None or e.parent.program == e.program]
    if not own or any(e.run is None for e in own):
        return 0
    return len({(e.program, e.run) for e in own})


def _calls(
    owner: Owner, runs: list[int], group: Sequence[OpEvent], ctx: Context
) -> tuple[int, bool]:
    """``(calls, exact)``: executions per step (from the program) x iterations (or, for a
    trace read without its capture, the runs of the program it shows) when the program
    says how often a kernel runs; else what the trace shows, exact only where one event is
    one call (a plain op, a custom call, any op on a device plane)."""
    kind, name, _ = owner
    if kind == "xla" or not ctx.host_trace or all(e.target for e in group):
        return len(runs), True
    per_step = [ctx.per_step.get(n) for n in name.split(" + ")]
    known = [n for n in per_step if isinstance(n, int) and n > 0]
    steps = ctx.iterations or _program_runs(group)
    if steps and per_step and len(known) == len(per_step):
        return max(known) * steps, True
    return len(runs), False


def _cost(
    owner: Owner, calls: int, exact: bool, group: Sequence[OpEvent], ctx: Context
) -> tuple[float | None, float | None, Provenance]:
    """Total flops and bytes of an owner over the profile, and where they came from: a
    per-call figure times the calls (only when the calls are exact), or XLA's own."""
    kind, name, kernel_id = owner
    per_call = ctx.costs.get(name) if kind == "pallas" else None
    hint = ctx.hints.get(kernel_id or "") if kind != "xla" else None
    if exact and per_call and (per_call.get("flops") or per_call.get("bytes_accessed")):
        flops = per_call.get("flops", 0.0) * calls or None
        return flops, per_call.get("bytes_accessed", 0.0) * calls or None, "cost_estimate"
    if exact and hint:
        return (
            hint.get("flops", 0.0) * calls or None,
            hint.get("bytes", 0.0) * calls or None,
            "hint",
        )
    xla_flops = sum(e.flops or 0.0 for e in group)
    xla_bytes = sum(e.bytes_accessed or 0.0 for e in group)
    if xla_flops or xla_bytes:
        return xla_flops or None, xla_bytes or None, "xla"
    io_bytes = ctx.io_bytes.get(name) if kind == "pallas" else None
    if exact and io_bytes:
        # The operands and results' sizes: a lower bound of the bytes a call moves.
        return None, float(io_bytes * calls), "shapes"
    return None, None, "none"


def _stat(owner: Owner, group: Sequence[OpEvent], runs: list[int], ctx: Context) -> KernelStat:
    kind, name, kernel_id = owner
    total = sum(runs) or sum(e.exclusive_ps for e in group)
    calls, exact = _calls(owner, runs, group, ctx)
    flops, bytes_, provenance = _cost(owner, calls, exact, group, ctx)
    seconds = total * 1e-12
    return KernelStat(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        target=next((e.target for e in group if e.target), None),
        hlo_op=group[0].op,
        source=ctx.sources.get(name) or ctx.sources.get(kernel_id or ""),
        kernel_id=kernel_id,
        calls=calls,
        calls_exact=exact,
        total_us=total * 1e-6,
        mean_us=total * 1e-6 / max(calls, 1),
        # Per-call extremes only where the trace's runs are the calls.
        min_us=min(runs) * 1e-6 if runs and len(runs) == calls else None,
        max_us=max(runs) * 1e-6 if runs and len(runs) == calls else None,
        share=total / ctx.total_ps,
        flops=flops,
        bytes_accessed=bytes_,
        flops_per_s=flops / seconds if flops and seconds else None,
        bytes_per_s=bytes_ / seconds if bytes_ and seconds else None,
        intensity=flops / bytes_ if flops and bytes_ else None,
        bound_by=_roofline.bound_by(flops, bytes_, ctx.peak),
        flops_source=provenance,
    )


def attribute(
    events: Sequence[OpEvent],
    *,
    plane_stats: Mapping[str, Any] | None = None,
    device_kind: str | None = None,
    costs: Mapping[str, Mapping[str, float]] | None = None,
    hints: Mapping[str, Mapping[str, float]] | None = None,
    sources: Mapping[str, str] | None = None,
    pallas_prefixes: Mapping[str, str] | None = None,
    kernels: Sequence[Mapping[str, Any]] = (),
    fusions: Mapping[str, Sequence[str]] | None = None,
    iterations: int = 0,
    autotuned: Mapping[str, int] | None = None,
    host_trace: bool = False,
    claims: Mapping[tuple[int, str], str] | None = None,
) -> tuple[list[KernelStat], list[KernelStat], float]:
    """``(kernels, ops, total device µs)``, each list sorted by share.

    ``kernels`` are the program's Pallas calls (``name``, ``scope``, ``per_step``,
    ``cost_estimate``) as the capture wrote them; ``costs`` maps a Pallas kernel name to
    its per-call ``cost_estimate``; ``hints`` a jaxtune kernel id to its per-call
    ``flops``/``bytes`` hints; ``sources`` a kernel name to its ``file:line``;
    ``pallas_prefixes`` a name-stack prefix to a kernel name; ``autotuned`` a jaxtune
    kernel id to its call sites per step; ``iterations`` how many steps the trace holds;
    ``host_trace`` that the ops ran on host threads (CPU), where an interpret-mode kernel's
    events interleave and cannot be counted as calls; ``claims`` the kernel of an
    instruction by ``(program id, instruction)``, recovered from a trace's own metadata.
    """
    classify(
        events, kernels=kernels, fusions=fusions, pallas_prefixes=pallas_prefixes, claims=claims
    )
    per_step: dict[str, int | None] = dict(autotuned or {})
    all_costs = dict(costs or {})
    io_bytes = {k["name"]: int(k["io_bytes"]) for k in kernels if k.get("io_bytes")}
    for k in kernels:
        n, before = k.get("per_step"), per_step.get(k["name"], 0)
        per_step[k["name"]] = None if n is None or before is None else before + int(n)
        if k.get("cost_estimate"):
            all_costs.setdefault(k["name"], k["cost_estimate"])
    ctx = Context(
        peak=_roofline.peak_for(device_kind, plane_stats),
        host_trace=host_trace,
        total_ps=sum(e.exclusive_ps for e in events) or 1,
        iterations=iterations,
        per_step=per_step,
        costs=all_costs,
        hints=hints or {},
        sources=sources or {},
        io_bytes=io_bytes,
    )
    runs = _runs(events)
    by_owner: dict[Owner, list[OpEvent]] = {}
    for e in events:
        by_owner.setdefault(e.owner, []).append(e)
    stats = [_stat(o, group, runs.get(o, []), ctx) for o, group in by_owner.items()]
    stats.sort(key=lambda s: -s.share)
    return (
        [s for s in stats if s.kind != "xla"],
        [s for s in stats if s.kind == "xla"],
        ctx.total_ps * 1e-6,
    )
