"""jaxtune, Tokamax's autotuner and tune-jax side by side on the same kernel, in one run.

The chunked sum of 2^20 f32 values, chunk 8/64/512/4096. Each run is a fresh process that
imports the kernel from this module (``--kernel-in script``: defines it in the script it
runs), first does other work of its own (a fixed number of unrelated matmuls; jaxtune's sweep
child, started when the kernel was decorated, comes up meanwhile), then sweeps with each
tool (jaxtune first on even runs, last on odd runs), then measures this run's truth (every
config timed in interleaved rounds); it reports each tool's sweep wall time, its pick and
whether jaxtune's child was up when its sweep began. The other work shares nothing with
the chunked sum, so no tool finds its programs already compiled. Afterwards this process
re-measures every config interleaved once more (the overall truth) and rates each pick
against both truths.

Tokamax and tune-jax are installed only for this benchmark (`nox -s bench`); a tool that
is missing is reported as such and left out.

Run: python bench/bench_vs_tools.py [--runs 6] [--results DIR]
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

import jax
import jax.numpy as jnp

import jaxtune

CHUNKS = [8, 64, 512, 4096]
N = 1 << 20


def chunked_sum(x: jax.Array, *, chunk: int) -> jax.Array:
    return x.reshape(-1, chunk).sum(axis=1).sum()


# Decorated at import: in tune mode with process isolation this starts the sweep child in
# the background, while the program does other work.
tuned_sum = jaxtune.autotuned(configs={"chunk": CHUNKS}, name="bench.vs.chunked_sum")(chunked_sum)


def run_jaxtune(x: jax.Array) -> tuple[float, int]:
    from jaxtune._isolation.process import POOL

    CHILD_UP.append(bool(POOL.children()))
    start = time.perf_counter()
    (entry,) = tuned_sum.tune(x).values()
    return time.perf_counter() - start, int(entry.config["chunk"])


def run_tokamax(x: jax.Array) -> tuple[float, int]:
    from tokamax._src.autotuning.autotuner import Autotuner

    start = time.perf_counter()
    data = Autotuner().autotune(
        lambda chunk: functools.partial(chunked_sum, chunk=chunk), set(CHUNKS), x
    )
    return time.perf_counter() - start, int(data.fastest_config)


def run_tune_jax(x: jax.Array) -> tuple[float, int]:
    import tune_jax

    start = time.perf_counter()
    fn = tune_jax.tune(chunked_sum, hyperparams={"chunk": CHUNKS})
    jax.block_until_ready(fn(x))
    return time.perf_counter() - start, int(fn.optimal_hyperparams["chunk"])


TOOLS = {"tokamax": run_tokamax, "tune-jax": run_tune_jax}
CHILD_UP: list[bool] = []


def one_run(run: int) -> dict[str, object]:
    """One fresh process: every available tool sweeps once."""
    x = jax.random.normal(jax.random.key(run), (N,), jnp.float32)
    other_work()
    order = ["jaxtune", *TOOLS] if run % 2 == 0 else [*TOOLS, "jaxtune"]
    out: dict[str, object] = {"run": run, "order": order}
    for tool in order:
        runner = run_jaxtune if tool == "jaxtune" else TOOLS[tool]
        try:
            seconds, pick = runner(x)
        except ImportError as e:
            out[tool] = {"error": f"not installed: {e}"}
        except Exception as e:  # a tool that fails is reported, not fatal
            out[tool] = {"error": f"{type(e).__name__}: {e}"[:300]}
        else:
            out[tool] = {"seconds": seconds, "pick": pick}
    out["child_up"] = CHILD_UP[0] if CHILD_UP else None
    out["truth_us"] = {c: statistics.median(v) for c, v in truth(rounds=60).items()}
    return out


def other_work(steps: int = 400) -> None:
    """What a program does between importing its kernels and tuning them (here: matmuls
    of a shape the chunked sum never uses)."""
    w = jax.random.normal(jax.random.key(1), (384, 384), jnp.float32)
    step = jax.jit(lambda a: jnp.tanh(a @ w) @ w.T)
    a = w
    for _ in range(steps):
        a = step(a)
    jax.block_until_ready(a)


def truth(rounds: int = 40) -> dict[int, list[float]]:
    """Every config timed in interleaved rounds (µs per call)."""
    x = jax.random.normal(jax.random.key(0), (N,), jnp.float32)
    fns = {c: jax.jit(functools.partial(chunked_sum, chunk=c)) for c in CHUNKS}
    for f in fns.values():
        jax.block_until_ready(f(x))
        jax.block_until_ready(f(x))
    samples: dict[int, list[float]] = {c: [] for c in CHUNKS}
    for r in range(rounds):
        for c in CHUNKS[r % 4 :] + CHUNKS[: r % 4]:
            start = time.perf_counter()
            for _ in range(5):
                out = fns[c](x)
            jax.block_until_ready(out)
            samples[c].append((time.perf_counter() - start) / 5 * 1e6)
    return samples


def summarise(runs: list[dict[str, object]], samples: dict[int, list[float]]) -> dict[str, object]:
    medians = {c: statistics.median(v) for c, v in samples.items()}
    best = min(medians, key=lambda c: medians[c])
    quart = {c: statistics.quantiles(v, n=4) for c, v in samples.items()}
    # A config the truth cannot separate from the best: interquartile ranges overlap.
    inseparable = {c for c in CHUNKS if quart[c][0] <= quart[best][2]}
    rows = []
    for run in runs:
        tok = run.get("tokamax", {})
        for tool in ["jaxtune", *TOOLS]:
            got = run.get(tool, {})
            if not isinstance(got, dict) or "pick" not in got:
                rows.append({"run": run["run"], "tool": tool, "error": got.get("error")})
                continue
            local = {int(c): v for c, v in run["truth_us"].items()}
            row = {
                "run": run["run"],
                "tool": tool,
                "jaxtune_position": run["order"].index("jaxtune"),
                "child_up": run.get("child_up"),
                "seconds": got["seconds"],
                "pick": got["pick"],
                "pick_time_over_best": medians[got["pick"]] / medians[best],
                "pick_over_run_best": local[got["pick"]] / min(local.values()),
                "right": got["pick"] in inseparable,
            }
            if isinstance(tok, dict) and "seconds" in tok:
                row["sweep_over_tokamax"] = got["seconds"] / tok["seconds"]
            rows.append(row)
    return {
        "truth_us": medians,
        "best": best,
        "inseparable_from_best": sorted(inseparable),
        "rows": rows,
    }


def markdown(summary: dict[str, object]) -> str:
    medians = summary["truth_us"]
    best = summary["best"]
    lines = [
        "| run | tool | jaxtune ran | child up | sweep s | sweep / Tokamax's | pick "
        "| pick / best | pick / this run's best |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["rows"]:
        if "error" in r:
            lines.append(f"| {r['run']} | {r['tool']} | | | {r['error']} | | | | |")
            continue
        when = "first" if r["jaxtune_position"] == 0 else "last"
        ratio = f"{r['sweep_over_tokamax']:.2f}" if "sweep_over_tokamax" in r else "-"
        mark = "" if r["right"] else " (wrong)"
        lines.append(
            f"| {r['run']} | {r['tool']} | {when} | {r['child_up']} | {r['seconds']:.2f} | "
            f"{ratio} | {r['pick']}{mark} | {r['pick_time_over_best']:.2f} | "
            f"{r['pick_over_run_best']:.2f} |"
        )
    truth_line = ", ".join(f"{c}: {medians[c] / medians[best]:.2f}" for c in CHUNKS)
    return "\n".join([f"Truth (time / best, best chunk {best}): {truth_line}", "", *lines, ""])


HERE = pathlib.Path(__file__).resolve().parent
_AS_MODULE = (
    "import json, sys; sys.path.insert(0, {here!r}); import bench_vs_tools as b; "
    "print('RESULT ' + json.dumps(b.one_run({run})), flush=True)"
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--results", default=None)
    parser.add_argument(
        "--kernel-in",
        choices=["module", "script"],
        default="module",
        help="where each run's program defines the kernel: in a module it imports "
        "(jaxtune's child imports it while the program does other work) or in the script "
        "itself (the child re-runs the script's top level when the sweep begins)",
    )
    args = parser.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(one_run(args.one)), flush=True)
        return
    runs = []
    for run in range(args.runs):
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "JAXTUNE_MODE": "tune",
            "JAXTUNE_ISOLATION": "process",
            "JAXTUNE_CACHE_DIR": tempfile.mkdtemp(prefix="jaxtune-bench-vs-"),
        }
        if args.kernel_in == "script":
            command = [sys.executable, __file__, "--one", str(run)]
        else:  # the kernel in a module the program imports, as kernels usually are
            command = [sys.executable, "-c", _AS_MODULE.format(here=str(HERE), run=run)]
        proc = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        found = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not found:
            raise SystemExit(f"run {run} failed:\n{proc.stderr[-3000:]}")
        runs.append(json.loads(found[-1][len("RESULT ") :]))
        print(runs[-1], flush=True)
    summary = summarise(runs, truth())
    text = markdown(summary)
    print(text)
    if args.results:
        out = pathlib.Path(args.results)
        out.mkdir(parents=True, exist_ok=True)
        doc = {"jax": jax.__version__, "runs": runs, **summary}
        (out / "vs_tools.json").write_text(json.dumps(doc, indent=1, default=str))
        (out / "vs_tools.md").write_text(text)


if __name__ == "__main__":
    main()
