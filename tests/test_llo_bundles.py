"""Bundle-slot fill over every bundle of a kernel (issue 43, point 4), read from the LLO
modules of a trace captured on a TPU v5e (tests/fixtures/v5e/flash_fwd_llo.xplane.pb), not
over the first 30 bundles xprof's ``bundle_util`` lists."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from test_llo import NEEDS_XPROF, XPROF_PYTHON

import jaxtune
from jaxtune._core.xspace import xplane
from jaxtune._profiling import llo, llo_bundles, llo_figures

TRACE = pathlib.Path(__file__).parent / "fixtures" / "v5e" / "flash_fwd_llo.xplane.pb"
FLASH = "jit_flash(31)::flash_attention.1"


def _read() -> dict[str, llo_bundles.BundleSlots | str]:
    return llo_bundles.of_modules(xplane.load(TRACE), None)


def test_every_bundle_of_flash_attention_is_read_and_its_mxu_is_used():
    slots = _read()
    assert len(slots) == 15  # every LLO module of the trace
    assert all(isinstance(s, llo_bundles.BundleSlots) for s in slots.values()), slots
    flash = slots[FLASH]
    assert isinstance(flash, llo_bundles.BundleSlots)
    assert flash.bundles == 831
    # The forward kernel's two matmuls per block: MXU slots filled somewhere in its
    # schedule, though none in the first 30 bundles (the sample xprof lists).
    assert sum(flash.used["mxu"]) == 256 and flash.avail["mxu"] == 4
    assert sum(flash.used["mxu"][:30]) == 0
    fill = flash.utilisation()
    assert fill["mxu"] == pytest.approx(256 / (831 * 4))
    assert set(fill) == set(llo_bundles.UNITS)
    assert (flash.spill, flash.fill) == (0, 0)


def test_an_unreadable_or_inconsistent_llo_module_says_why():
    assert llo_bundles.read(b"\x0a\x01x") == "its llo_proto holds no bundle slots"
    assert llo_bundles.read(b"\xff\xff").startswith("its llo_proto does not decode")
    # mxu lists two bundles, the other units none.
    two = b"\x32\x06\x0a\x04\x0a\x02\x01\x01"
    assert llo_bundles.read(two) == "its units list different numbers of bundles ([0, 2])"


def _sample(slots: llo_bundles.BundleSlots, n: int, **override: int) -> dict:
    """xprof's ``bundle_util`` data for the first ``n`` bundles of ``slots``."""
    rows = []
    for b in range(n):
        row = {"bundle": b}
        for unit in llo_bundles.UNITS:
            row[f"{unit}_used"] = slots.used[unit][b]
            row[f"{unit}_avail"] = slots.avail[unit]
        rows.append({**row, **(override if b == n - 1 else {})})
    return {"status": "OK", "data": {"total_bundles": slots.bundles, "bundles": rows,
                                     "shown_bundles": n, "truncated": True}}  # fmt: skip


def test_the_fill_over_every_bundle_is_used_only_where_it_agrees_with_xprof():
    flash = _read()[FLASH]
    assert isinstance(flash, llo_bundles.BundleSlots)
    answer = {"success": True, "modules": [{"kernel_name": FLASH,
              "hlo_instruction_name": "flash_attention.1", "total_instructions": 1206}]}  # fmt: skip
    names = {"flash_attention.1": "_flash_attention_kernel"}

    def kernel(bundle_util: dict) -> dict:
        got = llo_figures.summary(
            answer, {"flash_attention.1": {"bundle_util": bundle_util}}, names, None,
            {"flash_attention.1": flash},
        )  # fmt: skip
        return got["kernels"][0] | {"text": "\n".join(llo_figures.lines(got))}

    agreed = kernel(_sample(flash, 30))
    assert agreed["truncated"] is False and agreed["bundles_read"] == 831
    assert agreed["fill_from"] == "llo_proto: every bundle, checked against xprof's first 30"
    assert agreed["unit_slots"]["mxu"] == [256, 3324]
    assert "bundle slots filled mxu 8%, xlu 11%, vector_alu 17%" in agreed["text"]
    assert "(over all 831 bundles)" in agreed["text"]
    # A reading that disagrees with xprof is not used: the sample is, labelled as one.
    wrong = kernel(_sample(flash, 30, scalar_alu_used=0))
    assert wrong["truncated"] is True and wrong["bundles_read"] == 30
    assert wrong["fill_note"] == (
        "the trace's LLO module disagrees with xprof (bundle 29: xprof lists scalar_alu 0/2, "
        "the trace (2, 2))"
    )
    sample = "in a sample: the first 30 of 831 bundles, not the kernel's whole schedule"
    assert sample in wrong["text"]


