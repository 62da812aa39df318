"""The profile reader on traces captured on a TPU v5e (tests/fixtures/v5e, issue 43).

Each check is against an independent reading of the XSpace here: the ``XLA Ops`` events of
``/device:TPU:0`` walked one by one, custom calls found by their HLO text, kernel ids by the
``jaxtune[...]`` marker in their ``tf_op``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
import re
import sys

import pytest
from test_llo import NEEDS_XPROF, XPROF_PYTHON

import jaxtune
from jaxtune._core.xspace import xplane
from jaxtune._profiling import llo, llo_figures, mosaic, table
from jaxtune._render import units

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "v5e"

# Reading these traces starts children: a trace's Mosaic bodies are counted in a child process (mosaic_work.works).
pytestmark = pytest.mark.child

#: What each fixture ran (its README): calls of the traced function.
ITERATIONS = {"matmul": 5, "flash_fwd": 3, "flash_grad": 3, "nnx_step": 3, "flash_fwd_llo": 3}

#: The kernel function behind each Mosaic call, by the scope XLA named its instruction
#: after (JAX's flash attention: the forward under jit(flash_attention), the backward
#: kernels under generated named scopes; the example matmul's pallas_call(name=...)).
KERNEL_OF = (
    ("flash_mha_bwd_dkv_", "_flash_attention_dkv_kernel"),
    ("flash_mha_bwd_dq_", "_flash_attention_dq_kernel"),
    ("flash_attention.", "_flash_attention_kernel"),
    ("jaxtune_example_matmul.", "jaxtune_example_matmul"),
)

_MARK = re.compile(r"jaxtune\[(?P<id>[^#\]]+)#")


@dataclasses.dataclass
class Reading:
    """The device plane as read here: per Pallas custom call (by kernel function) its
    events and time, per event's HLO category its ops, and all op time."""

    calls: collections.Counter[str]
    ps: collections.Counter[str]
    kernel_ids: dict[str, set[str]]
    categories: dict[str, set[str]]
    total_ps: int
    peak_tflops: float | None


def _kernel_function(op: str) -> str:
    return next(name for prefix, name in KERNEL_OF if op.startswith(prefix))


def read(name: str) -> Reading:
    space = xplane.load(FIXTURES / f"{name}.xplane.pb")
    plane = space.plane("/device:TPU:0")
    assert plane is not None
    (ops,) = [line for line in plane.lines if line.name == "XLA Ops"]
    calls: collections.Counter[str] = collections.Counter()
    ps: collections.Counter[str] = collections.Counter()
    ids: dict[str, set[str]] = collections.defaultdict(set)
    categories: dict[str, set[str]] = collections.defaultdict(set)
    total = 0
    for ev in plane.events(ops):
        meta = plane.metadata(ev.metadata_id)
        total += ev.duration_ps
        categories[str(meta.stats.get("hlo_category"))].add(meta.display_name)
        if 'custom_call_target="tpu_custom_call"' not in meta.name:
            continue
        kernel = _kernel_function(meta.display_name)
        calls[kernel] += 1
        ps[kernel] += ev.duration_ps
        ids[kernel] |= {m["id"] for m in _MARK.finditer(str(meta.stats.get("tf_op", "")))}
    peak = plane.stats.get("peak_teraflops_per_second")
    return Reading(calls, ps, dict(ids), dict(categories), total, peak)


@pytest.fixture(scope="module", params=sorted(ITERATIONS))
def case(request):
    name = request.param
    return name, read(name), jaxtune.Profile.from_trace(FIXTURES / f"{name}.xplane.pb")


def test_each_pallas_kernel_is_one_row_named_by_its_kernel_function(case):
    name, seen, p = case
    pallas = {k.name: k for k in p.kernels if k.kind == "pallas"}
    assert set(pallas) == set(seen.calls), name
    for kernel, stat in pallas.items():
        assert "pallas_call" not in stat.name and "block_q_major" not in stat.name
        # Calls are executions: one custom-call event each; its time is theirs alone.
        assert stat.calls == seen.calls[kernel] and stat.calls_exact
        assert stat.total_us == pytest.approx(seen.ps[kernel] * 1e-6, rel=1e-9)
        (kernel_id,) = seen.kernel_ids[kernel]
        assert stat.kernel_id == kernel_id


