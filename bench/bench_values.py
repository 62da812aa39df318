"""Value-dependent kernels, sweep against truth, before and after issue 54.

*Before*: the sweep ran on made-up values in every flow (integers in 0..16, booleans half
true); the shapes-only flow still does (``jaxtune.tune`` of ``ShapeDtypeStruct``
arguments), so it stands for it. *After*: ``jaxtune tune -- python prog.py`` records the
values the program ran and sweeps on them. For each kernel, the truth times every config
on the program's own values in the same run (this process, after both sweeps); a row gives
each flow's stored config, how much slower than the truth's best it is on the program's
values, and the time the sweep stored for it (the median of its rounds) against the
truth's (on CPU the median call, configs taking turns; on the chip a call of a 50-call
loop, fastest of 5).

CPU (default): tests/value_kernels.py's five kernels (a loop count, lengths, group sizes,
ids, a padding mask), and the other flows that sweep on the program's values
(tests/test_values.py): ``jaxtune.tune`` of the step with its arrays (``caller``), an
eager call in tune mode (``eager``, the loop count) and three value sets of one call timed
as a mix (``loop_count mix``, ``JAXTUNE_VALUE_SETS=3``). ``--tpu``: JAX's megablox gmm with MoE-like group sizes on the chip
(tests/tpu/values_gmm.py), run on the lent TPU from ``tools/tpu/batch_values.sh``.

Run: python bench/bench_values.py [--tpu] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))


CPU_SHAPES = """
import sys, json, warnings
sys.path.insert(0, {tests!r})
warnings.simplefilter("ignore")
import jax, jaxtune
import value_kernels as vk

a = vk.arrays()
v = vk.program_values()
args = (*a, v["n"], v["lengths"], v["group_sizes"], v["ids"], v["mask"])
jaxtune.tune(vk.step, *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in args])
"""


#: ``jaxtune.tune`` of the step with the program's arrays: the caller's values.
CPU_CALLER = """
import sys, warnings
sys.path.insert(0, {tests!r})
warnings.simplefilter("ignore")
import jax, jaxtune
import value_kernels as vk

a = vk.arrays()
v = vk.program_values()
jaxtune.tune(jax.jit(vk.step), *a, v["n"], v["lengths"], v["group_sizes"], v["ids"], v["mask"])
"""

#: An eager call of the loop-count kernel under ``JAXTUNE_MODE=tune``.
CPU_EAGER = """
import sys
sys.path.insert(0, {tests!r})
import value_kernels as vk

x, w, _, _ = vk.arrays()
vk.loop_count(x, w, vk.program_values()["n"]).block_until_ready()
"""

#: A prefill-like call, then decode-like ones: one key, three value sets
#: (``JAXTUNE_VALUE_SETS=3``), timed as a mix.
MIX = [6000, 12, 12, 40, 12]
CPU_MIX = """
import sys
sys.path.insert(0, {tests!r})
import jax, jax.numpy as jnp
import value_kernels as vk

step = jax.jit(vk.loop_count)
x, w, _, _ = vk.arrays()
for n in {mix!r}:
    jax.block_until_ready(step(x, w, jnp.int32(n)))
"""


def _run(
    args: list[str], cache: pathlib.Path, cwd: pathlib.Path, **extra: str
) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAXTUNE_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def _entries(cache: pathlib.Path, cwd: pathlib.Path) -> dict[str, dict]:
    """Each kernel's entry in ``cache``, with its measurements (``cache show``)."""
    jaxtune = [sys.executable, "-m", "jaxtune", "cache"]
    listed = json.loads(_run([*jaxtune, "list", "--json"], cache, cwd).stdout)["entries"]
    out = {}
    for kernel in sorted({e["kernel"] for e in listed}):
        shown = json.loads(_run([*jaxtune, "show", kernel, "--json"], cache, cwd).stdout)
        (out[kernel],) = shown["entries"]
    return out


def _row(entry: dict, truth: dict[str, float]) -> dict:
    from jaxtune._core.vocabulary import config_id

    stored = config_id(entry["config"])
    best = min(truth.values())
    return {
        "config": stored,
        "slower_than_best": round(truth[stored] / best, 3),
        "sweep_us": round(entry["time_us"], 1),
        "truth_us": round(truth[stored], 1),
        "sweep_over_truth": round(entry["time_us"] / truth[stored], 3),
        "values": entry.get("values", {}),
        "decided": entry.get("decision", ""),
        # Where the sweep's time went (``sweep time (s)``: compile, first pass, rounds).
        "phases": entry.get("phases", {}),
    }


