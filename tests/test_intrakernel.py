"""Inside a TPU kernel (docs/profiling.md, "Inside a TPU kernel: custom-call tracing" and "Event
drops"): the lines custom-call tracing adds, read per kernel, on TPU-shaped traces written as
text protos with XProf's plane, line and stat names, their lines starting at epoch-scale
timestamps as real traces' do; event drops said at the top of the report with the flag
change."""

from __future__ import annotations

import json
import re

import pytest
from hostile.traces import EPOCH_NS
from jax.profiler import ProfileData

import jaxtune
from jaxtune._profiling import intrakernel

KERNEL = "jit(step)/jaxtune[lib.flash#0123456789]/flash/pallas_call"

#: A flash-attention-like kernel (two calls, 1 us each) and a fusion, with custom-call
#: tracing lines. Stat ids: 1 tf_op, 2 hlo_category, 3 pallas_primitive, 4 source_info,
#: 5 cycles, 6 tensor_core_freq_hz, 7 dropped_traces, 8 custom_call_target, 9 tf_op_name,
#: 14 long_name.
TRACE = """
planes {
  id: 1 name: "/device:TPU:0"
  stats { metadata_id: 6 double_value: 940000000.0 }
  %(plane_stats)s
  lines { id: 1 name: "XLA Ops" timestamp_ns: %(ops_ns)d
    events { metadata_id: 1 offset_ps: 0 duration_ps: 1000000 }
    events { metadata_id: 2 offset_ps: 1000000 duration_ps: 500000 }
    events { metadata_id: 1 offset_ps: 2000000 duration_ps: 1000000 }
  }
%(intra)s
  event_metadata { key: 1 value { id: 1 %(kernel_metadata)s } }
  event_metadata { key: 2 value { id: 2 name: "fusion.2"
    stats { metadata_id: 1 str_value: "jit(step)/tanh" } } }
  event_metadata { key: 10 value { id: 10 name: "vmatmul" } }
  event_metadata { key: 11 value { id: 11 name: "vadd" } }
  event_metadata { key: 12 value { id: 12 name: "vmax" } }
  event_metadata { key: 13 value { id: 13 name: "vexp" } }
  event_metadata { key: 20 value { id: 20 name: "primitive" } }
  event_metadata { key: 30 value { id: 30 name: "valu" } }
  event_metadata { key: 31 value { id: 31 name: "mxu" } }
  event_metadata { key: 40 value { id: 40 name: "line" } }
  stat_metadata { key: 1 value { id: 1 name: "tf_op" } }
  stat_metadata { key: 2 value { id: 2 name: "hlo_category" } }
  stat_metadata { key: 3 value { id: 3 name: "pallas_primitive" } }
  stat_metadata { key: 4 value { id: 4 name: "source_info" } }
  stat_metadata { key: 5 value { id: 5 name: "cycles" } }
  stat_metadata { key: 6 value { id: 6 name: "tensor_core_freq_hz" } }
  stat_metadata { key: 7 value { id: 7 name: "dropped_traces" } }
  stat_metadata { key: 8 value { id: 8 name: "custom_call_target" } }
  stat_metadata { key: 9 value { id: 9 name: "tf_op_name" } }
  stat_metadata { key: 14 value { id: 14 name: "long_name" } }
}
%(metadata_plane)s
"""

#: The custom-call tracing lines; their offsets count from the XLA Ops line's start.
INTRA = """
  lines { id: 2 name: "LLO Ops" timestamp_ns: %(intra_ns)d
    events { metadata_id: 10 offset_ps: 0 duration_ps: 200000 }
    events { metadata_id: 11 offset_ps: 300000 duration_ps: 0 }
    events { metadata_id: 12 offset_ps: 300000 duration_ps: 0 }
    events { metadata_id: 13 offset_ps: 700000 duration_ps: 300000 }
    %(stray)s
  }
  lines { id: 3 name: "Pallas Primitives" timestamp_ns: %(intra_ns)d
    events { metadata_id: 20 offset_ps: 0 duration_ps: 600000
             stats { metadata_id: 3 str_value: "dot_general" } }
    events { metadata_id: 20 offset_ps: 600000 duration_ps: 400000
             stats { metadata_id: 3 str_value: "exp" } }
    events { metadata_id: 20 offset_ps: 2000000 duration_ps: 500000
             stats { metadata_id: 3 str_value: "dot_general" } }
  }
  lines { id: 4 name: "VALU Instructions" timestamp_ns: %(intra_ns)d
    events { metadata_id: 30 offset_ps: 0 duration_ps: 400000 }
    events { metadata_id: 30 offset_ps: 2000000 duration_ps: 300000 }
  }
  lines { id: 5 name: "MXU0 Instructions" timestamp_ns: %(intra_ns)d
    events { metadata_id: 31 offset_ps: 100000 duration_ps: 0
             stats { metadata_id: 5 int64_value: 470 } }
  }
  lines { id: 6 name: "Source Lines" timestamp_ns: %(intra_ns)d
    events { metadata_id: 40 offset_ps: 0 duration_ps: 700000
             stats { metadata_id: 4 str_value: "flash.py:120" } }
  }
"""


