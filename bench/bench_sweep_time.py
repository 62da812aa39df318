"""Where a sweep's time goes on real kernels, and how long it takes beside the peers.

For each kernel, each run is a fresh process that sweeps with jaxtune (default settings,
the child process, ``JAXTUNE_MODE=tune`` so the child starts when the kernel is
decorated) and with the peer, in an order that alternates from run to run, and prints the
sweep's time breakdown (``Entry.phases``) and calls per config:

- ``flash``: JAX's flash attention forward (TPU interpret mode), q/k/v f32[1,2,512,128]
  causal, block_q x block_k in {128, 256, 512}: 9 configs. The peer is a plain loop in
  this process that compiles each config and calls it as many times as the sweep did
  (``Measurement.calls``: the check's and warm-up calls included); it runs after the sweep
  (it needs the counts), in a process whose JAX caches the sweep's child did not warm.
- ``swiglu``: pallas-forge's fused_swiglu over its own 3x3 grid; the peer is
  ``pallas_forge.tune`` with its defaults.
- ``ragged_dot``: Tokamax's ragged dot (interpret mode, ``bypass_device_check=True``), lhs
  f32[512,256], rhs f32[4,256,256], over Tokamax's 11 configs for these shapes with two
  input buffers; the peer is Tokamax's ``Autotuner`` on the same configs.
- ``tokamax_flash``: Tokamax's flash attention (interpret mode), f32[1,512,2,128] causal,
  over its 8 configs with the default layouts and its heuristics config; the peer is
  Tokamax's ``Autotuner`` on the same 9.

For Tokamax's kernels each run then measures the truth in the same process (every config
side by side, 21 interleaved rounds) and gives each pick's time over the fastest's
(median and quartiles of the round-by-round ratios). They
need tokamax >= 0.0.17 (the py3.12 environment).

``--truth ragged_dot --truth-rounds 61`` measures only the truth, for every config of a
Tokamax kernel, and prints each config's time over the fastest's: a longer, quieter look
where 21 rounds under load leave near-equal configs' ratios spread wide.

Run: python bench/bench_sweep_time.py [--kernels flash,swiglu] [--runs 3] [--results DIR]

Run it where the installed packages have their bytecode (pip writes it; after ``uv pip
install`` without ``--compile-bytecode`` on a machine with ``PYTHONDONTWRITEBYTECODE=1``,
run ``python -m compileall`` on the environment): without it every process compiles what it
imports, and the sweep's child, which imports JAX and the kernel's module after the run
starts, pays for it where an in-process peer does not (``import tokamax``: 7-8 s against 3
s). The bench says so when it finds none.
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
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Rounds of the truth each Tokamax run measures afterwards (one call of every config a
#: round): 7 put configs within a few percent of each other 1.10-1.16x apart by chance.
TRUTH_ROUNDS = 21
SIZES = [128, 256, 512]
SHAPE = (1, 2, 512, 128)


def attention(q, k, v, *, block_q: int, block_k: int):
    """JAX's TPU flash attention, forward, causal."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    sizes = fa.BlockSizes(block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1)
    return fa.flash_attention(q, k, v, causal=True, block_sizes=sizes)


def _flash_kernel():
    import jaxtune

    return jaxtune.autotuned(
        configs={"block_q": SIZES, "block_k": SIZES}, name="bench.sweep_time.flash"
    )(attention)


# Decorated at import (the child re-imports this script to find it).
flash = _flash_kernel()


def _entry(result, kernel):
    (entry,) = [e for (name, _, _), e in result.items() if name == kernel.kernel_id]
    return entry


def _sweep(kernel, args) -> tuple[float, object]:
    start = time.perf_counter()
    entry = _entry(kernel.tune(*args), kernel)
    return time.perf_counter() - start, entry


def _plain_loop(fn, args, entry) -> float:
    """Each config compiled and called as many times as the sweep called it, in turn."""
    start = time.perf_counter()
    for m in entry.measurements:
        if not m.ok:
            continue
        compiled = jax.jit(functools.partial(fn, **m.config)).lower(*args).compile()
        for _ in range(max(1, m.calls)):
            jax.block_until_ready(compiled(*args))
    return time.perf_counter() - start


def run_flash(order: str) -> dict[str, object]:
    from jax.experimental.pallas import tpu as pltpu

    pltpu.set_tpu_interpret_mode()
    q = jnp.asarray(np.random.default_rng(0).standard_normal(SHAPE), jnp.float32)
    sweep_s, entry = _sweep(flash, (q, q, q))
    loop_s = _plain_loop(attention, (q, q, q), entry)
    return _report(entry, sweep_s, "plain loop", loop_s, None, order="jaxtune first")