def test_after_a_disagreement_no_unchecked_reading_is_shown():
    slots = {name.partition("::")[2]: got for name, got in _read().items()}
    flash = slots["flash_attention.1"]
    assert isinstance(flash, llo_bundles.BundleSlots)
    modules = [{"kernel_name": FLASH, "hlo_instruction_name": "flash_attention.1"},
               {"kernel_name": "jit__normal(22)::fusion.35", "hlo_instruction_name": "fusion.35"}]  # fmt: skip
    answer = {"success": True, "modules": modules}
    names = {"flash_attention.1": "_flash_attention_kernel"}

    def fusion(bundle_util: dict) -> dict:
        static = {"flash_attention.1": {"bundle_util": bundle_util}}
        got = llo_figures.summary(answer, static, names, None, slots)
        (k,) = [k for k in got["kernels"] if k["hlo_op"] == "fusion.35"]
        return k | {"text": "\n".join(llo_figures.lines(got))}

    # No static analyses for the fusion: its reading is unchecked, and shown while the
    # checked kernel agrees with xprof.
    agreed = fusion(_sample(flash, 30))
    assert agreed["fill_from"] == "llo_proto: every bundle, unchecked"
    assert agreed["bundles_read"] == 13319 and agreed["unit_utilisation"]["vector_alu"] > 0
    wrong = fusion(_sample(flash, 30, scalar_alu_used=0))
    assert wrong["unit_utilisation"] == {} and wrong["fill_from"] is None
    assert wrong["fill_note"] == (
        "not read: the trace's LLO module disagreed with xprof on _flash_attention_kernel"
    )
    assert "(fusion.35): None instructions; bundle slots not shown: not read:" in wrong["text"]


#: Asks the real xprof for ``bundle_util`` of each LLO module named on the command line.
_ASK = """
import json, sys
from xprof.convert import _pywrap_profiler_plugin as plugin
print(json.dumps({m: json.loads(plugin.get_llo_static_analysis_json(sys.argv[1], "bundle_util",
                                                                     m, 0))
                  for m in sys.argv[2:]}))
"""


@pytest.mark.child  # xprof runs in a child process
@NEEDS_XPROF
def test_the_reading_matches_xprofs_bundle_listing_for_every_module():
    slots = _read()
    out = subprocess.run(
        [XPROF_PYTHON or sys.executable, "-c", _ASK, str(TRACE), *slots],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    listed = json.loads(out)
    for name, got in slots.items():
        assert isinstance(got, llo_bundles.BundleSlots)
        data = listed[name]["data"]
        assert data["hlo_instruction_name"] == name.partition("::")[2]
        assert got.disagreement(data["total_bundles"], data["bundles"]) is None, name
    # Where xprof lists every bundle (modules of at most 30), the whole fill is xprof's own.
    whole = [n for n in slots if not listed[n]["data"]["truncated"]]
    assert len(whole) == 7
    for name in whole:
        rows = listed[name]["data"]["bundles"]
        got = slots[name]
        assert isinstance(got, llo_bundles.BundleSlots)
        for unit in llo_bundles.UNITS:
            assert sum(r[f"{unit}_used"] for r in rows) == sum(got.used[unit])


@pytest.mark.child
@NEEDS_XPROF
def test_report_llo_on_the_v5e_trace_fills_flash_attentions_mxu_over_every_bundle():
    got = llo.attach(jaxtune.Profile.from_trace(TRACE), TRACE, python=XPROF_PYTHON).llo
    assert got["success"], got
    (kernel,) = got["kernels"]
    assert kernel["kernel"] == "_flash_attention_kernel" and kernel["success"], kernel
    assert kernel["unit_utilisation"]["mxu"] > 0.05
    assert (kernel["bundles"], kernel["bundles_read"], kernel["truncated"]) == (831, 831, False)
    assert kernel["fill_from"] == "llo_proto: every bundle, checked against xprof's first 30"
    text = "\n".join(llo_figures.lines(got))
    assert "bundle slots filled mxu 8%" in text and "(over all 831 bundles)" in text
    assert "in a sample" not in text
    # xprof loaded the trace once for all its answers (the wheel's library, one handle).
    assert got["xprof_calls"]["load"] == 1 and got["xprof_calls"]["static"] == 4
    assert set(got["seconds"]) >= {"read", "import", "load", "analyze", "static", "child"}
