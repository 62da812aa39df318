"""The 4-layer Flax NNX training step that ``jaxtune profile --`` captured on the TPU v5e
(tests/fixtures/v5e/nnx_step_bench: the trace, trimmed, and the capture's sidecar; issue 58).

Read with its sidecar, that capture showed a fourth "kernel" row, ``_flash_attention_kernel
+ flash_attention + flash_mha_bwd_dkv_... + flash_mha_bwd_dq_...``, under no autotuned
kernel: the optimizer's ``fusion.396``, whose fused ops the capture's HLO text reader had
taken from the ``ENTRY`` computation printed after it. Each check here is against the
device plane read independently (:func:`test_v5e_traces.read`).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from test_v5e_traces import FIXTURES, _kernel_function, read

import jaxtune
from jaxtune._cli import main as cli_main
from jaxtune._core.xspace import xplane
from jaxtune._profiling import llo, sidecar

# Reading the trace counts its Mosaic bodies in a child process (mosaic_work.works).
pytestmark = pytest.mark.child

BENCH = FIXTURES / "nnx_step_bench" / "nnx_step_bench.xplane.pb"
#: Where each kernel's FLOPs come from: the forward declares a cost estimate; the backward
#: kernels' are counted from their Mosaic bodies.
KERNELS = {
    "_flash_attention_kernel": "cost_estimate",
    "_flash_attention_dkv_kernel": "mosaic",
    "_flash_attention_dq_kernel": "mosaic",
}
AUTOTUNED = "tpu.flash_attention"
PEAK_FLOPS, PEAK_BYTES = 197e12, 819e9


@pytest.fixture(scope="module")
def bench():
    return read("nnx_step_bench/nnx_step_bench"), jaxtune.Profile.from_trace(BENCH)


def test_the_fixture_holds_the_capture_that_showed_the_joined_row():
    # The sidecar is the capture's own, fusions and all: its fusion.396 holds the op names
    # of every Pallas call (what made the joined row), though that fusion is Adam's update.
    info, _, malformed = sidecar.recall(BENCH, 0)
    assert malformed is None
    assert {k.name for k in info.kernels} == set(KERNELS)
    assert sum("pallas_call" in stack for stack in info.fusions["fusion.396"]) == 3


def test_one_row_per_pallas_kernel_under_its_autotuned_kernel(bench):
    seen, p = bench
    assert set(seen.calls) == set(KERNELS)
    assert not [k.name for k in p.kernels if " + " in k.name]
    rows = {k.name: k for k in p.kernels if k.kind == "pallas"}
    assert set(rows) == set(KERNELS)
    for name, row in rows.items():
        assert seen.kernel_ids[name] == {AUTOTUNED}
        assert row.kernel_id == AUTOTUNED
        # 4 layers x 5 steps; the row's time is its custom calls' (and, for dkv, the ns of
        # the ConcatBitcast calls XLA added to feed it), never the backward's reductions
        # in the same jit(flash_attention) scope (6 ms, once taken for the forward's).
        assert row.calls == seen.calls[name] == 20
        calls_us = seen.ps[name] * 1e-6
        assert calls_us <= row.total_us < calls_us * (1 + 1e-6)
        # The row's HLO op is its Mosaic call (the LLO section finds the kernel by it), not
        # a copy XLA added for it that ran first.
        assert _kernel_function(row.hlo_op) == name
    (head,) = [k for k in p.kernels if k.kind == "autotuned"]
    assert (head.name, head.kernel_id) == (AUTOTUNED, AUTOTUNED)
    assert head.total_us > 0  # the wrapper's own ops: the backward's reductions
    kernels_table = p.table().split("how far each kernel")[0]
    assert " + " not in kernels_table
    pallas_ops, owners, _ = llo._weighing(p.kernels, p.ops)
    assert {_kernel_function(op) for op in pallas_ops} == set(KERNELS)
    assert set(owners.values()) == {AUTOTUNED}


def test_forward_dkv_and_dq_have_flops_and_percent_of_peak(bench):
    _, p = bench
    text = p.table()
    for row in p.kernels:
        if row.kind != "pallas":
            continue
        assert row.flops_source == KERNELS[row.name]
        assert row.flops and row.flops_per_s and row.bytes_per_s
        assert row.compute_peak == pytest.approx(row.flops_per_s / PEAK_FLOPS)
        assert row.memory_peak == pytest.approx(row.bytes_per_s / PEAK_BYTES)
        assert 0 < row.compute_peak < 1 and row.over_peak == ()
        assert f"\n{row.name}: " in text and "% of peak FLOP/s" in text.split(row.name + ": ")[1]


def test_json_rows_say_which_rates_are_over_the_peak(capsys):
    assert cli_main(["report", "--json", str(BENCH)]) == 0
    doc = json.loads(capsys.readouterr().out)
    over = []
    for row in [*doc["kernels"], *doc["ops"], *doc["autotuned_kernels"]]:
        rates = (
            ("flops", row["flops_per_s"], PEAK_FLOPS),
            ("bytes", row["bytes_per_s"], PEAK_BYTES),
        )
        assert row["over_peak"] == [n for n, rate, peak in rates if (rate or 0) > peak], row["name"]
        over += row["over_peak"]
    assert "bytes" in over  # the trace holds XLA ops whose bytes count overstates the work
    pallas = [k for k in doc["kernels"] if k["kind"] == "pallas"]
    assert {k["name"] for k in pallas} == set(KERNELS)
    assert {k["kernel_id"] for k in pallas} == {AUTOTUNED}


def _trim_module():
    spec = importlib.util.spec_from_file_location("v5e_trim", FIXTURES / "trim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_trimming_keeps_what_the_report_reads(tmp_path):
    # The step that made the fixture, on a committed trace that has LLO modules: the
    # report reads the same; the Pallas kernel's LLO module stays, large others go.
    trim = _trim_module()
    whole = FIXTURES / "flash_fwd_llo.xplane.pb"
    out = tmp_path / "trimmed.xplane.pb"
    assert trim.main(str(whole), str(out)) == 0
    assert out.stat().st_size < whole.stat().st_size / 2
    before, after = (json.loads(jaxtune.Profile.from_trace(p).to_json()) for p in (whole, out))
    for key in ("kernels", "ops", "autotuned_kernels", "total_us", "step_us", "notes"):
        assert before[key] == after[key], key

    def llo_modules(path):
        meta = xplane.load(path).plane("/host:metadata")
        return {m.name: m.stats["llo_proto"] for m in meta.event_metadata.values() if "llo_proto" in m.stats}  # fmt: skip

    kept, every = llo_modules(out), llo_modules(whole)
    assert kept["jit_flash(31)::flash_attention.1"] == every["jit_flash(31)::flash_attention.1"]
    assert len(every["jit__normal(22)::fusion.35"]) > trim.SMALL_LLO
    assert "jit__normal(22)::fusion.35" not in kept
    assert all(len(v) <= trim.SMALL_LLO for k, v in kept.items() if "flash_attention" not in k)