def run_swiglu(order: str) -> dict[str, object]:
    import pallas_forge
    from conformance import forge_kernels as fk

    args = fk.swiglu_args()

    def peer() -> tuple[float, object]:
        start = time.perf_counter()
        report = pallas_forge.tune(
            pallas_forge.fused_swiglu, lambda config: args, fk.GRID, verbose=False
        )
        best = report.best(1)[0].config
        return time.perf_counter() - start, best

    return _both(order, lambda: _sweep(fk.swiglu, args), peer)


def _tokamax_peer(space, with_config, args) -> tuple[float, object]:
    """Tokamax's autotuner over ``space`` (``with_config(config)``: the op called with it)."""
    from tokamax._src.autotuning.autotuner import Autotuner

    configs = {tuple(sorted(c.items())) for c in space}
    start = time.perf_counter()
    data = Autotuner().autotune(lambda c: with_config(dict(c)), configs, *args)
    return time.perf_counter() - start, dict(data.fastest_config)


def _truth(kernel, args, default, rounds: int) -> tuple[dict[str, list[float]], str]:
    """Seconds per call of every config, round by round, and the fastest config's id."""
    from conformance.support import config_id, true_times

    calls = {}
    for config in [*kernel.space(*args), default]:
        fn = jax.jit(functools.partial(kernel.__wrapped__, **config))
        calls[config_id(config)] = functools.partial(fn, *args)
    times = true_times(calls, rounds=rounds, warmup=1, calls_per_round=1)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return times, min(medians, key=medians.__getitem__)


def _with_truth(report: dict[str, object], kernel, args, default) -> dict[str, object]:
    """Each pick's time over the truly fastest config's, measured here afterwards."""
    from conformance.support import config_id

    rounds, fastest = _truth(kernel, args, default, TRUTH_ROUNDS)

    def ratios(pick) -> list[float]:
        pairs = zip(rounds[config_id(dict(pick))], rounds[fastest], strict=True)
        return [a / b for a, b in pairs]

    def over_fastest(pick) -> float | None:
        return None if pick is None else round(statistics.median(ratios(pick)), 3)

    def quartiles(pick) -> list[float] | None:
        if pick is None:
            return None
        q = statistics.quantiles(ratios(pick), n=4)
        return [round(q[0], 3), round(q[2], 3)]

    return {
        **report,
        "truth_rounds": TRUTH_ROUNDS,
        "truth_fastest": fastest,
        "pick_vs_truth": over_fastest(report["pick"]),
        "pick_vs_truth_quartiles": quartiles(report["pick"]),
        "peer_pick_vs_truth": over_fastest(report["peer_pick"]),
        "peer_pick_vs_truth_quartiles": quartiles(report["peer_pick"]),
    }


def _ragged_dot_setup():
    from conformance import tokamax_kernels as tk
    from jax.experimental.pallas import tpu as pltpu

    pltpu.set_tpu_interpret_mode()
    args = tk.ragged_inputs(
        jax.ShapeDtypeStruct((512, 256), jnp.float32),
        jax.ShapeDtypeStruct((4, 256, 256), jnp.float32),
        jax.ShapeDtypeStruct((4,), jnp.int32),
    )
    return tk.ragged_dot, args, tk.tokamax_heuristics(*args)


def _tokamax_flash_setup():
    from conformance import tokamax_kernels as tk
    from jax.experimental.pallas import tpu as pltpu

    pltpu.set_tpu_interpret_mode()
    args = tk.flash_args()
    return tk.flash_attention, args, tk.flash_heuristics(*args)


def truth_table(kernel_name: str, rounds: int) -> None:
    """Print every config's median time and its round-by-round ratio to the fastest's."""
    kernel, args, default = {
        "ragged_dot": _ragged_dot_setup,
        "tokamax_flash": _tokamax_flash_setup,
    }[kernel_name]()
    times, fastest = _truth(kernel, args, default, rounds)
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"{kernel_name}: {rounds} interleaved rounds, load {os.getloadavg()[0]:.1f}")
    for name in sorted(medians, key=medians.__getitem__):
        ratios = [a / b for a, b in zip(times[name], times[fastest], strict=True)]
        q = statistics.quantiles(ratios, n=4)
        print(
            f"  {medians[name] * 1e3:8.2f} ms  {statistics.median(ratios):.3f}x "
            f"({q[0]:.2f}-{q[2]:.2f})  {name}"
        )


def run_ragged_dot(order: str) -> dict[str, object]:
    from conformance import tokamax_kernels as tk
    from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu

    kernel, args, default = _ragged_dot_setup()

    def with_config(config):
        op = tk.OP.replace(config=pallas_mosaic_tpu.Config(**config))
        return lambda a, b, g: op(a, b, group_sizes=g)

    space = kernel.space(*args)
    report = _both(
        order, lambda: _sweep(kernel, args), lambda: _tokamax_peer(space, with_config, args)
    )
    return _with_truth(report, kernel, args, default)


