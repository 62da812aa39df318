"""Probe (issue 57's timing phase): what does one profiler capture cost on the chip, and
where does it go? For each way of capturing (JAX's ``start_trace``/``stop_trace`` to a
folder then jaxtune's reader, or the profiler session's bytes in memory), each host tracer
level (2, jaxtune's today; 0) and each load (no calls; 32 "configs" of 7 blocking calls
each, a first-pass visit's worth; 32 x 34 calls, a round's worth), prints one JSON line:
the seconds to start, to run the calls, to stop, to read, the trace's size, how many
executions the reader found and their device time.

Then, for a few call lengths, the wall clock of K calls dispatched back to back and waited
for once, per call, beside each call's device time from a trace: can a sweep time calls
of the chip without a capture?

    python tools/tpu/probe_capture.py        # prints one JSON line per measurement
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from jaxtune._core.xspace import xplane
from jaxtune._tuning.sweep.timers import _walk


def options(host: int):
    o = jax.profiler.ProfileOptions()
    o.python_tracer_level = 0
    o.host_tracer_level = host
    o.enable_hlo_proto = False
    return o


def kernels(n: int):
    """``n`` jitted programs of different lengths (bf16 matmuls of 128..4096)."""
    top = int(os.environ.get("PROBE_TOP", "4096"))  # PROBE_TOP=256: a quick try on CPU
    sizes = [128 + ((top - 128) * i) // max(n - 1, 1) for i in range(n)]
    out = []
    for s in sizes:
        s -= s % 128
        x = jnp.ones((s, s), jnp.bfloat16)
        f = jax.jit(lambda a, b: a @ b)
        f(x, x).block_until_ready()
        out.append((f, x))
    return out


def load(ks, calls: int):
    for f, x in ks:
        for _ in range(calls):
            f(x, x).block_until_ready()


def capture_file(host: int, ks, calls: int):
    where = pathlib.Path(tempfile.mkdtemp())
    t0 = time.perf_counter()
    jax.profiler.start_trace(str(where), profiler_options=options(host))
    t1 = time.perf_counter()
    load(ks, calls)
    t2 = time.perf_counter()
    jax.profiler.stop_trace()
    t3 = time.perf_counter()
    size = sum(p.stat().st_size for p in where.rglob("*") if p.is_file())
    ex = _walk(xplane.load(where))
    t4 = time.perf_counter()
    shutil.rmtree(where)
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3, size, ex


def capture_memory(host: int, ks, calls: int):
    from jax._src.lib import _profiler

    t0 = time.perf_counter()
    session = _profiler.ProfilerSession(options(host))
    t1 = time.perf_counter()
    load(ks, calls)
    t2 = time.perf_counter()
    data = session.stop()
    t3 = time.perf_counter()
    ex = _walk(xplane.parse(data))
    t4 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3, len(data), ex


def main() -> None:
    print(json.dumps({"devices": str(jax.devices()), "jax": jax.__version__}), flush=True)
    ks = kernels(32)
    for load_name, n, calls in (("empty", 0, 0), ("visit", 32, 7), ("round", 32, 34)):
        for how, capture in (("file", capture_file), ("memory", capture_memory)):
            for host in (2, 0):
                for rep in range(3):
                    try:
                        s, c, st, r, size, ex = capture(host, ks[:n], calls)
                    except Exception as e:
                        print(json.dumps({"how": how, "host": host, "error": repr(e)}))
                        break
                    device_ms = sum(d for _, _, d in ex) / 1e6
                    print(
                        json.dumps(
                            {
                                "load": load_name,
                                "how": how,
                                "host": host,
                                "rep": rep,
                                "start_s": round(s, 4),
                                "calls_s": round(c, 4),
                                "stop_s": round(st, 4),
                                "read_s": round(r, 4),
                                "bytes": size,
                                "executions": len(ex),
                                "device_ms": round(device_ms, 3),
                            }
                        ),
                        flush=True,
                    )
    # Wall clock of back-to-back dispatch against device time.
    for f, x in (ks[0], ks[8], ks[16], ks[31]):
        where = pathlib.Path(tempfile.mkdtemp())
        host = 2 if jax.default_backend() == "cpu" else 0  # CPU's op events need level 1
        jax.profiler.start_trace(str(where), profiler_options=options(host))
        for _ in range(20):
            f(x, x).block_until_ready()
        jax.profiler.stop_trace()
        device = [d / 1e3 for _, _, d in _walk(xplane.load(where))]
        shutil.rmtree(where)
        walls_blocking, walls_async = [], []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(20):
                f(x, x).block_until_ready()
            walls_blocking.append((time.perf_counter() - t) / 20 * 1e6)
            t = time.perf_counter()
            outs = [f(x, x) for _ in range(20)]
            jax.block_until_ready(outs)
            walls_async.append((time.perf_counter() - t) / 20 * 1e6)
        print(
            json.dumps(
                {
                    "size": x.shape[0],
                    "device_us_median": round(statistics.median(device), 2),
                    "device_us_min": round(min(device), 2),
                    "wall_blocking_us_min": round(min(walls_blocking), 2),
                    "wall_async_us_min": round(min(walls_async), 2),
                    "wall_async_us_median": round(statistics.median(walls_async), 2),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
