"""Does the docs/examples.md flash-attention snippet pick a config that is really fast?

Runs the snippet verbatim in a fresh process (default isolation, fresh cache), reads the
config it stored, then re-measures every config side by side (interleaved rounds, one
process, TPU interpret mode on CPU) and prints the picked config's time against the best.

Run: python bench/bench_examples_pick.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def snippet() -> str:
    text = (ROOT / "docs" / "examples.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)
    return next(b for b in blocks if "flash_attention" in b)


def tune_in_fresh_process(workdir: pathlib.Path) -> dict[str, int]:
    script = workdir / "example.py"
    script.write_text(snippet())
    env = {**os.environ, "JAXTUNE_CACHE_DIR": str(workdir / "cache")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    print(proc.stdout, proc.stderr[-2000:], sep="\n")
    print(f"snippet ran in {time.perf_counter() - start:.1f} s, exit status {proc.returncode}")
    proc.check_returncode()
    config = re.search(r"block_k=(\d+),block_q=(\d+)", proc.stdout)
    assert config, proc.stdout
    return {"block_k": int(config[1]), "block_q": int(config[2])}


def remeasure(rounds: int) -> dict[tuple[int, int], float]:
    import jax
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    pltpu.set_tpu_interpret_mode()
    q = jax.random.normal(jax.random.key(0), (1, 2, 256, 128))
    fns = {}
    for bq in (128, 256):
        for bk in (128, 256):
            sizes = fa.BlockSizes(block_q=bq, block_k_major=bk, block_k=bk, block_b=1)
            fn = jax.jit(lambda q, k, v, s=sizes: fa.flash_attention(q, k, v, block_sizes=s))
            for _ in range(3):
                jax.block_until_ready(fn(q, q, q))
            fns[(bq, bk)] = fn
    samples: dict[tuple[int, int], list[float]] = {c: [] for c in fns}
    for _ in range(rounds):
        for c, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(q, q, q))
            samples[c].append((time.perf_counter() - start) * 1e3)
    return {c: statistics.median(s) for c, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        picked = tune_in_fresh_process(pathlib.Path(tmp))
    times = remeasure(args.rounds)
    best = min(times.values())
    for (bq, bk), ms in sorted(times.items(), key=lambda kv: kv[1]):
        mark = "  <- picked" if (bq, bk) == (picked["block_q"], picked["block_k"]) else ""
        print(f"block_q={bq} block_k={bk}: median {ms:.1f} ms ({ms / best:.2f}x best){mark}")
    ratio = times[(picked["block_q"], picked["block_k"])] / best
    print(f"picked / best = {ratio:.3f} ({'within' if ratio <= 1.10 else 'NOT within'} 10 %)")


if __name__ == "__main__":
    main()
