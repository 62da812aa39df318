"""Issue 57's goals side by side, in one run (CPU by default, ``--tpu`` on the chip):

1. **Second sweep.** jaxtune's example Pallas matmul (``jaxtune.examples.pallas_matmul``,
   f32[size, size] operands) swept in a fresh process (``JAXTUNE_MODE=tune``), then swept
   again with ``JAXTUNE_MODE=retune`` in another fresh process (a new child: the sweep of
   a ``jaxtune tune --retune`` or one begun again after a crash), with the sweeps'
   compilation cache (``JAXTUNE_COMPILE_CACHE=1``, the default) and without it (``0``),
   each pair in a cache directory of its own. Prints each sweep's wall time and the
   entry's breakdown (``compile threads``, ``compile wait``, ``total``) and the second
   sweep's time over the first (the issue's goal: at most 0.4x).
2. **Refusals.** Each tiling of JAX's megablox grouped matmul (``gmm``, lhs f32[512, 256],
   rhs f32[4, 256, 256], tm x tk x tn in {8, 64, 128} x {64, 128, 256} x {64, 128, 256},
   27 configs) checked from its traced program (what a TPU sweep does) beside the full
   path without the filter: lowered for TPU through ``jax.export`` on CPU, lowered and
   compiled on the chip with ``--tpu``. Prints how many configs the filter refused, the
   seconds each path spent on them, and whether every refused config failed the full
   path too (it must).
3. **Made-up values.** A 64 MiB bfloat16 argument (the grouped matmul's rhs past a
   recording's 64 MiB budget, bf16[8, 2048, 2048]) made up as sweeps did before (one
   float64 draw of the whole array, cast twice) and as they do now (``random_leaf``: streams
   drawn as float32 into place, on every core), taking turns for 5 rounds; prints each
   one's median and their ratio (the ``inputs`` phase of a sweep).

Run: python bench/bench_pace.py [--tpu] [--size 256] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
PHASES = ("compile_threads", "compile_wait", "total")


def one_sweep(size: int) -> None:
    """In a fresh process: one sweep of the example matmul; prints its figures as JSON."""
    import jax
    import jax.numpy as jnp

    import jaxtune
    from jaxtune.examples.pallas_matmul import matmul

    # Shapes only: this process never opens the device, so on a TPU the sweep runs in
    # jaxtune's child, where the compilation cache is on.
    x = jax.ShapeDtypeStruct((size, size), jnp.float32)
    start = time.perf_counter()
    result = jaxtune.tune(matmul, x, x, retune=os.environ.get("JAXTUNE_MODE") == "retune")
    wall = time.perf_counter() - start
    (entry,) = result.values()
    ok = sum(1 for m in entry.measurements if m.ok)
    print(json.dumps({"wall_s": wall, "phases": dict(entry.phases), "configs": ok}))


def second_sweep(size: int) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for cache in ("1", "0"):
        with tempfile.TemporaryDirectory() as tmp:
            runs = []
            for mode in ("tune", "retune"):
                env = {
                    **os.environ,
                    "JAXTUNE_CACHE_DIR": tmp,
                    "JAXTUNE_COMPILE_CACHE": cache,
                    "JAXTUNE_MODE": mode,
                    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                }
                cmd = [sys.executable, __file__, "--one-sweep", "--size", str(size)]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        first, second = runs
        out[f"compile_cache={cache}"] = {"first": first, "retune": second}
        phase = {p: (first["phases"].get(p, 0.0), second["phases"].get(p, 0.0)) for p in PHASES}
        print(f"compile cache {'on' if cache == '1' else 'off'}: {first['configs']} configs")
        for p, (a, b) in phase.items():
            print(f"  {p:16s} first {a:7.2f} s  retune {b:7.2f} s  ratio {b / max(a, 1e-9):.2f}x")
        ratio = second["wall_s"] / first["wall_s"]
        print(f"  {'wall':16s} first {first['wall_s']:7.2f} s  retune {second['wall_s']:7.2f} s")
        print(f"  ratio {ratio:.2f}x")
    return out


def refusals(tpu: bool) -> dict[str, object]:
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu.megablox import gmm

    from jaxtune._tuning.sweep.refusals import refusal, vmem_capacity

    args = (
        jax.ShapeDtypeStruct((512, 256), jnp.float32),
        jax.ShapeDtypeStruct((4, 256, 256), jnp.float32),
        jax.ShapeDtypeStruct((4,), jnp.int32),
    )
    vmem = vmem_capacity() if tpu else 128 * 2**20
    filter_s = full_s = 0.0
    refused = failed_too = 0
    for tiling in itertools.product((8, 64, 128), (64, 128, 256), (64, 128, 256)):

        def f(lhs, rhs, groups, tiling=tiling):
            return gmm(lhs, rhs, groups, tiling=tiling)

        start = time.perf_counter()
        why = refusal(jax.jit(f).trace(*args).jaxpr, vmem_bytes=vmem)
        checked = time.perf_counter() - start
        start = time.perf_counter()
        try:
            if tpu:
                jax.jit(f).lower(*args).compile()
            else:
                jax.export.export(jax.jit(f), platforms=["tpu"])(*args)
            fails = False
        except Exception:
            fails = True
        full = time.perf_counter() - start
        if why is not None:
            refused += 1
            failed_too += fails
            filter_s += checked
            full_s += full
    path = "lower+compile on the chip" if tpu else "lowered for TPU (jax.export)"
    print(f"refusals: gmm, 27 tilings: {refused} refused from the traced program")
    print(f"  refused configs: filter {filter_s:.2f} s vs {path} {full_s:.2f} s", end="")
    print(f" ({full_s / max(filter_s, 1e-9):.1f}x); failed the full path too: {failed_too}")
    return {"refused": refused, "failed_too": failed_too, "filter_s": filter_s, "full_s": full_s}


def made_up_values(rounds: int = 5) -> dict[str, float]:
    """Goal 3's figures: the median seconds of each way of making up a 64 MiB bf16 array."""
    import ml_dtypes
    import numpy as np

    from jaxtune._core.arrays import random_leaf
    from jaxtune._isolation.devices import usable_cores

    shape, dtype = (8, 2048, 2048), np.dtype(ml_dtypes.bfloat16)
    leaf = np.empty(shape, dtype)

    def before() -> None:
        np.random.default_rng(0).standard_normal(shape).astype(np.float32).astype(dtype)

    def now() -> None:
        random_leaf(leaf, np.random.default_rng(0), threads=usable_cores())

    times: dict[str, list[float]] = {"before": [], "now": []}
    for i in range(rounds):
        for name, make in (("before", before), ("now", now))[:: 1 if i % 2 else -1]:
            start = time.perf_counter()
            make()
            times[name].append(time.perf_counter() - start)
    out = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
    out["ratio"] = out["now"] / out["before"]
    out["cores"] = usable_cores()
    print(
        f"made-up values, bf16{list(shape)}: before {out['before']:.2f} s, now "
        f"{out['now']:.2f} s ({out['ratio']:.2f}x) on {out['cores']} cores"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tpu", action="store_true", help="on the chip (else CPU)")
    parser.add_argument("--size", type=int, default=None, help="matmul edge (256, 1024 --tpu)")
    parser.add_argument("--json", type=pathlib.Path, default=None)
    parser.add_argument("--one-sweep", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = args.size or (1024 if args.tpu else 256)
    if args.one_sweep:
        one_sweep(size)
        return
    sweeps = second_sweep(size)  # first: this process must not hold the chip meanwhile
    import jax

    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.devices()[0].device_kind}")
    out = {"second_sweep": sweeps, "refusals": refusals(args.tpu), "made_up": made_up_values()}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
