"""A sweep's timeline, for a probe on the chip (``bench_tokamax_tpu.py --timeline``).

Wraps the sweep engine's steps (a config's wait for the lowering processes, its lowering
or loading, its compile, the device timer's captures and rounds) to note when each began
and ended on which thread, and samples the host's busy cores from ``/proc/stat`` and this process's from its
CPU time meanwhile,
so that a sweep's compile wait can be told apart: the host's cores all busy (too much
work) or idle (a step that feeds the others too slowly). Nothing here runs unless asked.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["recording", "summary"]


def _busy() -> tuple[float, float]:
    """The host's busy and total jiffies so far (``/proc/stat``'s first line)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def _own_cpu() -> float:
    """The CPU seconds this process's threads used so far (its compiling threads' among
    them): ``/proc/stat`` stood still on the chip's host, this does not."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def recording(path: str, interval_s: float = 0.25) -> Iterator[None]:
    """Notes the sweep's steps and the host's busy cores until the block ends; writes
    them and their :func:`summary` to ``path`` (JSON)."""
    from jaxtune._tuning.sweep import compile as compile_mod
    from jaxtune._tuning.sweep import lowering_pool, measure

    t0 = time.perf_counter()
    spans: list[tuple[str, str, float, float]] = []
    cpu: list[tuple[float, float, float]] = []
    cores = os.cpu_count() or 1
    patched: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, kind: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def noted(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter() - t0
            try:
                return original(*args, **kwargs)
            finally:
                thread = threading.current_thread().name
                spans.append((kind, thread, start, time.perf_counter() - t0))

        patched.append((owner, name, original))
        setattr(owner, name, noted)

    wrap(lowering_pool.LoweringPool, "wait", "wait")
    wrap(compile_mod.Compiler, "lower", "lower")
    wrap(compile_mod.Compiler, "compile_one", "compile")
    wrap(measure.Stopwatch, "captured", "captured")
    wrap(measure.Stopwatch, "rounds", "rounds")
    stop = threading.Event()

    def sample() -> None:
        last, last_own, last_t = _busy(), _own_cpu(), time.perf_counter()
        while not stop.wait(interval_s):
            now, own, t = _busy(), _own_cpu(), time.perf_counter()
            share = (now[0] - last[0]) / max(now[1] - last[1], 1e-9)
            cpu.append((t - t0, share * cores, (own - last_own) / max(t - last_t, 1e-9)))
            last, last_own, last_t = now, own, t

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join()
        for owner, name, original in patched:
            setattr(owner, name, original)
        with open(path, "w") as f:
            json.dump(
                {"cores": cores, "spans": spans, "cpu": cpu, "summary": summary(spans, cpu)}, f
            )


def summary(
    spans: list[tuple[str, str, float, float]],
    cpu: list[tuple[float, float, float]],
    bin_s: float = 5.0,
) -> list[dict[str, float]]:
    """Per ``bin_s`` seconds: the host's busy cores, the cores this process kept busy, and
    how many threads were in each step on average (the compiling threads' ``compile``,
    the sweep thread's ``lower`` and ``wait``, the timer's ``captured`` and ``rounds``)."""
    end = max([s[3] for s in spans] + [c[0] for c in cpu] + [0.0])
    out = []
    for k in range(int(end // bin_s) + 1):
        lo, hi = k * bin_s, (k + 1) * bin_s
        row: dict[str, float] = {"t": lo}
        busy = [(c, own) for t, c, own in cpu if lo <= t < hi]
        row["busy_cores"] = round(sum(c for c, _ in busy) / len(busy), 2) if busy else 0.0
        row["own_cores"] = round(sum(own for _, own in busy) / len(busy), 2) if busy else 0.0
        for kind in ("compile", "lower", "wait", "captured", "rounds"):
            inside = sum(max(0.0, min(hi, b) - max(lo, a)) for kd, _, a, b in spans if kd == kind)
            row[kind] = round(inside / bin_s, 2)
        row["compiled"] = sum(1 for kd, _, _, b in spans if kd == "compile" and lo <= b < hi)
        out.append(row)
    return out
