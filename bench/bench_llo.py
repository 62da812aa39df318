"""What the LLO analysis adds to a report: ``jaxtune report`` with and without ``--llo`` on
the v5e fixtures, side by side in one run, and xprof's own cost of answering the way jaxtune
asks (one load of the trace) against the way its Python functions answer (one load per
question).

  report, no LLO      Profile.from_trace(path) and its table, in this process
  report, LLO         the same plus llo.attach (xprof's analysis in a child, the bundle-slot
                      reading of the trace), with the steps llo.seconds names
  --before            xprof alone on the whole trace: analyze_llo once per profiled program
                      and the four static analyses per kernel, each through xprof's Python
                      function (each loads the trace: what jaxtune did before), and the
                      same questions of one CreateLloAnalysis handle

Rounds alternate the two reports, so a busy machine slows both alike; the ratio is of
medians. ``--inflate N`` adds two traces that hold N more copies of the fixture's largest
LLO module (1.8 MB, 13,319 bundles): under other programs' names (a process that compiled
many programs, as a training script does), and with 20 of them under the profiled
program's (a training step's many fusions). xprof's load and each of its static analyses
grow with the file it is handed, so jaxtune hands it the profiled program's modules alone. The fixtures are small (2 MB with LLO); the figure the issue names (an NNX step, 158 s
with LLO against about 40 s without) must be measured on the chip: see docs/profiling.md,
"What the LLO analysis costs".

Run: python bench/bench_llo.py [--rounds 5] [--inflate 100] [--python XPROF_PYTHON]
     [--before] [--json bench/results/llo.json]
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

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import jaxtune  # noqa: E402
from jaxtune._core.xspace import schema  # noqa: E402
from jaxtune._profiling import llo  # noqa: E402
from jaxtune._profiling.report import read_space, report_from_trace  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "v5e"
TRACES = ("flash_fwd_llo", "flash_fwd", "flash_grad", "nnx_step", "matmul")


def _report(path: pathlib.Path, with_llo: bool, python: str | None) -> tuple[float, dict]:
    """What ``jaxtune report [--llo] PATH`` does, in this process: its seconds and LLO."""
    start = time.perf_counter()
    if with_llo:
        space = read_space(path)  # one reading for the report and the analysis
        profile = llo.attach(report_from_trace(path, space=space), path, python=python, space=space)
    else:
        profile = jaxtune.Profile.from_trace(path)
    profile.table()
    return time.perf_counter() - start, dict(profile.llo or {})


# -- an inflated trace: more LLO modules ----------------------------------------------------


def _inflate(src: pathlib.Path, others: int, mine: int, dst: pathlib.Path) -> None:
    """``src`` with more LLO modules on ``/host:metadata``, each a copy of its largest:
    ``others`` under the names of programs that never ran (``jit_other<i>(<n>)::<op>``),
    ``mine`` under the profiled program's (``jit_flash(31)::<op>.copy<i>``, as the many
    fusions of a training step)."""
    space = schema.SpaceIndex.FromString(src.read_bytes())
    for i, raw in enumerate(space.planes):
        plane = schema.PlaneIndex.FromString(raw)
        if plane.name != b"/host:metadata":
            continue
        (stat_id,) = [k for k, v in plane.stat_metadata.items() if v.name == b"llo_proto"]
        biggest = max(
            (m for m in plane.event_metadata.values() for s in m.stats if s.metadata_id == stat_id),
            key=lambda m: m.ByteSize(),
        )
        op = biggest.name.partition(b"::")[2]
        names = [b"jit_other%d(%d)::" % (n, 1000 + n) + op for n in range(others)]
        names += [b"jit_flash(31)::" + op + b".copy%d" % n for n in range(mine)]
        for key, name in enumerate(names, max(plane.event_metadata) + 1):
            copy = plane.event_metadata[key]
            copy.CopyFrom(biggest)
            copy.id, copy.name = key, name
        space.planes[i] = plane.SerializeToString()
    dst.write_bytes(space.SerializeToString())


# -- xprof alone: one load per question against one load --------------------------------

_XPROF = """
import json, sys, time
from xprof.convert import _pywrap_profiler_plugin as plugin
path, modules = sys.argv[1], json.loads(sys.argv[2])
modes = ("opcodes", "bundle_util", "spills", "register_pressure")
programs = sorted({m.partition("::")[0] + "::" for m in modules})
t = time.perf_counter()
for p in programs:
    plugin.analyze_llo(path, p)
for m in modules:
    for mode in modes:
        plugin.get_llo_static_analysis_json(path, mode, m, 0)
