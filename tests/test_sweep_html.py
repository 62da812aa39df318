"""`TuningResult.to_html()` and `jaxtune cache show --html`.

Covers docs/reports.md, "Sweeps: jaxtune cache show [KERNEL] --html OUT,
TuningResult.to_html()"."""

from __future__ import annotations

import re
import sys

import pytest

import jaxtune
from jaxtune import _cli
from jaxtune._core.vocabulary import Entry, Failure, Measurement
from jaxtune._tuning.store import cache as _cache


def two_knob_entry(kernel="lib.matmul", key="f32[512,512]"):
    measurements = []
    for bm in (64, 128, 256):
        for bn in (64, 128):
            cfg = {"block_m": bm, "block_n": bn}
            if bm == 256 and bn == 128:
                measurements.append(Failure(config=cfg, stage="compile", reason="VMEM exceeded"))
                continue
            t = 100.0 / bm * 64 + bn / 64
            measurements.append(
                Measurement(
                    config=cfg, median_us=t, min_us=t * 0.9, spread=0.1, samples=9, compile_s=0.1
                )
            )
    return Entry(
        kernel=kernel,
        device_kind="cpu",
        key=key,
        config={"block_m": 256, "block_n": 64},
        time_us=26.0,
        default_config={"block_m": 64, "block_n": 64},
        default_time_us=101.0,
        measurements=tuple(measurements),
    )


def one_knob_entry():
    return Entry(
        kernel="lib.lse",
        device_kind="cpu",
        key="f32[8,4096]",
        config={"chunk": 512},
        time_us=5.0,
        default_config={"chunk": 128},
        default_time_us=9.0,
        measurements=(
            Measurement(
                config={"chunk": 128},
                median_us=9.0,
                min_us=8.5,
                spread=0.2,
                samples=5,
                compile_s=0.1,
            ),
            Measurement(
                config={"chunk": 512},
                median_us=5.0,
                min_us=4.9,
                spread=0.05,
                samples=5,
                compile_s=0.1,
            ),
            Failure(config={"chunk": 4096}, stage="check", reason="max error 3.1 > atol 1e-05"),
        ),
    )


def test_sweep_page_marks_winner_default_and_failures():
    page = jaxtune.TuningResult.of(two_knob_entry(), one_knob_entry()).to_html()
    assert page.count('data-chart="sweep"') == 2
    assert page.count('data-chart="heatmap"') == 1  # only the two-knob space
    assert "failed at compile: VMEM exceeded" in page
    assert "failed at check: max error 3.1 &gt; atol 1e-05" in page
    assert re.search(
        r'<tr class="winner"><td class="wrap">block_m=256, block_n=64</td><td>winner</td>', page
    )
    assert '<td class="wrap">block_m=64, block_n=64</td><td>default</td>' in page
    assert "3.88x over the default" in page
    assert not re.search(r"<script|<link|<img|url\((?!#)", page)


def test_cache_show_html_writes_every_kernel(tmp_path, capsys):
    _cache.user_cache().write([two_knob_entry(), one_knob_entry()])
    out = tmp_path / "sweeps.html"
    assert _cli.main(["cache", "show", "--html", str(out)]) == 0
    page = out.read_text()
    assert "lib.matmul on cpu" in page and "lib.lse on cpu" in page
    assert _cli.main(["cache", "show", "lib.lse", "--html", str(out)]) == 0
    assert "lib.matmul" not in out.read_text()
    capsys.readouterr()
    assert _cli.main(["cache", "show"]) == 2
    assert "needs a kernel id" in capsys.readouterr().err


def test_cache_show_html_without_matplotlib_says_how_to_install(tmp_path, capsys, monkeypatch):
    _cache.user_cache().write([one_knob_entry()])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert _cli.main(["cache", "show", "lib.lse", "--html", str(tmp_path / "x.html")]) == 2
    assert "pip install 'jaxtune[plots]'" in capsys.readouterr().err
    with pytest.raises(jaxtune.PlotsUnavailableError):
        jaxtune.TuningResult.of(one_knob_entry()).to_html()


def test_sweep_page_says_how_the_stored_config_won_and_how_it_was_timed():
    import dataclasses

    margin = {"rival": {"chunk": 128}, "ratio": 1.8, "low": 1.7, "high": 1.9}
    entry = dataclasses.replace(
        one_knob_entry(), decision="clear", margin=margin, timer="wall", timing="vjp"
    )
    page = jaxtune.TuningResult.of(entry).to_html()
    assert "decided: clear: 1.80x ahead of chunk=128 (95 % interval 1.70-1.90)." in page
    assert (
        "stored config: <code>chunk=512</code>, 1.80x over the default (default <code>chunk=128"
        '</code>); timed <span class="pass">forward and backward (fwd+bwd) with the wall timer'
        "</span>." in page
    )
    tie = dataclasses.replace(entry, decision="tie", tie=True, margin={**margin, "ratio": 1.01})
    assert "decided: tie with chunk=128: 1.01x" in jaxtune.TuningResult.of(tie).to_html()
