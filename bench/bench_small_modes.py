"""Why the small kernel's slower-first row of the right-winner benchmark is wrong 4-6/10.

``bench_right_winner.py``'s ``small`` kernels run 1.3x the work (``work`` 13 vs 10 steps of
a ``fori_loop`` over 512 f32) in calls of 30-80 us. This times the two executables in one
process, in spells of about a second, three ways side by side: the way the benchmark's truth
does (each config warmed up, then 3 samples in a row, 30 rounds), the way a sweep's rounds
do (``_round_calls``: the configs' samples interleaved, 8 rounds), and call by call (300
blocking calls each, alternating). Each line is one spell; ``--spells`` of them.

On the 2-core machine the spells fall into modes: in some, both executables take about the
same time (27-29 us; a sweep measured there sees a tie, and stores the earlier config of
the space, correctly for that mode); in others work=13 is 1.3x slower (37 vs 50 us), the
truth's usual mode; in others both are slow (60-80 us) and 1.03-1.14x apart.

Run: python bench/bench_small_modes.py [--spells 9] [--results DIR]
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from bench_right_winner import _small

from jaxtune._tuning.sweep.samples import TimingOptions
from jaxtune._tuning.sweep.timers import WallTimer, _round_calls

WORK = (13, 10)


def spell(runs, timer: WallTimer, options: TimingOptions) -> dict[str, dict[int, float]]:
    """Each executable's time (us) by the three methods, one after the other."""
    truth: dict[int, list[float]] = {w: [] for w in WORK}
    for _ in range(30):
        for w in WORK:
            truth[w].append(timer.measure(runs[w], options, samples=3).min_us)
    rounds: dict[int, list[float]] = {w: [] for w in WORK}
    for i in range(8):
        order = WORK if i % 2 == 0 else WORK[::-1]
        got = _round_calls(time.perf_counter, [(runs[w], None) for w in order], options, 2)
        for w, calls in zip(order, got, strict=True):
            rounds[w].append(calls.wall.min_us)
    calls: dict[int, list[float]] = {w: [] for w in WORK}
    for _ in range(300):
        for w in WORK:
            start = time.perf_counter()
            runs[w]()
            calls[w].append((time.perf_counter() - start) * 1e6)
    return {
        name: {w: round(statistics.median(v[w]), 1) for w in WORK}
        for name, v in (("truth", truth), ("rounds", rounds), ("calls", calls))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spells", type=int, default=9)
    parser.add_argument("--results", type=pathlib.Path, default=None)
    a = parser.parse_args()
    x = jnp.asarray(np.random.default_rng(0).standard_normal(512, np.float32))
    runs = {}
    for w in WORK:
        f = jax.jit(functools.partial(_small, work=w))
        f(x).block_until_ready()
        runs[w] = lambda f=f: jax.block_until_ready(f(x))
    timer, options = WallTimer(), TimingOptions()
    spells = []
    for _ in range(a.spells):
        got = spell(runs, timer, options)
        spells.append(got)
        print(
            "  ".join(
                f"{name} {t[13]:.1f}/{t[10]:.1f} us = {t[13] / t[10]:.2f}x"
                for name, t in got.items()
            ),
            flush=True,
        )
    if a.results:
        a.results.mkdir(parents=True, exist_ok=True)
        (a.results / "small_modes.json").write_text(json.dumps(spells, indent=1))


if __name__ == "__main__":
    main()