def test_calls_equal_executions(case):
    name, seen, p = case
    iterations = ITERATIONS[name]
    per_step = {"nnx_step": 2}.get(name, 1)  # two attention layers
    assert set(seen.calls.values()) == {iterations * per_step}
    for group in table.kernel_tree(p.kernels, p.peak):
        head = group[0][0]
        if head.kind == "autotuned":
            assert head.calls == iterations * per_step, name


def test_one_row_per_autotuned_kernel_with_its_kernels_beneath(case):
    _, seen, p = case
    ids = {i for found in seen.kernel_ids.values() for i in found}
    groups = table.kernel_tree(p.kernels, p.peak)
    heads = [g for g in groups if g[0][2] == "autotuned"]
    assert sorted(g[0][1] for g in heads) == sorted(ids)
    for group in heads:
        head, kernel_id = group[0][0], group[0][1]
        parts = [k for k in p.kernels if k.kernel_id == kernel_id]
        assert {n.strip() for _, n, kind in group[1:] if kind == "pallas"} == {
            k for k, found in seen.kernel_ids.items() if kernel_id in found
        }
        assert head.total_us == pytest.approx(sum(k.total_us for k in parts))
    text = p.table()
    for kernel_id in ids:
        assert re.search(rf"^{re.escape(kernel_id)}\s+autotuned\s", text, re.M), text
    for kernel in seen.calls:
        assert re.search(rf"^  {re.escape(kernel)}\s+pallas\s+{seen.calls[kernel]}\s", text, re.M)
    rows = text.split("XLA ops")[0].split("* bound unknown")[0]
    assert "pallas_call" not in rows and "block_q_major" not in rows


def test_async_ops_are_never_kernels_and_totals_add_up(case):
    _, seen, p = case
    asynchronous = seen.categories.get("async-start", set()) | seen.categories.get(
        "async-done", set()
    )
    owned = {k.hlo_op for k in p.kernels}
    assert not asynchronous & owned
    assert asynchronous <= {o.name for o in p.ops}
    assert p.total_us == pytest.approx(seen.total_ps * 1e-6, rel=1e-9)
    assert sum(k.total_us for k in (*p.kernels, *p.ops)) == pytest.approx(p.total_us, rel=1e-9)
    assert sum(k.share for k in (*p.kernels, *p.ops)) == pytest.approx(1.0)


def test_flash_grad_and_nnx_have_slices_beside_their_kernels():
    # The fixtures hold what the issue is about: XLA's async slices and copies.
    assert read("flash_grad").categories["async-start"]
    assert read("nnx_step").categories["async-done"]


def test_peaks_come_from_the_device_kind_not_the_trace(case):
    _, seen, p = case
    assert p.peak is not None and p.peak.device == "TPU v5e"
    assert (p.peak.flops_per_s, p.peak.bytes_per_s) == (197e12, 819e9)
    assert seen.peak_tflops is None or seen.peak_tflops != 197  # the trace says its own


def test_no_figure_above_peak_is_shown_bare(case):
    p = case[2]
    _, rows = table.stat_rows([*p.kernels, *p.ops], mark_unknown=False, peak=p.peak)
    for stat, row in zip([*p.kernels, *p.ops], rows, strict=True):
        over_flops = (stat.flops_per_s or 0) > 197e12
        over_bytes = (stat.bytes_per_s or 0) > 819e9
        assert row[6].endswith(table.OVER_PEAK) == over_flops, (stat.name, row)
        assert row[7].endswith(table.OVER_PEAK) == over_bytes, (stat.name, row)
    marked = any((s.bytes_per_s or 0) > 819e9 for s in (*p.kernels, *p.ops))
    assert ("! above the device's peak (TPU v5e: 197 TFLOP/s, 819 GB/s" in p.table()) == marked


