"""Compiled HLO -> what attribution needs: each instruction's op name (name stack),
custom-call target and Python stack frames, and the instructions fused into each fusion.

From HLO *text* (what a capture has: :func:`hlo_ops`, :func:`hlo_fusions`), or from the
serialized ``HloProto`` of every compiled program a trace's metadata plane carries
(:func:`parse_hlo_proto`, on the schema of :mod:`jaxtune._core.xspace.schema`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .._core.xspace import schema as _schema
from .._core.xspace.xplane import DecodeError, decode, text
from . import mosaic as _mosaic
from .mosaic_work import body_of

__all__ = [
    "Frame",
    "HloInstruction",
    "HloModule",
    "expression_facts",
    "hlo_fusions",
    "hlo_ops",
    "parse_hlo_proto",
]

#: Deepest Python stack kept per instruction (a damaged index may loop).
MAX_FRAMES = 256

_HLO_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
#: The head of one instruction's text: ``%name =`` (``ROOT`` before it in a computation).
_INSTRUCTION = re.compile(r"\s*(?:ROOT\s+)?%?[\w.\-]+\s*=")
_OP_NAME = re.compile(r'op_name="(?P<op>(?:[^"\\]|\\.)*)"')
_TARGET = re.compile(r'custom_call_target="(?P<target>[^"]*)"')


#: A computation's head: its name at the line's start, then its signature (if printed) and
#: ``{``. Not an instruction (indented, ``name =``); a signature may hold ``=`` (a long
#: tuple's ``/*index=5*/``), so only what follows the name tells them apart.
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*(?:\(.*)?\{\s*$")
_CALLS = re.compile(r"calls=%?(?P<callee>[\w.\-]+)")


def hlo_fusions(hlo_text: str) -> dict[str, list[str]]:
    """Fusion instruction -> the distinct op names of the instructions fused into it, from
    compiled HLO text (a fusion's own metadata names only one of them)."""
    names: dict[str, list[str]] = {}
    calls: dict[str, str] = {}
    current = ""
    for line in hlo_text.splitlines():
        head = _COMPUTATION.match(line)
        if head:
            current = head.group("name")
            continue
        m = _HLO_LINE.match(line)
        if not m:
            continue
        op = _OP_NAME.search(m.group("rest"))
        if op and op.group("op") not in names.setdefault(current, []):
            names[current].append(op.group("op"))
        callee = _CALLS.search(m.group("rest"))
        if callee and " fusion(" in f" {m.group('rest')}":
            calls[m.group("name")] = callee.group("callee")
    return {fusion: names.get(callee, []) for fusion, callee in calls.items()}


def hlo_ops(hlo_text: str) -> dict[str, tuple[str, str | None]]:
    """Instruction name -> ``(op_name, custom-call target)`` from compiled HLO text."""
    out: dict[str, tuple[str, str | None]] = {}
    for line in hlo_text.splitlines():
        m = _HLO_LINE.match(line)
        if not m:
            continue
        rest = m.group("rest")
        op = _OP_NAME.search(rest)
        target = _TARGET.search(rest)
        out[m.group("name")] = (
            op.group("op") if op else "",
            target.group("target") if target else None,
        )
    return out


def expression_facts(expression: str) -> tuple[str, str | None] | None:
    """``(op_name, custom-call target)`` of one instruction's HLO text (``%custom-call.3 =
    bf16[...] custom-call(...), custom_call_target="tpu_custom_call", metadata={op_name=
    "..."}``, over one line or several: what XProf calls an op's long name), ``""`` and
    ``None`` for what it leaves out; ``None`` when the text is not an instruction."""
    if not _INSTRUCTION.match(expression):
        return None
    op = _OP_NAME.search(expression)
    target = _TARGET.search(expression)
    return (op.group("op") if op else "", target.group("target") if target else None)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Frame:
    """One Python frame of the code that traced an instruction."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HloInstruction:
    """One compiled HLO instruction; ``frames`` are outermost first, ``computation`` is
    the id of the computation holding it, ``calls`` those it calls, ``operands`` the
    names of the instructions whose values it takes. A Mosaic TPU custom call also
    carries its Pallas kernel's name and cost estimate (:mod:`.mosaic`), and, when it
    declares no estimate, its Mosaic body (``mosaic_body``, MLIR bytecode: its work is
    counted from it, :mod:`.mosaic_work`)."""

    name: str
    opcode: str
    op_name: str
    target: str | None
    frames: tuple[Frame, ...]
    calls: tuple[int, ...]
    computation: int = 0
    operands: tuple[str, ...] = ()
    kernel_name: str | None = None
    cost_estimate: dict[str, float] | None = None
    mosaic_body: bytes | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HloModule:
    """A compiled program: its instructions by name, each fusion's fused instructions
    (by name: a fusion's own metadata names only one of them), and where each
    instruction's value goes (:meth:`consumers`)."""

    name: str
    instructions: dict[str, HloInstruction]
    fused: dict[str, tuple[str, ...]]
    users: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    callers: dict[int, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def consumers(self, name: str) -> tuple[str, ...]:
        """The instructions an instruction's value goes to: those that take it as an
        operand; for one that none takes (its computation's result, as a copy at the end
        of a loop body), the instructions that call its computation (the ``while``)."""
        users = self.users.get(name)
        if users:
            return users
        ins = self.instructions.get(name)
        return self.callers.get(ins.computation, ()) if ins is not None else ()

    def ops(self) -> dict[str, tuple[str, str | None]]:
        """Instruction name -> ``(op_name, custom-call target)``, as :func:`hlo_ops`."""
        return {n: (i.op_name, i.target) for n, i in self.instructions.items()}


class _Stacks:
    """The module's stack frame index: a frame id -> its frames, outermost first."""

    def __init__(self, index: Any) -> None:
        self.files = [text(f) for f in index.file_names]
        self.functions = [text(f) for f in index.function_names]
        self.locations = list(index.file_locations)
        self.frames = list(index.stack_frames)
        self.memo: dict[int, tuple[Frame, ...]] = {}

    def _frame(self, frame_id: int) -> tuple[Frame | None, int]:
        if not 0 < frame_id <= len(self.frames):
            return None, 0
        frame = self.frames[frame_id - 1]
        location_id = frame.file_location_id
        if not 0 < location_id <= len(self.locations):
            return None, frame.parent_frame_id
        loc = self.locations[location_id - 1]
        file_id, function_id = loc.file_name_id, loc.function_name_id
        found = Frame(
            file=self.files[file_id - 1] if 0 < file_id <= len(self.files) else "",
            line=loc.line,
            function=self.functions[function_id - 1]
            if 0 < function_id <= len(self.functions)
            else "",
        )
        return found, frame.parent_frame_id

    def stack(self, frame_id: int) -> tuple[Frame, ...]:
        if frame_id in self.memo:
            return self.memo[frame_id]
        inner_first: list[Frame] = []
        seen: set[int] = set()
        at = frame_id
        while at and at not in seen and len(inner_first) < MAX_FRAMES:
            seen.add(at)
            frame, at = self._frame(at)
            if frame is not None:
                inner_first.append(frame)
        self.memo[frame_id] = out = tuple(reversed(inner_first))
        return out


def _instruction(
    ins: Any, stacks: _Stacks, computation: int, names: dict[int, str]
) -> HloInstruction:
    meta = ins.metadata
    frames = stacks.stack(meta.stack_frame_id)
    if not frames and meta.source_file:
        frames = (Frame(file=text(meta.source_file), line=meta.source_line, function=""),)
    target = text(ins.custom_call_target) or None
    config = bytes(ins.backend_config) if target == _mosaic.TARGET else b""
    estimate = _mosaic.cost_estimate(config) if config else None
    return HloInstruction(
        name=text(ins.name),
        opcode=text(ins.opcode),
        op_name=text(meta.op_name),
        target=target,
        kernel_name=_mosaic.kernel_name(config) if config else None,
        cost_estimate=estimate,
        mosaic_body=body_of(config) if config and not estimate else None,
        frames=frames,
        calls=tuple(ins.called_computation_ids),
        computation=computation,
        operands=tuple(names[i] for i in ins.operand_ids if i in names),
    )


def parse_hlo_proto(data: bytes) -> HloModule:
    """Decodes a serialized ``HloProto`` (the module and its buffer assignment).

    Raises:
        DecodeError: the bytes are not such a proto.
    """
    proto = decode(_schema.HloProto, bytes(data), "HloProto")
    if not proto.HasField("hlo_module"):
        raise DecodeError("not an HloProto (no hlo_module)")
    module = proto.hlo_module
    stacks = _Stacks(module.stack_frame_index)
    # Instruction ids are unique in a module; operands name them.
    ids = {ins.id: text(ins.name) for comp in module.computations for ins in comp.instructions}
    instructions: dict[str, HloInstruction] = {}
    by_computation: dict[int, list[str]] = {}
    users: dict[str, list[str]] = {}
    callers: dict[int, list[str]] = {}
    for comp in module.computations:
        names = by_computation.setdefault(comp.id, [])
        for ins in comp.instructions:
            found = _instruction(ins, stacks, comp.id, ids)
            instructions[found.name] = found
            names.append(found.name)
            for operand in found.operands:
                users.setdefault(operand, []).append(found.name)
            for callee in found.calls:
                callers.setdefault(callee, []).append(found.name)
    fused = {
        i.name: tuple(by_computation.get(i.calls[0], ()))
        for i in instructions.values()
        if i.opcode == "fusion" and i.calls
    }
    return HloModule(
        name=text(module.name),
        instructions=instructions,
        fused=fused,
        users={k: tuple(v) for k, v in users.items()},
        callers={k: tuple(v) for k, v in callers.items()},
    )
