"""``jaxtune report --llo`` (issue 24): xprof's embedded LLO analysis where it can run, and
one line saying why and what to do where it cannot."""

from __future__ import annotations

import importlib.util
import os

import pytest
from jax.profiler import ProfileData

from jaxtune._cli import main as cli_main
from jaxtune._profiling import llo, xplane

#: A TPU-shaped trace; ``%s`` is the /host:metadata plane's stats (an llo_proto or none).
TPU = """
planes {
  id: 1 name: "/device:TPU:0"
  lines { id: 1 name: "XLA Ops" timestamp_ns: 1000
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
"""
CPU = """
planes { id: 1 name: "/host:CPU"
  lines { id: 1 name: "tf_XLAEigen" timestamp_ns: 0
    events { metadata_id: 1 offset_ps: 0 duration_ps: 1000 stats { metadata_id: 1 str_value: "add.1" } } }
  event_metadata { key: 1 value { id: 1 name: "add.1" } }
  stat_metadata { key: 1 value { id: 1 name: "hlo_op" } } }
"""

#: Where xprof is: this Python (the jaxtune[xprof] extra), or JAXTUNE_XPROF_PYTHON.
XPROF_PYTHON = os.environ.get("JAXTUNE_XPROF_PYTHON")
HAS_XPROF = XPROF_PYTHON is not None or importlib.util.find_spec("xprof") is not None


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
    import json

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


@pytest.mark.skipif(not HAS_XPROF, reason="xprof not installed (pip install 'jaxtune[xprof]')")
def test_xprof_is_called_for_real_on_a_trace_without_llo_data(tmp_path):
    got = llo.analyze(_write(tmp_path, TPU % ""), "tpu", False, python=XPROF_PYTHON)
    assert got["success"] is False
    assert got["line"].startswith("the trace holds no LLO data (no llo_proto stat")
    assert "--xla_xprof_register_llo_debug_info=true" in got["line"]
    assert got["answer"] == {"success": False}  # xprof's own answer, kept


@pytest.mark.skipif(not HAS_XPROF, reason="xprof not installed (pip install 'jaxtune[xprof]')")
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
