"""Budgeted search and the tie rule, measured in one run.

1. A 256-config space (4 knobs x 4 values) whose kernel runs a number of loop steps set by
   a known cost function, so the best config is known. One exhaustive sweep measures every
   config; then `search="auto"` sweeps with 10 %, 25 % (three seeds) and 50 % of the
   configs. Figures: the pick's known cost and its measured time (from the exhaustive sweep)
   over the best's, and each sweep's wall time over the exhaustive sweep's.
2. Repeated sweeps of a kernel whose configs compile to the same program: each should
   report a tie and store the same (earliest) config.

Run: python bench/bench_search.py [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import tempfile
import time

os.environ.setdefault("JAXTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="jaxtune-bench-"))
os.environ.setdefault("JAXTUNE_ISOLATION", "inline")

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune._core.vocabulary import config_id
from jaxtune._tuning.sweep import search as _search

KNOBS = {"a": [1, 2, 4, 8], "b": [1, 2, 4, 8], "c": [16, 32, 64, 128], "d": [0, 1, 2, 3]}


def cost(config: dict[str, int]) -> int:
    """Loop steps of a config: 20 at the best (a=4, b=2, c=64, d=1), up to ~80."""
    a, b, c, d = (config[k] for k in "abcd")
    return round(
        2
        * (
            10
            + 3 * abs(math.log2(a) - 2)
            + 2 * abs(math.log2(b) - 1)
            + 4 * abs(math.log2(c) - 6)
            + abs(d - 1)
            + 0.5 * abs(math.log2(a) - math.log2(b) - 1)
        )
    )


def landscape(x: jax.Array, *, a: int, b: int, c: int, d: int) -> jax.Array:
    steps = cost({"a": a, "b": b, "c": c, "d": d})
    return jax.lax.fori_loop(0, steps, lambda i, v: jnp.sin(v) * 1.0001, x)


def sweep(strategy: object, budget: int | None, name: str) -> tuple[jaxtune.Entry, float]:
    kernel = jaxtune.autotuned(
        configs=KNOBS, name=name, check=False, search=strategy, budget=budget
    )(landscape)
    start = time.perf_counter()
    (entry,) = kernel.tune(jax.ShapeDtypeStruct((16384,), jnp.float32)).values()
    return entry, time.perf_counter() - start


def budgeted(report: dict[str, object]) -> None:
    space = [dict(zip(KNOBS, v, strict=True)) for v in itertools.product(*KNOBS.values())]
    best_cost = min(cost(c) for c in space)
    full, full_s = sweep("exhaustive", None, "bench.search.exhaustive")
    truth = {config_id(m.config): m.median_us for m in full.measurements if m.ok}
    best_us = min(truth.values())
    rows = [("exhaustive", 256, full, full_s)]
    for fraction, seeds in ((0.10, [0]), (0.25, [0, 1, 2]), (0.50, [0])):
        configs = round(fraction * len(space))
        for seed in seeds:
            strategy = _search.Auto()
            strategy.model = _search.Model(seed=seed)
            entry, seconds = sweep(strategy, configs, f"bench.search.auto{configs}.{seed}")
            rows.append((f"auto {fraction:.0%} seed {seed}", configs, entry, seconds))
    print(f"\n256-config space, best cost {best_cost} steps ({best_us:.0f} us measured)")
    print(f"{'sweep':22} {'measured':>9} {'cost/best':>10} {'time/best':>10} {'wall/exh':>9}")
    out = []
    for label, _, entry, seconds in rows:
        cost_ratio = cost(dict(entry.config)) / best_cost
        time_ratio = truth[config_id(entry.config)] / best_us
        wall = seconds / full_s
        print(f"{label:22} {entry.measured:9d} {cost_ratio:10.3f} {time_ratio:10.3f} {wall:9.2f}")
        out.append(
            {
                "sweep": label,
                "measured": entry.measured,
                "pick": dict(entry.config),
                "cost_over_best": cost_ratio,
                "time_over_best": time_ratio,
                "wall_over_exhaustive": wall,
            }
        )
    report["budgeted_search"] = out


def simulated(report: dict[str, object]) -> None:
    """The strategies alone, with each config's time its known cost (no machine noise)."""
    from jaxtune._core.vocabulary import Measurement

    space = [dict(zip(KNOBS, v, strict=True)) for v in itertools.product(*KNOBS.values())]
    best = min(cost(c) for c in space)

    def measure(configs: list[dict[str, int]]) -> dict[str, Measurement]:
        return {
            config_id(c): Measurement(
                config=c, median_us=cost(c), min_us=cost(c), spread=0, samples=1, compile_s=0
            )
            for c in configs
        }

    rows = []
    print("\nSimulated (time = known cost): best found / true best")
    for fraction in (0.10, 0.25, 0.50):
        budget = _search.Budget(configs=round(fraction * len(space)))
        for name in ("auto", "random", "coordinate"):
            ratios = []
            for seed in range(3):
                if name == "auto":
                    strategy: object = _search.Auto()
                    strategy.model = _search.Model(seed=seed)  # type: ignore[attr-defined]
                elif name == "random":
                    strategy = _search.Random(seed=seed)
                else:
                    strategy = _search.Coordinate()
                results, _ = _search.run_search(
                    space,
                    space[seed * 37],
                    strategy=strategy,  # type: ignore[arg-type]
                    budget=budget,
                    measure=measure,
                    config_id=config_id,
                )
                ratios.append(min(r.median_us for r in results.values()) / best)
            rows.append({"strategy": name, "fraction": fraction, "best_over_true": ratios})
            print(f"  {name:10} {fraction:4.0%}: " + ", ".join(f"{r:.3f}" for r in ratios))
    report["simulated"] = rows


@jaxtune.autotuned(configs={"variant": [3, 2, 1, 0]}, name="bench.search.twins")
def twins(x: jax.Array, *, variant: int) -> jax.Array:
    return jnp.cumsum(x * 2.0)


def ties(report: dict[str, object], runs: int = 10) -> None:
    x = jnp.ones(1 << 16)
    rows = []
    for _ in range(runs):
        (entry,) = twins.tune(x).values()
        rows.append({"tie": entry.tie, "config": dict(entry.config)})
    same = all(r == rows[0] for r in rows)
    print(
        f"\n{runs} sweeps of 4 identical configs: ties {[r['tie'] for r in rows]}, "
        f"configs {[r['config']['variant'] for r in rows]}, all the same: {same}"
    )
    report["ties"] = rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    report: dict[str, object] = {"jax": jax.__version__, "backend": jax.default_backend()}
    simulated(report)
    budgeted(report)
    ties(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
