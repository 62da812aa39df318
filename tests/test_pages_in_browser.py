"""Both HTML pages laid out by headless Chromium in a 1400 px window (docs/reports.md, "The
browser check"): nothing wider than its box or the window, sorted as they say, the stored config
and the pass timed shown. Skipped, saying why, where Chromium is not installed (``apt-get
install -y chromium``; ``.ci/run`` installs it)."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import shutil

import extras
import pytest
from test_pages_read_right import flash_entry, profile_with_an_autotuned_kernel
from test_sweep_html import one_knob_entry, two_knob_entry

import jaxtune

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.child,
    extras.skip_unless(
        any(shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")),
        reason=(
            "no headless Chromium on PATH (chromium, chromium-browser or google-chrome): these "
            "tests lay the pages out in a real browser engine, which no Python package does "
            "(apt-get install -y chromium; .ci/run installs it)"
        ),
    ),
]


def _render_reports():
    spec = importlib.util.spec_from_file_location(
        "render_reports", ROOT / "tools" / "render_reports.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _laid_out(path: pathlib.Path):
    tool = _render_reports()
    laid = tool.layout(path, tool.SHOWN[path.name])
    assert laid["window"] == 1400
    assert laid["page"] <= 1400, laid["overflow"]
    assert laid["overflow"] == [], laid["overflow"]
    for selector, boxes in laid["wanted"].items():
        assert boxes, selector
        for box in boxes:
            assert box["shown"] and box["width"] > 0 and box["left"] >= 0, (selector, box)
            assert box["right"] <= 1400, (selector, box)
    return laid


def test_the_sweep_page_fits_1400_px_and_shows_the_stored_config_and_pass(tmp_path):
    path = tmp_path / "sweeps.html"
    path.write_text(
        jaxtune.TuningResult.of(flash_entry(), two_knob_entry(), one_knob_entry()).to_html()
    )
    laid = _laid_out(path)
    stored = [b["text"] for b in laid["wanted"]["p.stored code"]]
    assert "block_q=256, block_k_major=512, block_k=128, block_b=1" in stored
    passes = [b["text"] for b in laid["wanted"]["p.stored .pass"]]
    assert "forward and backward (fwd+bwd) with the profiler timer" in passes


def test_the_profile_page_fits_1400_px_and_shows_the_config_and_pass(tmp_path):
    path = tmp_path / "report.html"
    path.write_text(profile_with_an_autotuned_kernel(tmp_path).to_html())
    laid = _laid_out(path)
    cells = [b["text"] for b in laid["wanted"]['table[data-table="autotuned"] td']]
    assert "block_q=256, block_k_major=512, block_k=128, block_b=1" in cells
    assert "fwd+bwd" in cells and "2.76x over the default" in cells
    # Sorted as it says: kernels by share of device time, largest first (an autotuned
    # kernel's head row, its parts beneath it).
    page = path.read_text()
    kernels = page[page.index('data-table="kernels"') : page.index('data-table="autotuned"')]
    body = kernels.split("<tbody>")[1]
    rows = re.findall(r'<tr(?: class="(\w*)")?>.*?<td class="num">([\d.]+)%</td>', body)
    shares = [float(share) for cls, share in rows if cls != "part"]
    assert shares == sorted(shares, reverse=True) and len(shares) == 3
    assert [cls for cls, _ in rows] == ["head", "part", "", ""]


def test_the_ops_and_scopes_tables_fit_1400_px_with_a_long_name_stack(tmp_path):
    from test_report_columns import LONG, long_stacked, profile

    path = tmp_path / "report.html"
    path.write_text(long_stacked(profile(tmp_path)).to_html())
    tool = _render_reports()
    laid = tool.layout(path, ('table[data-table="ops"] td.cut', 'table[data-table="scopes"] td'))
    assert laid["page"] <= 1400 and laid["overflow"] == [], laid["overflow"]
    cut = laid["wanted"]['table[data-table="ops"] td.cut']
    assert all(b["shown"] and b["width"] > 0 and b["right"] <= 1400 for b in cut), cut
    assert any(b["text"].endswith("attention_kernel/dot_general") for b in cut), cut
    assert LONG in [b["text"] for b in laid["wanted"]['table[data-table="scopes"] td']]
