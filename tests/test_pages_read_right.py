"""docs/reports.md, "A profile: jaxtune report PATH --html OUT, Profile.to_html()", "Sweeps:
jaxtune cache show [KERNEL] --html OUT, TuningResult.to_html()" and "Text tables": the sweep
page and the profile page say what they show and show it in order, and the text tables fit a
terminal. ``tests/test_pages_in_browser.py`` lays both pages out in Chromium at 1400 px."""

from __future__ import annotations

import dataclasses
import re

from hostile.traces import TPU_TRACE
from test_profiled import write_trace

import jaxtune
from jaxtune import _cli
from jaxtune._core.vocabulary import (
    CaptureInfo,
    Entry,
    Failure,
    Measurement,
    RanConfig,
    RecordedCall,
)
from jaxtune._profiling import report as _report
from jaxtune._tuning.store import cache as _cache

#: A long source path, as JAX's bundled kernels have.
SOURCE = (
    "/opt/venvs/training/lib/python3.11/site-packages/jax/experimental/pallas/ops/tpu/"
    "flash_attention.py:199"
)
CONFIG = {"block_q": 256, "block_k_major": 512, "block_k": 128, "block_b": 1}


def measurement(config, us, *, rounds=(), dropped=False):
    return Measurement(
        config=config,
        median_us=us,
        min_us=us * 0.95,
        spread=0.1,
        samples=12,
        compile_s=0.1,
        rounds_us=tuple(rounds),
        dropped=dropped,
    )


def flash_entry() -> Entry:
    """A sweep of four knobs, written in the author's order (not alphabetical), one fixed;
    raced configs and first-pass ones; an undecided rival whose 95 % interval lies above 1
    while its 99 % one does not (12 rounds)."""
    best_rounds = [100.0] * 12
    rival_rounds = [96, 98, 104, 105, 106, 107, 108, 110, 112, 115, 120, 140]
    configs = [
        {"block_q": q, "block_k_major": km, "block_k": k, "block_b": 1}
        for q in (128, 256)
        for km in (256, 512)
        for k in (128, 256)
    ]
    ms = []
    for i, c in enumerate(configs):
        if c == CONFIG:
            ms.append(measurement(c, 100.0, rounds=best_rounds))
        elif i == 0:  # the default, ruled out in the rounds
            ms.append(measurement(c, 390_000.0, rounds=[390_000.0] * 8, dropped=True))
        elif i == 1:  # raced to the end: the undecided rival
            ms.append(measurement(c, 110.0, rounds=rival_rounds))
        elif i == 2:  # ruled out in the rounds, yet faster than a first-pass config
            ms.append(measurement(c, 150.0, rounds=[150.0] * 8, dropped=True))
        elif i == 7:
            ms.append(Failure(config=c, stage="compile", reason="VMEM exceeded"))
        else:
            ms.append(measurement(c, 120.0 + 40 * i))
    return Entry(
        kernel="mylib.attention.flash_attention_with_a_long_module_path",
        device_kind="TPU v5 lite",
        key="bf16[8,16,4096,128],bf16[8,16,4096,128],bf16[8,16,4096,128];causal=True",
        config=CONFIG,
        time_us=100.0,
        default_config=configs[0],
        default_time_us=390_000.0,
        measurements=tuple(ms),
        decision="undecided",
        margin={"rival": dict(configs[1]), "ratio": 1.10, "low": 1.04, "high": 1.15},
        timer="profiler",
        timing="vjp",
    )


def test_the_undecided_interval_is_the_one_the_decision_used():
    text = jaxtune.TuningResult.of(flash_entry()).table()
    # 12 rounds: the 95 % interval (1.04-1.15) is wholly above 1, the 99 % one is not.
    assert (
        "undecided vs block_q=128, block_k_major=256, block_k=256: 1.10x (99 % interval 0.98-1.20) after 12 rounds"
        in text
    )
    assert "1.04-1.15" not in text


def test_text_tables_fit_120_columns_and_show_knobs_in_the_authors_order():
    text = jaxtune.TuningResult.of(flash_entry()).table()
    assert max(len(line) for line in text.splitlines()) <= 120, text
    at = text.index("config")
    column = " ".join(line[at:].strip() for line in text.splitlines()[2:] if line[at:].strip())
    # The knobs that varied, as the author wrote them, then the fixed one.
    assert "block_q=256, block_k_major=512, block_k=128 (fixed: block_b=1)" in column