def _stat(metadata_id: int, value: str) -> str:
    return f'stats {{ metadata_id: {metadata_id} str_value: "{value}" }}'


#: The kernel's XLA Ops metadata as a capture with HLO protos sees it (target and all).
CAPTURED = f'name: "custom-call.1" {_stat(1, KERNEL)} {_stat(8, "tpu_custom_call")}'


def _trace(
    tmp_path,
    *,
    plane_stats="",
    stray="",
    kernel_metadata=CAPTURED,
    metadata_plane="",
    intra_earlier_ns=0,
):
    """The trace, its lines at epoch scale; the intra-kernel lines start
    ``intra_earlier_ns`` before XLA Ops (their events' offsets later by as much)."""
    shift = intra_earlier_ns * 1000
    intra = re.sub(
        r"offset_ps: (\d+)",
        lambda m: f"offset_ps: {int(m[1]) + shift}",
        INTRA % {"intra_ns": EPOCH_NS - intra_earlier_ns, "stray": stray},
    )
    text = TRACE % {
        "plane_stats": plane_stats,
        "ops_ns": EPOCH_NS,
        "intra": intra,
        "kernel_metadata": kernel_metadata,
        "metadata_plane": metadata_plane,
    }
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(ProfileData.text_proto_to_serialized_xspace(text))
    return path


def test_kernel_rows_do_not_count_the_intra_kernel_lines(tmp_path):
    p = jaxtune.Profile.from_trace(_trace(tmp_path))
    (row,) = p.kernels
    assert (row.kernel_id, row.name, row.calls) == ("lib.flash", "flash", 2)
    assert row.total_us == pytest.approx(2.0)
    assert p.total_us == pytest.approx(2.5)  # XLA Ops alone: 2 x 1 us + 0.5 us
    assert not p.warnings


@pytest.mark.parametrize("intra_earlier_ns", [0, 1_500], ids=["same-start", "earlier-start"])
def test_per_unit_times_top_primitives_and_interpolated_spans(tmp_path, intra_earlier_ns):
    # Epoch-scale lines (~1.7e21 ps: past int64) were reported as a damaged trace; an
    # intra-kernel line that starts before XLA Ops is placed by the difference.
    p = jaxtune.Profile.from_trace(_trace(tmp_path, intra_earlier_ns=intra_earlier_ns))
    (inside,) = p.intrakernel
    assert (inside.kernel_id, inside.calls, inside.total_us) == ("lib.flash", 2, 2.0)
    # VALU's events (0.4 + 0.3 us); MXU0's one event carries cycles only:
    # 470 cycles / 940 MHz (the plane's tensor_core_freq_hz) = 0.5 us.
    assert inside.units == pytest.approx({"MXU0 Instructions": 0.5, "VALU Instructions": 0.7})
    assert dict(inside.primitives) == pytest.approx({"dot_general": 1.1, "exp": 0.4})
    assert inside.primitives[0][0] == "dot_general"
    assert dict(inside.sources) == pytest.approx({"flash.py:120": 0.7})
    # The first call's spans: measured regions as they are, the two instants between
    # 0.2 us and 0.7 us sharing that gap evenly; together exactly the call's 1 us.
    got = [
        (s.name, round(s.start_us, 6), round(s.duration_us, 6), s.estimate) for s in inside.spans
    ]
    assert got == [
        ("vmatmul", 0.0, 0.2, False),
        ("vadd", 0.2, 0.25, True),
        ("vmax", 0.45, 0.25, True),
        ("vexp", 0.7, 0.3, False),
    ]
    assert sum(s.duration_us for s in inside.spans) == pytest.approx(1.0)
    table = p.table()
    assert "inside lib.flash:flash (2 calls" in table
    assert "by unit: MXU0 Instructions 0.5 us, VALU Instructions 0.7 us" in table
    assert "0.50 us of them estimated" in table
    # Each unit's lane of the first call; MXU0's event is timed from cycles: an estimate.
    assert [(s.name, s.estimate) for s in inside.unit_spans["MXU0 Instructions"]] == [("mxu", True)]
    assert [round(s.duration_us, 6) for s in inside.unit_spans["VALU Instructions"]] == [0.4]
    doc = json.loads(p.to_json())
    assert doc["intrakernel"][0]["units"] == pytest.approx(inside.units)
    page = p.to_html()
    assert 'data-chart="intrakernel"' in page and "MXU0 Instructions" in page


