"""Tokamax's own ragged_dot space on the chip (issue 44, item 4): jaxtune's exhaustive sweep
of a fixed subset of Tokamax's configs against Tokamax's own autotuner on the same subset,
and a budgeted jaxtune search of Tokamax's whole space.

On a TPU machine from the repository root, with Tokamax 0.0.12 and its dependencies
installed (wheels carried; see ../shared/real-programs.md), one part per process, each
the only one to hold the chip:

    . tools/tpu/env.sh
    python bench/bench_tokamax_tpu.py --part tokamax --json OUT/tokamax.json
    python bench/bench_tokamax_tpu.py --part jaxtune --peer OUT/tokamax.json --json OUT/jaxtune.json

The problem is the one issue 44 names: lhs bf16[8192, 2048], rhs bf16[8, 2048, 2048], eight
groups of 1024 rows, Tokamax's ``PallasMosaicTpuRaggedDot``. Tokamax proposes 540 configs
for it; the subset is every fifth of them in a fixed order (sorted by their values), the
first ``--configs`` (96) of those.

- ``tokamax``: ``Autotuner().autotune`` over the subset (it compiles in parallel on every
  core, then times each config), in chunks of ``--chunk`` configs so that it can stop
  at ``--cap`` seconds: when it does, its wall time for the whole subset is estimated
  from the chunks done (per config) and marked so.
- ``jaxtune``: ``jaxtune.tune(..., retune=True)`` of the subset with ``search="exhaustive"``,
  then of Tokamax's whole space with ``search="model", budget=64``; then the truth: each
  pick (and Tokamax's, read from ``--peer``) timed side by side over interleaved rounds
  (wall clock, 20 calls a round), each pick's time over the fastest pick's.

``--dry`` runs both parts on CPU in TPU interpret mode on a tiny problem, to check the
mechanics only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.getcwd())

import jax
import jax.numpy as jnp
import numpy as np

import jaxtune
from jaxtune._core.vocabulary import config_id

DRY = "--dry" in sys.argv
if DRY:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
# This process holds the chip (its inputs live there), so sweeps run in it: say so up front.
os.environ.setdefault("JAXTUNE_ISOLATION", "inline")

from tokamax._src.ops.ragged_dot import pallas_mosaic_tpu as _rd  # noqa: E402

#: lhs [m, k], rhs [groups, k, n].
M, K, N, GROUPS = (256, 256, 256, 2) if DRY else (8192, 2048, 2048, 8)
DTYPE = jnp.float32 if DRY else jnp.bfloat16
STRIDE = 5
#: The budgeted search's configs (a few in a dry run, for the mechanics).
BUDGET = 4 if DRY else 64


def _cpu_as_tpu_v5e() -> None:
    """Interpret mode only: Tokamax's heuristics ask JAX's TPU-info registry about the
    device, which knows no CPU (as tests/conformance/tokamax_kernels.py does)."""
    from tests.ragged_dot_space import v5e_info_for_cpu

    found = v5e_info_for_cpu()
    if found is not None:
        found[0].setdefault("cpu", found[1])


if DRY:
    _cpu_as_tpu_v5e()
if DRY:  # interpret mode, and past its device check
    _rd.PallasMosaicTpuRaggedDot.supported_on = lambda self, device: True  # type: ignore[method-assign]
OP = _rd.PallasMosaicTpuRaggedDot(interpret=DRY)


def inputs() -> tuple[Any, ...]:
    """The problem's arrays: eight groups of ``M // GROUPS`` rows."""
    rng = np.random.default_rng(0)
    return (
        jnp.asarray(rng.standard_normal((M, K)), DTYPE),
        jnp.asarray(rng.standard_normal((GROUPS, K, N)), DTYPE),
        jnp.full((GROUPS,), M // GROUPS, jnp.int32),
    )


def all_configs(lhs: Any, rhs: Any, group_sizes: Any) -> list[dict[str, Any]]:
    """Tokamax's own candidates for these shapes, in a fixed order."""
    bound = OP.bind(lhs, rhs, group_sizes=group_sizes)
    return sorted(
        (dataclasses.asdict(c) for c in bound.autotuning_configs),
        key=lambda c: tuple(c.values()),
    )


def subset(lhs: Any, rhs: Any, group_sizes: Any, n: int = 96) -> list[dict[str, Any]]:
    """Every ``STRIDE``-th of Tokamax's configs, the first ``n`` of them."""
    return all_configs(lhs, rhs, group_sizes)[::STRIDE][:n]


def valid_inputs(lhs: Any, rhs: Any, group_sizes: Any) -> tuple[Any, ...]:
    """The sweep's inputs (``inputs=``): random group sizes would not cover ``lhs``'s rows
    (nor time the problem the truth and Tokamax time)."""
    del lhs, rhs, group_sizes
    return inputs()


def heuristics(lhs: Any, rhs: Any, group_sizes: Any) -> dict[str, Any]:
    """Tokamax's heuristics config: jaxtune's default."""
    return dataclasses.asdict(OP.bind(lhs, rhs, group_sizes=group_sizes).heuristics_config)


def _call(lhs: Any, rhs: Any, group_sizes: Any, **config: Any) -> Any:
    return OP.replace(config=_rd.Config(**config))(lhs, rhs, group_sizes=group_sizes)


def subset_space(lhs: Any, rhs: Any, group_sizes: Any) -> list[dict[str, Any]]:
    return subset(lhs, rhs, group_sizes, n=SUBSET_SIZE)


SUBSET_SIZE = 96


def _ragged_dot(
    lhs, rhs, group_sizes, *, tile_m, tile_k, tile_n, input_buffer_count, combine_scopes
):  # type: ignore[no-untyped-def]
    """Tokamax's ragged dot with one of its configs."""
    config = dict(
        tile_m=tile_m,
        tile_k=tile_k,
        tile_n=tile_n,
        input_buffer_count=input_buffer_count,
        combine_scopes=combine_scopes,
    )
    return _call(lhs, rhs, group_sizes, **config)


#: The fixed subset of Tokamax's configs, every one measured.
ragged_dot_subset = jaxtune.autotuned(
    configs=subset_space,
    default=heuristics,
    inputs=valid_inputs,
    search="exhaustive",
    budget=10_000,
    name="bench.tokamax.ragged_dot_subset",
)(_ragged_dot)
#: All of Tokamax's configs, a budgeted model search.
ragged_dot = jaxtune.autotuned(
    configs=all_configs,
    default=heuristics,
    inputs=valid_inputs,
    search="model",
    budget=BUDGET,
    name="bench.tokamax.ragged_dot",
)(_ragged_dot)


def part_tokamax(configs: list[dict[str, Any]], args: tuple[Any, ...], chunk: int, cap: float):
    from tokamax._src.autotuning.autotuner import Autotuner

    def with_config(config: Any) -> Any:
        op = OP.replace(config=config)
        return lambda a, b, g: op(a, b, group_sizes=g)

    start = time.perf_counter()
    fastest: dict[str, Any] | None = None
    best_ms = float("inf")
    done = failed = 0
    errors: list[str] = []
    for i in range(0, len(configs), chunk):
        part = {_rd.Config(**c) for c in configs[i : i + chunk]}
        data = Autotuner().autotune(with_config, part, *args)
        for config, result in data.items():
            if isinstance(result, Exception):
                failed += 1
                error = f"{type(result).__name__}: {(str(result).splitlines() or [''])[0][:300]}"
                if error not in errors and len(errors) < 3:
                    errors.append(error)
                continue
            ms = result.median_evaluation_time_ms
            if ms < best_ms:
                best_ms, fastest = ms, dataclasses.asdict(config)
        done += len(part)
        elapsed = time.perf_counter() - start
        print(f"tokamax: {done}/{len(configs)} configs in {elapsed:.1f} s", flush=True)
        if elapsed > cap and done < len(configs):
            break
    wall = time.perf_counter() - start
    return {
        "configs": len(configs),
        "configs_done": done,
        "failed": failed,
        "errors": errors,
        "chunk": chunk,
        "wall_s": wall,
        "wall_s_all": wall / done * len(configs),
        "estimated": done < len(configs),
        "fastest": fastest,
        "fastest_ms_own": best_ms,
    }


def _truth(picks: dict[str, dict[str, Any]], args: tuple[Any, ...], rounds: int = 15):
    """Seconds a call of each distinct pick, fastest round of ``rounds`` interleaved ones."""
    fns = {}
    for config in picks.values():
        cid = config_id(config)
        if cid not in fns:
            f = jax.jit(functools.partial(_call, **config))
            jax.block_until_ready(f(*args))
            fns[cid] = f
    times: dict[str, list[float]] = {cid: [] for cid in fns}
    for _ in range(rounds):
        for cid, f in fns.items():
            start = time.perf_counter()
            for _ in range(20):
                out = f(*args)
            jax.block_until_ready(out)
            times[cid].append((time.perf_counter() - start) / 20)
    best = {cid: min(t) for cid, t in times.items()}
    fastest = min(best.values())
    return {
        who: {"config": cid, "ms": best[cid] * 1e3, "over_fastest": best[cid] / fastest}
        for who, config in picks.items()
        for cid in [config_id(config)]
    }


def _failures(failed: Any) -> dict[str, Any]:
    """Failures by stage, with the first three distinct reasons (first line, cut) of each,
    and each failed config's reason (first line, cut short): a later run's refusals are
    checked against them (a config refused before compiling must have failed to compile)."""
    out: dict[str, Any] = {}
    for f in failed:
        stage = out.setdefault(f.stage, {"count": 0, "reasons": [], "configs": {}})
        stage["count"] += 1
        reason = (str(f.reason).strip().splitlines() or [""])[0][:300]
        stage["configs"][config_id(f.config)] = reason[:160]
        if reason not in stage["reasons"] and len(stage["reasons"]) < 3:
            stage["reasons"].append(reason)
    return out


def part_jaxtune(
    configs: list[dict[str, Any]], args: tuple[Any, ...], peer: dict | None, only: str = ""
):
    out: dict[str, Any] = {}
    picks: dict[str, dict[str, Any]] = {}
    pace = os.environ.get("BENCH_EARLY_PACE_S")
    if pace is not None:  # an experiment: the first pass's captures begin beside compiles
        from jaxtune._tuning.sweep import engine  # whenever configs come this far apart

        engine.EARLY_PACE_S = float(pace)
        out["early_pace_s"] = float(pace)
    runs = {"exhaustive": ragged_dot_subset, "model_budget_of_all": ragged_dot}
    if only:
        runs = {only: runs[only]}
    for label, kernel in runs.items():
        start = time.perf_counter()
        result = jaxtune.tune(jax.jit(kernel), *args, retune=True)
        wall = time.perf_counter() - start
        (entry,) = result.values()
        picks[label] = dict(entry.config)
        out[label] = {
            "wall_s": wall,
            "measured": entry.measured,
            "space": entry.space_size,
            "failed": sum(1 for m in entry.measurements if not m.ok),
            "failures": _failures(m for m in entry.measurements if not m.ok),
            # Configs that lowered to the same program as another: timed once for all.
            "same_program": sum(1 for m in entry.measurements if m.ok and m.same_as),
            "pick": dict(entry.config),
            "decision": entry.decision_text(),
            "phases": dict(getattr(entry, "phases", {}) or {}),
            # Each timed config: its median call (us), its calls and its rounds.
            "timed": {
                config_id(m.config): [round(m.median_us, 2), m.calls, len(m.rounds_us)]
                for m in entry.measurements
                if m.ok
            },
        }
        print(f"jaxtune {label}: {json.dumps(out[label])}", flush=True)
    if peer and peer.get("fastest"):
        picks["tokamax"] = peer["fastest"]
    picks["default"] = heuristics(*args)
    out["truth"] = _truth(picks, args, rounds=3 if DRY else 15)
    print(f"truth: {json.dumps(out['truth'])}", flush=True)
    if peer:
        out["exhaustive_over_tokamax_wall"] = out["exhaustive"]["wall_s"] / peer["wall_s_all"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("tokamax", "jaxtune"), required=True)
    ap.add_argument("--configs", type=int, default=96)
    ap.add_argument("--chunk", type=int, default=24)
    ap.add_argument("--cap", type=float, default=240.0)
    ap.add_argument("--peer", default=None, help="the tokamax part's JSON")
    ap.add_argument("--json", default=None)
    ap.add_argument("--stride", type=int, default=5, help="1: every config")
    ap.add_argument("--only", choices=("exhaustive", "model_budget_of_all"), default="")
    ap.add_argument("--dry", action="store_true")
    ap.add_argument(
        "--timeline", default=None, help="write the sweep's steps and busy cores here (JSON)"
    )
    args_ns = ap.parse_args()
    from absl import flags as absl_flags

    absl_flags.FLAGS(sys.argv[:1])  # Tokamax reads absl flags; ours are not theirs
    global SUBSET_SIZE, STRIDE
    SUBSET_SIZE, STRIDE = args_ns.configs, args_ns.stride
    args = inputs()
    configs = subset(*args, n=args_ns.configs)
    everything = all_configs(*args)
    print(f"{len(everything)} Tokamax configs; subset of {len(configs)}", flush=True)
    report: dict[str, Any] = {
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "tokamax": importlib.metadata.version("tokamax"),
        "date": time.strftime("%Y-%m-%d"),
        "problem": {"m": M, "k": K, "n": N, "groups": GROUPS, "dtype": str(DTYPE.dtype)},
        "tokamax_configs": len(everything),
        "subset": {"stride": STRIDE, "configs": len(configs)},
    }
    if args_ns.part == "tokamax":
        report["tokamax_autotuner"] = part_tokamax(configs, args, args_ns.chunk, args_ns.cap)
        print(json.dumps(report["tokamax_autotuner"]), flush=True)
    else:
        peer = None
        if args_ns.peer and os.path.exists(args_ns.peer):
            with open(args_ns.peer) as f:
                peer = json.load(f)["tokamax_autotuner"]
        timeline = contextlib.nullcontext()
        if args_ns.timeline:
            import _timeline

            timeline = _timeline.recording(args_ns.timeline)
        with timeline:
            report["jaxtune"] = part_jaxtune(configs, args, peer, args_ns.only)
        report["tokamax_autotuner"] = peer
    if args_ns.json:
        with open(args_ns.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