def test_cache_show_uses_one_unit_and_says_which_knobs_vary(capsys):
    _cache.user_cache().write([flash_entry()])
    assert _cli.main(["cache", "show", flash_entry().kernel]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120, out
    assert "knobs varied: block_q, block_k_major, block_k; fixed: block_b=1" in out
    assert "390000.0 us" not in out and "390.0 ms" in out  # the entry's unit: ms
    assert "block_q=256, block_k_major=512, block_k=128: 0.100 ms" in out
    assert "timed fwd+bwd, profiler timer" in out


def test_sweep_page_is_sorted_fastest_first_and_says_what_the_colours_mean():
    page = jaxtune.TuningResult.of(flash_entry()).to_html()
    table = page[page.index('data-table="configs"') :]
    medians = [
        float(x)
        for x in re.findall(
            r'<td class="wrap">[^<]*</td><td>[^<]*</td><td class="num">([\d.]+)', table
        )
    ]
    assert medians == sorted(medians) and len(medians) == 7
    assert table.rindex("failed at compile") > table.rindex('class="num">')
    # Labels and rows name only the knobs that vary, in the author's order.
    assert '<td class="wrap">block_q=256, block_k_major=512, block_k=128</td>' in table
    assert "knobs varied: block_q, block_k_major, block_k; fixed: block_b=1." in page
    # A colour is how far a config got, said in the caption; not a rank.
    assert "ruled out: timed in the rounds, shown slower than the winner" in page
    assert "first pass: first pass only" in page and "not its rank" in page
    assert (
        "stored config: <code>block_q=256, block_k_major=512, block_k=128, block_b=1</code>" in page
    )
    assert '<span class="pass">forward and backward (fwd+bwd) with the profiler timer' in page


def profile_with_an_autotuned_kernel(tmp_path, device_kind="TPU v5 lite"):
    info = CaptureInfo(
        device_kind=device_kind,
        platform="tpu",
        sources={"tiled_matmul": SOURCE, "no_cost": SOURCE},
        configs={"lib.mm": RanConfig(config=dict(CONFIG), speedup=2.76)},
        calls=(
            RecordedCall(
                kernel="lib.mm",
                key="f32[8]",
                config=dict(CONFIG),
                source="cache",
                entry_timing="vjp",
            ),
        ),
    )
    return _report.report_from_trace(write_trace(tmp_path, TPU_TRACE), info=info, iterations=2)


def test_profile_page_says_the_speedup_once_and_kind_as_the_chart_does(tmp_path):
    p = profile_with_an_autotuned_kernel(tmp_path)
    page = p.to_html()
    assert page.count("2.76x over the default") == 1
    autotuned = page[page.index('data-table="autotuned"') :]
    assert '<td class="wrap">block_q=256, block_k_major=512, block_k=128, block_b=1</td>' in (
        autotuned
    )
    assert "<td>cache</td>" in autotuned and "<td>fwd+bwd</td>" in autotuned
    kernels = page[page.index('data-table="kernels"') : page.index('data-table="autotuned"')]
    assert "<td>autotuned</td>" in kernels and "<td>pallas</td>" in kernels
    text = p.table()
    assert max(len(line) for line in text.splitlines()) <= 120, text
    assert text.count("2.76x over the default") == 1


def test_titles_name_the_device_once(tmp_path):
    p = profile_with_an_autotuned_kernel(tmp_path)
    cpu = dataclasses.replace(p, platform="cpu", device_kind="cpu")
    assert "<h1>jaxtune profile: cpu</h1>" in cpu.to_html()
    assert cpu.table().startswith("cpu: 2 iterations")
    assert "<h1>jaxtune profile: tpu (TPU v5 lite)</h1>" in p.to_html()


def decided(config, *measurements, decision, margin=None, default=None, default_us=100.0):
    """The table of one small entry of kernel ``k`` that stored ``config`` at 100 us."""
    entry = Entry(
        kernel="k",
        device_kind="cpu",
        key="f32[8]",
        config=config,
        time_us=100.0,
        default_config=default or config,
        default_time_us=default_us,
        measurements=measurements,
        decision=decision,
        margin=margin,
    )
    return jaxtune.TuningResult.of(entry).table()


def test_a_rival_that_left_the_rounds_clearly_behind_is_compared_by_its_rounds():
    # docs/autotuned.md "Sweeps": the decision comes from the rounds whenever two configs
    # ran in them; a rival out after 3 rounds (clearly behind) has no interval in the
    # margin, and its label must say so, not "first pass".
    best, rival = {"tm": 256}, {"tm": 128}
    text = decided(
        best,
        measurement(best, 100.0, rounds=[100.0, 101.0, 99.0, 100.0]),
        dataclasses.replace(
            measurement(rival, 270.0, rounds=[270.0, 272.0, 268.0]), dropped=True, behind=True
        ),
        decision="clear",
        margin={"rival": rival, "ratio": 2.5, "low": None, "high": None},
        default=rival,
        default_us=270.0,
    )
    assert "clear: 2.70x ahead of tm=128 (clearly behind after 3 rounds)" in text, text
    assert "first pass" not in text


def test_a_rival_ahead_by_its_estimate_that_loses_a_tie_is_not_called_not_faster():
    # A rival whose estimate is 0.99x of the stored config's but whose interval reaches
    # no further than 4 % faster, and which would lose a tie: the label says so.
    best, rival = {"chunk": 256}, {"chunk": 1024}
    mine = [100.0 + i for i in range(12)]
    factors = [0.96, 0.97, 0.98, 0.99, 0.99, 0.99, 1.0, 1.01, 1.02, 1.03, 1.05, 1.07]
    text = decided(
        best,
        measurement(best, 100.0, rounds=mine),
        measurement(rival, 99.0, rounds=[m * f for m, f in zip(mine, factors, strict=True)]),
        decision="clear",
        margin={"rival": rival, "ratio": 0.995, "low": 0.96, "high": 1.07},
    )
    assert (
        "clear: chunk=1024 at most 4 % faster, loses a tie: 0.99x (95 % interval 0.96-1.07)" in text
    ), text


def test_a_single_survivor_says_the_others_failed():
    ok, bad = {"r": 1}, {"r": 2}
    text = decided(
        ok,
        measurement(ok, 100.0),
        Failure(config=bad, stage="check", reason="output 0 differs"),
        decision="single",
    )
    assert (
        "single: the only config that ran; 1 other failed (`jaxtune cache show k` says why)" in text
    )