def cpu(work: pathlib.Path) -> dict:
    import jax.numpy as jnp
    import value_kernels as vk

    tests = str(ROOT / "tests")
    for script, text in [
        ("prog.py", vk.PROGRAM),
        ("shapes.py", CPU_SHAPES),
        ("caller.py", CPU_CALLER),
        ("eager.py", CPU_EAGER),
    ]:
        (work / script).write_text(text.format(tests=tests))
    (work / "mix.py").write_text(CPU_MIX.format(tests=tests, mix=MIX))
    tune = [sys.executable, "-m", "jaxtune", "tune", "--", sys.executable]
    _run([sys.executable, "shapes.py"], work / "before", work)
    _run([*tune, "prog.py"], work / "after", work)
    # The other flows that sweep on the values the program ran (tests/test_values.py).
    _run([sys.executable, "caller.py"], work / "caller", work)
    _run([sys.executable, "eager.py"], work / "eager", work, JAXTUNE_MODE="tune")
    _run([*tune, "mix.py"], work / "mix", work, JAXTUNE_VALUE_SETS="3")
    flows = {f: _entries(work / f, work) for f in ("before", "after", "caller", "eager", "mix")}
    values = vk.program_values()
    rows: dict[str, dict] = {}
    for name, (value_arg, _) in vk.CALLS.items():
        kernel = getattr(vk, name).kernel_id
        truth = {f"chunk={c}": t for c, t in vk.truth_us(name, values[value_arg]).items()}
        rows[name] = {"truth_us": {k: round(v, 1) for k, v in truth.items()}}
        for flow, entries in flows.items():
            if flow != "mix" and kernel in entries:
                rows[name][flow] = _row(entries[kernel], truth)
    # The mix: its three value sets' calls, each chunk's in turn.
    mix = [jnp.int32(n) for n in dict.fromkeys(MIX)]
    truth = {f"chunk={c}": t for c, t in vk.truth_us("loop_count", mix).items()}
    rows["loop_count mix"] = {
        "truth_us": {k: round(v, 1) for k, v in truth.items()},
        "mix": _row(flows["mix"][vk.loop_count.kernel_id], truth),
    }
    return rows


def tpu(
    work: pathlib.Path, flows: tuple[str, ...] = ("before", "after"), truth: bool = True
) -> dict:
    """megablox gmm's flows on the chip (``before``: made-up group sizes; ``after``: the
    program's own, through ``jaxtune tune``), each row rated against the truth (with
    ``truth=False``, each flow's stored config and phases alone: a quick look at a change
    of the sweep's pace, whose pick another run rates)."""
    mod = [sys.executable, "-m", "tests.tpu.values_gmm"]
    runs = {
        "before": [*mod, "synthesised"],
        "after": [sys.executable, "-m", "jaxtune", "tune", "--", *mod],
    }
    for flow in flows:
        start = time.perf_counter()
        _run(runs[flow], work / flow, ROOT)
        # Each flow's sweep as soon as it ends (the truth takes minutes more on the chip).
        entry = _entries(work / flow, ROOT)["tpu.gmm"]
        took = time.perf_counter() - start
        print(f"{flow}: {took:.1f} s, sweep phases {entry.get('phases', {})}", flush=True)
    if not truth:
        return {
            "tpu.gmm": {
                flow: {
                    "config": (e := _entries(work / flow, ROOT)["tpu.gmm"])["config"],
                    "phases": e.get("phases", {}),
                }
                for flow in flows
            }
        }
    truth_s = json.loads(_run([*mod, "truth"], work / "truth", ROOT).stdout.splitlines()[-1])
    truth = {k: v * 1e6 for k, v in truth_s.items()}
    row = {
        "truth_best_us": round(min(truth.values()), 1),
        "truth_worst_us": round(max(truth.values()), 1),
    }
    for flow in flows:
        row[flow] = _row(_entries(work / flow, ROOT)["tpu.gmm"], truth)
    return {"tpu.gmm": row}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tpu", action="store_true", help="megablox gmm on the chip")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument(
        "--flows", default="before,after", help="with --tpu: the flows to run (before,after)"
    )
    parser.add_argument(
        "--no-truth", action="store_true", help="with --tpu: the picks unrated (no truth run)"
    )
    args = parser.parse_args()
    import jax

    with tempfile.TemporaryDirectory(prefix="jaxtune-bench-values-") as tmp:
        rows = (
            tpu(pathlib.Path(tmp), tuple(args.flows.split(",")), truth=not args.no_truth)
            if args.tpu
            else cpu(pathlib.Path(tmp))
        )
    import platform

    doc = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "rows": rows,
    }
    print(json.dumps(doc, indent=1))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