def test_a_kernel_above_the_flop_peak_is_marked_and_says_why():
    p = jaxtune.Profile.from_trace(FIXTURES / "flash_fwd.xplane.pb")
    (flash,) = [k for k in p.kernels if k.kind == "pallas"]
    assert flash.flops_source == "cost_estimate" and flash.flops_per_s < 197e12
    # The same count over a tenth of the time: what a causal kernel that skips masked
    # blocks looks like against XLA's count of all of them.
    fast = dataclasses.replace(
        flash, total_us=flash.total_us / 10, flops_per_s=flash.flops_per_s * 10
    )
    text = dataclasses.replace(p, kernels=(fast,)).table()
    row = next(
        line for line in text.splitlines() if line.strip().startswith("_flash_attention_kernel")
    )
    assert f"{fast.flops_per_s / 1e12:.1f}!" in row
    assert "masked blocks" in text and "cost_estimate" in text


def test_mosaic_names_read_from_the_backend_config_alone():
    assert mosaic.kernel_name("not json") is None
    assert mosaic.kernel_name('{"custom_call_config": {"body": "TUzvUgE="}}') is None


def test_json_keeps_the_partition_and_names():
    p = jaxtune.Profile.from_trace(FIXTURES / "flash_grad.xplane.pb")
    doc = json.loads(p.to_json())
    names = {k["name"]: k for k in doc["kernels"]}
    assert set(names) == {
        "_flash_attention_kernel",
        "_flash_attention_dkv_kernel",
        "_flash_attention_dq_kernel",
        "tpu.flash_attention",
    }
    assert names["tpu.flash_attention"]["kind"] == "autotuned"
    assert names["tpu.flash_attention"]["calls"] == 3


def _llo_names() -> tuple[set[str], set[str]]:
    """The LLO modules of the flash_fwd_llo trace, read here: ``<module>(<n>)::<op>``
    events with an llo_proto; and the programs that ran on the device plane."""
    space = xplane.load(FIXTURES / "flash_fwd_llo.xplane.pb")
    meta = space.plane("/host:metadata")
    device = space.plane("/device:TPU:0")
    (modules,) = [line for line in device.lines if line.name == "XLA Modules"]
    ran = {device.metadata(ev.metadata_id).name.split("(")[0] for ev in device.events(modules)}
    llo_ops = {m.name for m in meta.event_metadata.values() if "llo_proto" in m.stats}
    return ran, llo_ops


def test_llo_scope_is_the_profiled_programs():
    ran, llo_ops = _llo_names()
    assert ran == {"jit_flash"}
    assert any(n.startswith("jit__normal(") for n in llo_ops)  # RNG initialisers
    scope = llo.scope_of(xplane.load(FIXTURES / "flash_fwd_llo.xplane.pb"))
    assert scope is not None and scope.programs == ("jit_flash",)
    mine = {n.split("::")[1] for n in llo_ops if n.split("(")[0] in ran}
    assert scope.ops == mine == {"flash_attention.1"}
    assert scope.others == len(llo_ops) - len(mine)
    assert llo.scope_of(xplane.load(FIXTURES / "flash_fwd.xplane.pb")) is None


def test_llo_summary_counts_only_the_scoped_modules():
    scope = llo.scope_of(xplane.load(FIXTURES / "flash_fwd_llo.xplane.pb"))
    answer = {
        "success": True,
        "total_instructions": 5000,
        "unique_registers": 900,
        "modules": [
            {"hlo_instruction_name": "flash_attention.1", "total_instructions": 1713},
            {"hlo_instruction_name": "fusion.48", "total_instructions": 3287},
        ],
    }
    got = llo_figures.summary(answer, {}, {"flash_attention.1": "_flash_attention_kernel"}, scope)
    assert [k["kernel"] for k in got["kernels"]] == ["_flash_attention_kernel"]
    assert got["total_instructions"] == 1713
    assert "of jit_flash (14 LLO modules of other programs left out)" in got["line"]


