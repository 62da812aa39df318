"""What writing and reading the frames between parent and child costs (issue 47, point 4).

Each frame type is written (``to_wire``, then msgpack), read back (msgpack, then
``frames.reply`` / ``frames.request``) and compared, as the two ends do it. With
``--against REV`` the same round trip is timed with ``jaxtune/_isolation/frames.py`` as it
stood at git revision ``REV`` (loaded beside the current one, both reading the same
frames), interleaved with the current code, so the figures compare the annotation-driven
codec (:mod:`jaxtune._core.typed`) with the hand-written ``to_wire``/``read`` it replaced.
Times are the best of ``--reps`` repeats of ``--number`` round trips, in µs per trip.

Run: python bench/bench_wire.py [--against main] [--reps 7] [--number 2000] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import subprocess
import sys
import timeit
from collections.abc import Callable
from types import ModuleType
from typing import Any

from jaxtune._core.codec import packb, unpackb
from jaxtune._core.vocabulary import Failure, Measurement
from jaxtune._isolation import frames

ROOT = pathlib.Path(__file__).resolve().parent.parent
MEASUREMENT = dict(
    config={"block_m": 128, "block_n": 256, "layout": ("x", 2)},
    median_us=12.5,
    min_us=11.9,
    spread=0.04,
    samples=40,
    compile_s=0.8,
    low_us=12.1,
    high_us=12.9,
    rounds_us=(12.4, 12.6, 12.5),
    calls=60,
)


def samples(m: ModuleType) -> dict[str, Any]:
    """One frame of each type, built with the frames module ``m`` (current or old)."""
    cid = "block_m=128,block_n=256"
    ref = m.FunctionRef(module="pkg.kernels", qualname="matmul", path="/src/k.py", kernel="k")
    return {
        "ready": m.Ready(
            pid=4242,
            platform="tpu",
            device_kind="TPU v5 lite",
            device_count=1,
            versions={"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": None},
            env={"XLA_FLAGS": "--xla_dump_to=/tmp", "JAX_PLATFORMS": None},
        ),
        "compile_start": m.CompileStarted(cid=cid, thread=140_000_000_001),
        "compiled": m.CompileFinished(cid=cid, seconds=0.75),
        "run_start": m.RunStarted(cid=cid, thread=140_000_000_001),
        "round_start": m.RoundStarted(cids=(cid, "block_m=256,block_n=256", "block_m=512")),
        "ran": m.RunFinished(cid=cid),
        "result": m.ConfigResult(cid=cid, result=Measurement(**MEASUREMENT)),
        "result_failed": m.ConfigResult(
            cid=cid,
            result=Failure(config={"block_m": 128}, stage="compile", reason="VMEM OOM " * 8),
        ),
        "done": m.Done(body={"results": {}}, notes=("a note",), unapplied={"x64": "why"}),
        "error": m.ErrorReply(kind=m.ErrorKind.SWEEP, message="boom " * 20, notes=("n",)),
        "preload": m.Preload(
            modules=(m.Module(ref=ref, environ={"A": "1"}),), handlers=("jaxtune.x",)
        ),
        "request": m.Request(
            handler="jaxtune._profiling.serve",
            op="profile",
            ref=ref,
            fields=m.WireFields({"iters": 3, "warmup": 2, "logdir": "/tmp/x"}),
            args=[{"shape": [8, 128], "dtype": "float32"}],
            kwargs={},
            jax_state={"jax_enable_x64": False},
        ),
    }


def round_trips(m: ModuleType, frame: Any) -> dict[str, Callable[[], Any]]:
    """One write and read of ``frame`` with module ``m``: the typed part alone
    (``to_wire`` and the reader, on the map), and the whole trip through msgpack as the two
    ends do it."""
    read = m.reply
    if isinstance(frame, m.Preload | m.Request):
        read = m.request

    def typed() -> Any:
        return read(frame.to_wire())

    def trip() -> Any:
        return read(unpackb(packb(frame.to_wire())))

    assert typed() == frame and trip() == frame, (type(frame).__name__, trip(), frame)
    return {"typed": typed, "trip": trip}


def load_frames(rev: str) -> ModuleType:
    """``jaxtune/_isolation/frames.py`` as it stood at git revision ``rev``, loaded as a
    sibling of the current one (its relative imports find today's ``_core``)."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:jaxtune/_isolation/frames.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = "jaxtune._isolation._frames_at_rev"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "jaxtune._isolation"
    sys.modules[name] = module  # dataclasses look their module up while building a class
    exec(compile(source, f"{rev}:frames.py", "exec"), module.__dict__)
    return module


def timed(trip: Callable[[], Any], number: int) -> float:
    return timeit.timeit(trip, number=number) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="a git revision whose frames.py to compare with")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()

    ends = {"now": frames}
    if args.against:
        ends[args.against] = load_frames(args.against)
    trips = {
        (kind, part, end): trip
        for end, m in ends.items()
        for kind, f in samples(m).items()
        for part, trip in round_trips(m, f).items()
    }
    times: dict[tuple[str, str, str], list[float]] = {key: [] for key in trips}
    for _ in range(args.reps):  # interleaved, so drift in the machine's speed hits both
        for key, trip in trips.items():
            times[key].append(timed(trip, args.number))
    best = {key: round(min(t), 2) for key, t in times.items()}  # the least disturbed repeat
    kinds = list(samples(frames))
    columns = [(part, end) for part in ("typed", "trip") for end in ends]
    print("µs per round trip (typed: to_wire and read; trip: through msgpack too)")
    print(f"{'frame':<16}" + "".join(f"{part + ' ' + end:>16}" for part, end in columns))
    for kind in kinds:
        print(f"{kind:<16}" + "".join(f"{best[kind, p, e]:>16.2f}" for p, e in columns))
    totals = {f"{p} {e}": round(sum(best[k, p, e] for k in kinds), 2) for p, e in columns}
    print(f"{'sum':<16}" + "".join(f"{t:>16.2f}" for t in totals.values()))
    rows = {k: {f"{p} {e}": best[k, p, e] for p, e in columns} for k in kinds}
    if args.json:
        args.json.write_text(
            json.dumps({"us_per_round_trip": rows, "sum": totals}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
