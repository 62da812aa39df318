"""Trace-reader throughput on a generated TPU-shaped trace, and a profile() split.

  jaxtune's XSpace reader, MB/s on a trace of --mb megabytes (default 50)
  jax.profiler.ProfileData (C++) on the same bytes, for reference (it hides metadata stats)
  jaxtune.profile() on a small model: child start, compile, run, parse

Run: python bench/bench_trace_reader.py [--mb 50]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time

import jax.numpy as jnp


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes | int | float) -> bytes:
    if isinstance(payload, float):
        return _varint(number << 3 | 1) + struct.pack("<d", payload)
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _stat(mid: int, value: int | float | str) -> bytes:
    if isinstance(value, str):
        return _field(1, mid) + _field(5, value.encode())
    if isinstance(value, float):
        return _field(1, mid) + _field(2, value)
    return _field(1, mid) + _field(4, value)


def generate(megabytes: float) -> bytes:
    """An XSpace with one TPU plane, 200 kinds of ops, and events until the size is reached."""
    stat_names = {1: "tf_op", 2: "flops", 3: "bytes_accessed", 4: "hlo_category", 5: "run_id"}
    plane = bytearray(_field(1, 1) + _field(2, b"/device:TPU:0"))
    for sid, name in stat_names.items():
        entry = _field(1, sid) + _field(2, _field(1, sid) + _field(2, name.encode()))
        plane += _field(5, entry)
    for mid in range(1, 201):
        stats = (
            _field(5, _stat(1, f"jit(step)/layer{mid % 12}/kernel{mid}/pallas_call"))
            + _field(5, _stat(2, float(mid * 1e6)))
            + _field(5, _stat(3, float(mid * 4e3)))
            + _field(5, _stat(4, "custom-call"))
        )
        meta = _field(1, mid) + _field(2, f"custom-call.{mid}".encode()) + stats
        plane += _field(4, _field(1, mid) + _field(2, meta))
    events = bytearray()
    target = int(megabytes * 1e6)
    i = 0
    while len(events) < target:
        event = (
            _field(1, 1 + i % 200) + _field(2, i * 1000) + _field(3, 900) + _field(4, _stat(5, i))
        )
        events += _field(4, event)
        i += 1
    line = _field(1, 1) + _field(2, b"XLA Ops") + _field(3, 1000) + bytes(events)
    plane += _field(3, line)
    return _field(1, bytes(plane))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50.0)
    args = parser.parse_args()
    os.environ.setdefault("JAXTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="jaxtune-bench-"))
    from jax.profiler import ProfileData

    from jaxtune._profiling import attribution as _attribution
    from jaxtune._profiling import xspace as _xspace

    data = generate(args.mb)
    size = len(data) / 1e6
    start = time.perf_counter()
    space = _xspace.parse(data)
    ours = time.perf_counter() - start
    events = sum(len(line.events) for p in space.planes for line in p.lines)
    start = time.perf_counter()
    ops, plane = _attribution.op_events(space)
    kernels, _, _ = _attribution.attribute(
        ops, plane_stats=plane.stats if plane else None, device_kind="TPU v5 lite"
    )
    attribution = time.perf_counter() - start
    start = time.perf_counter()
    reference = ProfileData.from_serialized_xspace(data)
    sum(1 for p in reference.planes for line in p.lines for _ in line.events)
    theirs = time.perf_counter() - start
    print(f"trace: {size:.1f} MB, {events} events, {len(kernels)} kernels")
    print(f"jaxtune reader        {ours:7.2f} s  {size / ours:7.1f} MB/s")
    print(
        f"attribution           {attribution:7.2f} s  {events / attribution / 1e6:7.2f} M events/s"
    )
    print(f"ProfileData (C++)     {theirs:7.2f} s  {size / theirs:7.1f} MB/s  (no metadata stats)")

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from profile_models import model

    import jaxtune

    os.environ["JAXTUNE_ISOLATION"] = "process"
    start = time.perf_counter()
    p = model.profile(jnp.ones((128, 128)))
    total = time.perf_counter() - start
    t = p.timings
    start_s = total - t["compile_s"] - t["run_s"] - t["parse_s"]
    print(
        f"jaxtune.profile total {total:7.2f} s: child start + transfer {start_s:.2f} s, "
        f"compile {t['compile_s']:.2f} s, run (traced) {t['run_s']:.3f} s, "
        f"parse {t['parse_s']:.3f} s"
    )
    jaxtune._isolation.process.shutdown_children()


if __name__ == "__main__":
    main()
