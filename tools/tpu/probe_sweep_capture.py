"""Probe (issue 57's timing phase): why a capture of Tokamax's ragged_dot configs costs
far more inside a sweep (60.7 s of captures for 3.1 s of device time, 540 configs, TPU
v5e, 2026-12-06) than a capture of plain matmuls does (0.3 s, ``probe_capture.py``)?

Compiles Tokamax ragged_dot configs (bench/bench_tokamax_tpu.py's problem), then times
captures of ``k`` configs (each config's 6 calls started back to back, as the sweep's
first pass does) with the host tracer off: start, calls, stop, read, the trace's bytes.
Each case is one JSON line:
- ``quiet``: k = 1, 8 and ``PROBE_COUNT`` (32; 64 on 2026-12-06, which with the cases
  below took over 130 s) with that many programs loaded and nothing else running;
- ``busy``: k = 8, 32 while 12 threads trace and compile more configs (as the sweep's
  compile threads do); ``busy_switch``: the same with a GIL switch interval of 0.5 ms;
- ``loaded``: k = 8, 32 with ``PROBE_LOADED`` (128) more programs loaded: inside the sweep a
  capture of 32 configs' calls took 4-5 s to stop (329 programs loaded) against 1.4-1.9 s
  in the quiet case (32 loaded): is it the programs the process holds?
- ``cost``: what a stop pays for, in a fresh process: the first capture ever (of one
  program, with ``PROBE_COUNT`` loaded); the same again; one program after 8 others ran
  outside any trace; those 8, then again; 8 that never ran, then again; one program after
  8 more were compiled (loaded since the last stop). Inside a sweep the first capture of
  32 programs took 11-23 s to stop and the next 1.4-3.7 s (TPU v5e, 2026-12-07).
- ``cached``: is it the executables' origin? A ``--retune`` loads every program from JAX's
  persistent compilation cache, and its first capture (of 32 programs) took 11 s to
  stop, the next 1.5-2 s. ``PROBE_COUNT`` programs compiled with the cache on and
  captured; then the same configs compiled again, loaded from the cache, and captured:
  one program first, then again, then 8, then those 8 again.
- ``tiles``: is it the calls' own work? Every probe case so far compiled the space from
  its end (large tiles), while the sweeps' long first stops held its start (tile_m 64 and
  128: the most grid steps a call). ``PROBE_COUNT`` configs from each end of the space,
  captured 32 (or fewer) at a time, small tiles first, then large, then small again (6
  calls each, as the first pass), then small with 2 calls each (as the rounds).
- ``modes``: k = 1, 8, 32 under each TPU trace mode of the profiler's advanced
  configuration (``tpu_trace_mode``): the stop's 35 ms a program is the profiler building
  each program's HLO module for its LLO utilization counters. Does a mode that keeps the
  ``XLA Modules`` line (which a timer reads) skip that work? (No, on libtpu 0.0.42.1:
  docs/benchmarks.md, "What a trace's stop pays for".)

    python tools/tpu/probe_sweep_capture.py
    PROBE_CASES=quiet,loaded PROBE_LOADED=300 python tools/tpu/probe_sweep_capture.py
    PROBE_COUNT=4 python tools/tpu/probe_sweep_capture.py --dry   # CPU, interpret mode
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from bench import bench_tokamax_tpu as rd
from jaxtune._core.xspace import xplane
from jaxtune._tuning.sweep.timers import _walk

sys.argv[1:] = [a for a in sys.argv[1:] if a != "--dry"]  # read: Tokamax's flags take argv


def options(advanced=None):
    o = jax.profiler.ProfileOptions()
    o.python_tracer_level = 0
    o.host_tracer_level = 0
    o.enable_hlo_proto = False
    if advanced:
        o.advanced_configuration = advanced
    return o


def compiled(configs, args):
    """Each config compiled (12 threads); the ones Mosaic refuses are left out."""

    refused: list[str] = []

    def one(config):
        f = jax.jit(lambda a, b, g: rd._call(a, b, g, **config))
        try:
            return f.lower(*args).compile()
        except Exception as e:
            refused.append(type(e).__name__)
            return None

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        out = [c for c in pool.map(one, configs) if c is not None]
    print(json.dumps({"refused": sorted(set(refused)), "count": len(refused)}), flush=True)
    return out


def capture(programs, args, calls=6, advanced=None):
    where = pathlib.Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    jax.profiler.start_trace(str(where), profiler_options=options(advanced))
    t1 = time.perf_counter()
    for p in programs:
        outs = [p(*args) for _ in range(calls)]
        jax.block_until_ready(outs)
    t2 = time.perf_counter()
    jax.profiler.stop_trace()
    t3 = time.perf_counter()
    size = sum(f.stat().st_size for f in where.rglob("*") if f.is_file())
    space = xplane.load(where)
    ex = _walk(space)
    t4 = time.perf_counter()
    lines = sorted(
        {f"{p.name}:{line.name}" for p in space.planes(space.plane_names) for line in p.lines}
    )
    shutil.rmtree(where)
    return {
        "start_s": round(t1 - t0, 4),
        "calls_s": round(t2 - t1, 4),
        "stop_s": round(t3 - t2, 4),
        "read_s": round(t4 - t3, 4),
        "bytes": size,
        "executions": len(ex),
        "device_s": round(sum(d for _, _, d in ex) / 1e9, 4),
        "lines": lines[:40],
    }


#: Programs loaded before the quiet captures (PROBE_COUNT=4 with --dry: a quick try on CPU).
COUNT = int(os.environ.get("PROBE_COUNT", "32"))
#: The cases to run (all by default; ``PROBE_CASES=quiet,loaded`` skips the busy ones).
CASES = os.environ.get("PROBE_CASES", "quiet,busy,busy_switch,loaded").split(",")
#: The trace modes of the ``modes`` case (libtpu 0.0.42.1's ``TraceOptions.TraceMode``).
MODES = (
    "",
    "TRACE_ONLY_XLA",
    "TRACE_XLA_BENCHMARK",
    "TRACE_COMPUTE",
    "TRACE_ONLY_STEPS",
    "TRACE_COMPUTE_AND_DMA_LITE",
)
#: Programs loaded beside the others for the ``loaded`` case.
LOADED = int(os.environ.get("PROBE_LOADED", "128"))


def main() -> None:
    if "cached" in CASES:  # before anything compiles: JAX reads the setting once
        jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="probe-cache-"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    args = rd.inputs()
    configs = rd.all_configs(*args)
    print(json.dumps({"devices": str(jax.devices()), "configs": len(configs)}), flush=True)
    t = time.perf_counter()
    # Large tiles first: most of the small-tile configs are fast to refuse or slow to run.
    order = configs[::-1]
    loaded = compiled(order[: COUNT * 2], args)[:COUNT]
    print(json.dumps({"compiled": len(loaded), "s": round(time.perf_counter() - t, 1)}), flush=True)
    if "cached" in CASES:
        cached(order, loaded, args)
        return
    if "tiles" in CASES:
        small = compiled(configs[: COUNT * 4], args)[:COUNT]  # the space's start
        for p in (*small, *loaded):
            jax.block_until_ready(p(*args))
        k = min(32, COUNT)
        steps = (("small", small, 6), ("large", loaded, 6), ("small again", small, 6))
        for name, programs, calls in (*steps, ("small, 2 calls each", small, 2)):
            got = capture(programs[:k], args, calls=calls)
            got.pop("lines")
            print(json.dumps({"case": "tiles", "step": name, "k": k, **got}), flush=True)
        return
    if "cost" not in CASES:  # the cost case runs its programs itself
        for p in loaded:
            jax.block_until_ready(p(*args))
    if "cost" in CASES:
        cost(order, loaded, args)
    if "quiet" in CASES:
        cases("quiet", sorted({1, 8, 32, COUNT}), loaded, args)
    if "modes" in CASES:
        for mode in MODES:
            advanced = {"tpu_trace_mode": mode} if mode else None
            for k in (1, 8, 32):
                for rep in range(2):
                    try:
                        got = capture(loaded[:k], args, advanced=advanced)
                    except Exception as e:  # an unknown mode: say so, go on
                        got = {"error": f"{type(e).__name__}: {e}"[:300]}
                    print(
                        json.dumps({"case": "modes", "mode": mode, "k": k, "rep": rep, **got}),
                        flush=True,
                    )
    more: list = []
    first, second = order[COUNT * 2 : COUNT * 4], order[COUNT * 4 : COUNT * 6]
    if "busy" in CASES:
        cases("busy", (8, 32), loaded, args, beside=lambda: more.extend(compiled(first, args)))
    if "busy_switch" in CASES:
        # The same with a shorter GIL switch interval (5 ms by default): a thread that let
        # go of the GIL (a C++ call) gets it back sooner from a thread running Python.
        sys.setswitchinterval(0.0005)
        cases(
            "busy_switch", (8, 32), loaded, args, beside=lambda: more.extend(compiled(second, args))
        )
        sys.setswitchinterval(0.005)
    if "loaded" in CASES:
        # As many programs loaded as a sweep of the space holds (329 that ran, for Tokamax's
        # 540 ragged_dot configs): does a capture's stop cost grow with the programs the
        # process holds, or only with those that ran in it?
        more.extend(compiled(order[COUNT * 6 : COUNT * 6 + LOADED * 2], args)[:LOADED])
        for p in more:
            jax.block_until_ready(p(*args))
        print(json.dumps({"loaded": len(loaded) + len(more)}), flush=True)
        cases("loaded", (8, 32), more, args)


def cost(order, loaded, args) -> None:
    """The ``cost`` case (see the module's docstring): one JSON line a step."""

    def step(name, programs):
        got = capture(programs, args)
        got.pop("lines")
        print(json.dumps({"case": "cost", "step": name, "k": len(programs), **got}), flush=True)

    first = loaded[:1]
    step("first capture ever", first)
    step("same again", first)
    for p in loaded[1:9]:
        for _ in range(5):
            jax.block_until_ready(p(*args))
    step("one after 8 ran outside a trace", first)
    step("those 8 (ran outside before)", loaded[1:9])
    step("those 8 again", loaded[1:9])
    step("8 never run", loaded[9:17])
    step("those 8 again", loaded[9:17])
    more = compiled(order[COUNT * 2 : COUNT * 2 + 24], args)[:8]
    print(json.dumps({"case": "cost", "compiled more": len(more)}), flush=True)
    step("one after more were compiled", first)
    step("one again", first)
    for p in loaded[17:]:
        for _ in range(5):
            jax.block_until_ready(p(*args))
    step(f"one after {len(loaded[17:])} ran outside", first)


def cached(order, loaded, args) -> None:
    """The ``cached`` case (see the module's docstring): one JSON line a step."""

    def step(name, programs):
        got = capture(programs, args)
        got.pop("lines")
        print(json.dumps({"case": "cached", "step": name, "k": len(programs), **got}), flush=True)

    for p in loaded:
        jax.block_until_ready(p(*args))
    step("first capture ever, compiled here", loaded[:1])
    step("8 compiled here", loaded[1:9])
    t = time.perf_counter()
    again = compiled(order[: COUNT * 2], args)[:COUNT]  # from the persistent cache
    print(
        json.dumps(
            {"case": "cached", "reloaded": len(again), "s": round(time.perf_counter() - t, 1)}
        ),
        flush=True,
    )
    for p in again:
        jax.block_until_ready(p(*args))
    step("one loaded from the cache", again[:1])
    step("the same again", again[:1])
    step("8 loaded from the cache", again[1:9])
    step("those 8 again", again[1:9])
    step("32 loaded from the cache", again[9:41])
    step("those 32 again", again[9:41])


def cases(name, ks, programs, args, beside=None) -> None:
    """Three captures of the first ``k`` of ``programs`` for each ``k``, one JSON line each;
    with ``beside``, while a thread runs it (cases stop when it has ended)."""
    worker = None if beside is None else threading.Thread(target=beside)
    if worker is not None:
        worker.start()
        time.sleep(2)
    for k in ks:
        for rep in range(3):
            if worker is not None and not worker.is_alive():
                break
            got = capture(programs[:k], args)
            print(json.dumps({"case": name, "k": k, "rep": rep, **got}), flush=True)
    if worker is not None:
        worker.join()


if __name__ == "__main__":
    main()
