"""The profile's text tables and its HTML page (``jaxtune report [--top N] [--html OUT]``):
docs/reports.md, "A profile: jaxtune report PATH --html OUT, Profile.to_html()", and
docs/profiling.md, "The tables"."""

from __future__ import annotations

import re
import sys

import pytest
from test_profiled import TPU_TRACE, write_trace

import jaxtune
from jaxtune._cli import main as cli_main
from jaxtune._core.vocabulary import CaptureInfo
from jaxtune._profiling import report as _report

COSTS = {"tiled_matmul": {"flops": 2e9, "bytes_accessed": 1e6}}


NO_PEAKS_TRACE = TPU_TRACE.replace("stats { metadata_id: 10 double_value: 197.0 }", "").replace(
    "stats { metadata_id: 11 double_value: 819.0 }", ""
)


def tpu_profile(tmp_path, device_kind="TPU v5 lite", trace=TPU_TRACE):
    path = write_trace(tmp_path, trace)
    info = CaptureInfo(costs=COSTS, device_kind=device_kind)
    return _report.report_from_trace(path, info=info, iterations=2), path


def test_table_has_a_kernels_table_and_an_ops_table(tmp_path):
    table = tpu_profile(tmp_path)[0].table(top=2)
    # Rows group by autotuned kernel (its Pallas kernels beneath it): top 2 of 3 groups.
    kernels_at = table.index("kernels (top 2 of 3: one row per autotuned kernel")
    ops_at = table.index("XLA ops (top 1 of 1)")
    assert kernels_at < ops_at
    assert "fusion.2" in table[ops_at:] and "fusion.2" not in table[:ops_at]
    assert "tiled_matmul" in table[kernels_at:ops_at] and "lib.norm" not in table


def test_unknown_bound_has_a_footnote_that_says_how_to_supply_it(tmp_path):
    table = tpu_profile(tmp_path)[0].table()
    assert "unknown*" in table
    assert re.search(r"no FLOP count \(no_cost, lib\.norm\): .*cost_estimate=", table, re.S)
    cpu_table = tpu_profile(tmp_path, device_kind="cpu", trace=NO_PEAKS_TRACE)[0].table()
    # With FLOPs and bytes known, only the device's peaks are missing.
    assert "no peak FLOP/s and bandwidth for device 'cpu' (tiled_matmul)" in cpu_table
    assert "PEAKS" in cpu_table


def test_one_unit_per_column_chosen_by_magnitude(tmp_path):
    table = tpu_profile(tmp_path)[0].table()
    header = next(line for line in table.splitlines() if line.startswith("name"))
    assert "total us" in header and "TFLOP/s" in header
    assert "400.0" in table  # 4e9 FLOPs in 10 us, in TFLOP/s
    stats = [s for s in tpu_profile(tmp_path)[0].kernels]
    from jaxtune._profiling.table import stat_rows

    slow = [stats[0].__class__(name="a", kind="pallas", total_us=957_000.0, mean_us=1.0)]
    fast = [stats[0].__class__(name="b", kind="pallas", total_us=33_516.7, mean_us=1.0)]
    header, rows = stat_rows(slow + fast, mark_unknown=False)
    assert header[3] == "total ms" and [r[3] for r in rows] == ["957.0", "33.5"]


def test_profile_html_is_one_self_contained_page_with_three_charts(tmp_path):
    profile, _ = tpu_profile(tmp_path)
    page = profile.to_html()
    for chart in ("share", "roofline", "timeline"):
        assert f'data-chart="{chart}"' in page
    assert page.count("<svg") == 3
    for name in ("tiled_matmul", "no_cost", "lib.norm", "fusion.2"):
        assert name in page
    assert "compute 197 TFLOP/s" in page and "memory 819 GB/s" in page
    assert "FLOPs/bytes from cost_estimate" in page
    # Nothing is fetched at view time: no scripts, stylesheets or images by address.
    assert not re.search(r"<script|<link|<img|<iframe|url\((?!#)|@import", page)
    assert not re.search(r"(src|href)=\"?https?:", page)


def test_roofline_without_peaks_says_how_to_get_roofs(tmp_path):
    page = tpu_profile(tmp_path, device_kind="cpu", trace=NO_PEAKS_TRACE)[0].to_html()
    assert "No roofs: no peak FLOP/s and bandwidth known for &#x27;cpu&#x27;" in page
    assert "compute 197" not in page


def test_report_html_writes_the_page(tmp_path, capsys):
    path = write_trace(tmp_path, TPU_TRACE)
    out = tmp_path / "site" / "report.html"
    assert cli_main(["report", str(path), "--html", str(out)]) == 0
    assert out.read_text().count('class="chart"') == 3
    assert f"wrote {out}" in capsys.readouterr().err


def test_without_matplotlib_the_command_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    profile, path = tpu_profile(tmp_path)
    with pytest.raises(jaxtune.PlotsUnavailableError, match=r"pip install 'jaxtune\[plots\]'"):
        profile.to_html()
    assert cli_main(["report", str(path), "--html", str(tmp_path / "r.html")]) == 2
    assert "pip install 'jaxtune[plots]'" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_timeline_survives_json(tmp_path):
    profile, _ = tpu_profile(tmp_path)
    assert [(s.name, s.start_us, s.duration_us) for s in profile.timeline[:2]] == [
        ("tiled_matmul", 0.0, 4.0),
        ("fusion.2", 5.0, 1.0),
    ]
    assert '"timeline"' in profile.to_json()


def test_a_captured_trace_reads_back_with_what_the_capture_knew(tmp_path, capsys):
    folder = tmp_path / "trace"
    folder.mkdir()
    write_trace(folder, TPU_TRACE)
    info = CaptureInfo(costs=COSTS, device_kind="TPU v5 lite", platform="tpu")
    first = _report.report_from_trace(folder, info=info, iterations=2)
    again = _report.report_from_trace(folder)
    assert again.kernels == first.kernels and again.iterations == 2
    assert again.kernels[0].flops_source == "cost_estimate"
    assert cli_main(["report", str(folder / "trace.xplane.pb")]) == 0
    assert "cost_estimate" in capsys.readouterr().out
