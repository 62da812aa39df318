"""A generator of large TPU-shaped traces (``.xplane.pb``), for the trace-reader benchmark.

The trace looks like what XProf writes for a TPU training run: a ``/device:TPU:0`` plane
with lines ``Steps``, ``XLA Modules`` and ``XLA Ops`` (one event per executed op, the op's
facts on its event metadata: ``tf_op``, ``hlo_category``, ``flops``, ``bytes_accessed``,
``program_id``, ``long_name``), a ``/host:CPU`` plane of host threads, and a
``/host:metadata`` plane. Of the ``kinds`` ops, every tenth is a Pallas kernel (a
``tpu_custom_call`` whose name stack ends in ``pallas_call``), the rest XLA fusions.
With ``intra=True`` the plane also holds the lines custom-call tracing adds inside each
kernel call (``LLO Ops`` regions, ``MXU0 Instructions`` and ``VALU Instructions`` lanes),
on lines whose own epoch-scale ``timestamp_ns`` differs from the ``XLA Ops`` line's.

It is written with the ``protobuf`` package and an XSpace schema declared here, apart from
jaxtune's own (:mod:`jaxtune._core.xspace.schema`), and it returns the ground truth: each
kernel's (and XLA op's) total device time and event count, so the benchmark can check the
report against it.

Run: python bench/tpu_trace.py OUT.xplane.pb [--events 3200000] [--intra]
"""

from __future__ import annotations

import argparse
import collections
import random
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto

#: XLA's XSpace schema (``xla/tsl/profiler/protobuf/xplane.proto``), as written by XLA.
_SCHEMA = {
    "XSpace": [
        ("planes", 1, "XPlane"),
        ("errors", 2, _F.TYPE_STRING, True),
        ("warnings", 3, _F.TYPE_STRING, True),
        ("hostnames", 4, _F.TYPE_STRING, True),
    ],
    "XPlane": [
        ("id", 1, _F.TYPE_INT64),
        ("name", 2, _F.TYPE_STRING),
        ("lines", 3, "XLine"),
        ("event_metadata", 4, "XPlane.EventMetadataEntry"),
        ("stat_metadata", 5, "XPlane.StatMetadataEntry"),
        ("stats", 6, "XStat"),
    ],
    "XLine": [
        ("id", 1, _F.TYPE_INT64),
        ("display_id", 10, _F.TYPE_INT64),
        ("name", 2, _F.TYPE_STRING),
        ("display_name", 11, _F.TYPE_STRING),
        ("timestamp_ns", 3, _F.TYPE_INT64),
        ("duration_ps", 9, _F.TYPE_INT64),
        ("events", 4, "XEvent"),
    ],
    "XEvent": [
        ("metadata_id", 1, _F.TYPE_INT64),
        ("offset_ps", 2, _F.TYPE_INT64),
        ("duration_ps", 3, _F.TYPE_INT64),
        ("stats", 4, "XStat"),
    ],
    "XStat": [
        ("metadata_id", 1, _F.TYPE_INT64),
        ("double_value", 2, _F.TYPE_DOUBLE),
        ("uint64_value", 3, _F.TYPE_UINT64),
        ("int64_value", 4, _F.TYPE_INT64),
        ("str_value", 5, _F.TYPE_STRING),
        ("bytes_value", 6, _F.TYPE_BYTES),
        ("ref_value", 7, _F.TYPE_UINT64),
    ],
    "XEventMetadata": [
        ("id", 1, _F.TYPE_INT64),
        ("name", 2, _F.TYPE_STRING),
        ("display_name", 4, _F.TYPE_STRING),
        ("metadata", 3, _F.TYPE_BYTES),
        ("stats", 5, "XStat"),
        ("child_id", 6, _F.TYPE_INT64, True),
    ],
    "XStatMetadata": [
        ("id", 1, _F.TYPE_INT64),
        ("name", 2, _F.TYPE_STRING),
        ("description", 3, _F.TYPE_STRING),
    ],
}


def classes() -> dict[str, Any]:
    """Message classes of XLA's XSpace schema (this file's own, not jaxtune's)."""
    fd = descriptor_pb2.FileDescriptorProto(
        name="bench/xplane.proto", package="bench.xplane", syntax="proto3"
    )
    for name, fields in _SCHEMA.items():
        msg = fd.message_type.add(name=name)
        for spec in fields:
            fname, number, kind = spec[:3]
            repeated = isinstance(kind, str) or (len(spec) > 3 and spec[3])
            f = msg.field.add(
                name=fname,
                number=number,
                label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL,
            )
            if isinstance(kind, str):
                f.type = _F.TYPE_MESSAGE
                f.type_name = f".bench.xplane.{kind}"
            else:
                f.type = kind
        if name == "XPlane":
            for entry, value in (
                ("EventMetadataEntry", "XEventMetadata"),
                ("StatMetadataEntry", "XStatMetadata"),
            ):
                e = msg.nested_type.add(name=entry)
                e.options.map_entry = True
                e.field.add(name="key", number=1, type=_F.TYPE_INT64, label=_F.LABEL_OPTIONAL)
                e.field.add(
                    name="value",
                    number=2,
                    type=_F.TYPE_MESSAGE,
                    type_name=f".bench.xplane.{value}",
                    label=_F.LABEL_OPTIONAL,
                )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"bench.xplane.{n}"))
        for n in _SCHEMA
    }


