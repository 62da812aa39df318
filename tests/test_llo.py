"""``jaxtune report --llo`` (docs/profiling.md, "LLO analysis: modelled per-kernel figures"):
xprof's embedded LLO analysis where it can run, and one line saying why and what to do where it
cannot."""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import json
import os
import random
import re
import sys

import extras
import pytest
from hostile.traces import EPOCH_NS
from jax.profiler import ProfileData

import jaxtune
from jaxtune._cli import main as cli_main
from jaxtune._core.xspace import xplane
from jaxtune._profiling import llo, llo_figures
from jaxtune._render import units

#: A TPU-shaped trace, its line at epoch scale as real ones are; ``%s`` is the
#: /host:metadata plane's stats (an llo_proto or none).
TPU = """
planes {
  id: 1 name: "/device:TPU:0"
  lines { id: 1 name: "XLA Ops" timestamp_ns: EPOCH_NS
    events { metadata_id: 1 offset_ps: 0 duration_ps: 1000000 } }
  event_metadata { key: 1 value { id: 1 name: "custom-call.1"
    stats { metadata_id: 1 str_value: "jit(step)/flash/pallas_call" } } }
  stat_metadata { key: 1 value { id: 1 name: "tf_op" } }
}
planes {
  id: 2 name: "/host:metadata"
  %s
  stat_metadata { key: 1 value { id: 1 name: "llo_proto" } }
}
""".replace("EPOCH_NS", str(EPOCH_NS))
CPU = """
planes { id: 1 name: "/host:CPU"
  lines { id: 1 name: "tf_XLAEigen" timestamp_ns: EPOCH_NS
    events { metadata_id: 1 offset_ps: 0 duration_ps: 1000 stats { metadata_id: 1 str_value: "add.1" } } }
  event_metadata { key: 1 value { id: 1 name: "add.1" } }
  stat_metadata { key: 1 value { id: 1 name: "hlo_op" } } }
""".replace("EPOCH_NS", str(EPOCH_NS))

#: Where xprof is: this Python (the jaxtune[xprof] extra), or JAXTUNE_XPROF_PYTHON.
XPROF_PYTHON = os.environ.get("JAXTUNE_XPROF_PYTHON")
HAS_XPROF = XPROF_PYTHON is not None or importlib.util.find_spec("xprof") is not None
#: For the tests that run xprof's own LLO analysis: nothing else reads an LLO module, and
#: xprof is the optional `xprof` extra, not in the test dependency group (its pins do not
#: always install beside the JAX under test; `nox -s tpu` installs it).
NEEDS_XPROF = extras.skip_unless(
    HAS_XPROF,
    reason=(
        "xprof is not installed here and JAXTUNE_XPROF_PYTHON names no Python that has it: "
        "this test runs xprof's own LLO analysis, which nothing else provides "
        "(pip install 'jaxtune[xprof]')"
    ),
)


def _write(tmp_path, text):
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(text))
    return path


def test_report_llo_on_a_cpu_trace_says_it_is_tpu_only(tmp_path, capsys):
    assert cli_main(["report", "--llo", str(_write(tmp_path, CPU))]) == 0
    out = capsys.readouterr().out
    assert "llo: LLO analysis is TPU-only: this is a cpu trace" in out


