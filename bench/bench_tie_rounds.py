"""How many interleaved rounds does the decision rule need before it may stop, on near-tie
spaces? The evidence behind issue 21's open speed point.

For each kernel, ``--sweeps`` sweeps run inline with default settings, except that the
rounds never stop early: every sweep records ``--rounds`` rounds of every config (the
samples of each round, as the sweep times them). Then the decision rule
(:func:`jaxtune._tuning.sweep.stats.decide`) is replayed on each recorded sweep, round by
round from the sixth, and the benchmark reports the round at which it first settled (no
rival undecided), what it would store and how. The per-round ratio of each config's round
time (its fastest call there) over the first config's shows why: the share of rounds whose
ratio lies outside 1 ± ``tie_within``.

- ``chunked_sum``: the chunked sum of ``bench_vs_tools.py`` (chunk 8/64/512/4096, within
  7 % of each other in truth), the space whose sweep the issue wants within 1.2x of
  Tokamax's.
- ``twins``: 4 configs that compile to the same program (``bench_right_winner.py``'s
  ``ties``): a true tie.
- ``small``: two configs 1.3x apart in compute (``bench_right_winner.py``'s ``small``).

Run: python bench/bench_tie_rounds.py [--sweeps 5] [--rounds 60] [--busy 0] [--results DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import sys
import tempfile
from typing import Any

os.environ["JAXTUNE_MODE"] = "tune"
os.environ["JAXTUNE_ISOLATION"] = "inline"  # the rounds are recorded in this process
os.environ.setdefault("JAXTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="jaxtune-bench-"))

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import bench_right_winner as winner
import bench_vs_tools as vs

from jaxtune._tuning.sweep import engine, rounds, stats
from jaxtune._tuning.sweep.samples import DEFAULT


def cases() -> dict[str, tuple[Any, tuple[Any, ...], list[str]]]:
    """name: (kernel, arguments, its configs' ids in space order)."""
    x = jax.random.normal(jax.random.key(0), (vs.N,), jnp.float32)
    small = jax.random.normal(jax.random.key(1), (512,), jnp.float32)
    twins = jax.random.normal(jax.random.key(2), (1 << 16,), jnp.float32)
    return {
        "chunked_sum": (vs.tuned_sum, (x,), [f"chunk={c}" for c in vs.CHUNKS]),
        "twins": (winner.twins, (twins,), [f"variant={v}" for v in (3, 2, 1, 0)]),
        "small": (winner.small_fast_first, (small,), ["work=10", "work=13"]),
    }


def record(kernel: Any, args: tuple[Any, ...], sweeps: int, n_rounds: int) -> list[Any]:
    """Each sweep's rounds: ``[{config id: [µs per call, ...]}, ...]``."""
    recorded: list[list[dict[str, list[float]]]] = []
    original, decide = rounds.interleaved, rounds.decide

    class NeverSettled:
        verdicts: dict[str, str] = {}  # noqa: RUF012 - a stand-in Decision
        settled = False

    def recording(configs: Any, *, timed: Any, options: Any, **kw: Any) -> Any:
        def one_round(cs: Any) -> Any:
            out = timed(cs)
            recorded[-1].append(
                {cid: list(t.samples_us) for cid, t in out.items() if hasattr(t, "samples_us")}
            )
            return out

        recorded.append([])
        rounds.decide = lambda *a, **k: NeverSettled()
        try:
            longer = dataclasses.replace(options, max_rounds=n_rounds, max_rounds_s=600.0)
            return original(configs, timed=one_round, options=longer, **kw)
        finally:
            rounds.decide = decide

    engine.interleaved = recording
    try:
        for _ in range(sweeps):
            kernel.tune(*args)
    finally:
        engine.interleaved = original
    return recorded


def replay(sweep: list[dict[str, list[float]]], order: list[str]) -> dict[str, Any]:
    """The round at which the rule first settles on this sweep's rounds, and its pick."""
    default = order[0]
    decision, n = None, 0
    for n in range(DEFAULT.rounds, len(sweep) + 1):
        per_round = {c: [min(r[c]) for r in sweep[:n] if r.get(c)] for c in order}
        decision = stats.decide(per_round, order, default=default, tie_within=DEFAULT.tie_within)
        if decision.settled:
            break
    assert decision is not None
    ratios = [
        min(r[c]) / min(r[default]) for r in sweep for c in order[1:] if r.get(c) and r.get(default)
    ]
    band = 1 + DEFAULT.tie_within
    outside = sum(1 for v in ratios if not 1 / band <= v <= band) / max(1, len(ratios))
    return {
        "settled_at": n if decision.settled else None,
        "pick": decision.pick,
        "kind": decision.kind,
        "outside_band": round(outside, 2),
        "samples_per_round": statistics.median(len(r[default]) for r in sweep),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--busy", type=int, default=0, help="busy processes to start")
    parser.add_argument("--kernels", default="chunked_sum,twins,small")
    parser.add_argument("--results", type=pathlib.Path)
    a = parser.parse_args()
    out: dict[str, Any] = {"busy": a.busy, "rounds": a.rounds, "kernels": {}}
    with winner.busy(a.busy):  # pinned one to a core, as the right-winner benchmark's
        for name, (kernel, args, order) in cases().items():
            if name not in a.kernels.split(","):
                continue
            sweeps = record(kernel, args, a.sweeps, a.rounds)
            got = [replay(s, order) for s in sweeps]
            out["kernels"][name] = got
            settled = [g["settled_at"] for g in got]
            picks = [g["pick"].split("=")[1] + f" ({g['kind']})" for g in got]
            print(f"{name}: settled at rounds {settled}; picks {picks}")
            print(
                "  rounds outside 1 ± tie_within: "
                f"{[g['outside_band'] for g in got]}; samples a round "
                f"{[g['samples_per_round'] for g in got]}"
            )
    if a.results:
        a.results.mkdir(parents=True, exist_ok=True)
        (a.results / "tie_rounds.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