#: Events on each of the 8 host threads (not read by a device report).
HOST_EVENTS = 50_000

STAT_NAMES = [
    "tf_op",
    "hlo_category",
    "flops",
    "bytes_accessed",
    "program_id",
    "long_name",
    "group_id",
    "custom_call_target",
    "peak_teraflops_per_second",
    "peak_hbm_bw_gigabytes_per_second",
    "device_type_string",
    "pallas_primitive",
]
SID = {n: i + 1 for i, n in enumerate(STAT_NAMES)}


def kernel_of(mid: int) -> tuple[str, str]:
    """``(kind, row name)`` the report should give op kind ``mid``."""
    if mid % 10 == 0:
        return "pallas", f"attention_{mid // 10}"
    return "xla", f"fusion.{mid}"


def _stat(msg: Any, name: str, value: Any) -> None:
    s = msg.stats.add(metadata_id=SID[name])
    if isinstance(value, str):
        s.str_value = value
    elif isinstance(value, float):
        s.double_value = value
    else:
        s.int64_value = value


#: Intra-kernel lines: (id, name), their start after the ``XLA Ops`` line's, in ns.
INTRA = ((4, "LLO Ops"), (5, "MXU0 Instructions"), (6, "VALU Instructions"))
INTRA_SHIFT_NS = 5