def test_without_xprof_llo_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "xprof" else real(n, *a)
    )
    path = _write(tmp_path, TPU % "")
    assert cli_main(["report", "--llo", "--json", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["llo"]["success"] is False
    assert "pip install 'jaxtune[xprof]'" in doc["llo"]["line"]
    # Everything else works without xprof.
    assert [k["name"] for k in doc["kernels"]] == ["flash"]


def test_llo_data_is_an_llo_proto_stat_on_the_metadata_plane(tmp_path):
    without = xplane.load(_write(tmp_path, TPU % ""))
    assert not llo.has_llo_data(without)
    with_llo = xplane.load(
        _write(tmp_path, TPU % 'stats { metadata_id: 1 bytes_value: "\\x08\\x01" }')
    )
    assert llo.has_llo_data(with_llo)


@pytest.mark.child  # the analysis runs in a bounded child process
@NEEDS_XPROF
def test_xprof_is_called_for_real_on_a_trace_without_llo_data(tmp_path):
    got = llo.analyze(_write(tmp_path, TPU % ""), "tpu", False, python=XPROF_PYTHON)
    assert got["success"] is False
    assert got["line"].startswith("the trace holds no LLO data (no llo_proto stat")
    assert "--xla_xprof_register_llo_debug_info=true" in got["line"]
    assert got["answer"] == {"success": False}  # xprof's own answer, kept


@pytest.mark.child  # the analysis runs in a bounded child process
@NEEDS_XPROF
def test_xprof_answer_on_a_trace_with_an_llo_proto(tmp_path):
    path = _write(tmp_path, TPU % 'stats { metadata_id: 1 bytes_value: "\\x08\\x01" }')
    got = llo.analyze(path, "tpu", True, python=XPROF_PYTHON)
    # A made-up llo_proto: xprof answers success (its modelled schedule) or its
    # structured error, which the report passes on with its reason.
    if got["success"]:
        assert got["semantics"] == "static_modelled_schedule"
        assert "modelled static schedule" in got["line"]
    else:
        assert got["line"].startswith("xprof's LLO analysis did not succeed")
        assert "answer" in got


# -- per-kernel figures ----------------------------------------------------------------

#: ``analyze_llo``'s answer as the xprof 2.24.2 wheel gives it (recorded on a trace whose
#: llo_proto is a bare LloModuleProto), with the counts a real kernel would have put in.
ANSWER = {
    "success": True,
    "total_modules": 1,
    "total_instructions": 812,
    "unique_registers": 57,
    "opcode_histogram": {"VLD": 96, "VMATMUL": 128, "SALU_ADD": 40},
    "execution_unit_summary": {},
    "modules": [
        {
            "kernel_name": "custom-call.1",
            "hlo_instruction_name": "custom-call.1",
            "total_instructions": 812,
            "unique_registers": 57,
            "opcode_histogram": {"VLD": 96, "VMATMUL": 128, "SALU_ADD": 40},
            "execution_unit_summary": {},
            "source_map": {},
        }
    ],
    "source_map_by_kernel": {"custom-call.1": {}},
    "source_map": {},
}


def _static(mode, data):
    """A ``get_llo_static_analysis_json`` answer, envelope as the wheel writes it."""
    return {
        "status": "OK",
        "semantics": "static_modelled_schedule",
        "semantics_note": "Static / modelled compiler schedule estimate (NOT measured hardware counters)",
        "mode": mode,
        "data": {"hlo_instruction_name": "custom-call.1", **data},
    }


STATIC = {
    "opcodes": _static(
        "opcodes",
        {
            "total_instructions": 812,
            "top_opcodes": [{"opcode": "VMATMUL", "count": 128}, {"opcode": "VLD", "count": 96}],
            "categories": [],
        },
    ),
    "bundle_util": _static(
        "bundle_util",
        {
            "hlo_module_name": "jit_step",
            "hlo_module_id": 3,
            "total_bundles": 400,
            "shown_bundles": 2,
            "truncated": True,
            "bundles": [
                {
                    "bundle": 0,
                    "mxu_used": 1,
                    "mxu_avail": 2,
                    "vector_alu_used": 1,
                    "vector_alu_avail": 4,
                },
                {
                    "bundle": 1,
                    "mxu_used": 2,
                    "mxu_avail": 2,
                    "vector_alu_used": 0,
                    "vector_alu_avail": 4,
                },
            ],
        },
    ),
    "spills": _static(
        "spills",
        {
            "summary": {
                "num_allocations": 9,
                "num_spill_allocations": 1,
                "num_scoped_allocations": 2,
                "total_allocation_bytes": 65536,
                "total_spill_bytes": 4096,
                "static_spill_bundles": 3,
                "static_fill_bundles": 5,
                "num_spill_fill_instructions": 8,
            },
            "allocations": [],
            "spill_fill_instructions": [],
        },
    ),
    "register_pressure": _static(
        "register_pressure",
        {
            "total_live_ranges": 210,
            "peak_by_register_type": {"vreg": 48, "sreg": 9},
            "hottest_bundles": [],
        },
    ),
}


def test_per_kernel_figures_from_xprofs_answers():

    got = llo_figures.summary(ANSWER, {"custom-call.1": STATIC}, {"custom-call.1": "flash"})
    assert got["success"] is True
    assert got["semantics"] == "static_modelled_schedule"
    (k,) = got["kernels"]
    assert k["kernel"] == "flash" and k["hlo_op"] == "custom-call.1"
    assert k["success"] is True and k["errors"] == {}
    assert k["instructions"] == 812 and k["unique_registers"] == 57
    assert k["opcodes"] == [["VMATMUL", 128], ["VLD", 96]]
    # Slots filled over slots available, over the bundles xprof showed (2 of 400).
    assert k["unit_utilisation"] == {"mxu": 0.75, "vector_alu": 0.125}
    assert (k["bundles"], k["bundles_read"], k["truncated"]) == (400, 2, True)
    assert k["spills"]["total_spill_bytes"] == 4096 and k["spills"]["static_fill_bundles"] == 5
    assert k["register_peaks"] == {"sreg": 9, "vreg": 48} and k["live_ranges"] == 210
    text = "\n".join(llo_figures.lines(got))
    assert (
        "llo: LLO analysis (modelled static schedule, not measured): 1 Pallas kernel(s) and "
        "0 other module(s)" in text
    )
    assert "flash (custom-call.1): 812 instructions, 57 registers" in text
    # A sample is labelled as one (issue 43: a sample of 30 bundles read as the kernel's).
    assert (
        "bundle slots filled mxu 75%, vector_alu 12% in a sample: the first 2 of 400 bundles, "
        "not the kernel's whole schedule" in text
    )
    assert "spills 4096 B in 3 bundles, fills in 5" in text
    assert "peak live registers vreg 48, sreg 9" in text


def test_a_failed_static_mode_marks_its_kernel_and_says_why():

    broken = {
        **STATIC,
        "bundle_util": {
            "status": "ERROR",
            "semantics": "static_modelled_schedule",
            "mode": "bundle_util",
            "error": "Failed to produce static analysis JSON.",
        },
    }
    got = llo_figures.summary(ANSWER, {"custom-call.1": broken}, {})
    (k,) = got["kernels"]
    assert k["success"] is False
    assert k["errors"] == {"bundle_util": "Failed to produce static analysis JSON."}
    assert k["unit_utilisation"] == {} and k["instructions"] == 812  # the rest still read
    (line,) = [line for line in llo_figures.lines(got) if "custom-call.1:" in line]
    assert "bundle_util failed: Failed to produce static analysis JSON." in line
    # Without static answers (beyond MAX_KERNELS), the module's own totals still show.
    (alone,) = llo_figures.summary(ANSWER, {}, {})["kernels"]
    assert alone["success"] is False and alone["instructions"] == 812
    assert alone["opcodes"][0] == ["VMATMUL", 128]


def _program(others: int) -> tuple[dict, dict[str, float]]:
    """``analyze_llo``'s answer for a program of two Pallas kernels (the lighter ones) and
    ``others`` XLA fusions, one more without device time, and the device time by op."""
    times = {"custom-call.1": 3.0, "custom-call.2": 1.0}
    shuffled = random.Random(others).sample(range(others), others)  # no two alike
    times |= {f"fusion.{i}": 10.0 + 7 * n for i, n in enumerate(shuffled)}
    modules = [
        {"hlo_instruction_name": op, "total_instructions": 100 + i}
        for i, op in enumerate([*times, "copy.1"])
    ]
    return {"success": True, "modules": modules}, times


@pytest.mark.parametrize("others", [3, llo_figures.OTHER_MODULES, llo_figures.OTHER_MODULES + 7])
def test_the_llo_section_leads_with_the_pallas_kernels_then_the_heaviest_modules(others, tmp_path):
    answer, times = _program(others)
    got = llo_figures.summary(
        answer,
        {},
        {"custom-call.1": "flash", "custom-call.2": "mm"},
        autotuned={"custom-call.1": "tpu.flash"},
        device_us=times,
    )
    # --json: every module, the Pallas kernels first, then the most device time.
    fusions = sorted((op for op in times if op.startswith("fusion.")), key=lambda o: -times[o])
    order = ["custom-call.1", "custom-call.2", *fusions, "copy.1"]
    assert [k["hlo_op"] for k in got["kernels"]] == order
    assert [k["pallas"] for k in got["kernels"]] == [True, True] + [False] * (others + 1)
    assert got["pallas_kernels"] == 2 and got["kernels"][0]["autotuned"] == "tpu.flash"
    assert f"2 Pallas kernel(s) and {others + 1} other module(s)" in got["line"]
    # The text: the Pallas kernels (under their autotuned kernel's name), then the
    # heaviest OTHER_MODULES others, then how many were left out and their time.
    text = llo_figures.lines(got)
    assert text[1].startswith(f"  tpu.flash: flash (custom-call.1): {units.duration(3.0)} on")
    assert text[2].startswith(f"  mm (custom-call.2): {units.duration(1.0)} on the device; ")
    shown = [line.split(":")[0].strip() for line in text if line.startswith("    ")]
    assert shown == order[2:][: llo_figures.OTHER_MODULES]
    left = order[2 + len(shown) :]
    if left:
        # copy.1, the module without device time, is the last left out.
        spent = [times[op] for op in left if op in times]
        what = (
            f"{len(left)} other modules, {units.duration(sum(spent))} on the device"
            if spent
            else "1 other module"
        )
        assert left[-1] == "copy.1"
        assert text[3] == f"  other modules, the heaviest first ({len(shown)} of {others + 1}):"
        assert text[-1] == f"  ... and {what}: {llo_figures.ALL_MODULES}"
    else:
        assert text[3] == "  other modules, the heaviest first:" and len(text) == 4 + len(shown)
    # Every module on request: the report's table with llo_all, and lines(..., None).
    every = llo_figures.lines(got, None)
    assert [line.split(":")[0].strip() for line in every if line.startswith("    ")] == order[2:]
    assert not any(line.startswith("  ... and") for line in every)
    profile = dataclasses.replace(jaxtune.Profile.from_trace(_write(tmp_path, CPU)), llo=got)
    assert ("\n".join(text) in profile.table()) and (
        "\n".join(every) in profile.table(llo_all=True)
    )


def test_the_html_page_shows_the_llo_section_as_the_text_does(tmp_path):
    answer, times = _program(llo_figures.OTHER_MODULES + 4)
    got = llo_figures.summary(answer, {}, {"custom-call.1": "flash"}, device_us=times)
    profile = dataclasses.replace(jaxtune.Profile.from_trace(_write(tmp_path, CPU)), llo=got)
    page = html.unescape(profile.to_html())
    shown = llo_figures.lines(got)
    assert shown[-1].startswith("  ... and ")
    for line in shown:
        assert f">{line.strip()}</p>" in page
    # The modules the text leaves out, the page leaves out too.
    for line in llo_figures.lines(got, None):
        assert (f">{line.strip()}</p>" in page) == (line in shown), line


FAKE_PLUGIN = """
import json, time
ANSWER = json.loads({answer!r})
STATIC = json.loads({static!r})
def built_with_embedded():
    return True
def analyze_llo(path, kernel=""):
    if {hang!r}:
        time.sleep(120)
    return ANSWER
def get_llo_static_analysis_json(path, mode="region_tree", hlo_op="", bundle=0):
    if mode == "list_ops":
        return json.dumps({{"status": "OK", "mode": mode, "data": {{"ops": ["custom-call.1"]}}}})
    if mode == "spills":
        raise RuntimeError("INTERNAL: spills crashed")
    return json.dumps(STATIC[mode])
"""


def _fake_xprof(tmp_path, monkeypatch, hang=False):
    """An importable ``xprof`` whose plugin answers like the wheel (and whose spills mode
    raises), on PYTHONPATH for the analysis child."""
    import json

    pkg = tmp_path / "fake" / "xprof" / "convert"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_pywrap_profiler_plugin.py").write_text(
        FAKE_PLUGIN.format(answer=json.dumps(ANSWER), static=json.dumps(STATIC), hang=hang)
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    return sys.executable


@pytest.mark.child
def test_report_llo_runs_each_kernels_static_analyses_in_the_child(tmp_path, monkeypatch, capsys):
    python = _fake_xprof(tmp_path, monkeypatch)
    path = _write(tmp_path, TPU % 'stats { metadata_id: 1 bytes_value: "\\x0a\\x01x" }')
    got = llo.attach(jaxtune.Profile.from_trace(path), path, python=python).llo
    (k,) = got["kernels"]
    assert k["kernel"] == "flash"  # the report's name for the kernel of custom-call.1
    assert k["unit_utilisation"]["mxu"] == 0.75
    # One mode that raised in xprof is that mode's error, not a lost analysis.
    assert k["errors"] == {"spills": "RuntimeError: INTERNAL: spills crashed"}
    monkeypatch.setattr(llo, "xprof_available", lambda python=None: True)
    assert cli_main(["report", "--llo", "--json", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["llo"]["kernels"][0]["opcodes"] == [["VMATMUL", 128], ["VLD", 96]]
    (row,) = [k for k in jaxtune.Profile.from_trace(path).kernels if k.kind == "pallas"]
    for flag in ("--llo", "--llo-all"):
        assert cli_main(["report", flag, str(path)]) == 0
        out = capsys.readouterr().out
        assert (
            f"  flash (custom-call.1): {units.duration(row.total_us)} on the device; "
            "812 instructions" in out
        )


@pytest.mark.child
def test_a_hanging_analysis_is_stopped_at_its_time_limit(tmp_path, monkeypatch):
    python = _fake_xprof(tmp_path, monkeypatch, hang=True)
    monkeypatch.setattr(llo, "LLO_TIMEOUT_S", 2)
    got = llo.analyze(_write(tmp_path, TPU % ""), "tpu", True, python=python)
    assert got["success"] is False
    assert got["line"] == "xprof's LLO analysis took over 2 s and was stopped"


@pytest.mark.child
@pytest.mark.parametrize(
    ("printed", "named"),
    [
        (
            '{"embedded": true, "seconds": {"load": "slow"}}',
            r"reply.seconds\['load'\]: expected float",
        ),
        ('{"embedded": "yes"}', r"reply.embedded: expected bool, got str 'yes'"),
        ('["embedded"]', r"reply: expected a _Reply \(a map\), got list"),
    ],
)
def test_an_answer_of_another_shape_is_a_failure_that_names_the_field(tmp_path, printed, named):
    """The xprof child's answer (written by hand: xprof's Python has no jaxtune) is read as
    a typed record: a field of the wrong kind is named in the report's line, never a
    KeyError or TypeError later."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho '{printed}'\n")
    python.chmod(0o755)
    got = llo.analyze(_write(tmp_path, TPU % ""), "tpu", True, python=str(python))
    assert got["success"] is False
    assert got["line"].startswith("xprof's LLO analysis answered in another shape ("), got
    assert re.search(named, got["line"]), got["line"]


#: An llo_proto that the wheel's analysis reads: a LloModuleProto whose field 1
#: (hlo_instruction_name) is "custom-call.1", on the kernel's /host:metadata event.
LLO_MODULE = (
    'event_metadata { key: 5 value { id: 5 name: "custom-call.1" '
    'stats { metadata_id: 1 bytes_value: "\\x0a\\x0dcustom-call.1" } } }'
)


@pytest.mark.child  # the analysis runs in a bounded child process
@NEEDS_XPROF
def test_the_real_embedded_analysis_answers_per_kernel(tmp_path):
    path = _write(tmp_path, TPU % LLO_MODULE)
    got = llo.attach(jaxtune.Profile.from_trace(path), path, python=XPROF_PYTHON).llo
    assert got["success"] is True, got
    assert got["semantics"] == "static_modelled_schedule"
    (k,) = got["kernels"]
    assert (k["hlo_op"], k["kernel"], k["llo_module"]) == (
        "custom-call.1",
        "flash",
        "custom-call.1",
    )
    # Every static mode answered OK: a module without instructions has zero of everything.
    assert k["success"] is True and k["errors"] == {}
    assert k["instructions"] == 0 and k["bundles"] == 0 and k["spills"]["total_spill_bytes"] == 0
