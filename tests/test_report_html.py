"""The profile's text tables and its HTML page (``jaxtune report [--top N] [--html OUT]``):
docs/reports.md, "A profile: jaxtune report PATH --html OUT, Profile.to_html()", and
docs/profiling.md, "The tables"."""

from __future__ import annotations

import html
import itertools
import pathlib
import re
import sys

import pytest
from test_profiled import TPU_TRACE, write_trace

import jaxtune
from jaxtune._cli import main as cli_main
from jaxtune._core.vocabulary import CaptureInfo
from jaxtune._profiling import report as _report
from jaxtune._profiling import table

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


V5E = pathlib.Path(__file__).parent / "fixtures" / "v5e"


def _table_rows(page: str, name: str) -> list[tuple[str, list[str]]]:
    """``(row class, cell texts)`` of the page's table ``name``, tags and breaks removed."""
    body = page[page.index(f'data-table="{name}"') :]
    body = body[: body.index("</table>")]
    rows = []
    for cls, cells in re.findall(r'<tr(?: class="(\w*)")?>(.*?)</tr>', body.split("<tbody>")[1]):
        texts = re.findall(r"<td[^>]*>(.*?)</td>", cells)
        rows.append((cls, [html.unescape(re.sub(r"<[^>]+>", "", t)) for t in texts]))
    return rows


def _chart_texts(page: str, name: str) -> list[str]:
    chart = page[page.index(f'data-chart="{name}"') :]
    chart = chart[: chart.index("</figure>")]
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", chart)]


@pytest.mark.child  # reading a v5e trace counts its Mosaic bodies in a child (mosaic_work)
@pytest.mark.parametrize("fixture", ["flash_grad", "nnx_step", "flash_fwd", "matmul"])
def test_page_groups_kernels_as_the_text_table_does(fixture):
    p = jaxtune.Profile.from_trace(V5E / f"{fixture}.xplane.pb")
    page = p.to_html()
    rows = _table_rows(page, "kernels")
    text = p.table(top=50).split("\nXLA ops")[0]
    # Each row of the page is a row of the text table: same name (indented there under
    # its head row), kind and figures, the "!" marks included.
    for cls, cells in rows:
        indent = "  " if cls == "part" else ""
        line = r"\s+".join(re.escape(c) for c in cells[:10])
        assert re.search(rf"^{indent}{line}\s*$", text, re.M), (cells, text)
    below = text.split("\n-----")[1].splitlines()[1:]
    shown = [line for line in itertools.takewhile(lambda x: x and x[0] not in "*!", below)]
    assert len(rows) == len(shown)
    # One head row per autotuned kernel, named by its id, over its parts; no flat
    # ``id:name`` row, and each part beneath the head it belongs to.
    ids = {k.kernel_id for k in p.kernels if k.kind == "pallas" and k.kernel_id}
    heads = [cells for cls, cells in rows if cls == "head"]
    assert sorted(cells[0] for cells in heads) == sorted(ids) and ids
    assert all(cells[1] == "autotuned" for cells in heads)
    for kernel_id in ids:
        assert not any(cells[0].startswith(f"{kernel_id}:") for _, cells in rows)
    at = [i for i, (cls, _) in enumerate(rows) if cls == "head"]
    for start, end in zip(at, [*at[1:], len(rows)], strict=True):
        kernel_id = rows[start][1][0]
        beneath = [cells for cls, cells in rows[start + 1 : end] if cls == "part"]
        assert {c[0] for c in beneath if c[1] == "pallas"} == {
            k.name for k in p.kernels if k.kernel_id == kernel_id and k.kind == "pallas"
        }
    assert "one row per autotuned kernel, its Pallas kernels beneath it" in page


@pytest.mark.child  # reading a v5e trace counts its Mosaic bodies in a child, unless a test
# before it in this process read the same trace
def test_page_marks_figures_above_peak_with_the_text_tables_footnote():
    p = jaxtune.Profile.from_trace(V5E / "flash_grad.xplane.pb")
    page = p.to_html()
    rows = _table_rows(page, "kernels")
    (around,) = [cells for _, cells in rows if cells[0] == table.AROUND]
    assert around[1] == "xla" and around[7].endswith(table.OVER_PEAK)
    assert float(around[7][:-1]) > 819  # GB/s, above v5e's 819 GB/s
    # Every figure above the peak is marked, and none other, in both tables.
    peak_flops, peak_bytes = 197e12, 819e9
    for name in ("kernels", "ops"):
        header = re.findall(r"<th[^>]*>(.*?)</th>", page[page.index(f'data-table="{name}"') :])
        flops_unit, bytes_unit = header[6], header[7]
        scale = {
            "T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "": 1.0
        }  # fmt: skip
        for _, cells in _table_rows(page, name):
            for cell, unit, limit in (
                (cells[6], flops_unit.removesuffix("FLOP/s"), peak_flops),
                (cells[7], bytes_unit.removesuffix("B/s"), peak_bytes),
            ):
                if cell != "-":
                    above = float(cell.rstrip(table.OVER_PEAK)) * scale[unit] > limit * 1.001
                    assert cell.endswith(table.OVER_PEAK) == above, (name, cells)
    notes = [html.unescape(n) for n in re.findall(r'<p class="note[^"]*">(.*?)</p>', page)]
    assert "! above the device's peak (TPU v5e: 197 TFLOP/s, 819 GB/s" in "\n".join(notes)
    assert any(
        n.startswith(f"tpu.flash_attention {table.AROUND}: bytes from XLA's cost analysis")
        for n in notes
    )
    # The text table says the same.
    assert f"tpu.flash_attention {table.AROUND}: bytes from XLA's cost analysis" in (
        " ".join(p.table().split())
    )


@pytest.mark.child  # a v5e trace's Mosaic bodies are counted in a child (mosaic_work)
def test_charts_draw_each_kernel_once_not_the_head_rows():
    p = jaxtune.Profile.from_trace(V5E / "flash_grad.xplane.pb")
    page = p.to_html()
    shares = [float(t.strip()[:-1]) for t in _chart_texts(page, "share") if t.endswith("%")]
    # Four kernels and one bar of XLA ops: their shares, never the head row's 99.7 %.
    assert len(shares) == 5 and sum(shares) == pytest.approx(100.0, abs=0.3)
    labels = " ".join(_chart_texts(page, "share"))
    assert f"tpu.flash_attention {table.AROUND}" in labels
    assert "tpu.flash_attention:_flash_attention_" in labels
