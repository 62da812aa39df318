"""The child-process runner against the in-process one, on a 16-config sweep.

Reports (targets from the issue):
  child start-up time (import JAX, start the backend, say ready)
  child sweep wall / inline sweep wall, after start-up           target <= 1.10
  sweep wall / lower bound, where lower bound =
      sum of compile times / compile threads + time spent timing   target <= 1.25

Run: python bench/bench_child_runner.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp

os.environ.setdefault("JAXTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="jaxtune-bench-"))

import jaxtune
from jaxtune._isolation import process as _process
from jaxtune._tuning.sweep import drive as _sweep
from jaxtune._tuning.sweep import runner as _runner
from jaxtune._tuning.sweep import samples as _samples
from jaxtune._tuning.sweep.timers import WallTimer


@jaxtune.autotuned(
    configs={"chunk": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768], "unroll": [1, 2]},
    name="bench.scan_sum",
)
def scan_sum(x: jax.Array, *, chunk: int, unroll: int) -> jax.Array:
    """A blocked sum of squares whose speed depends on the block and the unrolling."""
    blocks = x.reshape(-1, chunk)

    def step(acc: jax.Array, block: jax.Array) -> tuple[jax.Array, None]:
        return acc + jnp.sum(block * block), None

    total, _ = jax.lax.scan(step, jnp.zeros((), x.dtype), blocks, unroll=unroll)
    return total


class CountingTimer(WallTimer):
    """Wall timer that also adds up the time spent timing."""

    def __init__(self) -> None:
        super().__init__()
        self.spent = 0.0

    def measure(self, run: Any, options: Any, **kw: Any) -> _samples.Timing:
        start = time.perf_counter()
        try:
            return super().measure(run, options, **kw)
        finally:
            self.spent += time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    x = jax.random.normal(jax.random.key(0), (1 << 20,))
    sig = scan_sum.options.bind((x,), {})
    task = scan_sum.options.bound(sig).sweep_task()
    threads = min(4, os.cpu_count() or 1)

    start = time.perf_counter()
    child = _process.ChildProcess(_runner.ProcessRunner().environment())
    startup = time.perf_counter() - start
    child.close()

    runner = _runner.ProcessRunner()
    runner.sweep(task)  # starts the pooled child: later sweeps measure the sweep alone
    inline, process, bounds = [], [], []
    for _ in range(args.repeats):
        timer = CountingTimer()
        start = time.perf_counter()
        outcome = _sweep.run_sweep(task, timer=timer)
        inline.append(time.perf_counter() - start)
        compile_s = sum(m.compile_s for m in outcome.measurements if hasattr(m, "compile_s"))
        bounds.append(compile_s / threads + timer.spent)
        start = time.perf_counter()
        runner.sweep(task)
        process.append(time.perf_counter() - start)
    _process.shutdown_children()

    inline_s, process_s, bound_s = (statistics.median(v) for v in (inline, process, bounds))
    print(
        f"jax {jax.__version__}, {os.cpu_count()} cores, {len(task.plan.configs)} configs, "
        f"{threads} compile threads, median of {args.repeats}"
    )
    print(f"child start-up                     {startup:6.2f} s")
    print(f"inline sweep                       {inline_s:6.2f} s")
    print(f"child sweep (warm child)           {process_s:6.2f} s")
    print(f"lower bound (compile/threads+timing) {bound_s:4.2f} s")
    print(f"child / inline                     {process_s / inline_s:6.3f}   (target <= 1.10)")
    print(f"inline / lower bound               {inline_s / bound_s:6.3f}   (target <= 1.25)")
    print(f"child / lower bound                {process_s / bound_s:6.3f}")


if __name__ == "__main__":
    main()
