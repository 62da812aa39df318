"""Trace-time lookup and cache load with 10,000 entries in one kernel's cache file.

Figures (targets from issue 12): `config_for` of a tuned key (the whole trace-time choice:
binding, space, scopes, user cache) <= 100 us; loading the file into a fresh store <= 50 ms.

Run: python bench/bench_cache.py [--entries 10000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

os.environ["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtune-bench-cache-")

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune._tuning import cache as _cache
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.result import Entry, Measurement


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    kind = _lookup.device_kind()
    store = _cache.user_cache()
    store.write(entries(args.entries, kind))
    path = store.path_for(kind, "bench.cache.kernel")
    loads = []
    for _ in range(5):
        fresh = _cache.CacheStore(store.root)
        start = time.perf_counter()
        got = fresh.read(kind, "bench.cache.kernel")
        loads.append((time.perf_counter() - start) * 1e3)
    assert len(got) == args.entries
    x = jax.ShapeDtypeStruct((4096 * 77,), jnp.float32)
    assert kernel.config_for(x).source == "cache"
    lookups = []
    for _ in range(200):
        start = time.perf_counter()
        kernel.config_for(x)
        lookups.append((time.perf_counter() - start) * 1e6)
    report = {
        "entries": args.entries,
        "file_mb": path.stat().st_size / 1e6,
        "load_ms": statistics.median(loads),
        "lookup_us": statistics.median(lookups),
    }
    print(
        f"{args.entries} entries ({report['file_mb']:.1f} MB): load {report['load_ms']:.1f} ms "
        f"(target <= 50), trace-time lookup {report['lookup_us']:.1f} us (target <= 100)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
