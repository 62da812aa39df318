"""Reading a large TPU-shaped trace: jaxtune against an independent protobuf walk,
``jax.profiler.ProfileData`` and (where given a Python that has it) xprof's kernel stats.

  the trace: bench/tpu_trace.py (>= 80 MB, 3.2 M op events, 400 kinds of ops)
  jaxtune report FILE           wall time and peak memory of the command, in a fresh process
  Profile.from_trace(FILE)      time inside a fresh process, and its peak memory
  independent protobuf walk     XLA's schema (bench/tpu_trace.py's own), every event walked
  ProfileData                   jax.profiler.ProfileData.from_file, XLA Ops events walked
  xprof get_kernel_stats        --xprof-python PY: a Python with ``pip install xprof``

Each reader's per-row totals are checked against the generator's truth (and jaxtune's
against the independent walk's). Writes bench/results/trace_reader.json.

With ``--intra`` the trace also holds the lines custom-call tracing adds inside each kernel
call (``LLO Ops``, ``MXU0``/``VALU Instructions``, on their own epoch-scale line starts;
2.4 M op events and 0.96 M intra-kernel events by default), jaxtune's per-unit times are
checked against the generator's, and the independent walk walks those lines too.

Run: python bench/bench_trace_reader.py [--trace /tmp/jaxtune-bench.xplane.pb]
     [--xprof-python /tmp/xprof-venv/bin/python] [--profile-model] [--runs 5] [--intra]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import tpu_trace  # noqa: E402


def _fresh(code: str, python: str = sys.executable) -> tuple[dict, float, float]:
    """Runs ``code`` in a fresh process; ``(its last JSON line, wall s, peak RSS MB)``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    # The peak of this child alone: wait4's rusage is the child's own.
    rss = _last_child_rss()
    if proc.returncode != 0:
        raise RuntimeError(err.decode()[-3000:])
    return json.loads(out.decode().strip().splitlines()[-1]), wall, rss


_SEEN_RSS = [0.0]


def _last_child_rss() -> float:
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    _SEEN_RSS[0] = max(_SEEN_RSS[0], peak)
    return peak


def _report_cli(path: str) -> tuple[float, float, str]:
    """``jaxtune report FILE`` (with ``--json``) in a fresh process: wall s, peak MB, json."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxtune", "report", "--json", path],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(proc.stderr.read().decode()[-3000:] if proc.stderr else "")
    return wall, usage.ru_maxrss / 1024, out.decode()


FROM_TRACE = """
import json, resource, sys, time
import jaxtune
Profile = jaxtune.Profile  # imported on first use (with JAX): not part of the reading
t = time.perf_counter()
p = Profile.from_trace({path!r})
s = time.perf_counter() - t
rows = {{r.name: r.total_us for r in (*p.kernels, *p.ops)}}
units = {{k.name: dict(k.units) for k in p.intrakernel}}
print(json.dumps({{"s": s, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": rows, "calls": {{r.name: r.calls for r in (*p.kernels, *p.ops)}},
                  "units": units, "timeline": len(p.timeline)}}))
"""

WALK = """
import json, re, resource, sys, time, collections
sys.path.insert(0, {here!r})
import tpu_trace
t = time.perf_counter()
space = tpu_trace.classes()["XSpace"].FromString(open({path!r}, "rb").read())
plane = next(p for p in space.planes if p.name.startswith("/device:TPU:"))
names = {{k: v.name for k, v in plane.stat_metadata.items()}}
row = {{}}
for k, m in plane.event_metadata.items():
    stats = {{names[s.metadata_id]: s for s in m.stats}}
    tf_op = stats["tf_op"].str_value if "tf_op" in stats else ""
    found = re.search(r"jit\\(([^()]*)\\)/pallas_call$", tf_op)
    row[k] = found.group(1) if found else m.name
totals = collections.Counter()
lanes = collections.Counter()
for line in plane.lines:
    if line.name == "XLA Ops":
        for ev in line.events:
            totals[row[ev.metadata_id]] += ev.duration_ps
    elif line.name.endswith(" Instructions") or line.name == "LLO Ops":
        for ev in line.events:  # every intra-kernel event walked too
            lanes[line.name] += ev.duration_ps
