"""HloProtos and CPU traces built by hand, for tests of the trace reader: a minimal protobuf
encoder, instructions with ids and operands, and the text proto of a ``/host:CPU`` plane
(epoch-scale timestamps, as real traces have) with a ``/host:metadata`` plane carrying the
programs' HLO protos."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hostile.traces import EPOCH_NS
from jax.profiler import ProfileData

CALLBACK = "xla_ffi_python_cpu_callback"


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def msg(*fields: tuple[int, object]) -> bytes:
    """A message of ``(field number, int | str | bytes)`` fields, in order."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, int):
            out += varint(number << 3) + varint(value)
        else:
            data = value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[arg-type]
            out += varint(number << 3 | 2) + varint(len(data)) + data
    return bytes(out)


@dataclasses.dataclass
class Ins:
    """One instruction: its id, name, opcode, op name (name stack; ``""``: no metadata),
    stack frame id, custom-call target, called computations and operand ids."""

    id: int
    name: str
    opcode: str
    op_name: str = ""
    frame: int = 0
    target: str = ""
    calls: Sequence[int] = ()
    operands: Sequence[int] = ()

    def encode(self) -> bytes:
        fields: list[tuple[int, object]] = [(1, self.name), (2, self.opcode)]
        if self.op_name:
            fields.append((7, msg((2, self.op_name), (15, self.frame))))
        if self.target:
            fields.append((28, self.target))
        fields.append((35, self.id))
        if self.operands:  # packed, as proto3 writes repeated numbers
            fields.append((36, b"".join(varint(i) for i in self.operands)))
        if self.calls:
            fields.append((38, b"".join(varint(c) for c in self.calls)))
        return msg(*fields)


def module(
    name: str,
    computations: Sequence[tuple[int, str, Sequence[Ins]]],
    locations: Sequence[tuple[str, str, int]] = (),
    frames: Sequence[tuple[int, int]] = (),
) -> bytes:
    """An ``HloProto`` of computations ``(id, name, instructions)`` (the entry last, as XLA
    writes it); ``locations`` are ``(file, function, line)`` and ``frames`` ``(location,
    parent frame)``, 1-based, as in a ``StackFrameIndexProto``."""
    files = sorted({f for f, _, _ in locations})
    functions = sorted({fn for _, fn, _ in locations})
    index = msg(
        *[(1, f) for f in files],
        *[(2, f) for f in functions],
        *[
            (3, msg((1, files.index(f) + 1), (2, functions.index(fn) + 1), (3, line)))
            for f, fn, line in locations
        ],
        *[(4, msg((1, loc), (2, parent))) for loc, parent in frames],
    )
    comps = [
        (3, msg((1, cname), *[(2, i.encode()) for i in ins], (5, cid)))
        for cid, cname, ins in computations
    ]
    return msg((1, msg((1, name), *comps, (17, index))), (3, b""))


def _octal(data: bytes) -> str:
    return "".join(f"\\{b:03o}" for b in data)


def event(op: str, start_us: float, length_us: float, run: int, program: int, module: str) -> str:
    """One executed thunk of a CPU trace (stats ``hlo_op``, ``hlo_module``, ``program_id``,
    ``run_id``)."""
    return (
        f"events {{ metadata_id: 1 offset_ps: {round(start_us * 10**6)} duration_ps: "
        f"{round(length_us * 10**6)} stats {{ metadata_id: 1 str_value: {op!r} }} "
        f'stats {{ metadata_id: 2 str_value: "{module}" }} '
        f"stats {{ metadata_id: 3 int64_value: {program} }} "
        f"stats {{ metadata_id: 4 int64_value: {run} }} }}"
    ).replace("'", '"')


def cpu_trace(lines: Sequence[Sequence[str]], protos: dict[int, tuple[str, bytes]]) -> str:
    """A CPU trace: one host thread's line per item of ``lines`` (its events), each
    starting at its own epoch-scale timestamp, and the HLO proto of each program
    (``program id -> (module name, proto)``)."""
    threads = "\n".join(
        f'  lines {{ id: {n + 1} name: "tf_XLAEigen/{n + 1}" timestamp_ns: {EPOCH_NS}\n'
        f"    {' '.join(events)}\n  }}"
        for n, events in enumerate(lines)
    )
    metadata = "\n".join(
        f'  event_metadata {{ key: {n} value {{ id: {n} name: "{name}({pid})"\n'
        f'    stats {{ metadata_id: 1 bytes_value: "{_octal(proto)}" }}\n'
        f"    stats {{ metadata_id: 2 int64_value: {pid} }} }} }}"
        for n, (pid, (name, proto)) in enumerate(protos.items(), start=1)
    )
    return f"""
planes {{
  id: 1 name: "/host:CPU"
{threads}
  event_metadata {{ key: 1 value {{ id: 1 name: "thunk" }} }}
  stat_metadata {{ key: 1 value {{ id: 1 name: "hlo_op" }} }}
  stat_metadata {{ key: 2 value {{ id: 2 name: "hlo_module" }} }}
  stat_metadata {{ key: 3 value {{ id: 3 name: "program_id" }} }}
  stat_metadata {{ key: 4 value {{ id: 4 name: "run_id" }} }}
}}
planes {{
  id: 2 name: "/host:metadata"
{metadata}
  stat_metadata {{ key: 1 value {{ id: 1 name: "Hlo Proto" }} }}
  stat_metadata {{ key: 2 value {{ id: 2 name: "program_id" }} }}
}}
"""


def serialized(text: str) -> bytes:
    """The XSpace a text proto describes, serialized."""
    return ProfileData.text_proto_to_serialized_xspace(text)