def generate(
    path: str, events: int = 3_200_000, kinds: int = 400, seed: int = 0, *, intra: bool = False
) -> dict:
    """Writes the trace; returns the truth: ``{"events", "bytes", "rows": {name: {"kind",
    "total_ps", "events", "flops", "units": {lane: ps}}}, "intra_events"}``."""
    rng = random.Random(seed)
    msg = classes()
    space = msg["XSpace"]()
    space.hostnames.append("bench-host")
    tpu = space.planes.add(id=1, name="/device:TPU:0")
    for name, sid in SID.items():
        tpu.stat_metadata[sid].id = sid
        tpu.stat_metadata[sid].name = name
    _stat(tpu, "peak_teraflops_per_second", 197.0)
    _stat(tpu, "peak_hbm_bw_gigabytes_per_second", 819.0)
    _stat(tpu, "device_type_string", "TPU v5 lite")
    durations = {}
    flops = {}
    for mid in range(1, kinds + 1):
        m = tpu.event_metadata[mid]
        m.id = mid
        kind, row = kernel_of(mid)
        layer = mid % 24
        if kind == "pallas":
            m.name = f"custom-call.{mid}"
            _stat(m, "tf_op", f"jit(train_step)/layer_{layer}/jit({row})/pallas_call")
            _stat(m, "hlo_category", "custom-call")
            _stat(m, "custom_call_target", "tpu_custom_call")
        else:
            m.name = row
            _stat(m, "tf_op", f"jit(train_step)/layer_{layer}/block_{mid}/dot_general")
            _stat(m, "hlo_category", "convolution fusion")
        flops[mid] = float(rng.randint(1, 1000) * 1_000_000)
        _stat(m, "flops", flops[mid])
        _stat(m, "bytes_accessed", float(rng.randint(1, 1000) * 4096))
        _stat(m, "program_id", 7)
        _stat(m, "long_name", f"%{m.name} = f32[8,1024,128] {m.name}(...), metadata={{...}}")
        durations[mid] = rng.randint(200_000, 5_000_000)  # 0.2-5 µs in ps
    tpu.event_metadata[kinds + 1].id = kinds + 1
    tpu.event_metadata[kinds + 1].name = "jit_train_step"
    tpu.event_metadata[kinds + 2].id = kinds + 2
    tpu.event_metadata[kinds + 2].name = "step"
    # Intra-kernel event kinds: two LLO regions, one MXU and one VALU instruction.
    intra_ids = {"dma": kinds + 3, "compute": kinds + 4, "vmatmul": kinds + 5, "vadd": kinds + 6}
    for name, mid in intra_ids.items():
        tpu.event_metadata[mid].id = mid
        tpu.event_metadata[mid].name = name

    truth: dict[str, dict] = collections.defaultdict(
        lambda: {"kind": "", "total_ps": 0, "events": 0, "flops": 0.0, "units": {}}
    )
    shift = INTRA_SHIFT_NS * 1000  # an intra line's offsets count from its own start
    inner: dict[int, list[bytes]] = {lid: [] for lid, _ in INTRA}
    intra_events = 0
    base_ns = 1_700_000_000_000_000_000  # epoch-scale, as real traces are
    steps = 100
    per_step = events // steps
    ops = msg["XLine"](id=3, name="XLA Ops", timestamp_ns=base_ns)
    modules = msg["XLine"](id=2, name="XLA Modules", timestamp_ns=base_ns)
    step_line = msg["XLine"](id=1, name="Steps", timestamp_ns=base_ns)
    chunks = [step_line.SerializeToString(), modules.SerializeToString()]
    head = ops.SerializeToString()
    body: list[bytes] = []
    t = 0
    order = list(range(1, kinds + 1))
    for step in range(steps):
        step_start = t
        chunk = msg["XLine"]()
        for i in range(per_step):
            mid = order[(i * 7 + step) % kinds]
            d = durations[mid] + (i % 5) * 1000
            e = chunk.events.add(metadata_id=mid, offset_ps=t, duration_ps=d)
            e.stats.add(metadata_id=SID["group_id"], int64_value=step)
            kind, row = kernel_of(mid)
            r = truth[row]
            r["kind"], r["total_ps"], r["events"] = kind, r["total_ps"] + d, r["events"] + 1
            r["flops"] += flops[mid]
            if intra and kind == "pallas":
                at, half, quarter = t - shift, d // 2, d // 4
                for lid, name, start, length in (
                    (4, "dma", at, half),
                    (4, "compute", at + half, d - half),
                    (5, "vmatmul", at + quarter, quarter),
                    (6, "vadd", at + half, quarter),
                ):
                    lane = msg["XLine"]()
                    ev = lane.events.add(
                        metadata_id=intra_ids[name], offset_ps=start, duration_ps=length
                    )
                    if lid == 4:
                        _stat(ev, "pallas_primitive", name)
                    inner[lid].append(lane.SerializeToString())
                    intra_events += 1
                units = r["units"]
                for lane_name in ("MXU0 Instructions", "VALU Instructions"):
                    units[lane_name] = units.get(lane_name, 0) + quarter
            t += d + 1000 * (1 + i % 3)
        body.append(chunk.SerializeToString())
        modules_ev = msg["XLine"]()
        modules_ev.events.add(
            metadata_id=kinds + 1, offset_ps=step_start, duration_ps=t - step_start
        )
        step_ev = msg["XLine"]()
        step_ev.events.add(metadata_id=kinds + 2, offset_ps=step_start, duration_ps=t - step_start)
        chunks[0] += step_ev.SerializeToString()
        chunks[1] += modules_ev.SerializeToString()
    # Concatenated serializations of one message are its merge: the lines' events join.
    lines = [chunks[0], chunks[1], head + b"".join(body)]
    if intra:
        for lid, name in INTRA:
            line = msg["XLine"](id=lid, name=name, timestamp_ns=base_ns + INTRA_SHIFT_NS)
            lines.append(line.SerializeToString() + b"".join(inner[lid]))
    tpu_bytes = tpu.SerializeToString() + b"".join(_field3(x) for x in lines)
    host = msg["XPlane"](id=2, name="/host:CPU")
    host.stat_metadata[1].id = 1
    host.stat_metadata[1].name = "group_id"
    for mid in range(1, 51):
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = f"train.py:{mid} step_fn"
    for tid in range(8):
        line = host.lines.add(id=tid, name=f"python thread {tid}", timestamp_ns=base_ns)
        for i in range(HOST_EVENTS):
            e = line.events.add(
                metadata_id=1 + (i % 50), offset_ps=i * 4_000_000, duration_ps=3_000_000
            )
            e.stats.add(metadata_id=1, int64_value=i // 1000)
    meta = msg["XPlane"](id=3, name="/host:metadata")
    head_bytes = msg["XSpace"](hostnames=["bench-host"]).SerializeToString()
    data = (
        head_bytes
        + _field1(tpu_bytes)
        + _field1(host.SerializeToString())
        + _field1(meta.SerializeToString())
    )
    with open(path, "wb") as f:
        f.write(data)
    n_events = sum(r["events"] for r in truth.values())
    return {
        "events": n_events,
        "host_events": 8 * HOST_EVENTS,
        "intra_events": intra_events,
        "bytes": len(data),
        "rows": dict(truth),
    }


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field1(payload: bytes) -> bytes:
    """``planes`` (field 1, length-delimited) of an XSpace holding ``payload``."""
    return b"\x0a" + _varint(len(payload)) + payload


def _field3(payload: bytes) -> bytes:
    """``lines`` (field 3) of an XPlane holding ``payload``."""
    return b"\x1a" + _varint(len(payload)) + payload


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--events", type=int, default=3_200_000)
    parser.add_argument("--intra", action="store_true", help="add intra-kernel lines")
    args = parser.parse_args()
    truth = generate(args.out, args.events, intra=args.intra)
    print(
        f"{args.out}: {truth['bytes'] / 1e6:.1f} MB, {truth['events']} op events, "
        f"{truth['intra_events']} intra-kernel events"
    )


if __name__ == "__main__":
    main()