#: xprof's plugin as the 2.24 wheel behaves: each name asked is matched as a substring of
#: the LLO module names (``<program>(<n>)::<HLO op>``); ``analyze_llo`` answers every module
#: that holds it (none: ``{"success": False}``), a static analysis the first. The decoy is
#: a module of another program whose name holds the profiled one's.
FAKE_PLUGIN = """
import json
def built_with_embedded():
    return True
def _matching(name):
    return [m for m in MODULES if name in m[0]]
def _ask(what, name):
    with open(ASKED, "a") as f:
        f.write(what + " " + name + "\\n")
def analyze_llo(path, kernel=""):
    _ask("analyze_llo", kernel)
    found = _matching(kernel)
    if not found:
        return {"success": False}
    return {"success": True, "total_instructions": sum(n for _, n in found),
            "unique_registers": 9, "opcode_histogram": {"VADD": 3},
            "modules": [{"kernel_name": m, "hlo_instruction_name": m.split("::")[1],
                         "total_instructions": n} for m, n in found]}
def get_llo_static_analysis_json(path, mode="region_tree", hlo_op="", bundle=0):
    _ask(mode, hlo_op)
    (name, n), *_ = _matching(hlo_op)
    data = {"hlo_instruction_name": name.split("::")[1], "total_instructions": n}
    return json.dumps({"status": "OK", "mode": mode, "data": data})
"""

REAL = ("jit_flash(31)::flash_attention.1", 1713)
DECOY = ("xjit_flash(31)::flash_attention.12", 40)
OTHER = ("jit__normal(22)::fusion.48", 3287)


