from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from hostile.traces import GPU_TRACE, TPU_TRACE
from jax.profiler import ProfileData
from profile_models import model, with_autotuned

import jaxtune
from jaxtune._core import flags as _flags
from jaxtune._core.vocabulary import CaptureInfo, ProfileOptions
from jaxtune._isolation import process as _process
from jaxtune._profiling import profiled as _profiled
from jaxtune._profiling.report import report_from_trace

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def process(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    yield
    _process.shutdown_children()


@pytest.mark.child
@pytest.mark.slow
def test_cpu_end_to_end_two_interpret_kernels_and_xla_ops(process, tmp_path):
    p = model.profile(jnp.ones((128, 128)), logdir=str(tmp_path / "trace"))
    by_name = {k.name: k for k in p.kernels}
    assert set(by_name) == {"double_it", "add_one"}
    assert by_name["double_it"].calls == 3 * 2  # iterations x call sites
    assert by_name["add_one"].calls == 3
    # An interpret-mode kernel's cost_estimate (from the jaxpr) gives it achieved rates.
    add = by_name["add_one"]
    assert add.flops_source == "cost_estimate" and add.flops == 3 * 128 * 128
    assert add.flops_per_s and add.bytes_per_s and add.intensity == pytest.approx(0.125)
    # Without a cost estimate or hint, the operands' and results' sizes bound the bytes.
    double = by_name["double_it"]
    assert double.flops_source == "shapes" and double.flops is None
    assert double.bytes_accessed == 6 * 2 * 128 * 128 * 4
    assert double.bytes_per_s and double.bound_by == "unknown"
    for k in p.kernels:
        assert k.kind == "pallas" and k.total_us > 0
        assert k.total_us / p.iterations <= p.step_us
    assert sum(k.share for k in (*p.kernels, *p.ops)) <= 1.0 + 1e-9
    assert p.ops and all(o.kind == "xla" for o in p.ops)
    assert p.platform == "cpu" and p.missing_flags == ()
    assert list((tmp_path / "trace").glob("**/*.xplane.pb"))
    table = p.table()
    assert "double_it" in table and "add_one" in table
    doc = json.loads(p.to_json())
    assert doc["schema"] == 1 and {k["name"] for k in doc["kernels"]} == {"double_it", "add_one"}
    assert set(p.timings) >= {"compile_s", "run_s", "parse_s"}
    # llo=True (the default) asks for the LLO analysis too: on CPU, one plain line.
    assert p.llo is not None and p.llo["success"] is False
    assert "llo: LLO analysis is TPU-only: this is a cpu trace" in table
    assert doc["llo"]["line"].startswith("LLO analysis is TPU-only")


@pytest.mark.child
@pytest.mark.slow
def test_autotuned_kernel_with_hints_gets_achieved_rates(process):
    p = jaxtune.profile(with_autotuned, jax.ShapeDtypeStruct((16, 256), jnp.float32), iters=2)
    (k,) = [k for k in p.kernels if k.kind == "autotuned"]
    assert k.kernel_id == "tests.profile.rowsum" and k.calls == 2
    assert k.flops_source == "hint" and k.flops == 2 * 16 * 256
    assert k.flops_per_s and k.bytes_per_s and k.intensity == pytest.approx(0.25)
    assert k.bound_by == "unknown"  # no peak table for CPU


@pytest.mark.child
@pytest.mark.slow
def test_the_child_sees_profiling_flags_and_the_parent_does_not(process, tmp_path, monkeypatch):
    dump = tmp_path / "dump"
    real = _flags.profile_flags

    def with_dump(platform, **kw):
        flags = real(platform, **kw)
        if platform == "cpu":
            flags = {"XLA_FLAGS": [_flags.Flag(name="xla_dump_to", value=str(dump))]}
        return flags

    monkeypatch.setattr(_flags, "profile_flags", with_dump)
    p = model.profile(jnp.ones((64, 64)))
    assert f"--xla_dump_to={dump}" in (p.flags["XLA_FLAGS"] or "")
    assert any(dump.iterdir())  # the flag took effect in the child
    assert "xla_dump_to" not in os.environ.get("XLA_FLAGS", "")


@pytest.mark.child
def test_a_profiling_child_that_dies_is_a_profile_error_with_its_signal_and_stderr(monkeypatch):
    # The crash is read as a sweep's is (the service's `Crash`): how the child ended, and
    # the end of what it wrote; the next capture gets a new child.
    from profile_models import dies_in_the_child

    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    with pytest.raises(jaxtune.ProfileError) as caught:
        jaxtune.profile(dies_in_the_child, jnp.ones(8), iters=1)
    message = str(caught.value)
    assert message.startswith(
        "the profiling child was lost: the child process killed by signal SIGSEGV; stderr: "
    )
    assert "Fatal Python error: Segmentation fault" in message  # its stderr, as it ended
    assert model.profile(jnp.ones((64, 64)), iters=1).kernels  # a new child serves


def test_closure_is_captured_in_process_with_missing_flags_named(monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    monkeypatch.setattr(
        _flags,
        "profile_flags",
        lambda platform, **kw: {"XLA_FLAGS": [_flags.Flag(name="xla_cpu_foo", value="1")]},
    )

    def local(x):
        return jnp.sin(x).sum()

    with pytest.warns(jaxtune.JaxtuneWarning, match="cannot run in a child process"):
        p = jaxtune.profile(local, jnp.ones(8), iters=2)
    assert p.missing_flags == ("--xla_cpu_foo=1",)
    assert "captured without profiling flags: --xla_cpu_foo=1" in p.table()


def test_a_capture_leaves_the_python_tracer_off(tmp_path):
    # docs/profiling.md, "Capture": JAX's default (python_tracer_level=1) writes an event
    # per Python call,
    # hundreds of thousands on an interpret-mode step, and slows the traced calls; the
    # report reads none of them. XLA's op events (host tracer) stay.
    from jaxtune._core.xspace import xplane

    def step(x):
        return jnp.tanh(jax.nn.softmax(x) @ x).sum()

    options = ProfileOptions(iters=2, warmup=2, logdir=str(tmp_path))
    _profiled.capture(step, (jnp.ones((64, 64)),), {}, options)
    space = xplane.load(tmp_path)
    plane = space.plane("/host:CPU")
    names = [plane.metadata(ev.metadata_id).name for ln in plane.lines for ev in plane.events(ln)]
    assert [n for n in names if n.startswith("$")] == []  # "$file.py:12 function"
    p = jaxtune.Profile.from_trace(tmp_path)
    assert p.ops and all(o.calls == 2 for o in p.ops), p.table()
    assert list(space.hlo_programs())  # the HLO protos, for op names, are still written


def write_trace(tmp_path, text):
    path = tmp_path / "trace.xplane.pb"
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(text))
    return path


def test_tpu_text_proto_trace_attribution_and_roofline(tmp_path):
    path = write_trace(tmp_path, TPU_TRACE)
    costs = {"tiled_matmul": {"flops": 2e9, "bytes_accessed": 1e6}}
    p = report_from_trace(
        path, info=CaptureInfo(costs=costs, device_kind="TPU v5 lite"), iterations=2
    )
    k = {s.name: s for s in p.kernels}
    assert set(k) == {"tiled_matmul", "no_cost", "lib.norm"}
    mm = k["tiled_matmul"]
    assert (mm.kind, mm.kernel_id, mm.calls, mm.total_us) == ("pallas", "lib.mm", 2, 10.0)
    assert (mm.min_us, mm.max_us) == (4.0, 6.0)
    assert mm.flops == 4e9 and mm.flops_source == "cost_estimate"
    assert mm.flops_per_s == pytest.approx(4e9 / 10e-6)
    assert mm.bound_by == "compute"  # 2000 FLOP/byte, past the v5e ridge of ~240
    nc = k["no_cost"]
    assert (nc.flops, nc.flops_per_s, nc.bound_by, nc.flops_source) == (
        None,
        None,
        "unknown",
        "none",
    )
    assert (k["lib.norm"].kind, k["lib.norm"].total_us) == ("autotuned", 1.0)
    (op,) = p.ops
    assert (op.name, op.flops, op.bytes_accessed, op.flops_source) == (
        "fusion.2",
        2048,
        8192,
        "xla",
    )
    assert op.bound_by == "memory"
    assert p.step_us == pytest.approx(14.0 / 2)
    assert sum(s.share for s in (*p.kernels, *p.ops)) == pytest.approx(1.0)
    assert p.platform == "tpu"


def test_gpu_text_proto_trace_attribution(tmp_path):
    p = report_from_trace(write_trace(tmp_path, GPU_TRACE))
    assert [(k.name, k.kind, k.calls, k.total_us) for k in p.kernels] == [
        ("softmax", "pallas", 1, 3.0)
    ]
    assert [(o.name, o.total_us) for o in p.ops] == [("loop_fusion", 1.0)]
    assert p.platform == "gpu"


def test_report_on_a_plain_jax_profiler_trace(tmp_path, incli):
    f = jax.jit(lambda x: jnp.sin(x) @ x)
    x = jnp.ones((64, 64))
    f(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path)):
        f(x).block_until_ready()
    proc = incli("report", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ops"] and all(o["kind"] == "xla" for o in doc["ops"])
    assert doc["total_us"] > 0
    text = incli("report", str(tmp_path), "--top", "3")
    assert text.returncode == 0 and "kind" in text.stdout


def test_report_on_a_missing_trace_is_a_clear_error(tmp_path, incli):
    proc = incli("report", str(tmp_path))
    assert proc.returncode == 2
    assert "no .xplane.pb under" in proc.stderr


def test_jaxtune_profile_env_profiles_first_call_per_signature(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("JAXTUNE_PROFILE", "1")
    monkeypatch.setenv("JAXTUNE_PROFILE_DIR", str(tmp_path))
    x = jnp.ones((64, 64))
    float(model(x))
    float(model(x))
    float(model(jnp.ones((96, 96))))
    reports = sorted(tmp_path.glob("*/report.json"))
    assert len(reports) == 2
    doc = json.loads(reports[0].read_text())
    assert {k["name"] for k in doc["kernels"]} == {"double_it", "add_one"}
    assert (reports[0].parent / "report.txt").exists()
    assert "jaxtune: profiled model" in capsys.readouterr().out
    assert doc["llo"] is not None  # llo=True, the default: the analysis or why there is none


def test_profile_llo_0_leaves_the_llo_analysis_out_of_automatic_profiles(monkeypatch, tmp_path):
    # What `jaxtune profile --no-llo` sets: no analysis, and its flag is not "missing".
    monkeypatch.setenv("JAXTUNE_PROFILE", "1")
    monkeypatch.setenv("JAXTUNE_PROFILE_LLO", "0")
    monkeypatch.setenv("JAXTUNE_PROFILE_DIR", str(tmp_path))
    float(model(jnp.ones((32, 32))))
    (report,) = tmp_path.glob("*/report.json")
    doc = json.loads(report.read_text())
    assert doc["llo"] is None and doc["missing_flags"] == []


def test_llo_false_runs_no_analysis_and_llo_true_reports_it(tmp_path, monkeypatch):
    from jaxtune._profiling import llo

    path = tmp_path / "t.xplane.pb"
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(TPU_TRACE))
    plain = jaxtune.Profile.from_trace(path)
    # The one profile path, its capture and report stood in for by the trace's report.
    monkeypatch.setattr(_profiled, "_capture_in_child", lambda *a: CaptureInfo(platform="tpu"))
    monkeypatch.setattr(_profiled, "read_space", lambda where: None)
    monkeypatch.setattr(_profiled, "report_from_trace", lambda *a, **k: plain)

    def profile(llo):
        options = ProfileOptions(llo=llo, logdir=str(tmp_path))
        return _profiled._capture_and_report(lambda: None, (), {}, options)

    assert profile(llo=False).llo is None
    monkeypatch.setattr(llo, "xprof_available", lambda python=None: False)
    got = profile(llo=True)
    assert got.platform == "tpu" and got.llo is not None and got.llo["success"] is False
    assert got.llo["line"] == (
        "LLO analysis needs xprof, which is not installed; pip install 'jaxtune[xprof]' "
        "(the xprof wheel from PyPI, which embeds it)"
    )
    assert got.table().count("llo: ") == 1
    assert json.loads(got.to_json())["llo"]["fix"].startswith("pip install 'jaxtune[xprof]'")


def test_on_tpu_the_auto_profile_prints_its_report_before_the_llo_analysis(
    tmp_path, monkeypatch, capsys
):
    """Under ``jaxtune profile --`` the table comes first; xprof's analysis, which can take
    a while on a big trace, after it, begun and ended with a line (issue 43)."""
    from jaxtune._profiling import llo

    fixture = pathlib.Path(__file__).parent / "fixtures" / "v5e" / "flash_fwd_llo.xplane.pb"
    monkeypatch.setenv("JAXTUNE_PROFILE", "1")
    monkeypatch.setenv("JAXTUNE_PROFILE_DIR", str(tmp_path))
    monkeypatch.setattr(
        _profiled, "capture", lambda *a, **k: type("Info", (), {"platform": "tpu"})()
    )
    monkeypatch.setattr(_profiled, "read_space", lambda path: None)
    monkeypatch.setattr(
        _profiled, "report_from_trace", lambda *a, **k: jaxtune.Profile.from_trace(fixture)
    )

    def attach(profile, path, space=None):
        print("ANALYSING")
        return dataclasses.replace(profile, llo={"success": False, "line": "the LLO line"})

    monkeypatch.setattr(llo, "attach", attach)
    float(model(jnp.ones((40, 40))))  # a signature no other test profiles
    captured = capsys.readouterr()
    out = captured.out
    assert out.index("jaxtune: profiled model") < out.index("_flash_attention_kernel")
    assert out.index("_flash_attention_kernel") < out.index("ANALYSING")
    assert out.index("ANALYSING") < out.index("llo: the LLO line") < out.index("report in")
    assert "jaxtune: LLO analysis of model's trace (xprof, in a child, at most 300 s)" in (
        captured.err
    )
    assert "jaxtune: LLO analysis of model took " in captured.err
    (report,) = tmp_path.glob("*/report.json")
    assert json.loads(report.read_text())["llo"]["line"] == "the LLO line"


SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    import jax.numpy as jnp
    from profile_models import model
    print("result", float(model(jnp.ones((64, 64)))))
    """
)


@pytest.mark.child
@pytest.mark.slow
def test_profile_command_sets_flags_and_writes_reports(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxtune",
            "profile",
            "--llo",
            "--logdir",
            str(tmp_path / "out"),
            "--",
            sys.executable,
            str(script),
            str(ROOT / "tests"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "result" in proc.stdout
    # The program prints where the report is and the report itself.
    # (The kernels header now says its rows group by autotuned kernel.)
    assert "report in" in proc.stdout and "kernels (top 2 of 2:" in proc.stdout
    (report,) = (tmp_path / "out").glob("*/report.json")
    assert f"jaxtune profile: wrote 1 report: {report}" in proc.stderr
    doc = json.loads(report.read_text())
    assert {k["name"] for k in doc["kernels"]} == {"double_it", "add_one"}
    # --llo: the analysis ran on the capture and said, in the report, why it cannot here.
    assert doc["llo"]["line"].startswith("LLO analysis is TPU-only: this is a cpu trace")
    assert "llo: LLO analysis is TPU-only" in report.with_suffix(".txt").read_text()


def test_reader_exposes_hlo_protos_and_dropped_events_are_reported(tmp_path):
    text = (
        TPU_TRACE
        + """
warnings: "Dropped 1234 events: trace buffer full"
planes {
  id: 9 name: "/host:metadata"
  event_metadata { key: 1 value { id: 1 name: "jit_step"
    stats { metadata_id: 1 bytes_value: "\\x0a\\x08jit_step" } } }
  stat_metadata { key: 1 value { id: 1 name: "hlo_proto" } }
}
"""
    )
    path = write_trace(tmp_path, text)
    from jaxtune._core.xspace import xplane as _xspace

    space = _xspace.load(path)
    assert space.hlo_protos() == {"jit_step": b"\x0a\x08jit_step"}
    p = report_from_trace(path)
    assert any("trace_best_effort_frequency=100" in w for w in p.warnings)
    # At the top of the report, before the summary line.
    assert p.table().startswith("warning: the trace dropped events (Dropped 1234 events")


def test_every_folder_of_a_capture_gives_the_same_report(tmp_path):
    """``jaxtune profile`` writes ``<root>/<fn>-N/trace/...``; the capture's root,
    ``<fn>-N/`` (what it prints) and ``<fn>-N/trace/`` give one report: same kernels, FLOP/s
    and iterations (the sidecar below the folder named is found)."""
    trace_dir = tmp_path / "step-1" / "trace"
    path = trace_dir / "plugins" / "profile" / "run" / "host.xplane.pb"
    path.parent.mkdir(parents=True)
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(TPU_TRACE))
    costs = {"tiled_matmul": {"flops": 2e9, "bytes_accessed": 1e6}}
    info = CaptureInfo(costs=costs, device_kind="TPU v5 lite")
    first = report_from_trace(trace_dir, info=info, iterations=2)

    def summary(p):
        return p.iterations, [(k.name, k.calls, k.flops_per_s, k.total_us) for k in p.kernels]

    assert first.iterations == 2 and any(k.flops_per_s for k in first.kernels)
    for folder in (tmp_path, tmp_path / "step-1", trace_dir, path):
        assert summary(jaxtune.Profile.from_trace(folder)) == summary(first), folder


def test_profile_command_that_profiles_nothing_says_so_and_fails(tmp_path, cli):
    """A program with no @profiled function makes `jaxtune profile` fail with status 3,
    never exit 0 having said "reports under DIR" and written nothing (docs/profiling.md,
    "jaxtune profile")."""
    script = tmp_path / "train.py"
    script.write_text('import jax.numpy as jnp\nprint("result", float(jnp.ones(4).sum()))\n')
    out = tmp_path / "out"
    proc = cli("profile", "--logdir", str(out), "--", "python", str(script))
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "result 4.0" in proc.stdout
    assert (
        f"jaxtune profile: nothing was profiled: `{sys.executable} {script}` ran to the end, "
        "but no @jaxtune.profiled function was called with concrete arrays, so no report was "
        f"written under {out}."
    ) in proc.stderr
    assert "    @jaxtune.profiled\n    def train_step(params, batch): ...\n" in proc.stderr
    assert not list(out.glob("**/*"))


FAILING_CAPTURE = textwrap.dedent(
    """
    import jax.numpy as jnp
    import jaxtune

    @jaxtune.profiled(iters=1, llo=False)
    def step(x):
        return x * 2 if float(x.sum()) > 0 else x  # runs, but cannot be traced

    print("result", float(step(jnp.ones(4)).sum()))
    """
)


def test_profile_command_whose_captures_failed_says_so_and_fails(tmp_path, cli):
    script = tmp_path / "train.py"
    script.write_text(FAILING_CAPTURE)
    out = tmp_path / "out"
    proc = cli("profile", "--logdir", str(out), "--", "python", str(script))
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "result 8.0" in proc.stdout  # the program itself ran on
    (failed,) = out.glob("*/error.txt")
    assert failed.read_text().startswith("jaxtune could not profile step: ")
    assert (
        "jaxtune profile: nothing was profiled: 1 capture of @jaxtune.profiled functions "
        "failed, so no report was written. The first: jaxtune could not profile step: "
    ) in proc.stderr
    assert f"(kept in {failed})." in proc.stderr
    assert "no @jaxtune.profiled function was called" not in proc.stderr


def test_profile_command_reports_the_programs_own_failure_first(tmp_path, cli):
    script = tmp_path / "train.py"
    script.write_text("import sys\nsys.exit(5)\n")
    proc = cli("profile", "--logdir", str(tmp_path / "out"), "--", "python", str(script))
    assert proc.returncode == 5
    assert "jaxtune profile: the program exited with status 5; no profile was written" in (
        proc.stderr
    )


def test_a_capture_never_writes_over_an_earlier_one(monkeypatch, tmp_path):
    """Each run of a program starts counting captures at 1: a second run wrote its report
    over the first run's ``step-1``."""
    monkeypatch.setenv("JAXTUNE_PROFILE", "1")
    monkeypatch.setenv("JAXTUNE_PROFILE_DIR", str(tmp_path))
    earlier = tmp_path / "step-1" / "report.json"
    earlier.parent.mkdir()
    earlier.write_text("an earlier run's report")

    def step(x):
        return jnp.sin(x) * 2

    step.__qualname__ = "step"  # as a module-level function's
    for _ in range(2):  # two runs of a program: each has its own decorated function
        float(jaxtune.profiled(iters=1, llo=False)(step)(jnp.ones(8)).sum())
    assert earlier.read_text() == "an earlier run's report"
    assert sorted(p.parent.name for p in tmp_path.glob("*/report.json")) == [
        "step-1",
        "step-2",
        "step-3",
    ]
