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

from .._program import markers as _markers
from . import roofline as _roofline
from .events import Walk
from .totals import OpKind, Totals

__all__ = ["Context", "KernelStat", "attribute", "classifier", "kernel_ids"]

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
    ``"unknown"`` against the device's peaks. ``config`` is the config an autotuned kernel
    ran with, and ``speedup`` what tuning measured it gained over the default config
    (``None`` when not tuned, or for a trace read without its capture).
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

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["config"] = dict(self.config) if self.config is not None else None
        return out


def kernel_ids(kernels: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Pallas kernel name -> the jaxtune kernel id it runs inside (the innermost marker of
    its scope, else ``inside``), for the names that have one id only."""
    found: dict[str, set[str | None]] = {}
    for k in kernels:
        marks = _markers.parse("/".join(str(f) for f in k.get("scope") or ()))
        inside = marks[-1][0] if marks else k.get("inside")
        found.setdefault(str(k.get("name")), set()).add(inside if isinstance(inside, str) else None)
    return {
        name: only
        for name, i in found.items()
        if len(i) == 1 and (only := next(iter(i))) is not None
    }


def classifier(
    *,
    kernels: Sequence[Mapping[str, Any]] = (),
    fusions: Mapping[str, Sequence[str]] | None = None,
    claims: Mapping[tuple[int, str], str] | None = None,
) -> Callable[[OpKind], Owner]:
    """The owner of an executed op (memoized by its :class:`~.events.OpKind`), by
    :func:`jaxtune._program.markers.owner_of`.

    ``kernels`` are the program's Pallas calls (name, scope, ...); ``fusions`` map a fusion
    to the op names of the instructions fused into it: a fusion that holds ops of kernels
    belongs to them (one owner naming every kernel, ``"a + b"``, when there are several),
    never to an anonymous XLA row. ``claims`` name the Pallas kernel of an instruction
    (``(program id, instruction)``) where the trace's own metadata says it
    (:mod:`.recover`). (An op without metadata inside another, and a program a callback ran
    from inside another program's op, belong to the op that runs them: :func:`.events.walk`
    sees to that.)
    """
    scopes = _markers.scope_table(kernels)
    known: dict[tuple[str, str | None, str], Owner] = {}
    memo: dict[OpKind, Owner] = {}
    ids = kernel_ids(kernels)

    def owner(stack: str, target: str | None, op: str) -> Owner:
        key = (stack, target, op if not stack else "")
        if key not in known:
            known[key] = _markers.owner_of(stack, target, op, scopes)
        return known[key]

    def classify(kind: OpKind) -> Owner:
        found = memo.get(kind)
        if found is not None:
            return found
        result = owner(kind.name_stack, kind.target, kind.op)
        claim = claims.get((kind.program, kind.op)) if claims and kind.program is not None else None
        parts = (fusions or {}).get(kind.op)
        if claim is not None:
            # An op claimed by the trace's metadata (a copy XLA added to the kernel's loop
            # body, without a name stack) is the kernel's: the same row, kernel id and all.
            result = ("pallas", claim, result[2] or ids.get(claim))
        elif result[0] == "xla" and parts:
            inner = {owner(stack, None, kind.op) for stack in parts}
            named = sorted({o for o in inner if o[0] != "xla"}, key=lambda o: o[1])
            if len(named) == 1:
                result = named[0]
            elif named:
                result = ("pallas", " + ".join(o[1] for o in named), None)
        memo[kind] = result
        return result

    return classify


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
    configs: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)


def _program_runs(t: Totals) -> int:
    """How many runs of its program the trace shows a kernel in (its events' ``run_id``s;
    0 when an event lacks one). Programs a callback ran inside it have runs of their own
    and are left out."""
    return 0 if t.runless else len(t.program_runs)


def _calls(owner: Owner, t: Totals, ctx: Context) -> tuple[int, bool]:
    """``(calls, exact)``: executions per step (from the program) x iterations (or, for a
    trace read without its capture, the runs of the program it shows) when the program
    says how often a kernel runs; else what the trace shows, exact only where one event is
    one call (a plain op, a custom call, any op on a device plane)."""
    kind, name, _ = owner
    if kind == "xla" or not ctx.host_trace or t.all_targets:
        return t.runs, True
    per_step = [ctx.per_step.get(n) for n in name.split(" + ")]
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
    if t.flops or t.bytes_accessed:
        return t.flops or None, t.bytes_accessed or None, "xla"
    io_bytes = ctx.io_bytes.get(name) if kind == "pallas" else None
    if exact and io_bytes:
        # The operands and results' sizes: a lower bound of the bytes a call moves.
        return None, float(io_bytes * calls), "shapes"
    return None, None, "none"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _stat(owner: Owner, t: Totals, ctx: Context) -> KernelStat:
    kind, name, kernel_id = owner
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
    extremes = t.runs and t.runs == calls and t.run_min is not None and t.run_max is not None
    return KernelStat(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        target=t.target,
        hlo_op=t.first_op,
        source=ctx.sources.get(name) or ctx.sources.get(kernel_id or ""),
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
        config=ran.get("config") if ran else None,
        speedup=ran.get("speedup") if ran else None,
    )


def attribute(
    walked: Walk,
    *,
    plane_stats: Mapping[str, Any] | None = None,
    device_kind: str | None = None,
    costs: Mapping[str, Mapping[str, float]] | None = None,
    hints: Mapping[str, Mapping[str, float]] | None = None,
    sources: Mapping[str, str] | None = None,
    kernels: Sequence[Mapping[str, Any]] = (),
    iterations: int = 0,
    autotuned: Mapping[str, int] | None = None,
    host_trace: bool = False,
    configs: Mapping[str, Mapping[str, Any]] | None = None,
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
    a jaxtune kernel id to the config it ran with and its tuned ``speedup``.
    """
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
        total_ps=walked.total_ps or 1,
        iterations=iterations,
        per_step=per_step,
        costs=all_costs,
        hints=hints or {},
        sources=sources or {},
        io_bytes=io_bytes,
        configs=configs or {},
    )
    stats = [_stat(o, t, ctx) for o, t in walked.owners.items() if t.events]
    stats.sort(key=lambda s: -s.share)
    return (
        [s for s in stats if s.kind != "xla"],
        [s for s in stats if s.kind == "xla"],
        ctx.total_ps * 1e-6,
    )
