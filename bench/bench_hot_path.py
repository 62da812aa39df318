"""Hot-path cost of @autotuned, measured side by side in one process.

Ratios (targets from the issue):
  jit(autotuned) / jit(config written in)    target <= 1.01
  eager autotuned / jit(config written in)   target <= 1.05

Run: python bench/bench_hot_path.py [--reps N]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune.examples.chunked import chunked_logsumexp


def interleaved(
    fns: dict[str, object], arg: jax.Array, reps: int, inner: int
) -> dict[str, list[float]]:
    """µs per call of each function per round, sampled in alternation so that drift hits
    all alike (the order within a round rotates)."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        for _ in range(3):
            jax.block_until_ready(fn(arg))  # type: ignore[operator]
    names = list(fns)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            fn = fns[name]
            start = time.perf_counter()
            for _ in range(inner):
                out = fn(arg)  # type: ignore[operator]
            jax.block_until_ready(out)
            samples[name].append((time.perf_counter() - start) / inner * 1e6)
    return samples


def paired(samples: dict[str, list[float]], name: str) -> float:
    """The median over rounds of ``name``'s time over the written-in kernel's time in the
    same round: load that comes and goes cancels out of each round's ratio."""
    return statistics.median(a / b for a, b in zip(samples[name], samples["written"], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results: list[dict[str, object]] = []
    os.environ.setdefault("JAXTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="jaxtune-bench-"))

    @jaxtune.autotuned(configs={"scale": [2.0, 3.0]}, name="bench.tiny", check=False)
    def tiny(x: jax.Array, *, scale: float) -> jax.Array:
        return x * scale + 1

    cases = [
        (
            "chunked_logsumexp f32[8,16384]",
            chunked_logsumexp,
            {"chunk": 1024},
            jax.random.normal(jax.random.key(0), (8, 16384)),
            5,
        ),
        ("x * scale + 1, f32[8]", tiny, {"scale": 2.0}, jnp.ones(8), 200),
        ("x * scale + 1, f32[256]", tiny, {"scale": 2.0}, jnp.ones(256), 200),
    ]
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {args.reps} interleaved reps")
    print(
        f"{'case':34} {'written-in':>12} {'jit(tuned)':>12} {'eager':>12} "
        f"{'jit ratio':>10} {'eager ratio':>12}"
    )
    for label, kernel, config, x, inner in cases:
        with jaxtune.TuningResult.of(
            jaxtune.Entry(
                kernel=kernel.kernel_id,
                device_kind=jaxtune._tuning.lookup.device_kind(),
                key=kernel.config_for(x).key,
                config=config,
                time_us=None,
                default_config=config,
                default_time_us=None,
            )
        ):
            written = jax.jit(functools.partial(kernel.__wrapped__, **config))
            tuned = jax.jit(kernel)
            samples = interleaved(
                {"written": written, "tuned": tuned, "eager": kernel}, x, args.reps, inner
            )
        res = {name: statistics.median(v) for name, v in samples.items()}
        jit_ratio = paired(samples, "tuned")
        eager_ratio = paired(samples, "eager")
        results.append(
            {"case": label, "written_us": res["written"], "jit": jit_ratio, "eager": eager_ratio}
        )
        print(
            f"{label:34} {res['written']:10.1f}us {res['tuned']:10.1f}us "
            f"{res['eager']:10.1f}us {jit_ratio:10.3f} {eager_ratio:12.3f}"
        )

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jax": jax.__version__, "hot_path": results}, f, indent=1)


if __name__ == "__main__":
    main()
