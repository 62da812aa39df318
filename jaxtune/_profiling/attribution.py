"""Device events -> HLO ops -> kernels, with time, FLOP/s, bandwidth and roofline bound.

Where the ops are:
- CPU: host plane ``/host:CPU``, lines ``tf_XLA*``, one event per executed thunk with stats
  ``hlo_op``/``hlo_module``; the op's name stack comes from the compiled HLO's metadata
  (``hlo`` below), since a CPU trace carries no HLO protos.
- TPU: planes ``/device:TPU:N``, line ``XLA Ops``; the event metadata carries ``tf_op`` (the
  name stack), ``hlo_category``, ``flops``, ``bytes_accessed``.
- GPU: planes ``/device:GPU:N``, kernel events with ``hlo_op``/``hlo_module`` (and, when
  given, ``tf_op``).

An op belongs to the innermost Pallas kernel of its name stack (``<name>/pallas_call``, or
a Pallas custom call), else to the innermost ``jaxtune[<id>#<digest>]`` marker, else it is
a plain XLA op. Nested events (a while loop and its body) count their exclusive time, so
nothing is counted twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from .. import _markers
from . import roofline as _roofline
from . import xspace as _xspace

__all__ = ["KernelStat", "OpEvent", "attribute", "op_events"]

_PALLAS_CALL = "/pallas_call"
PALLAS_TARGETS = ("tpu_custom_call", "__gpu$xla.gpu.triton", "mosaic_gpu", "mosaic_gpu_v2")
Provenance = Literal["cost_estimate", "hint", "xla", "shapes", "none"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KernelStat:
    """Time and throughput of one kernel (or one XLA op) over a profile.

    ``kind``: ``"pallas"``, ``"autotuned"`` or ``"xla"``. Times are µs; ``share`` is the
    fraction of all device op time. ``flops``/``bytes_accessed`` are totals over all calls,
    and ``flops_source`` says where they came from: ``"cost_estimate"`` (the kernel's own),
    ``"hint"`` (``@autotuned(flops=..., bytes=...)``), ``"xla"`` (XLA's cost analysis in
    the trace), ``"shapes"`` or ``"none"``. ``bound_by`` is ``"compute"``, ``"memory"`` or
    ``"unknown"`` against the device's peaks.
    """

    name: str
    kind: Literal["pallas", "autotuned", "xla"]
    target: str | None = None
    hlo_op: str | None = None
    source: str | None = None
    kernel_id: str | None = None
    calls: int = 0
    total_us: float = 0.0
    mean_us: float = 0.0
    min_us: float = 0.0
    max_us: float = 0.0
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


@dataclasses.dataclass(slots=True)
class OpEvent:
    """One executed HLO op."""

    op: str
    module: str
    name_stack: str
    target: str | None
    start_ps: int
    duration_ps: int
    exclusive_ps: int
    flops: float | None
    bytes_accessed: float | None
    line: int
    parent: OpEvent | None = None
    owner: tuple[str, str, str | None] = ("xla", "", None)


def _device_planes(space: _xspace.Space) -> list[_xspace.Plane]:
    devices = [p for p in space.planes if p.name.startswith(("/device:TPU:", "/device:GPU:"))]
    if devices:
        return devices
    return [p for p in space.planes if p.name == "/host:CPU"]


def _op_lines(plane: _xspace.Plane) -> list[_xspace.Line]:
    if plane.name.startswith("/device:TPU:"):
        return [line for line in plane.lines if line.name == "XLA Ops"]
    if plane.name == "/host:CPU":
        return [line for line in plane.lines if line.name.startswith("tf_XLA")]
    return list(plane.lines)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def op_events(
    space: _xspace.Space, hlo: Mapping[str, tuple[str, str | None]] | None = None
) -> tuple[list[OpEvent], _xspace.Plane | None]:
    """Every executed HLO op of the first device plane (all lines), with exclusive times.

    ``hlo`` maps an HLO instruction name to ``(op_name, custom-call target)``.
    """
    hlo = hlo or {}
    planes = _device_planes(space)
    if not planes:
        return [], None
    plane = planes[0]
    events: list[OpEvent] = []
    for index, line in enumerate(_op_lines(plane)):
        base = line.timestamp_ns * 1000
        on_line: list[OpEvent] = []
        for ev in line.events:
            op = ev.stat("hlo_op")
            if op is None and plane.name.startswith("/device:TPU:"):
                op = ev.name
            if not op:
                continue
            op = str(op)
            known = hlo.get(op)
            name_stack = str(ev.stat("tf_op") or (known[0] if known else ""))
            target = ev.stat("custom_call_target") or (known[1] if known else None)
            on_line.append(
                OpEvent(
                    op=op,
                    module=str(ev.stat("hlo_module", "")),
                    name_stack=name_stack,
                    target=str(target) if target else None,
                    start_ps=base + ev.offset_ps,
                    duration_ps=ev.duration_ps,
                    exclusive_ps=ev.duration_ps,
                    flops=_number(ev.stat("flops")),
                    bytes_accessed=_number(ev.stat("bytes_accessed")),
                    line=index,
                )
            )
        on_line.sort(key=lambda e: (e.start_ps, -e.duration_ps))
        stack: list[OpEvent] = []
        for e in on_line:
            while stack and stack[-1].start_ps + stack[-1].duration_ps <= e.start_ps:
                stack.pop()
            if stack:
                e.parent = stack[-1]
                stack[-1].exclusive_ps -= e.duration_ps
            stack.append(e)
        events.extend(on_line)
    for e in events:
        e.exclusive_ps = max(e.exclusive_ps, 0)
    events.sort(key=lambda e: e.start_ps)
    return events, plane


def _owner(e: OpEvent, prefixes: Sequence[tuple[str, str]] = ()) -> tuple[str, str, str | None]:
    """``(kind, name, kernel id)`` of the kernel an op belongs to.

    ``prefixes`` are ``(name-stack prefix, kernel name)`` of interpret-mode Pallas kernels
    (from ``locate``), longest first: their body ops are named ``<name>/while/body/...``,
    without ``pallas_call``.
    """
    stack = e.name_stack
    marks = _markers.parse(stack)
    kernel_id = marks[-1][0] if marks else None
    for prefix, name in prefixes:
        if stack == prefix or stack.startswith(prefix + "/"):
            return "pallas", name, kernel_id
    at = stack.find(_PALLAS_CALL)
    if at >= 0:
        name = stack[:at].rsplit("/", 1)[-1].split("(")[-1] or "pallas_call"
        if not marks or marks[-1][2] <= at:
            return "pallas", name, kernel_id
    if e.target in PALLAS_TARGETS:
        name = stack.rsplit("/", 1)[-1] if stack else e.op
        return "pallas", name or e.op, kernel_id
    if kernel_id is not None:
        return "autotuned", kernel_id, kernel_id
    return "xla", e.op, None


def attribute(
    events: Sequence[OpEvent],
    *,
    plane_stats: Mapping[str, Any] | None = None,
    device_kind: str | None = None,
    costs: Mapping[str, Mapping[str, float]] | None = None,
    hints: Mapping[str, Mapping[str, float]] | None = None,
    sources: Mapping[str, str] | None = None,
    pallas_prefixes: Mapping[str, str] | None = None,
) -> tuple[list[KernelStat], list[KernelStat], float]:
    """``(kernels, ops, total device µs)``.

    ``costs`` maps a Pallas kernel name to its per-call ``cost_estimate``; ``hints`` maps a
    jaxtune kernel id to its per-call ``flops``/``bytes`` hints; ``sources`` maps a kernel
    name to its ``file:line``; ``pallas_prefixes`` maps an interpret-mode Pallas kernel's
    name-stack prefix (``.../<name>``) to its name.
    """
    costs, hints, sources = costs or {}, hints or {}, sources or {}
    peak = _roofline.peak_for(device_kind, plane_stats)
    total_ps = sum(e.exclusive_ps for e in events) or 1
    prefixes = sorted((pallas_prefixes or {}).items(), key=lambda kv: -len(kv[0]))
    known: dict[tuple[str, str | None, str], tuple[str, str, str | None]] = {}
    for e in events:  # in time order, so a parent is classified before its children
        if not e.name_stack and e.parent is not None:
            # Ops XLA added without metadata (copies inside a loop body) belong to the op
            # that runs them.
            e.owner = e.parent.owner
            continue
        memo = (e.name_stack, e.target, e.op if not e.name_stack else "")
        owner = known.get(memo)
        if owner is None:
            owner = known[memo] = _owner(e, prefixes)
        e.owner = owner
    # Calls: runs of consecutive top-level events of one kernel, in time order.
    runs: dict[tuple[str, str, str | None], list[int]] = {}
    previous: tuple[str, str, str | None] | None = None
    for e in events:
        if e.parent is not None and e.parent.owner == e.owner:
            if runs.get(e.owner):
                runs[e.owner][-1] += e.exclusive_ps
            continue
        if e.owner[0] == "xla" or e.owner != previous:
            runs.setdefault(e.owner, []).append(0)
        runs[e.owner][-1] += e.exclusive_ps
        previous = e.owner
    by_owner: dict[tuple[str, str, str | None], list[OpEvent]] = {}
    for e in events:
        by_owner.setdefault(e.owner, []).append(e)

    kernels: list[KernelStat] = []
    ops: list[KernelStat] = []
    for owner, group in by_owner.items():
        kind, name, kernel_id = owner
        calls = runs.get(owner) or [sum(e.exclusive_ps for e in group)]
        total = sum(calls)
        flops = bytes_ = None
        provenance: Provenance = "none"
        per_call = costs.get(name) if kind == "pallas" else None
        hint = hints.get(kernel_id or "") if kind != "xla" else None
        xla_flops = sum(e.flops or 0.0 for e in group)
        xla_bytes = sum(e.bytes_accessed or 0.0 for e in group)
        if per_call and (per_call.get("flops") or per_call.get("bytes_accessed")):
            flops = per_call.get("flops", 0.0) * len(calls) or None
            bytes_ = per_call.get("bytes_accessed", 0.0) * len(calls) or None
            provenance = "cost_estimate"
        elif hint:
            flops = hint.get("flops", 0.0) * len(calls) or None
            bytes_ = hint.get("bytes", 0.0) * len(calls) or None
            provenance = "hint"
        elif xla_flops or xla_bytes:
            flops, bytes_, provenance = xla_flops or None, xla_bytes or None, "xla"
        seconds = total * 1e-12
        stat = KernelStat(
            name=name,
            kind=kind,  # type: ignore[arg-type]
            target=next((e.target for e in group if e.target), None),
            hlo_op=group[0].op,
            source=sources.get(name) or sources.get(kernel_id or ""),
            kernel_id=kernel_id,
            calls=len(calls),
            total_us=total * 1e-6,
            mean_us=total * 1e-6 / len(calls),
            min_us=min(calls) * 1e-6,
            max_us=max(calls) * 1e-6,
            share=total / total_ps,
            flops=flops,
            bytes_accessed=bytes_,
            flops_per_s=flops / seconds if flops and seconds else None,
            bytes_per_s=bytes_ / seconds if bytes_ and seconds else None,
            intensity=flops / bytes_ if flops and bytes_ else None,
            bound_by=_roofline.bound_by(flops, bytes_, peak),
            flops_source=provenance,
        )
        (ops if kind == "xla" else kernels).append(stat)
    kernels.sort(key=lambda s: -s.total_us)
    ops.sort(key=lambda s: -s.total_us)
    return kernels, ops, total_ps * 1e-6