@pytest.mark.child
@pytest.mark.parametrize("decoy_first", [False, True])
def test_llo_child_analyses_only_the_profiled_programs(tmp_path, monkeypatch, decoy_first):
    pkg = tmp_path / "fake" / "xprof" / "convert"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    asked = tmp_path / "asked.txt"
    modules = [DECOY, REAL, OTHER] if decoy_first else [REAL, DECOY, OTHER]
    (pkg / "_pywrap_profiler_plugin.py").write_text(
        f"ASKED = {str(asked)!r}\nMODULES = {modules!r}\n" + FAKE_PLUGIN
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    path = FIXTURES / "flash_fwd_llo.xplane.pb"
    got = llo.attach(jaxtune.Profile.from_trace(path), path, python=sys.executable).llo
    assert got["success"], got
    # analyze_llo was asked for the profiled program alone, the static analyses for its
    # kernel's whole module name: never the whole trace, never by op name alone.
    lines = [line.split(" ", 1) for line in asked.read_text().splitlines()]
    assert [name for what, name in lines if what == "analyze_llo"] == ["jit_flash(31)::"]
    assert {name for what, name in lines if what != "analyze_llo"} == {REAL[0]}
    (kernel,) = got["kernels"]
    assert kernel["kernel"] == "_flash_attention_kernel" and kernel["llo_module"] == REAL[0]
    _leads_with_the_pallas_kernel(path, got)
    # The decoy matched the prefix inside another program's name: left out, and with it
    # the answer's histogram and registers, which span it.
    assert got["total_instructions"] == 1713
    assert got["unique_registers"] is None and got["top_opcodes"] == []
    if decoy_first:  # xprof answered for the decoy: refused, not shown as the kernel's
        assert not kernel["success"]
        assert kernel["errors"]["opcodes"] == "xprof answered for flash_attention.12"
    else:
        assert kernel["success"] and kernel["instructions"] == 1713


def test_llo_summary_keeps_a_scoped_answers_registers_and_opcodes():
    scope = llo.scope_of(xplane.load(FIXTURES / "flash_fwd_llo.xplane.pb"))
    answer = {
        "success": True,
        "scoped": ["jit_flash(31)::"],
        "total_instructions": 1206,
        "unique_registers": 125,
        "opcode_histogram": {"VMUL": 144, "VST": 104},
        "modules": [{"kernel_name": REAL[0], "hlo_instruction_name": "flash_attention.1",
                     "total_instructions": 1206}],
    }  # fmt: skip
    got = llo_figures.summary(answer, {}, {"flash_attention.1": "_flash_attention_kernel"}, scope)
    assert got["unique_registers"] == 125 and got["top_opcodes"] == [["VMUL", 144], ["VST", 104]]
    assert got["line"].endswith("1206 instructions, 125 registers")


@pytest.mark.child
@NEEDS_XPROF
def test_real_xprof_analyses_the_profiled_program_alone():
    path = FIXTURES / "flash_fwd_llo.xplane.pb"
    got = llo.attach(jaxtune.Profile.from_trace(path), path, python=XPROF_PYTHON).llo
    assert got["success"], got
    (kernel,) = got["kernels"]
    assert kernel["llo_module"] == "jit_flash(31)::flash_attention.1" and kernel["success"]
    # The program's own totals (the whole trace's are 54936 instructions over 15 modules).
    assert got["total_instructions"] == 1206 and got["unique_registers"] == 125
    assert "(14 LLO modules of other programs left out)" in got["line"]
    _leads_with_the_pallas_kernel(path, got)


def _leads_with_the_pallas_kernel(path, got):
    """The LLO section of the flash_fwd_llo report: its one Pallas kernel first, named
    under its autotuned kernel, with the device time of its kernel row, in ``--json``
    and in the text (issue 58 item 4)."""
    p = jaxtune.Profile.from_trace(path)
    (row,) = [k for k in p.kernels if k.kind == "pallas"]
    # Its autotuned kernel, as the kernels table's head row names it.
    owner = [k.name for k in p.kernels if k.kind == "autotuned" and k.kernel_id == row.kernel_id]
    name = owner[0] if owner else row.kernel_id
    assert name and f"\n{name} " in p.table()
    first = got["kernels"][0]
    assert (first["hlo_op"], first["pallas"], first["autotuned"]) == (row.hlo_op, True, name)
    assert first["device_us"] == row.total_us and got["pallas_kernels"] == 1
    assert "1 Pallas kernel(s) and 0 other module(s) of jit_flash" in got["line"]
    text = dataclasses.replace(p, llo=got).table().splitlines()
    at = text.index(f"llo: {got['line']}")
    assert text[at + 1].startswith(
        f"  {name}: {row.name} ({row.hlo_op}): {units.duration(row.total_us)} on the device; "
    )
    assert not any("other module" in line for line in text[at + 1 :])  # none to leave out


def test_llo_of_other_programs_alone_is_not_analysed():
    scope = llo.scope_of(xplane.load(FIXTURES / "flash_fwd_llo.xplane.pb"))
    assert scope is not None
    none = dataclasses.replace(scope, ops=frozenset(), modules=())
    # No child runs (this Python has no xprof to ask): the line says why.
    got = llo.analyze(FIXTURES / "flash_fwd_llo.xplane.pb", "tpu", True, python="/", scope=none)
    assert not got["success"]
    assert got["why"] == (
        "the trace's 14 LLO modules are all of programs other than jit_flash, which have none"
    )


def test_xprof_is_handed_the_profiled_programs_llo_modules_alone():
    space = xplane.load(FIXTURES / "flash_fwd_llo.xplane.pb")
    scope = llo.scope_of(space)
    assert scope is not None
    scoped = xplane.parse(llo.scoped_trace(space, scope.modules))
    assert scoped.plane_names == ["/host:metadata"]
    meta = scoped.plane("/host:metadata")
    original = {m.name: m.stats["llo_proto"] for m in space.plane("/host:metadata").event_metadata.values() if "llo_proto" in m.stats}  # fmt: skip
    assert {m.name: m.stats["llo_proto"] for m in meta.event_metadata.values()} == {
        name: original[name] for name in scope.modules
    }
    assert llo.has_llo_data(scoped)


#: xprof's answers for the profiled program's modules, asked of a file.
_ANSWERS = """
import json, sys
from xprof.convert import _pywrap_profiler_plugin as plugin
path, module = sys.argv[1], sys.argv[2]
static = {m: json.loads(plugin.get_llo_static_analysis_json(path, m, module, 0))
          for m in ("opcodes", "bundle_util", "spills", "register_pressure")}
print(json.dumps({"analyze": plugin.analyze_llo(path, module.partition("::")[0] + "::"),
                  "static": static}))
"""


@pytest.mark.child
@NEEDS_XPROF
def test_xprof_answers_the_same_on_the_scoped_file_as_on_the_whole_trace(tmp_path):
    import subprocess

    whole = FIXTURES / "flash_fwd_llo.xplane.pb"
    space = xplane.load(whole)
    scope = llo.scope_of(space)
    assert scope is not None
    scoped = tmp_path / "llo.xplane.pb"
    scoped.write_bytes(llo.scoped_trace(space, scope.modules))
    assert scoped.stat().st_size < whole.stat().st_size / 30

    def answers(path):
        out = subprocess.run(
            [XPROF_PYTHON or sys.executable, "-c", _ANSWERS, str(path), REAL[0]],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout  # fmt: skip
        return json.loads(out)

    assert answers(scoped) == answers(whole)


def _xla_flops(name: str) -> dict[str, float]:
    """XLA's ``flops`` stat of each Pallas call of a fixture, by kernel function."""
    plane = xplane.load(FIXTURES / f"{name}.xplane.pb").plane("/device:TPU:0")
    assert plane is not None
    return {
        _kernel_function(m.display_name): m.stats["flops"]
        for m in plane.event_metadata.values()
        if 'custom_call_target="tpu_custom_call"' in m.name
    }


def test_backward_kernels_count_their_flops_from_their_mosaic_body():
    """Issues 43 and 58: JAX's flash attention backward kernels declare no cost estimate,
    so XLA's figure for their calls is 0; their FLOPs are counted from the Mosaic body
    (matmuls x grid), labelled ``mosaic``, and match a hand count."""
    xla = _xla_flops("flash_grad")
    assert xla["_flash_attention_dkv_kernel"] == xla["_flash_attention_dq_kernel"] == 0
    p = jaxtune.Profile.from_trace(FIXTURES / "flash_grad.xplane.pb")
    kernels = {k.name: k for k in p.kernels}
    doc = {k["name"]: k for k in json.loads(p.to_json())["kernels"]}
    # q, k, v bf16 [2, 8, 2048, 128]: dkv recomputes S = QK^T and runs dP, dV, dK (4
    # matmuls of 2*S*S*D each per head); dq recomputes S and runs dP, dQ (3).
    b, h, s, d = 2, 8, 2048, 128
    hand = {"_flash_attention_dkv_kernel": 8 * b * h * s * s * d}
    hand["_flash_attention_dq_kernel"] = 6 * b * h * s * s * d
    for name, per_call in hand.items():
        k = kernels[name]
        assert k.flops_source == "mosaic" and doc[name]["flops_source"] == "mosaic"
        assert k.flops == 3 * per_call
        assert k.bytes_accessed and k.bound_by in ("compute", "memory")
        assert k.compute_peak == pytest.approx(k.flops_per_s / 197e12)
    # The forward kernel's figure is its cost estimate, as XLA counted it (3 calls).
    forward = kernels["_flash_attention_kernel"]
    assert forward.flops_source == "cost_estimate"
    assert forward.flops == 3 * xla["_flash_attention_kernel"]
    text = p.table()
    for name in hand:
        assert re.search(rf"^  {name}\s+pallas\s+3\s.*\smosaic\s*$", text, re.M), text
    assert "* bound unknown" not in text


@pytest.mark.parametrize("name", ["flash_fwd", "flash_fwd_llo"])
def test_report_llo_reads_the_trace_once(name, monkeypatch, capsys):
    from jaxtune._cli import main as cli_main

    reads = []
    real = xplane.load
    monkeypatch.setattr(xplane, "load", lambda path: reads.append(path) or real(path))
    monkeypatch.setattr(llo, "xprof_available", lambda python=None: False)
    assert cli_main(["report", "--llo", str(FIXTURES / f"{name}.xplane.pb")]) == 0
    assert len(reads) == 1  # the report and the LLO analysis share one reading
    assert "llo: LLO analysis needs xprof" in capsys.readouterr().out


def test_a_tpu_trace_without_llo_data_starts_no_child(monkeypatch):
    path = FIXTURES / "flash_fwd.xplane.pb"
    monkeypatch.setattr(llo, "_ask_xprof", lambda *a, **k: pytest.fail("a child was started"))
    got = llo.attach(jaxtune.Profile.from_trace(path), path, python=sys.executable).llo
    assert got is not None and not got["success"]
    assert got["line"].startswith("the trace holds no LLO data (no llo_proto stat")


def test_json_says_how_far_each_kernel_is_from_the_peaks():
    """Issue 58: `report --json` carries % of peak, over-peak and the roofline floor per
    kernel, as the rates and the device's peaks give them; the backward kernels' bytes,
    counted copy by copy, are no longer over the peak bandwidth."""
    p = jaxtune.Profile.from_trace(FIXTURES / "flash_grad.xplane.pb")
    doc = json.loads(p.to_json())
    flops_peak, bytes_peak = 197e12, 819e9
    rows = {k["name"]: k for k in doc["kernels"]}
    for k in doc["kernels"]:
        assert k["compute_peak"] == pytest.approx(k["flops_per_s"] / flops_peak)
        assert k["memory_peak"] == pytest.approx(k["bytes_per_s"] / bytes_peak)
        over = [n for n, f in (("flops", k["compute_peak"]), ("bytes", k["memory_peak"])) if f > 1]
        assert k["over_peak"] == over
        floor = max(k["flops"] / flops_peak, k["bytes_accessed"] / bytes_peak) * 1e6
        assert k["floor_us"] == pytest.approx(floor)
        assert k["floor_share"] == pytest.approx(floor / k["total_us"])
    for name in ("_flash_attention_dkv_kernel", "_flash_attention_dq_kernel"):
        assert rows[name]["flops_source"] == "mosaic" and rows[name]["over_peak"] == []


#: A "how far from the peaks" line as the text and the HTML page print it.
_PEAK_LINE = re.compile(
    r"^(?P<name>.+?): (?:(?P<flops>[\d.]+)%(?P<flops_over>!?) of peak FLOP/s)?(?:, )?"
    r"(?:(?P<bytes>[\d.]+)%(?P<bytes_over>!?) of peak bandwidth)?$"
)
_FLOOR_LINE = re.compile(
    r"^(?P<name>.+?): (?P<share>[\d.]+)% of the roofline floor: the floor is "
    r"(?P<floor>[\d.]+) (?P<floor_unit>s|ms|us), it takes (?P<takes>[\d.]+) (?P<takes_unit>s|ms|us) "
    r"\(per call; flops and bytes from (?P<source>\w+)\)$"
)
_US = {"s": 1e6, "ms": 1e3, "us": 1.0}


def _shown(text: str, places: int) -> pytest.approx:
    """A percentage as printed (``places`` decimals), as an interval around its value."""
    return pytest.approx(float(text) / 100, abs=0.5 * 10**-places / 100 + 1e-12)


def _percent(line: re.Match, key: str, fraction: float) -> None:
    digits = line[key].partition(".")[2]
    assert fraction == _shown(line[key], len(digits)), (line[0], fraction)


def _report_lines(text: str) -> list[str]:
    """The report's lines, each wrapped line joined to the line it continues."""
    return text.replace("\n    ", " ").splitlines()


@pytest.mark.parametrize("fixture", ["flash_grad", "matmul"])
def test_peak_and_floor_lines_in_the_text_and_the_page_match_the_json(fixture):
    """Issue 58 item 2: the text table and the HTML page both show, per kernel row, its %
    of the peaks (marked above them), and per autotuned kernel its roofline floor line,
    with the figures the ``--json`` rows carry (``compute_peak``, ``memory_peak``,
    ``over_peak``, ``floor_us``, ``floor_share``); the autotuned kernel's own figures are
    its rows' sums, as its parts run one after another."""
    import html as _html

    p = jaxtune.Profile.from_trace(FIXTURES / f"{fixture}.xplane.pb")
    doc = json.loads(p.to_json())
    page = _html.unescape(re.sub(r"<[^>]+>", "\n", p.to_html()))
    peak = doc["peak"]
    by_id = collections.defaultdict(list)
    for k in doc["kernels"]:
        by_id[k["kernel_id"] or k["name"]].append(k)
    for shown in (_report_lines(p.table()), [x.strip() for x in page.splitlines()]):
        peaks = {m["name"]: m for line in shown if (m := _PEAK_LINE.match(line)) and m["name"]}
        floors = {m["name"]: m for line in shown if (m := _FLOOR_LINE.match(line))}
        # Every kernel row with a rate: its line, the JSON's fractions, marked over 100 %.
        for k in doc["kernels"]:
            if k["compute_peak"] is None and k["memory_peak"] is None:
                continue
            head = k["kind"] == "autotuned" and len(by_id[k["kernel_id"]]) > 1
            line = peaks[f"{k['name']} {table.AROUND}" if head else k["name"]]
            for key, mark in (("compute_peak", "flops"), ("memory_peak", "bytes")):
                _percent(line, mark, k[key])
                assert bool(line[f"{mark}_over"]) == (mark in k["over_peak"]) == (k[key] > 1)
        # Every autotuned kernel with parts: its whole, from its rows' JSON figures.
        wholes = []
        for kernel_id, rows in by_id.items():
            own = [k for k in rows if k["kind"] == "autotuned"]
            if len(rows) < 2 or any(k["floor_us"] is None for k in rows):
                continue
            total = sum(k["total_us"] for k in rows)
            calls = own[0]["calls"] if own else max(k["calls"] for k in rows)
            flops = sum(k["flops"] for k in rows) / (total * 1e-6)
            bytes_ = sum(k["bytes_accessed"] for k in rows) / (total * 1e-6)
            whole = peaks[kernel_id]
            _percent(whole, "flops", flops / peak["flops_per_s"])
            _percent(whole, "bytes", bytes_ / peak["bytes_per_s"])
            floor = sum(k["floor_us"] for k in rows)
            line = floors[kernel_id]
            _percent(line, "share", floor / total)
            assert float(line["floor"]) * _US[line["floor_unit"]] == pytest.approx(
                floor / calls, rel=0.01
            )
            assert float(line["takes"]) * _US[line["takes_unit"]] == pytest.approx(
                total / calls, rel=0.01
            )
            sources = {k["flops_source"] for k in rows}
            assert line["source"] == (sources.pop() if len(sources) == 1 else "mixed")
            # --json's own entry for the whole says the same.
            (entry,) = [k for k in doc["autotuned_kernels"] if k["kernel_id"] == kernel_id]
            assert entry["floor_us"] == pytest.approx(floor)
            assert entry["floor_share"] == pytest.approx(floor / total)
            assert entry["compute_peak"] == pytest.approx(flops / peak["flops_per_s"])
            assert entry["memory_peak"] == pytest.approx(bytes_ / peak["bytes_per_s"])
            assert entry["flops_source"] == line["source"]
            assert entry["total_us"] == pytest.approx(total)
            assert bool(whole["flops_over"] or whole["bytes_over"]) == bool(entry["over_peak"])
            wholes.append(kernel_id)
        # Each fixture ran one autotuned kernel, with its own ops beside its Pallas calls.
        assert wholes == list(floors) == [k["kernel_id"] for k in doc["autotuned_kernels"]]
        assert len(wholes) == 1
