"""The profile's timeline (docs/reports.md, "A profile: jaxtune report PATH --html OUT,
Profile.to_html()"): each kernel drawn only where it ran, never one bar across a gap; a trace
with more spans than a chart can hold thinned over the whole run, and the page says how."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hostile.traces import EPOCH_NS, TPU_TRACE
from test_profiled import write_trace

from jaxtune._core.vocabulary import CaptureInfo
from jaxtune._profiling import events as _events
from jaxtune._profiling import report as _report
from jaxtune._profiling import timeline as _timeline

_HEAD, _TAIL = TPU_TRACE.split("  event_metadata", 1)
_LINE_START = _HEAD.index("    events")
_LINE_END = _HEAD.index("  }\n", _LINE_START)


def tpu_trace(events: list[tuple[int, int, int]]) -> str:
    """TPU_TRACE with its ``XLA Ops`` line replaced: ``(metadata id, start us, us)``."""
    lines = "".join(
        f"    events {{ metadata_id: {m} offset_ps: {s * 10**6} duration_ps: {d * 10**6} }}\n"
        for m, s, d in events
    )
    return _HEAD[:_LINE_START] + lines + _HEAD[_LINE_END:] + "  event_metadata" + _TAIL


def profile_of(tmp_path, text):
    info = CaptureInfo(device_kind="TPU v5 lite", platform="tpu")
    return _report.report_from_trace(write_trace(tmp_path, text), info=info, iterations=3)


def bars(profile, name):
    return [(s.start_us, s.duration_us) for s in profile.timeline if s.name == name]


def test_a_kernel_that_ran_three_times_is_three_bars_not_one_over_the_gaps(tmp_path):
    # tiled_matmul (id 1) runs, the device idles, it runs again, then fusion.2 (id 2) and
    # no_cost (id 3), then tiled_matmul once more: one bar per stretch it ran.
    p = profile_of(tmp_path, tpu_trace([(1, 0, 4), (1, 10, 4), (2, 20, 2), (3, 23, 5), (1, 30, 4)]))
    assert bars(p, "tiled_matmul") == [(0.0, 4.0), (10.0, 4.0), (30.0, 4.0)]
    # No bar of it is drawn over the kernel that ran in between.
    (other,) = bars(p, "no_cost")
    assert not any(s < other[0] + other[1] and other[0] < s + d for s, d in bars(p, "tiled_matmul"))
    assert p.timeline_joined_us == 0.0 and all(s.spans == 1 for s in p.timeline)
    page = p.to_html()
    assert "All 5 spans drawn, each a stretch of time one kernel ran without a gap." in page


def test_events_that_touch_are_one_span(tmp_path):
    p = profile_of(tmp_path, tpu_trace([(1, 0, 4), (1, 4, 3), (2, 8, 1), (1, 9, 1)]))
    assert bars(p, "tiled_matmul") == [(0.0, 7.0), (9.0, 1.0)]
    assert [s.spans for s in p.timeline if s.name == "tiled_matmul"] == [1, 1]


TWO_STREAMS = """
planes {
  id: 2 name: "/device:GPU:0"
  lines { id: 7 name: "Stream #7" timestamp_ns: START_NS
    events { metadata_id: 1 offset_ps: 0 duration_ps: 3000000
             stats { metadata_id: 1 str_value: "custom-call.5" }
             stats { metadata_id: 2 str_value: "jit_step" } }
    events { metadata_id: 1 offset_ps: 100000000 duration_ps: 3000000
             stats { metadata_id: 1 str_value: "custom-call.5" }
             stats { metadata_id: 2 str_value: "jit_step" } }
  }
  lines { id: 8 name: "Stream #8" timestamp_ns: LATER_NS
    events { metadata_id: 2 offset_ps: 0 duration_ps: 1000000
             stats { metadata_id: 1 str_value: "loop_fusion" }
             stats { metadata_id: 2 str_value: "jit_step" } }
  }
  event_metadata { key: 1 value { id: 1 name: "softmax_kernel"
    stats { metadata_id: 3 str_value: "jit(step)/softmax/pallas_call" } } }
  event_metadata { key: 2 value { id: 2 name: "loop_fusion_kernel" } }
  stat_metadata { key: 1 value { id: 1 name: "hlo_op" } }
  stat_metadata { key: 2 value { id: 2 name: "hlo_module" } }
  stat_metadata { key: 3 value { id: 3 name: "tf_op" } }
}
""".replace("START_NS", str(EPOCH_NS)).replace("LATER_NS", str(EPOCH_NS + 50_000))


def test_a_kernel_on_one_stream_is_not_drawn_across_another_streams_work(tmp_path):
    # softmax runs on stream 7 at 0 us and at 100 us; loop_fusion on stream 8 at 50 us
    # (its line starts 50 us later, at epoch scale). Nothing else ran on stream 7, which
    # once made softmax one bar from 0 to 103 us, over loop_fusion.
    p = _report.report_from_trace(write_trace(tmp_path, TWO_STREAMS))
    assert [(s.name, s.start_us, s.duration_us) for s in p.timeline] == [
        ("softmax", 0.0, 3.0),
        ("loop_fusion", 50.0, 1.0),
        ("softmax", 100.0, 3.0),
    ]


def test_a_long_trace_is_thinned_over_the_whole_run_and_the_page_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(_events, "TIMELINE_SPANS", 8)
    # 200 calls, kernels alternating, each after a 1 us gap: 200 spans, the last at 599 us.
    calls = [(1 if i % 2 else 3, 3 * i, 2) for i in range(200)]
    p = profile_of(tmp_path, tpu_trace(calls))
    assert 0 < len(p.timeline) <= 8
    assert sum(s.spans for s in p.timeline) == 200
    # Over the whole run, not its first stretch: the bars reach the last call's end.
    assert p.timeline[0].start_us == 0.0
    assert max(s.start_us + s.duration_us for s in p.timeline) == pytest.approx(599.0)
    assert p.timeline_joined_us > 0
    assert json.loads(p.to_json())["timeline_joined_us"] == p.timeline_joined_us
    page = p.to_html()
    assert f"{len(p.timeline)} bars for 200 spans" in page
    assert "over the whole run (never only its first part)" in page


def test_join_keeps_owners_apart_and_counts_what_it_joined():
    rows = np.array(
        [[0, 4, 0, 1], [4, 6, 0, 1], [5, 9, 1, 1], [8, 10, 0, 1], [30, 31, 0, 1]],
        dtype=np.int64,
    )
    assert _timeline.join(rows, 0).tolist() == [
        [0, 6, 0, 2],
        [5, 9, 1, 1],
        [8, 10, 0, 1],
        [30, 31, 0, 1],
    ]
    assert _timeline.join(rows, 2).tolist() == [[0, 10, 0, 3], [5, 9, 1, 1], [30, 31, 0, 1]]
    thinned, gap = _timeline.joined(rows, most=2)
    assert len(thinned) <= 2 and thinned[:, 3].sum() == 5 and gap > 0
    assert _timeline.joined(rows, most=10)[1] == 0