def test_spans_with_no_events_between_trace_points_are_one_estimate():
    regions = [intrakernel._Event(start=100, end=300, name="a")]
    spans = intrakernel.spans_of(0, 1000, regions)
    assert [(s.name, s.estimate) for s in spans] == [
        ("(between trace points)", True),
        ("a", False),
        ("(between trace points)", True),
    ]
    assert sum(s.duration_us for s in spans) == pytest.approx(1000 * 1e-6)


def test_dropped_traces_is_a_warning_at_the_top_with_the_flag_change(tmp_path):
    path = _trace(tmp_path, plane_stats="stats { metadata_id: 7 int64_value: 17 }")
    p = jaxtune.Profile.from_trace(path)
    (warning,) = p.warnings
    assert warning.startswith("the trace dropped 17 events")
    assert "trace_best_effort_frequency=100,trace_guaranteed_frequency=100" in warning
    assert "xla_tpu_bundle_instrumentation_options" in warning
    # At the top, wrapped between words only: the flags stay whole, to be copied.
    lines = p.table().splitlines()
    top = "\n".join(lines[: next(i for i, x in enumerate(lines) if x.startswith("tpu"))])
    assert top.startswith("warning: the trace dropped 17 events")
    assert " ".join(top.split()) == f"warning: {' '.join(warning.split())}"
    assert all(len(line) <= 120 or " " not in line.strip() for line in top.splitlines())
    assert f"warning: {warning}" in p.to_html() or "warning: the trace dropped 17" in p.to_html()
    assert json.loads(p.to_json())["warnings"] == [warning]


def test_a_kernel_that_lost_its_end_is_a_warning(tmp_path):
    # An LLO event at 5 us: no kernel event is around it (its Begin/End were dropped).
    stray = "events { metadata_id: 11 offset_ps: 5000000 duration_ps: 100000 }"
    p = jaxtune.Profile.from_trace(_trace(tmp_path, stray=stray))
    (warning,) = p.warnings
    assert "1 intra-kernel events lie outside every kernel event" in warning
    assert "Begin/End events were lost" in warning
    assert "trace_best_effort_frequency=100" in warning


#: The XLA Ops metadata of a Pallas kernel in a trace without HLO protos (a trimmed trace,
#: another tool's export): ``hlo_category: custom-call``, no ``custom_call_target`` stat,
#: the name stack under each stat name XLA and XProf write, or in the op's long name (its
#: HLO text, XProf's ``long_name``; the metadata's name when it has a display name).
STACK = "jit(step)/jit(flash)/pallas_call"
#: The op's HLO text (quotes escaped for the text proto).
HLO_TEXT = (
    "%custom-call.1 = f32[8,128]{1,0} custom-call(f32[8,128]{1,0} %p0), "
    f'custom_call_target=\\"tpu_custom_call\\", metadata={{op_name=\\"{STACK}\\"}}'
)
TRACE_ONLY = {
    "tf_op": f'name: "custom-call.1" {_stat(1, STACK)}',
    "tf_op_name": f'name: "custom-call.1" {_stat(9, STACK)}',
    "long_name stack": f'name: "custom-call.1" {_stat(14, STACK)}',
    "long_name HLO": f'name: "custom-call.1" {_stat(14, HLO_TEXT)}',
    "display_name": f'name: "{HLO_TEXT}" display_name: "custom-call.1"',
}
#: A metadata plane without HLO protos.
NO_HLO = """
planes {
  id: 2 name: "/host:metadata"
  event_metadata { key: 1 value { id: 1 name: "jit_step" stats { metadata_id: 1 int64_value: 7 } } }
  stat_metadata { key: 1 value { id: 1 name: "program_id" } }
}
"""


@pytest.mark.parametrize("where", sorted(TRACE_ONLY))
def test_a_kernel_known_only_from_the_trace_is_listed_with_its_lanes(tmp_path, where):
    meta = f"{TRACE_ONLY[where]} {_stat(2, 'custom-call')}"
    p = jaxtune.Profile.from_trace(_trace(tmp_path, kernel_metadata=meta, metadata_plane=NO_HLO))
    assert [(k.name, k.kind, k.calls, k.hlo_op) for k in p.kernels] == [
        ("flash", "pallas", 2, "custom-call.1")
    ]
    assert p.kernels[0].total_us == pytest.approx(2.0)
    assert [o.name for o in p.ops] == ["fusion.2"]
    (inside,) = p.intrakernel
    assert (inside.name, inside.calls) == ("flash", 2)
    assert inside.units == pytest.approx({"MXU0 Instructions": 0.5, "VALU Instructions": 0.7})
    table = p.table()
    assert "kernels: none" not in table
    assert "inside flash (2 calls, 2.0 us):" in table
    assert "by unit: MXU0 Instructions 0.5 us, VALU Instructions 0.7 us" in table
    if where == "long_name HLO":  # the HLO text names the target too
        assert p.kernels[0].target == "tpu_custom_call"