per_question = time.perf_counter() - t
lib = plugin._lib
t = time.perf_counter()
h = lib.CreateLloAnalysis(path.encode())
load = time.perf_counter() - t
for p in programs:
    lib.GetLloAnalysisJson(h, p.encode())
for m in modules:
    for mode in modes:
        lib.GetLloStaticAnalysisJson(h, mode.encode(), m.encode(), 0)
lib.FreeLloAnalysis(h)
one_load = time.perf_counter() - t
print(json.dumps({"per_question_s": per_question, "one_load_s": one_load, "load_s": load,
                  "questions": len(programs) + 4 * len(modules)}))
"""


def _xprof_alone(path: pathlib.Path, python: str, modules: list[str]) -> dict:
    out = subprocess.run(
        [python, "-c", _XPROF, str(path), json.dumps(modules)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _row(name: str, path: pathlib.Path, rounds: int, python: str | None) -> dict:
    off, on = [], []
    last: dict = {}
    _report(path, True, python)  # warm: imports, the page cache
    for _ in range(rounds):
        t, _ = _report(path, False, python)
        off.append(t)
        t, last = _report(path, True, python)
        on.append(t)
    row = {
        "trace": name,
        "mb": round(path.stat().st_size / 2**20, 2),
        "no_llo_s": statistics.median(off),
        "llo_s": statistics.median(on),
        "ratio": statistics.median(on) / statistics.median(off),
        "added_s": statistics.median(on) - statistics.median(off),
        "llo_line": last.get("line"),
        "llo_seconds": last.get("seconds"),
        "xprof_calls": last.get("xprof_calls"),
    }
    kernels = [k for k in last.get("kernels") or () if k.get("success")]
    if kernels:
        row["mxu_fill"] = {k["kernel"]: k["unit_utilisation"].get("mxu") for k in kernels}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--inflate",
        type=int,
        default=100,
        help="extra LLO modules (0: none); a second trace moves 20 of them into the profiled "
        "program",
    )
    ap.add_argument("--python", default=os.environ.get("JAXTUNE_XPROF_PYTHON"))
    ap.add_argument(
        "--before",
        action="store_true",
        help="also time xprof on the whole trace, one load per question (as jaxtune asked "
        "before) and one load (minutes on the inflated traces)",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    python = args.python
    if not llo.xprof_available(python):
        # A skip, not a failure: `nox -s bench` runs this where xprof may be missing.
        print(
            "bench_llo: skipped: needs xprof (pip install 'jaxtune[xprof]', or --python a "
            "Python that has it, or JAXTUNE_XPROF_PYTHON)"
        )
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [(n, FIXTURES / f"{n}.xplane.pb") for n in TRACES]
        if args.inflate:
            src = FIXTURES / "flash_fwd_llo.xplane.pb"
            for others, mine in ((args.inflate, 0), (args.inflate - 20, 20)):
                big = pathlib.Path(tmp) / f"inflated_{others}_{mine}.xplane.pb"
                _inflate(src, others, mine, big)
                paths.insert(1, (f"flash_fwd_llo + {others} others + {mine} mine", big))
        for name, path in paths:
            row = _row(name, path, args.rounds, python)
            if args.before and row["xprof_calls"]:
                wanted = ["jit_flash(31)::flash_attention.1"]
                row["xprof_alone"] = _xprof_alone(path, python or sys.executable, wanted)
            rows.append(row)
    print(f"{'trace':<34} {'MB':>6} {'no LLO s':>9} {'LLO s':>7} {'ratio':>6} {'added s':>8}")
    for r in rows:
        print(
            f"{r['trace']:<34} {r['mb']:>6} {r['no_llo_s']:>9.3f} {r['llo_s']:>7.3f} "
            f"{r['ratio']:>6.2f} {r['added_s']:>8.3f}"
        )
    for r in rows:
        if r["llo_seconds"]:
            steps = ", ".join(f"{k} {v:.3f}" for k, v in sorted(r["llo_seconds"].items()))
            print(f"  {r['trace']}: llo steps (s): {steps}; xprof calls {r['xprof_calls']}")
        if r.get("xprof_alone"):
            x = r["xprof_alone"]
            print(
                f"  {r['trace']}: xprof alone, {x['questions']} questions: one load per "
                f"question {x['per_question_s']:.3f} s, one load {x['one_load_s']:.3f} s "
                f"(the load {x['load_s']:.3f} s)"
            )
        if r.get("mxu_fill"):
            print(f"  {r['trace']}: MXU slot fill over every bundle {r['mxu_fill']}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
