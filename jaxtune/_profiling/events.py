"""Trace -> executed HLO ops: the events of the first device plane, each with its
instruction's name stack, custom-call target, program and run, and its exclusive time.

Where the ops are:
- CPU: host plane ``/host:CPU``, lines ``tf_XLA*`` (XLA's thread pool) and the calling
  thread's (``python``), one event per executed thunk with stats
  ``hlo_op``/``hlo_module``/``program_id``/``run_id``; the op's name stack comes from the
  compiled HLO's metadata: the capture's HLO text, or the HLO protos the trace carries
  (:mod:`.hloproto`).
- TPU: planes ``/device:TPU:N``, line ``XLA Ops``; the event metadata carries ``tf_op`` (the
  name stack), ``hlo_category``, ``flops``, ``bytes_accessed``.
- GPU: planes ``/device:GPU:N``, kernel events with ``hlo_op``/``hlo_module`` (and, when
  given, ``tf_op``).

Nested events (a while loop and its body) count their exclusive time, so nothing is
counted twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .. import _markers
from . import xspace as _xspace

__all__ = ["OpEvent", "op_events", "program_ids"]

Owner = _markers.Owner


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
    owner: Owner = ("xla", "", None)
    program: int | None = None
    run: int | None = None


def _device_planes(space: _xspace.Space) -> list[_xspace.Plane]:
    devices = [p for p in space.planes if p.name.startswith(("/device:TPU:", "/device:GPU:"))]
    if devices:
        return devices
    return [p for p in space.planes if p.name == "/host:CPU"]


def _op_lines(plane: _xspace.Plane) -> list[_xspace.Line]:
    if plane.name.startswith("/device:TPU:"):
        return [line for line in plane.lines if line.name == "XLA Ops"]
    # On CPU a thunk runs on XLA's pool (``tf_XLA*`` lines) or on the thread that called
    # the program (its ``python`` line): every line, and of each only the events of ops.
    return list(plane.lines)


def program_ids(space: _xspace.Space) -> set[int]:
    """The programs (``program_id``) whose ops ran on the first device plane."""
    planes = _device_planes(space)
    return {
        pid
        for line in (_op_lines(planes[0]) if planes else ())
        for ev in line.events
        if (pid := _int_or_none(ev.stats.get("program_id"))) is not None
    }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def op_events(
    space: _xspace.Space,
    hlo: Mapping[str, tuple[str, str | None]] | None = None,
    programs: Mapping[int, Mapping[str, tuple[str, str | None]]] | None = None,
) -> tuple[list[OpEvent], _xspace.Plane | None]:
    """Every executed HLO op of the first device plane (all lines), with exclusive times.

    ``hlo`` maps an HLO instruction name to ``(op_name, custom-call target)``;
    ``programs`` does so per program id (instruction names repeat across programs), and
    wins for the events that name their program.
    """
    hlo = hlo or {}
    programs = programs or {}
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
            program = _int_or_none(ev.stat("program_id"))
            known = programs.get(program, hlo).get(op) if program is not None else hlo.get(op)
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
                    program=program,
                    run=_int_or_none(ev.stat("run_id")),
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
