"""`jaxtune tune -- python train.py`: the command's wall time and how long its first sweep
waited for the sweep child (the ``start`` phase), for one or more source trees side by side.

The program is a jitted step calling two of jaxtune's example kernels (the pure-JAX
``chunked_logsumexp`` and the Pallas ``pallas_matmul``, interpret mode on CPU); each run
is a fresh command with an empty cache, and the trees take turns run by run, so the
machine's load meets each alike. Give an older tree (``git worktree add --detach DIR REV``)
to compare with it.

Also how soon Ctrl-C ends the command, once while the program runs (``jaxtune tune --
python sleeper.py``) and once during a sweep (a config that sleeps in the sweep child),
each over the same program run plainly and interrupted alike (``python sleeper.py``):
seconds from SIGINT to exit and their ratio, the runs taking turns
(tests/test_interrupt_cli.py checks what the command leaves, not how soon).

Run: python bench/bench_tune_command.py [--trees DIR,DIR] [--runs 3] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

sys.path.insert(0, str(ROOT / "tests"))
from example_program import TRAIN as PROGRAM  # noqa: E402 - found on the line above
from interrupt_programs import SLEEPER, TWO_KERNELS  # noqa: E402 - the same


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


def ctrl_c_s(command: list[str], env: dict[str, str], work: pathlib.Path) -> float:
    """Seconds from a SIGINT, sent once ``command`` has written ``work/mark``, until it
    exits (with 130, as Ctrl-C ends a command)."""
    mark = work / "mark"
    proc = subprocess.Popen(
        command,
        env={**env, "MARK": str(mark)},
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the machine's other work never sees the signal
    )
    try:
        deadline = time.monotonic() + 300
        while not mark.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command} wrote no mark:\n{proc.communicate()[1][-3000:]}")
            time.sleep(0.01)
        start = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        took = time.perf_counter() - start
        if proc.returncode not in (130, -signal.SIGINT):
            raise RuntimeError(f"{command} exited {proc.returncode}:\n{err[-3000:]}")
        return took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def ctrl_c_run(tree: pathlib.Path, work: pathlib.Path) -> dict[str, float]:
    """One Ctrl-C of each: the plain program, `jaxtune tune --` while the program runs,
    and during a sweep; seconds from the signal to the exit."""
    env = {**os.environ, "PYTHONPATH": str(tree), "JAXTUNE_CACHE_DIR": str(work / "cache")}
    (work / "sleeper.py").write_text(SLEEPER)
    (work / "prog.py").write_text(TWO_KERNELS)
    tune = [sys.executable, "-m", "jaxtune", "tune", "--", sys.executable]
    got = {}
    for name, command in (
        ("plain", [sys.executable, "sleeper.py", str(work / "mark")]),
        ("tune_program", [*tune, "sleeper.py", str(work / "mark")]),
        ("tune_sweep", [*tune, "prog.py"]),
    ):
        (work / "mark").unlink(missing_ok=True)
        got[name] = round(ctrl_c_s(command, env, work), 3)
    return got


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
    interrupts: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    for run in range(a.runs):
        for tree in trees:
            with tempfile.TemporaryDirectory(prefix="jaxtune-bench-") as tmp:
                interrupts[str(tree)].append(ctrl_c_run(tree, pathlib.Path(tmp)))
            print(f"{tree} Ctrl-C run {run}: {json.dumps(interrupts[str(tree)][-1])}", flush=True)
    for tree, got in interrupts.items():
        plain = statistics.median(r["plain"] for r in got)
        medians = {k: statistics.median(r[k] for r in got) for k in ("tune_program", "tune_sweep")}
        summary[tree]["ctrl_c"] = {"runs": got, "median_plain_s": plain, **medians}
        print(
            f"{tree}: Ctrl-C to exit, median of {a.runs}: the plain program {plain:.3f} s; "
            + ", ".join(
                f"`jaxtune tune --` {what} {s:.3f} s ({s / plain:.1f}x the plain program)"
                for what, s in (
                    ("while it runs", medians["tune_program"]),
                    ("during a sweep", medians["tune_sweep"]),
                )
            ),
            flush=True,
        )
    if a.results:
        a.results.mkdir(parents=True, exist_ok=True)
        (a.results / "tune_command.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
