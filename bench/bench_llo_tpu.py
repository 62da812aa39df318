"""The LLO analysis's cost where it was found too high (issue 43: an NNX profile took 158 s
with LLO against about 40 s without): ``jaxtune profile --llo`` against ``--no-llo`` of a
Flax NNX training step (tests/tpu/nnx_model.py, flash attention under
``nnx.value_and_grad``, state donated), on a TPU machine from the repository root:

    . tools/tpu/env.sh && python bench/bench_llo_tpu.py --json OUT.json

Each run is a fresh ``python -m jaxtune profile ... -- python bench/bench_llo_tpu.py
--program``, the two kinds alternated (``--rounds`` each), so both pay the same start-up,
compile and capture; the figure is the ratio of median wall times (the issue asks for at
most 1.5). For each run it keeps what the LLO run spends where: the program's own time
until its table is printed (the capture with the LLO debug-info flag set, which also
registers LLO debug info at every compile), the analysis (``jaxtune: LLO analysis of ...
took N s``) and its steps (``llo.seconds`` in report.json: ``read``, xprof's ``load``,
``analyze``, ``static``), and the trace's size. ``JAXTUNE_TPU_DRY=1`` runs it on CPU
(interpret mode, a tiny model): there the LLO line is "TPU-only", so only the mechanics
are checked.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def program(steps: int, size: str) -> None:
    """The profiled program: ``steps`` NNX training steps, the first one profiled."""
    sys.path.insert(0, str(ROOT))
    import jaxtune
    from tests.tpu import nnx_model
    from tests.tpu.kernels import DRY

    chosen = {"small": nnx_model.SMALL, "bench": nnx_model.BENCH}[size]
    if DRY:
        chosen = nnx_model.Size(layers=1, d_model=128, heads=1, seq=128, batch=1, vocab=256)
    step = jaxtune.profiled(iters=3)(nnx_model.train_step)
    graphdef, state, tokens = nnx_model.init(chosen)
    for _ in range(steps):
        state, loss = step(graphdef, state, tokens)
        print(f"loss {float(loss):.4f}", flush=True)


def _run(llo: bool, steps: int, size: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="jaxtune-llo-bench-") as where:
        argv = [sys.executable, "-m", "jaxtune", "profile", "--llo" if llo else "--no-llo"]
        argv += ["--logdir", where, "--", sys.executable, __file__, "--program"]
        argv += ["--steps", str(steps), "--size", size]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(done.stdout[-2000:] + done.stderr[-4000:])
        (report,) = pathlib.Path(where).glob("*/report.json")
        doc = json.loads(report.read_text())
        traces = list(pathlib.Path(where).rglob("*.xplane.pb"))
        took = re.search(r"LLO analysis of \S+ took ([0-9.]+) s", done.stderr)
        llo_doc = doc.get("llo") or {}
        return {
            "llo": llo,
            "wall_s": wall,
            "analysis_s": float(took.group(1)) if took else None,
            "llo_seconds": llo_doc.get("seconds"),
            "llo_line": llo_doc.get("line"),
            "trace_mb": sum(t.stat().st_size for t in traces) / 2**20,
            "device_ms": doc.get("total_us", 0) / 1e3,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--program", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--size", choices=("small", "bench"), default="bench")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.program:
        program(args.steps, args.size)
        return
    runs = []
    for _ in range(args.rounds):
        for llo in (False, True):
            runs.append(_run(llo, args.steps, args.size))
            r = runs[-1]
            print(
                f"{'llo   ' if llo else 'no llo'} {r['wall_s']:7.1f} s wall, trace "
                f"{r['trace_mb']:.1f} MB, analysis {r['analysis_s']} s, steps {r['llo_seconds']}",
                flush=True,
            )
    off = statistics.median(r["wall_s"] for r in runs if not r["llo"])
    on = statistics.median(r["wall_s"] for r in runs if r["llo"])
    print(f"median wall: no LLO {off:.1f} s, LLO {on:.1f} s, ratio {on / off:.2f} (goal <= 1.5)")
    last = next(r for r in reversed(runs) if r["llo"])
    print(f"llo line: {last['llo_line']}")
    if args.json:
        summary = {"no_llo_s": off, "llo_s": on, "ratio": on / off, "runs": runs}
        pathlib.Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
