"""TPU benchmarks for docs/benchmarks.md's TPU section, run on a TPU machine from the
repository root: ``python bench/bench_tpu.py --json OUT.json`` (on a machine without
network access, after ``. tools/tpu/env.sh``).

All in one process, which holds the chip (jaxtune's sweeps run in it, as in a user's
program that has already used the TPU), side by side:

- ``nnx``: a Flax NNX + optax transformer step (tests/tpu/nnx_model.py, BENCH size) at
  flash attention's 128/128 default, then after ``jaxtune.tune`` of the step: ms per step,
  and the tune's wall time.
- ``flash_fwd``, ``flash_grad``, ``matmul``: ``jaxtune.tune`` of the kernel (retune, its
  whole space) against a plain loop that compiles every config of the same space and
  times each over 12 interleaved rounds (wall clock, 10 calls a round): wall times, and the
  stored config's time over the plain loop's best (the truth). Where the time went on
  either side: the sweep's breakdown (``Entry.phases``: child start, compile, check, first
  pass, rounds; see docs/search.md) and the loop's compile and timing seconds, each
  printed as a line and kept in the JSON, with the compile threads the sweep used.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.getcwd())

import jax
import jax.numpy as jnp

import jaxtune
from jaxtune._core.vocabulary import config_id
from jaxtune._tuning.sweep.breakdown import breakdown_text
from jaxtune._tuning.sweep.compile import compile_threads


def _block(x: Any) -> Any:
    return jax.block_until_ready(x)


def step_ms(step: Any, graphdef: Any, state: Any, tokens: Any, n: int = 10) -> tuple[float, Any]:
    for _ in range(2):
        state, loss = step(graphdef, state, tokens)
    _block(loss)
    start = time.perf_counter()
    for _ in range(n):
        state, loss = step(graphdef, state, tokens)
    _block(loss)
    return (time.perf_counter() - start) / n * 1e3, state


def bench_nnx() -> dict[str, Any]:
    from tests.tpu import nnx_model
    from tests.tpu.kernels import flash

    graphdef, state, tokens = nnx_model.init(nnx_model.BENCH)
    default = dict(flash.config_for(*_attention_args(nnx_model.BENCH)).config)
    default_ms, state = step_ms(nnx_model.step_with(default), graphdef, state, tokens)
    start = time.perf_counter()
    result = jaxtune.tune(nnx_model.train_step, graphdef, state, tokens)
    tune_s = time.perf_counter() - start
    (entry,) = [e for e in result.values() if e.kernel == "tpu.flash_attention"]
    tuned_ms, state = step_ms(nnx_model.train_step, graphdef, state, tokens)
    return {
        "size": dataclasses.asdict(nnx_model.BENCH),
        "default_config": default,
        "default_ms": default_ms,
        "tuned_config": dict(entry.config),
        "tuned_ms": tuned_ms,
        "speedup": default_ms / tuned_ms,
        "tune_s": tune_s,
        "decision": entry.decision_text(),
    }


def _attention_args(size: Any) -> tuple[jax.ShapeDtypeStruct, ...]:
    shape = (size.batch, size.heads, size.seq, size.d_model // size.heads)
    return (jax.ShapeDtypeStruct(shape, jnp.bfloat16),) * 3


def plain_loop(
    fn: Any, configs: list[dict[str, Any]], args: tuple[Any, ...]
) -> tuple[dict[str, float], dict[str, float]]:
    """Compile every config, then 12 interleaved rounds of 10 calls each: seconds a call
    (the fastest round), and the seconds compiling (with two warm-up calls) and timing."""
    begin = time.perf_counter()
    compiled = {}
    for c in configs:
        f = jax.jit(functools.partial(fn, **c))
        try:
            _block(f(*args))
            _block(f(*args))
        except Exception:
            continue
        compiled[config_id(c)] = f
    compile_s = time.perf_counter() - begin
    best = dict.fromkeys(compiled, float("inf"))
    for _ in range(12):
        for cid, f in compiled.items():
            start = time.perf_counter()
            for _ in range(10):
                out = f(*args)
            _block(out)
            best[cid] = min(best[cid], (time.perf_counter() - start) / 10)
    total_s = time.perf_counter() - begin
    return best, {"compile": compile_s, "rounds": total_s - compile_s, "total": total_s}


def bench_kernel(name: str) -> dict[str, Any]:
    from jaxtune.examples.pallas_matmul import matmul
    from tests.tpu import kernels
    from tests.tpu.truth import grad_of

    if name == "matmul":
        kernel = matmul
        args: tuple[Any, ...] = (
            jax.random.normal(jax.random.key(1), (4096, 4096), jnp.bfloat16),
            jax.random.normal(jax.random.key(2), (4096, 4096), jnp.bfloat16),
        )
        raw, target = matmul.__wrapped__, jax.jit(matmul)
    else:
        kernel = kernels.flash
        args = kernels.qkv()
        raw = kernels.flash.__wrapped__
        target = jax.jit(kernels.flash)
        if name == "flash_grad":
            raw = grad_of(raw)

            def loss(q: Any, k: Any, v: Any) -> Any:
                return kernels.flash(q, k, v).astype(jnp.float32).sum()

            target = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    configs = [dict(c) for c in kernel.space(*args)]
    loop, loop_phases = plain_loop(raw, configs, args)
    loop_s = loop_phases["total"]
    start = time.perf_counter()
    result = jaxtune.tune(target, *args, retune=True)
    sweep_s = time.perf_counter() - start
    (entry,) = result.values()
    best = min(loop, key=loop.__getitem__)
    phases = dict(getattr(entry, "phases", {}) or {})
    print(f"{name} sweep {breakdown_text(phases)}", flush=True)
    print(f"{name} plain loop {breakdown_text(loop_phases)}", flush=True)
    return {
        "configs": len(configs),
        "plain_loop_s": loop_s,
        "sweep_s": sweep_s,
        "sweep_over_loop": sweep_s / loop_s,
        "stored": dict(entry.config),
        "truth_best": best,
        "stored_over_best": loop[config_id(entry.config)] / loop[best],
        "decision": entry.decision_text(),
        "phases": phases,
        "plain_loop_phases": loop_phases,
        "compile_threads": compile_threads(),
        "calls": {config_id(m.config): m.calls for m in entry.measurements if m.ok},
        "same_program": sum(1 for m in entry.measurements if m.ok and m.same_as),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", required=True)
    parser.add_argument("--only", default="nnx,flash_fwd,flash_grad,matmul")
    args = parser.parse_args()
    import warnings

    warnings.simplefilter("ignore")
    dev = jax.devices()[0]
    out: dict[str, Any] = {
        "device": dev.device_kind,
        "jax": jax.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    for name in args.only.split(","):
        start = time.perf_counter()
        out[name] = bench_nnx() if name == "nnx" else bench_kernel(name)
        out[name]["wall_s"] = time.perf_counter() - start
        print(name, json.dumps(out[name], default=str), flush=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
