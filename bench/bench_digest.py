"""What the code digest (issue 33, point 1) costs, and that it stays off the hot path.

1. The digest of each example kernel, computed cold (its module's source parsed for the
   first time in the process) and then read again (kept per kernel).
2. The first trace of a kernel whose user-cache entry records a digest (the lookup works the
   digest out, once) against the same kernel with ``version=`` (no digest), in fresh
   processes.
3. The hot path with such an entry: eager / jit(config written in) and jit(tuned) / jit
   (written in), interleaved as bench_hot_path.py measures them. The digest is never
   computed there, so the ratios are bench_hot_path's.

Run: python bench/bench_digest.py [--reps N] [--json OUT]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune._tuning import digest as _digest
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.state import TUNING_STATE
from jaxtune._tuning.store import cache as _cache

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_hot_path import interleaved, paired

FIRST_TRACE = """
import os, time, sys
t0 = time.perf_counter()
import jax, jax.numpy as jnp
from jaxtune.examples.chunked import chunked_logsumexp as k
x = jnp.ones((8, 16384))
if sys.argv[1] == "version":
    k.options.code._enabled = False  # as with version=: no digest to work out
t = time.perf_counter()
choice = k.config_for(x)
dt = time.perf_counter() - t
assert choice.source == "cache", choice
print(dt * 1e3)
"""


def cold_and_warm() -> list[dict[str, object]]:
    from jaxtune.examples.chunked import chunked_logsumexp
    from jaxtune.examples.pallas_matmul import matmul

    rows = []
    for kernel in (matmul, chunked_logsumexp):
        TUNING_STATE.reset("parsed modules")
        start = time.perf_counter()
        value = _digest.code_digest(kernel)
        cold_ms = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        _digest.code_digest(kernel)
        parsed_ms = (time.perf_counter() - start) * 1e3
        kernel.options.code.digest  # noqa: B018 - kept from here on
        warm_ns = (
            min(timeit.repeat(lambda k=kernel: k.options.code.digest, number=10000, repeat=5)) / 1e4
        )
        rows.append(
            {
                "kernel": kernel.kernel_id,
                "parts": len(value.parts),
                "cold_ms": cold_ms,
                "sources_parsed_ms": parsed_ms,
                "kept_ns": warm_ns * 1e9,
            }
        )
    return rows


def first_trace(runs: int) -> dict[str, float]:
    from jaxtune.examples.chunked import chunked_logsumexp

    x = jax.ShapeDtypeStruct((8, 16384), jnp.float32)
    key = chunked_logsumexp.config_for(x).key
    entry = jaxtune.Entry(
        kernel=chunked_logsumexp.kernel_id,
        device_kind=_lookup.device_kind(),
        key=key,
        config={"chunk": 1024},
        time_us=1.0,
        default_config={"chunk": 256},
        default_time_us=2.0,
        code_digest=chunked_logsumexp.options.code.digest,
    )
    _cache.user_cache().write([entry])
    out: dict[str, list[float]] = {"digest": [], "version": []}
    for i in range(runs):
        for mode in ("digest", "version") if i % 2 == 0 else ("version", "digest"):
            done = subprocess.run(
                [sys.executable, "-c", FIRST_TRACE, mode],
                capture_output=True,
                text=True,
                check=True,
                env=os.environ,
            )
            out[mode].append(float(done.stdout.strip()))
    return {f"{mode}_ms": statistics.median(v) for mode, v in out.items()}


def hot_path(reps: int) -> list[dict[str, object]]:
    from jaxtune.examples.chunked import chunked_logsumexp

    @jaxtune.autotuned(configs={"scale": [2.0, 3.0]}, name="bench.digest_tiny", check=False)
    def tiny(x: jax.Array, *, scale: float) -> jax.Array:
        return x * scale + 1

    cases = [
        (
            "chunked_logsumexp f32[8,16384]",
            chunked_logsumexp,
            {"chunk": 1024},
            jnp.ones((8, 16384)),
            5,
        ),
        ("x * scale + 1, f32[8]", tiny, {"scale": 2.0}, jnp.ones(8), 200),
    ]
    rows = []
    for label, kernel, config, x, inner in cases:
        entry = jaxtune.Entry(
            kernel=kernel.kernel_id,
            device_kind=_lookup.device_kind(),
            key=kernel.config_for(x).key,
            config=config,
            time_us=None,
            default_config=config,
            default_time_us=None,
            code_digest=kernel.options.code.digest,
        )
        _cache.user_cache().write([entry])
        assert kernel.config_for(x).source == "cache"
        written = jax.jit(functools.partial(kernel.__wrapped__, **config))
        samples = interleaved(
            {"written": written, "tuned": jax.jit(kernel), "eager": kernel}, x, reps, inner
        )
        rows.append(
            {
                "case": label,
                "written_us": statistics.median(samples["written"]),
                "jit": paired(samples, "tuned"),
                "eager": paired(samples, "eager"),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--runs", type=int, default=6, help="fresh processes per first-trace case")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtune-bench-digest-")
    print(
        f"jax {jax.__version__}, python {sys.version.split()[0]}, backend {jax.default_backend()}"
    )
    digests = cold_and_warm()
    print(f"{'kernel':40} {'parts':>5} {'cold ms':>8} {'parsed ms':>10} {'kept ns':>8}")
    for r in digests:
        print(
            f"{r['kernel']:40} {r['parts']:5} {r['cold_ms']:8.2f} {r['sources_parsed_ms']:10.2f} "
            f"{r['kept_ns']:8.0f}"
        )
    trace = first_trace(args.runs)
    print(
        f"first lookup in a fresh process, entry in the user cache (median of {args.runs}): "
        f"with the digest {trace['digest_ms']:.1f} ms, without (version=) {trace['version_ms']:.1f} ms"
    )
    rows = hot_path(args.reps)
    print(f"{'case':34} {'written-in':>12} {'jit ratio':>10} {'eager ratio':>12}")
    for r in rows:
        print(f"{r['case']:34} {r['written_us']:10.1f}us {r['jit']:10.3f} {r['eager']:12.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"jax": jax.__version__, "digest": digests, "first_trace": trace, "hot_path": rows},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
