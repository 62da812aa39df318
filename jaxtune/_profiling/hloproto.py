"""Serialized HLO protos (what a trace's metadata plane holds for every compiled program)
-> what attribution needs: each instruction's op name (name stack), custom-call target and
Python stack frames, and the instructions fused into each fusion.

The same facts :mod:`.hlo` reads from compiled HLO *text* (what a capture has); a trace
written by anyone carries them only as protos. Fields read (``xla/service/hlo.proto``)::

    HloProto             hlo_module=1
    HloModuleProto       name=1 computations=3 stack_frame_index=17
    HloComputationProto  name=1 instructions=2 id=5
    HloInstructionProto  name=1 opcode=2 metadata=7 custom_call_target=28 id=35
                         called_computation_ids=38
    OpMetadata           op_name=2 source_file=3 source_line=4 stack_frame_id=15
    StackFrameIndexProto file_names=1 function_names=2 file_locations=3 stack_frames=4
      FileLocation       file_name_id=1 function_name_id=2 line=3
      StackFrame         file_location_id=1 parent_frame_id=2
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .protowire import DecodeError, fields, text, varint

__all__ = ["Frame", "HloInstruction", "HloModule", "parse_hlo_proto"]

#: Deepest Python stack kept per instruction (a damaged index may loop).
MAX_FRAMES = 256


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
    the id of the computation holding it, ``calls`` those it calls."""

    name: str
    opcode: str
    op_name: str
    target: str | None
    frames: tuple[Frame, ...]
    calls: tuple[int, ...]
    computation: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HloModule:
    """A compiled program: its instructions by name, and each fusion's fused instructions
    (by name: a fusion's own metadata names only one of them)."""

    name: str
    instructions: dict[str, HloInstruction]
    fused: dict[str, tuple[str, ...]]

    def ops(self) -> dict[str, tuple[str, str | None]]:
        """Instruction name -> ``(op_name, custom-call target)``, as :func:`.hlo.hlo_ops`."""
        return {n: (i.op_name, i.target) for n, i in self.instructions.items()}


def _message(buf: bytes, span: tuple[int, int]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for field, _, value in fields(buf, *span):
        out.setdefault(field, []).append(value)
    return out


def _string(msg: dict[int, list[Any]], buf: bytes, field: int) -> str:
    values = msg.get(field)
    return text(buf, values[-1]) if values and isinstance(values[-1], tuple) else ""


def _int(msg: dict[int, list[Any]], field: int) -> int:
    values = msg.get(field)
    return values[-1] if values and isinstance(values[-1], int) else 0


def _ints(msg: dict[int, list[Any]], buf: bytes, field: int) -> tuple[int, ...]:
    """A repeated int64, packed (proto3's default) or not."""
    out: list[int] = []
    for value in msg.get(field, ()):
        if isinstance(value, int):
            out.append(value)
        elif isinstance(value, tuple):
            pos, end = value
            while pos < end:
                number, pos = varint(buf, pos)
                out.append(number)
    return tuple(out)


class _Stacks:
    """The module's stack frame index: a frame id -> its frames, outermost first."""

    def __init__(self, buf: bytes, span: tuple[int, int] | None) -> None:
        msg = _message(buf, span) if span else {}
        self.files = [text(buf, v) for v in msg.get(1, ()) if isinstance(v, tuple)]
        self.functions = [text(buf, v) for v in msg.get(2, ()) if isinstance(v, tuple)]
        self.locations = [_message(buf, v) for v in msg.get(3, ()) if isinstance(v, tuple)]
        self.frames = [_message(buf, v) for v in msg.get(4, ()) if isinstance(v, tuple)]
        self.memo: dict[int, tuple[Frame, ...]] = {}

    def _frame(self, frame_id: int) -> tuple[Frame | None, int]:
        if not 0 < frame_id <= len(self.frames):
            return None, 0
        frame = self.frames[frame_id - 1]
        location_id = _int(frame, 1)
        if not 0 < location_id <= len(self.locations):
            return None, _int(frame, 2)
        loc = self.locations[location_id - 1]
        file_id, function_id = _int(loc, 1), _int(loc, 2)
        found = Frame(
            file=self.files[file_id - 1] if 0 < file_id <= len(self.files) else "",
            line=_int(loc, 3),
            function=self.functions[function_id - 1]
            if 0 < function_id <= len(self.functions)
            else "",
        )
        return found, _int(frame, 2)

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
    buf: bytes, span: tuple[int, int], stacks: _Stacks, computation: int
) -> HloInstruction:
    msg = _message(buf, span)
    meta = _message(buf, msg[7][-1]) if isinstance(msg.get(7, [None])[-1], tuple) else {}
    frames = stacks.stack(_int(meta, 15))
    if not frames and _string(meta, buf, 3):
        frames = (Frame(file=_string(meta, buf, 3), line=_int(meta, 4), function=""),)
    return HloInstruction(
        name=_string(msg, buf, 1),
        opcode=_string(msg, buf, 2),
        op_name=_string(meta, buf, 2),
        target=_string(msg, buf, 28) or None,
        frames=frames,
        calls=_ints(msg, buf, 38),
        computation=computation,
    )


def parse_hlo_proto(data: bytes) -> HloModule:
    """Decodes a serialized ``HloProto`` (the module and its buffer assignment).

    Raises:
        DecodeError: the bytes are not such a proto.
    """
    buf = bytes(data)
    span = _message(buf, (0, len(buf))).get(1, [None])[-1]
    if not isinstance(span, tuple):
        raise DecodeError("not an HloProto (no hlo_module)")
    module = _message(buf, span)
    span17 = module.get(17, [None])[-1]
    stacks = _Stacks(buf, span17 if isinstance(span17, tuple) else None)
    instructions: dict[str, HloInstruction] = {}
    by_computation: dict[int, list[str]] = {}
    for comp_span in module.get(3, ()):
        if not isinstance(comp_span, tuple):
            continue
        comp = _message(buf, comp_span)
        names = by_computation.setdefault(_int(comp, 5), [])
        for ins_span in comp.get(2, ()):
            if isinstance(ins_span, tuple):
                ins = _instruction(buf, ins_span, stacks, _int(comp, 5))
                instructions[ins.name] = ins
                names.append(ins.name)
    fused = {
        i.name: tuple(by_computation.get(i.calls[0], ()))
        for i in instructions.values()
        if i.opcode == "fusion" and i.calls
    }
    return HloModule(name=_string(module, buf, 1), instructions=instructions, fused=fused)
