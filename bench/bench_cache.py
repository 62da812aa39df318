"""Trace-time lookup and cache load with 10,000 entries in one kernel's cache file.

Figures (targets from issue 12): `config_for` of a tuned key (the whole trace-time choice:
binding, space, scopes, user cache) <= 100 us; loading the file into a fresh store <= 50 ms.

A store decodes a file's outer map when it first reads it and each entry when it is first
looked up, so the load is reported three ways: the file alone (a lookup of a key it does
not hold), the file and the first entry (a fresh store's first lookup of a tuned key), and
the first `config_for` after the user cache is dropped (what the first trace pays). Decoding
every entry (`jaxtune cache list`, or the nearest-shape fallback on a miss) is shown too.

Run: python bench/bench_cache.py [--entries 10000] [--json PATH] [--results DIR]
(writes cache.txt and cache.json to bench/results unless --results says otherwise)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtune-bench-cache-")

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune._core.vocabulary import Entry, Measurement
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.state import TUNING_STATE
from jaxtune._tuning.store import cache as _cache


@jaxtune.autotuned(configs={"chunk": [8, 64, 512, 4096]}, name="bench.cache.kernel")
def kernel(x: jax.Array, *, chunk: int) -> jax.Array:
    return x.reshape(-1, chunk).sum(axis=1).sum()


def entries(n: int, kind: str) -> list[Entry]:
    out = []
    for i in range(n):
        size = 4096 * (i + 1)
        measured = tuple(
            Measurement(
                config={"chunk": c},
                median_us=10.0 + c,
                min_us=9.0 + c,
                spread=0.05,
                samples=20,
                compile_s=0.1,
                low_us=9.5 + c,
                high_us=10.5 + c,
            )
            for c in (8, 64, 512, 4096)
        )
        out.append(
            Entry(
                kernel="bench.cache.kernel",
                device_kind=kind,
                key=f"f32[{size}]",
                config={"chunk": 512},
                time_us=522.0,
                default_config={"chunk": 8},
                default_time_us=18.0,
                measurements=measured,
                shapes=(("f32", (size,)),),
                search="exhaustive",
                space_size=4,
            )
        )
    return out


def timed(fn: Callable[[], object], reps: int, scale: float) -> float:
    """Median time of ``fn`` over ``reps`` calls, times ``scale`` (1e3: ms, 1e6: us)."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * scale)
    return statistics.median(times)


def cpu_us(fn: Callable[[], object], calls: int) -> float:
    """This process's CPU time per call of ``fn`` (µs), the best of 5 batches: less
    sensitive than wall time to other processes on a shared machine."""
    batches = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(calls):
            fn()
        batches.append((time.process_time() - start) / calls * 1e6)
    return min(batches)


def measure(n: int) -> dict[str, object]:
    kind = _lookup.device_kind()
    store = _cache.user_cache()
    store.write(entries(n, kind))
    name = "bench.cache.kernel"
    path = store.path_for(kind, name)
    size = 4096 * min(77, n)  # a tuned shape
    key = f"f32[{size}]"

    def fresh_lookup(key: str) -> object:
        return _cache.CacheStore(store.root).lookup(name, kind, key)

    def first_config_for() -> object:
        TUNING_STATE.reset("user caches")  # the next lookup builds a new user cache store
        return kernel.config_for(x)

    assert fresh_lookup(key) is not None and fresh_lookup("absent") is None
    assert len(_cache.CacheStore(store.root).read(kind, name)) == n
    x = jax.ShapeDtypeStruct((size,), jnp.float32)
    assert kernel.config_for(x).source == "cache"
    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "load_average": os.getloadavg()[0],
        "entries": n,
        "file_mb": path.stat().st_size / 1e6,
        "load_ms": timed(lambda: fresh_lookup("absent"), 7, 1e3),
        "load_first_lookup_ms": timed(lambda: fresh_lookup(key), 7, 1e3),
        "first_config_for_ms": timed(first_config_for, 7, 1e3),
        "lookup_us": timed(lambda: kernel.config_for(x), 500, 1e6),
        "lookup_cpu_us": cpu_us(lambda: kernel.config_for(x), 500),
        "read_all_ms": timed(lambda: _cache.CacheStore(store.root).read(kind, name), 3, 1e3),
    }


def text(r: dict[str, Any]) -> str:
    return (
        f"python {r['python']}, jax {r['jax']}, load average {r['load_average']:.1f}; "
        f"{r['entries']} entries "
        f"({r['file_mb']:.1f} MB) in one cache file\n"
        f"load (file read, outer map decoded)        {r['load_ms']:8.1f} ms  (target <= 50)\n"
        f"load + first lookup of a tuned key         {r['load_first_lookup_ms']:8.1f} ms\n"
        f"first config_for, user cache dropped       {r['first_config_for_ms']:8.1f} ms\n"
        f"trace-time lookup (config_for, warm)       {r['lookup_us']:8.1f} us  (target <= 100)\n"
        f"  the same in CPU time, best of 5 x 500    {r['lookup_cpu_us']:8.1f} us\n"
        f"every entry decoded and checked (read)     {r['read_all_ms']:8.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    parser.add_argument(
        "--results",
        default=str(pathlib.Path(__file__).parent / "results"),
        help="write cache.json and cache.txt here ('' for nowhere; default: bench/results)",
    )
    args = parser.parse_args()
    report = measure(args.entries)
    print(text(report))
    if args.results:
        out = pathlib.Path(args.results)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cache.txt").write_text(text(report) + "\n")
        (out / "cache.json").write_text(json.dumps(report, indent=1) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