def run_tokamax_flash(order: str) -> dict[str, object]:
    from conformance import tokamax_kernels as tk

    kernel, args, default = _tokamax_flash_setup()

    def with_config(config):
        op = tk.FLASH_OP.replace(config=tk.flash_config(**config))
        return lambda q, k, v: op(q, k, v, is_causal=True)

    space = [*kernel.space(*args), default]
    report = _both(
        order, lambda: _sweep(kernel, args), lambda: _tokamax_peer(space, with_config, args)
    )
    return _with_truth(report, kernel, args, default)


def _both(order, ours, peer) -> dict[str, object]:
    if order == "jaxtune first":
        sweep_s, entry = ours()
        peer_s, peer_pick = peer()
    else:
        peer_s, peer_pick = peer()
        sweep_s, entry = ours()
    return _report(entry, sweep_s, "own tuner", peer_s, peer_pick, order=order)


def _report(entry, sweep_s, peer_name, peer_s, peer_pick, *, order) -> dict[str, object]:
    return {
        "order": order,
        "sweep_s": round(sweep_s, 2),
        "peer": peer_name,
        "peer_s": round(peer_s, 2),
        "ratio": round(sweep_s / peer_s, 3),
        "pick": dict(entry.config),
        "peer_pick": peer_pick,
        "decision": entry.decision_text(),
        "phases": dict(entry.phases),
        "calls": {
            ",".join(f"{k}={v}" for k, v in sorted(m.config.items())): m.calls
            for m in entry.measurements
            if m.ok
        },
        "load": round(os.getloadavg()[0], 1),
    }


RUNS = {
    "flash": run_flash,
    "swiglu": run_swiglu,
    "ragged_dot": run_ragged_dot,
    "tokamax_flash": run_tokamax_flash,
}


def one(kernel: str, order: str) -> None:
    print(json.dumps(RUNS[kernel](order), default=str), flush=True)


def _say_if_no_bytecode() -> None:
    """Warns when JAX's own modules have no bytecode and none will be written."""
    import importlib.util

    cached = importlib.util.cache_from_source(jax.__file__)
    if sys.flags.dont_write_bytecode and not os.path.exists(cached):
        print(
            "warning: no bytecode for JAX and PYTHONDONTWRITEBYTECODE is set: every process "
            "compiles what it imports, which charges the sweep's child (see this script's "
            "docstring; `python -m compileall` the environment)",
            file=sys.stderr,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="flash,swiglu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--results", type=pathlib.Path, default=None)
    parser.add_argument("--truth", choices=["ragged_dot", "tokamax_flash"], default=None)
    parser.add_argument("--truth-rounds", type=int, default=TRUTH_ROUNDS)
    parser.add_argument("--one", nargs=2, metavar=("KERNEL", "ORDER"), help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.one:
        one(a.one[0], a.one[1])
        return
    if a.truth:
        sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
        truth_table(a.truth, a.truth_rounds)
        return
    _say_if_no_bytecode()
    summary: dict[str, object] = {}
    for kernel in a.kernels.split(","):
        runs = []
        for run in range(a.runs):
            order = "jaxtune first" if run % 2 == 0 else "peer first"
            with tempfile.TemporaryDirectory() as cache:
                env = {
                    **os.environ,
                    "JAXTUNE_CACHE_DIR": cache,
                    "JAXTUNE_MODE": "tune",
                    "PYTHONPATH": os.pathsep.join(
                        [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
                    ),
                }
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", kernel, order],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
            if proc.returncode != 0:
                print(f"{kernel} run {run} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                continue
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            runs.append(got)
            print(f"{kernel} run {run}: {json.dumps(got)}", flush=True)
        if runs:
            summary[kernel] = {
                "runs": runs,
                "median_sweep_s": statistics.median(r["sweep_s"] for r in runs),
                "median_peer_s": statistics.median(r["peer_s"] for r in runs),
                "median_ratio": statistics.median(r["ratio"] for r in runs),
            }
            s = summary[kernel]
            print(
                f"{kernel}: sweep {s['median_sweep_s']:.1f} s vs {runs[0]['peer']} "
                f"{s['median_peer_s']:.1f} s, ratio {s['median_ratio']:.2f} (median of {len(runs)})",
                flush=True,
            )
    if a.results:
        a.results.mkdir(parents=True, exist_ok=True)
        name = "sweep_time_" + "_".join(a.kernels.split(",")) + ".json"
        (a.results / name).write_text(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
