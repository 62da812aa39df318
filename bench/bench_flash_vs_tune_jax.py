"""jaxtune and tune-jax side by side on JAX's own flash attention (TPU interpret mode, CPU).

Each run is a fresh process that sweeps block_q x block_k (128/256 each) with both tools
(jaxtune first on even runs, last on odd runs) at default settings, and reports each tool's
sweep wall time and pick. Afterwards this process re-measures every config in interleaved
rounds (the truth) and rates each pick against it. Tokamax's Pallas kernels cannot run on
CPU, and its autotuner does not run interpret-mode kernels, so it is left out here.

tune-jax is installed only for benchmarks (`nox -s bench`); when missing it is reported
as such.

Run: python bench/bench_flash_vs_tune_jax.py [--runs 3] [--rounds 15] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import jax
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import jaxtune

SIZES = [128, 256]
SHAPE = (1, 2, 256, 128)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, block_q: int, block_k: int):
    sizes = fa.BlockSizes(block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1)
    return fa.flash_attention(q, k, v, block_sizes=sizes)


tuned = jaxtune.autotuned(
    configs={"block_q": SIZES, "block_k": SIZES}, name="bench.flash_vs_tune_jax"
)(attention)


def run_jaxtune(q: jax.Array) -> tuple[float, tuple[int, int]]:
    start = time.perf_counter()
    (entry,) = tuned.tune(q, q, q).values()
    return time.perf_counter() - start, (entry.config["block_q"], entry.config["block_k"])


def run_tune_jax(q: jax.Array) -> tuple[float, tuple[int, int]]:
    import tune_jax

    start = time.perf_counter()
    fn = tune_jax.tune(attention, hyperparams={"block_q": SIZES, "block_k": SIZES})
    jax.block_until_ready(fn(q, q, q))
    best = fn.optimal_hyperparams
    return time.perf_counter() - start, (best["block_q"], best["block_k"])


def one_run(run: int) -> dict[str, object]:
    pltpu.set_tpu_interpret_mode()
    q = jax.random.normal(jax.random.key(run), SHAPE)
    order = ["jaxtune", "tune-jax"] if run % 2 == 0 else ["tune-jax", "jaxtune"]
    out: dict[str, object] = {"run": run, "order": order}
    for tool in order:
        try:
            seconds, pick = (run_jaxtune if tool == "jaxtune" else run_tune_jax)(q)
        except ImportError as e:
            out[tool] = {"error": f"not installed: {e}"}
        except Exception as e:  # a tool that fails is reported, not fatal
            out[tool] = {"error": f"{type(e).__name__}: {e}"[:300]}
        else:
            out[tool] = {"seconds": seconds, "pick": list(pick)}
    return out


def truth(rounds: int) -> dict[tuple[int, int], float]:
    """Every config's median time (ms) over interleaved rounds."""
    pltpu.set_tpu_interpret_mode()
    q = jax.random.normal(jax.random.key(0), SHAPE)
    fns = {}
    for bq in SIZES:
        for bk in SIZES:
            fn = jax.jit(lambda q, bq=bq, bk=bk: attention(q, q, q, block_q=bq, block_k=bk))
            for _ in range(3):
                jax.block_until_ready(fn(q))
            fns[(bq, bk)] = fn
    samples: dict[tuple[int, int], list[float]] = {c: [] for c in fns}
    for r in range(rounds):
        configs = list(fns)
        for c in configs[r % len(configs) :] + configs[: r % len(configs)]:
            start = time.perf_counter()
            jax.block_until_ready(fns[c](q))
            samples[c].append((time.perf_counter() - start) * 1e3)
    return {c: statistics.median(s) for c, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--results", default=None)
    args = parser.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(one_run(args.one)), flush=True)
        return
    runs = []
    for run in range(args.runs):
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        env["JAXTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxtune-bench-flash-")
        proc = subprocess.run(
            [sys.executable, __file__, "--one", str(run)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        found = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not found:
            raise SystemExit(f"run {run} failed:\n{proc.stderr[-3000:]}")
        runs.append(json.loads(found[-1][len("RESULT ") :]))
        print(runs[-1], flush=True)
    times = truth(args.rounds)
    best = min(times.values())
    lines = [
        "Truth (median ms, / best): "
        + ", ".join(f"q{bq}/k{bk}: {ms:.0f} ({ms / best:.2f})" for (bq, bk), ms in times.items()),
        "",
        "| run | tool | sweep s | pick (block_q, block_k) | pick / best |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        for tool in ("jaxtune", "tune-jax"):
            got = r[tool]
            if "error" in got:
                lines.append(f"| {r['run']} | {tool} | {got['error']} | | |")
                continue
            pick = tuple(got["pick"])
            lines.append(
                f"| {r['run']} | {tool} | {got['seconds']:.1f} | {pick} | "
                f"{times[pick] / best:.2f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results:
        out = pathlib.Path(args.results)
        out.mkdir(parents=True, exist_ok=True)
        doc = {
            "jax": jax.__version__,
            "runs": runs,
            "truth_ms": {str(k): v for k, v in times.items()},
        }
        (out / "flash_vs_tune_jax.json").write_text(json.dumps(doc, indent=1))
        (out / "flash_vs_tune_jax.md").write_text(text)


if __name__ == "__main__":
    main()
