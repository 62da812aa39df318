"""The cost of a miss in the user cache with a shared store (JAXTUNE_REMOTE_CACHE) set:
reachable (moto's S3 server on localhost, and a directory) against unreachable (the server
frozen: requests hang until JAXTUNE_REMOTE_TIMEOUT).

Each figure is the first `config_for` of a kernel with an empty user cache and the store's
client made (as every kernel but the first of a process finds it), as the first trace of a
kernel pays it, and is reported as a ratio:
- read through / plain miss: what a reachable store adds to the first miss of a kernel
  (one listing and one object read, copied into the user cache);
- frozen: elapsed / JAXTUNE_REMOTE_TIMEOUT, for several timeouts (the bound holds when it
  is about 1);
- after giving up / plain miss: every later miss of the process (no request is made);
- hit after read through / hit: later lookups of a kernel read through are user-cache hits.
Paid once per process, at its first miss, and reported in seconds: the client library's
import (s3fs; outside the timeout, measured in a fresh interpreter) and making the client
(credentials, the service's model; under a deadline of its own).

Run: python bench/bench_shared_store.py [--repeats 7] [--results DIR]
(needs `pip install 'jaxtune[remote]' 'moto[server]'`; writes shared_store.json and
shared_store.txt to bench/results unless --results says otherwise)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
os.environ["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtune-bench-shared-")

import jax
import jax.numpy as jnp
import shared_store_state

import jaxtune
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import shared as _shared
from jaxtune._tuning.store.remote import SharedStore

ROOT = pathlib.Path(__file__).resolve().parent.parent

KERNELS = [
    jaxtune.autotuned(configs={"factor": [1, 2, 3]}, check=False, name=f"bench.shared.k{i}")(
        lambda x, *, factor: x * factor
    )
    for i in range(64)
]
X = jnp.ones((256,), jnp.float32)


def entry(kernel: Any) -> Entry:
    return Entry(
        kernel=kernel.kernel_id,
        device_kind=_lookup.device_kind(),
        key=kernel.config_for(X).key,
        config={"factor": 3},
        time_us=1.0,
        default_config={"factor": 1},
        default_time_us=2.0,
        created=time.time(),
        kernel_version=kernel.options.version,
    )


class Fresh:
    """A fresh user cache and no memory of the store for each measured lookup."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> None:
        self.n += 1
        os.environ["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtune-bench-shared-")
        shared_store_state.forget()


def first_lookup(
    kernel: Any, fresh: Fresh, repeats: int, *, expect: str, warm: bool = False
) -> list[float]:
    """The first lookup of ``kernel`` in a fresh state; ``warm``: the store's client made
    first (outside the time), as it is for every kernel but the first of a process."""
    times = []
    for _ in range(repeats):
        fresh()
        if warm:
            store = _shared.current()
            assert store is not None
            store.objects.connect()
        start = time.perf_counter()
        choice = kernel.config_for(X)
        times.append(time.perf_counter() - start)
        assert choice.source == expect, (choice.source, expect)
    return times


def connect_seconds(url: str, repeats: int) -> list[float]:
    """Making the store's client: once per process, under a deadline of its own."""
    out = []
    for _ in range(repeats):
        store = SharedStore(url, 60)
        start = time.perf_counter()
        store.objects.connect()
        out.append(time.perf_counter() - start)
    return out


def timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def import_seconds(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--results", type=pathlib.Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    from s3_server import MISSING, S3Server

    if MISSING:
        raise SystemExit(f"bench_shared_store: {MISSING}")
    fresh = Fresh()
    n = args.repeats
    # Warm JAX and the kernels' spaces, so that only the store's part differs.
    for k in KERNELS:
        k.config_for(X)
    plain = first_lookup(KERNELS[0], fresh, n, expect="default")
    server = S3Server()
    figures: dict[str, Any] = {}
    try:
        os.environ.update(server.env())
        stores = {
            "s3 (moto, localhost)": f"s3://{server.bucket()}/team",
            "directory": tempfile.mkdtemp(prefix="jaxtune-bench-store-"),
        }
        for label, url in stores.items():
            SharedStore(url, 30).publish([entry(k) for k in KERNELS[:3]])
            os.environ["JAXTUNE_REMOTE_CACHE"] = url
            through = first_lookup(KERNELS[1], fresh, n, expect="cache", warm=True)
            hit = timed(lambda: KERNELS[1].config_for(X), n)
            empty = first_lookup(KERNELS[5], fresh, n, expect="default", warm=True)
            made = connect_seconds(url, n)
            figures[label] = {
                "plain_miss_s": statistics.median(plain),
                "client_s": statistics.median(made),
                "read_through_s": statistics.median(through),
                "read_through_over_plain_miss": statistics.median(through)
                / statistics.median(plain),
                "miss_in_store_too_over_plain_miss": statistics.median(empty)
                / statistics.median(plain),
                "hit_after_read_through_s": statistics.median(hit),
            }
        # Unreachable: the server frozen, requests hang until the timeout.
        url = stores["s3 (moto, localhost)"]
        os.environ["JAXTUNE_REMOTE_CACHE"] = url
        server.freeze()
        frozen: dict[str, Any] = {}
        for timeout in (0.5, 1.0, 2.0):
            os.environ["JAXTUNE_REMOTE_TIMEOUT"] = str(timeout)
            waits, laters = [], []
            for i in range(n):
                fresh()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    store = _shared.current()
                    assert store is not None
                    store.objects.connect()  # no request: the client alone
                    start = time.perf_counter()
                    KERNELS[10 + i].config_for(X)
                    waits.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    KERNELS[30 + i].config_for(X)  # the process gave up: no request
                    laters.append(time.perf_counter() - start)
            frozen[f"{timeout:g}"] = {
                "first_miss_over_timeout": statistics.median(waits) / timeout,
                "max_first_miss_over_timeout": max(waits) / timeout,
                "later_miss_over_plain_miss": statistics.median(laters) / statistics.median(plain),
            }
        figures["frozen s3"] = frozen
    finally:
        server.stop()
        os.environ.pop("JAXTUNE_REMOTE_TIMEOUT", None)
    figures["import_s3fs_s"] = import_seconds("s3fs")
    figures["import_fsspec_s"] = import_seconds("fsspec")
    figures["machine"] = {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "cpus": os.cpu_count(),
        "repeats": n,
    }
    lines = [
        "bench_shared_store: the first miss of a kernel with a shared store set "
        f"(medians of {n}; ratios)",
    ]
    for label in stores:
        f = figures[label]
        lines.append(
            f"  {label}: read through {f['read_through_over_plain_miss']:.0f}x a plain miss "
            f"({f['read_through_s'] * 1e3:.1f} ms vs {f['plain_miss_s'] * 1e3:.2f} ms); "
            f"a kernel the store lacks too: {f['miss_in_store_too_over_plain_miss']:.0f}x; "
            f"later lookups are user-cache hits ({f['hit_after_read_through_s'] * 1e6:.0f} us); "
            f"the client, made once per process: {f['client_s'] * 1e3:.0f} ms"
        )
    for timeout, f in frozen.items():
        lines.append(
            f"  frozen store, JAXTUNE_REMOTE_TIMEOUT={timeout}: first miss "
            f"{f['first_miss_over_timeout']:.2f}x the timeout (max "
            f"{f['max_first_miss_over_timeout']:.2f}x); every later miss "
            f"{f['later_miss_over_plain_miss']:.2f}x a plain miss (no request)"
        )
    lines.append(
        f"  once per process, outside the timeout: import s3fs {figures['import_s3fs_s']:.2f} s, "
        f"fsspec alone {figures['import_fsspec_s']:.2f} s"
    )
    text = "\n".join(lines)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "shared_store.json").write_text(json.dumps(figures, indent=2) + "\n")
    (args.results / "shared_store.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
