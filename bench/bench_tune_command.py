"""`jaxtune tune -- python train.py`: the command's wall time and how long its first sweep
waited for the sweep child (the ``start`` phase), for one or more source trees side by side.

The program is a jitted step calling two of jaxtune's example kernels (the pure-JAX
``chunked_logsumexp`` and the Pallas ``pallas_matmul``, interpret mode on CPU); each run
is a fresh command with an empty cache, and the trees take turns run by run, so the
machine's load meets each alike. Give an older tree (``git worktree add --detach DIR REV``)
to compare with it.

Run: python bench/bench_tune_command.py [--trees DIR,DIR] [--runs 3] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

sys.path.insert(0, str(ROOT / "tests"))
from example_program import TRAIN as PROGRAM  # noqa: E402 - found on the line above


def one_run(tree: pathlib.Path, work: pathlib.Path) -> dict[str, object]:
    """One ``jaxtune tune --`` of the program with ``tree`` on the path, an empty cache."""
    cache = work / "cache"
    env = {**os.environ, "PYTHONPATH": str(tree), "JAXTUNE_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    tuned = subprocess.run(
        [sys.executable, "-m", "jaxtune", "tune", "--json", "--", sys.executable, "train.py"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if tuned.returncode != 0:
        raise RuntimeError(f"jaxtune tune failed:\n{tuned.stderr[-3000:]}")
    listed = subprocess.run(
        [sys.executable, "-m", "jaxtune", "cache", "list", "--json"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    entries = sorted(json.loads(listed.stdout)["entries"], key=lambda e: e["created"])
    return {
        "wall_s": round(wall, 2),
        "tuned": len(json.loads(tuned.stdout)["tuned"]),
        # In the order the command swept them: only the first can wait for the child.
        "start_s": [e["phases"].get("start", 0.0) for e in entries],
        "sweeps_s": [e["phases"].get("total", 0.0) for e in entries],
        "load": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated source trees")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--results", type=pathlib.Path, default=None)
    a = parser.parse_args()
    trees = [pathlib.Path(t).resolve() for t in a.trees.split(",")]
    runs: dict[str, list[dict[str, object]]] = {str(t): [] for t in trees}
    for run in range(a.runs):
        for tree in trees:
            with tempfile.TemporaryDirectory(prefix="jaxtune-bench-") as tmp:
                work = pathlib.Path(tmp)
                (work / "train.py").write_text(PROGRAM)
                got = one_run(tree, work)
            runs[str(tree)].append(got)
            print(f"{tree} run {run}: {json.dumps(got)}", flush=True)
    summary = {
        tree: {
            "runs": got,
            "median_wall_s": statistics.median(r["wall_s"] for r in got),
            "median_first_start_s": statistics.median(r["start_s"][0] for r in got),
        }
        for tree, got in runs.items()
    }
    for tree, s in summary.items():
        print(
            f"{tree}: wall {s['median_wall_s']:.2f} s, first sweep's start "
            f"{s['median_first_start_s']:.2f} s (median of {a.runs})",
            flush=True,
        )
    if a.results:
        a.results.mkdir(parents=True, exist_ok=True)
        (a.results / "tune_command.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