s = time.perf_counter() - t
print(json.dumps({{"s": s, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": {{k: v * 1e-6 for k, v in totals.items()}}}}))
"""

PROFILE_DATA = """
import json, resource, time, collections
from jax.profiler import ProfileData
t = time.perf_counter()
data = ProfileData.from_file({path!r})
totals = collections.Counter()
for plane in data.planes:
    if plane.name.startswith("/device:TPU:"):
        for line in plane.lines:
            if line.name == "XLA Ops":
                for ev in line.events:
                    totals[ev.name] += ev.duration_ns
s = time.perf_counter() - t
print(json.dumps({{"s": s, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "ops": {{k: v * 1e-3 for k, v in totals.items()}}}}))
"""

XPROF = """
import json, resource, time
from xprof.convert import raw_to_tool_data
t = time.perf_counter()
data, _ = raw_to_tool_data.xspace_to_tool_data([{path!r}], "kernel_stats", {{}})
s = time.perf_counter() - t
print(json.dumps({{"s": s, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "bytes": len(data or b"")}}))
"""


def _runs(runs: list[tuple[float, float, float]]) -> dict:
    """Median, best and every run's seconds, the peak memory, the load averages."""
    times = sorted(t for t, _, _ in runs)
    return {
        "s": times[len(times) // 2],
        "best_s": times[0],
        "runs_s": [round(t, 3) for t, _, _ in runs],
        "load_1min": [round(load, 2) for _, _, load in runs],
        "peak_mb": max(m for _, m, _ in runs),
    }


def _line(runs: list[tuple[float, float, float]]) -> str:
    r = _runs(runs)
    return (
        f"{r['s']:6.2f} s (best {r['best_s']:.2f} of {len(runs)}, load {min(r['load_1min'])}"
        f"-{max(r['load_1min'])})  peak {r['peak_mb']:6.0f} MB"
    )


def _worst(ours: dict[str, float], truth: dict[str, float]) -> float:
    """Largest relative difference of per-row totals (1.0 when a row is missing)."""
    worst = 0.0
    for name, want in truth.items():
        got = ours.get(name)
        worst = max(worst, 1.0 if got is None else abs(got - want) / max(want, 1e-12))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--trace", default=os.path.join(tempfile.gettempdir(), "jaxtune-bench.xplane.pb")
    )
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--intra", action="store_true", help="add intra-kernel lines")
    parser.add_argument("--xprof-python", default=None)
    parser.add_argument("--profile-model", action="store_true")
    parser.add_argument(
        "--runs", type=int, default=1, help="runs of jaxtune's readers (each in a fresh process)"
    )
    args = parser.parse_args()
    start = time.perf_counter()
    events = args.events or (2_400_000 if args.intra else 3_200_000)
    truth = tpu_trace.generate(args.trace, events, intra=args.intra)
    generated = time.perf_counter() - start
    want = {name: r["total_ps"] * 1e-6 for name, r in truth["rows"].items()}
    calls = {name: r["events"] for name, r in truth["rows"].items()}
    mb = truth["bytes"] / 1e6
    print(
        f"trace: {mb:.1f} MB, {truth['events']} op events, {truth['intra_events']} "
        f"intra-kernel events (+{truth['host_events']} host), generated in {generated:.1f} s"
    )
    results: dict = {
        "trace_mb": mb,
        "events": truth["events"],
        "intra_events": truth["intra_events"],
        "host_events": truth["host_events"],
    }

    # The machine may be shared: each run's time with the load average it ran under.
    cli_runs, got_runs = [], []
    for _ in range(args.runs):
        wall, rss, doc = _report_cli(args.trace)
        cli_runs.append((wall, rss, os.getloadavg()[0]))
        got, _, _ = _fresh(FROM_TRACE.format(path=args.trace))
        got_runs.append((got["s"], got["rss"], os.getloadavg()[0]))
    report = json.loads(doc)
    rows = {r["name"]: r["total_us"] for r in (*report["kernels"], *report["ops"])}
    results["report_cli"] = {**_runs(cli_runs), "worst_rel_diff": _worst(rows, want)}
    print(
        f"jaxtune report         {_line(cli_runs)}  "
        f"rows vs truth: worst rel. diff {_worst(rows, want):.1e}"
    )

    wrong_calls = sum(1 for n, c in calls.items() if got["calls"].get(n) != c)
    results["from_trace"] = {**_runs(got_runs), "wrong_calls": wrong_calls}
    print(f"Profile.from_trace     {_line(got_runs)}  rows with wrong calls: {wrong_calls}")
    if args.intra:
        lanes = {
            (name, lane): ps * 1e-6
            for name, r in truth["rows"].items()
            for lane, ps in r["units"].items()
        }
        found = {(n, lane): t for n, u in got["units"].items() for lane, t in u.items()}
        worst = max(
            (abs(found.get(k, 0.0) - v) / max(v, 1e-12) for k, v in lanes.items()), default=0.0
        )
        results["from_trace"]["intra_worst_rel_diff"] = worst
        results["from_trace"]["timeline_spans"] = got["timeline"]
        print(
            f"  intra-kernel: {len(got['units'])} kernels with lanes, per-unit times vs truth: "
            f"worst rel. diff {worst:.1e}; timeline {got['timeline']} spans"
        )

    walk, _, _ = _fresh(WALK.format(path=args.trace, here=str(HERE)))
    agree = _worst(got["rows"], walk["rows"])
    results["protobuf_walk"] = {"s": walk["s"], "peak_mb": walk["rss"], "jaxtune_vs_walk": agree}
    ratio = results["from_trace"]["s"] / walk["s"]
    results["from_trace_vs_walk"] = ratio
    print(
        f"independent pb walk    {walk['s']:6.2f} s  peak {walk['rss']:6.0f} MB  "
        f"jaxtune vs walk: worst rel. diff {agree:.1e}; from_trace / walk {ratio:.2f}x"
    )

    pd, _, _ = _fresh(PROFILE_DATA.format(path=args.trace))
    results["profile_data"] = {"s": pd["s"], "peak_mb": pd["rss"]}
    print(
        f"ProfileData            {pd['s']:6.2f} s  peak {pd['rss']:6.0f} MB  (ops by name; "
        "no metadata stats, so no kernels)"
    )

    if args.xprof_python:
        # A fresh folder each run: xprof caches what it converted beside the trace.
        with tempfile.TemporaryDirectory(prefix="jaxtune-bench-xprof-") as folder:
            copy = shutil.copy(args.trace, folder)
            xp, _, _ = _fresh(XPROF.format(path=copy), python=args.xprof_python)
        results["xprof_kernel_stats"] = {"s": xp["s"], "peak_mb": xp["rss"], "bytes": xp["bytes"]}
        print(
            f"xprof kernel_stats     {xp['s']:6.2f} s  peak {xp['rss']:6.0f} MB  "
            f"({xp['bytes']} bytes of kernel stats)"
        )

    if args.profile_model:
        results["profile_model"] = _profile_model()
    out = HERE / "results" / ("trace_reader_intra.json" if args.intra else "trace_reader.json")
    out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")


def _profile_model() -> dict:
    """``jaxtune.profile()`` of a small CPU model: child start, compile, run, parse."""
    os.environ.setdefault("JAXTUNE_CACHE_DIR", tempfile.mkdtemp(prefix="jaxtune-bench-"))
    os.environ["JAXTUNE_ISOLATION"] = "process"
    sys.path.insert(0, str(ROOT / "tests"))
    import jax.numpy as jnp
    from profile_models import model

    import jaxtune

    start = time.perf_counter()
    p = model.profile(jnp.ones((128, 128)))
    total = time.perf_counter() - start
    t = dict(p.timings)
    jaxtune._isolation.process.shutdown_children()
    print(
        f"jaxtune.profile total {total:.2f} s: compile {t['compile_s']:.2f} s, "
        f"run {t['run_s']:.3f} s, parse {t['parse_s']:.3f} s"
    )
    return {"total_s": total, **t}


if __name__ == "__main__":
    main()
