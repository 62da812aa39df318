"""docs/profiling.md, "Attribution" (one row per XLA instruction; kernel internals are the
kernel's): an XLA-op row is one HLO instruction of one program, its calls are its events, its
name stack is a column, and grouping by scope is a view of its own (``Profile.scopes``);
instructions XLA added without metadata go to the kernel their values go to (a copy of a kernel
loop's initial value, a copy in the loop's body), never to a plain XLA row.

The traces are built by hand (:mod:`hlo_protos`), CPU- and TPU-shaped, at epoch scale; a
real capture of a training step with JAX's flash attention is in
``tests/real_kernels/test_profile.py``.
"""

from __future__ import annotations

import collections

import pytest
from hlo_protos import CALLBACK, Ins, cpu_trace, event, module, serialized
from hostile.traces import EPOCH_NS

from jaxtune._core.vocabulary import CaptureInfo, PallasKernel
from jaxtune._profiling import report as _report

SCOPE = "jit(step)/jit(attn)"
#: (file, function, line): the program's call of attn, the pallas_call line, the body.
LOCATIONS = [
    ("/app/train.py", "<module>", 20),  # 1
    ("/app/train.py", "step", 9),  # 2
    ("/app/kern.py", "attn", 40),  # 3: the pallas_call line
    ("/app/kern.py", "attn_kernel", 12),  # 4: the kernel body
    ("/app/train.py", "step", 10),  # 5: the step's own ops
]
FRAMES = [(1, 0), (2, 1), (3, 2), (4, 3), (5, 1)]
SITE, BODY, STEP = 3, 4, 5


def step_proto() -> bytes:
    """``jit_step``: an interpret-mode kernel ``attn_kernel`` (grid loop ``while.4``, its
    callbacks, a copy in its loop body, a copy XLA made of the loop's initial value),
    three instructions of one name stack (``jit(step)/dot_general``), copies that feed
    plain ops or both kinds, and a plain XLA loop with a copy in its body."""
    entry = [
        Ins(1, "constant.1", "constant"),
        Ins(2, "copy.2", "copy", operands=[1]),  # the kernel loop's initial value
        Ins(3, "tuple.3", "tuple", operands=[2]),
        Ins(11, "copy.11", "copy", operands=[1]),  # to the kernel and to a plain add
        Ins(4, "while.4", "while", f"{SCOPE}/while", SITE, calls=[2], operands=[3, 11]),
        Ins(5, "io_callback.5", "custom-call", f"{SCOPE}/io_callback", SITE, CALLBACK),
        Ins(6, "dot.6", "dot", "jit(step)/dot_general", STEP),
        Ins(7, "dot.7", "dot", "jit(step)/dot_general", STEP),
        Ins(8, "fusion.8", "fusion", "jit(step)/dot_general", STEP, calls=[3]),
        Ins(9, "copy.9", "copy", operands=[6]),  # to a plain add only
        Ins(10, "add.10", "add", "jit(step)/add", STEP, operands=[9, 7, 11]),
        Ins(12, "while.12", "while", "jit(step)/while", STEP, calls=[4]),
    ]
    body = [
        Ins(13, "io_callback.13", "custom-call", f"{SCOPE}/while/body/io_callback", BODY, CALLBACK),
        Ins(14, "copy.14", "copy", operands=[13]),  # the body's result: goes to while.4
    ]
    fused = [Ins(20, "multiply.20", "multiply", "jit(step)/dot_general", STEP)]
    plain_body = [
        Ins(15, "add.15", "add", "jit(step)/while/body/add", STEP),
        Ins(16, "copy.16", "copy", operands=[15]),  # goes to the plain while.12
    ]
    comps = [
        (2, "body", body),
        (3, "fused", fused),
        (4, "plain_body", plain_body),
        (1, "main", entry),
    ]
    return module("jit_step", comps, LOCATIONS, FRAMES)


def eval_proto() -> bytes:
    """``jit_eval``: an instruction of the same name as one of ``jit_step``'s."""
    return module("jit_eval", [(1, "main", [Ins(6, "dot.6", "dot", "jit(eval)/dot_general")])])


#: One run of jit_step, on two host threads: (op, start µs, length µs, thread).
STEP_RUN = [
    ("while.4", 0, 20, 0),
    ("io_callback.13", 1, 3, 0),
    ("copy.14", 5, 1, 1),  # on another thread: not inside while.4's event
    ("io_callback.5", 21, 1, 0),
    ("copy.2", 23, 1, 0),
    ("dot.6", 25, 4, 0),
    ("dot.7", 30, 3, 0),
    ("fusion.8", 34, 2, 0),
    ("copy.9", 37, 1, 0),
    ("add.10", 39, 1, 0),
    ("copy.11", 41, 1, 0),
    ("while.12", 43, 10, 0),
    ("add.15", 44, 2, 0),
    ("copy.16", 47, 1, 0),  # inside while.12's event: a row of its own all the same
]
STEP_RUNS, EVAL_RUNS = 3, 2


def trace(tmp_path, swap=False):
    """The trace file: 3 runs of jit_step, 2 of jit_eval (``swap``: dot.7 runs before
    dot.6, as threads may order them)."""
    lines: list[list[str]] = [[], []]
    for r in range(STEP_RUNS):
        t = 1000 * r
        for op, start, length, thread in STEP_RUN:
            if swap and op in ("dot.6", "dot.7"):  # dot.7 (3 µs) at 25, dot.6 (4 µs) at 29
                start = 25 if op == "dot.7" else 29
            lines[thread].append(event(op, t + start, length, 100 + r, 8, "jit_step"))
    for r in range(EVAL_RUNS):
        lines[0].append(event("dot.6", 1000 * r + 60, 5, 200 + r, 9, "jit_eval"))
    for line in lines:  # each line in start order, as a thread writes it
        line.sort(key=lambda e: int(e.split("offset_ps: ")[1].split()[0]))
    protos = {8: ("jit_step", step_proto()), 9: ("jit_eval", eval_proto())}
    path = tmp_path / ("swapped" if swap else "plain") / "host.xplane.pb"
    path.parent.mkdir()
    path.write_bytes(serialized(cpu_trace(lines, protos)))
    return path


def _events(path):
    """(module, instruction) -> its events in the trace."""
    from jaxtune._core.xspace import xplane

    space = xplane.load(path)
    plane = space.plane("/host:CPU")
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in plane.lines:
        for ev in plane.events(line):
            stats = xplane.stats_of(ev.stats, plane.stat_names)
            counts[stats["hlo_module"], stats["hlo_op"]] += 1
    return counts


PLAIN = {
    ("jit_step", "dot.6"): "jit(step)/dot_general",
    ("jit_step", "dot.7"): "jit(step)/dot_general",
    ("jit_step", "fusion.8"): "jit(step)/dot_general",
    ("jit_step", "copy.9"): "",
    ("jit_step", "add.10"): "jit(step)/add",
    ("jit_step", "copy.11"): "",
    ("jit_step", "while.12"): "jit(step)/while",
    ("jit_step", "add.15"): "jit(step)/while/body/add",
    ("jit_step", "copy.16"): "",
    ("jit_eval", "dot.6"): "jit(eval)/dot_general",
}


def test_one_row_per_instruction_of_each_program_with_its_events_as_calls(tmp_path):
    path = trace(tmp_path)
    p = _report.report_from_trace(path)
    rows = {(o.program, o.name): o for o in p.ops}
    assert {k: o.name_stack for k, o in rows.items()} == PLAIN
    events = _events(path)
    for (program, name), row in rows.items():
        assert row.calls == events[program, name], (program, name)
        assert row.calls_exact and row.hlo_op == name and row.kind == "xla"
        assert row.source is None and row.kernel_id is None
    assert rows["jit_eval", "dot.6"].calls == EVAL_RUNS
    assert rows["jit_step", "dot.6"].total_us == pytest.approx(STEP_RUNS * 4)
    # while.12's own time: its body's add and copy are rows of their own.
    assert rows["jit_step", "while.12"].total_us == pytest.approx(STEP_RUNS * (10 - 2 - 1))
    doc = p.to_json()
    assert '"name_stack": "jit(step)/dot_general"' in doc and '"program": "jit_eval"' in doc


def test_the_rows_are_the_same_whichever_instruction_runs_first(tmp_path):
    def rows(path):
        p = _report.report_from_trace(path)
        return {(o.name, o.calls, round(o.total_us, 6)) for o in p.ops}

    assert rows(trace(tmp_path)) == rows(trace(tmp_path, swap=True))


def test_scopes_group_the_instructions_of_a_name_stack(tmp_path):
    p = _report.report_from_trace(trace(tmp_path))
    by_stack = {(g.program, g.name_stack): g for g in p.scopes}
    dots = by_stack["jit_step", "jit(step)/dot_general"]
    assert (dots.ops, dots.calls) == (3, 3 * STEP_RUNS)
    assert set(dots.hlo_ops) == {"dot.6", "dot.7", "fusion.8"}
    assert dots.total_us == pytest.approx(STEP_RUNS * (4 + 3 + 2))
    assert dots.hlo_ops[0] == "dot.6"  # the heaviest first
    assert by_stack["jit_eval", "jit(eval)/dot_general"].calls == EVAL_RUNS
    assert set(by_stack["jit_step", ""].hlo_ops) == {"copy.9", "copy.11", "copy.16"}
    assert sum(g.ops for g in p.scopes) == len(p.ops)
    assert sum(g.share for g in p.scopes) == pytest.approx(sum(o.share for o in p.ops))
    assert p.scopes == tuple(sorted(p.scopes, key=lambda g: -g.share))
    assert '"scopes": [' in p.to_json()


def _kernel_ops_claimed(p, name):
    (kernel,) = p.kernels
    assert kernel.name == name
    # The loop (less its callback inside), its callbacks, the copy in its body (on
    # another thread than the loop) and the copy of its initial value: 23 µs a run.
    assert kernel.total_us == pytest.approx(STEP_RUNS * (17 + 3 + 1 + 1 + 1))
    names = {o.name for o in p.ops}
    assert not names & {"copy.2", "copy.14", "while.4", "io_callback.5", "io_callback.13"}
    # A copy whose value goes to plain ops (copy.9, copy.16), or to the kernel and a plain
    # op (copy.11), is XLA's.
    assert names >= {"copy.9", "copy.11", "copy.16"}
    assert sum(s.share for s in (*p.kernels, *p.ops)) == pytest.approx(1.0)
    return kernel


def test_copies_for_a_kernels_loop_are_the_kernels_in_a_plain_trace(tmp_path):
    kernel = _kernel_ops_claimed(_report.report_from_trace(trace(tmp_path)), "attn_kernel")
    assert kernel.source == "/app/kern.py:40"


def test_copies_for_a_kernels_loop_are_the_kernels_in_a_captured_trace(tmp_path):
    # The capture names the kernel as the jaxpr does (not as the trace's stacks would).
    info = CaptureInfo(
        platform="cpu",
        kernels=(
            PallasKernel(
                name="_attn_kernel",
                scope=("jit(step)", "jit(attn)"),
                per_step=1,
                source="/app/kern.py:40",
                call_site="/app/train.py:9",
            ),
        ),
        sources={"_attn_kernel": "/app/kern.py:40"},
    )
    p = _report.report_from_trace(trace(tmp_path), info=info, iterations=STEP_RUNS)
    kernel = _kernel_ops_claimed(p, "_attn_kernel")
    assert (kernel.calls, kernel.calls_exact) == (STEP_RUNS, True)
    assert (kernel.source, kernel.call_site) == ("/app/kern.py:40", "/app/train.py:9")
    assert kernel.name_stack is None and kernel.program is None


def test_a_damaged_operand_graph_adopts_nothing_and_ends(tmp_path):
    # Instructions that take each other's values (a cycle no compiler writes).
    cycle = [
        Ins(1, "copy.1", "copy", operands=[2]),
        Ins(2, "copy.2", "copy", operands=[1]),
        Ins(3, "copy.3", "copy", operands=[3, 9]),  # itself, and an id nobody has
    ]
    proto = module("jit_loop", [(1, "main", cycle)])
    lines = [[event(f"copy.{i}", 2 * i, 1, 1, 5, "jit_loop") for i in (1, 2, 3)]]
    path = tmp_path / "cycle.xplane.pb"
    path.write_bytes(serialized(cpu_trace(lines, {5: ("jit_loop", proto)})))
    p = _report.report_from_trace(path)
    assert {(o.name, o.calls) for o in p.ops} == {("copy.1", 1), ("copy.2", 1), ("copy.3", 1)}


TPU_TRACE = """
planes {
  id: 1 name: "/device:TPU:0"
  lines { id: 1 name: "XLA Ops" timestamp_ns: START_NS
    EVENTS
  }
  event_metadata { key: 1 value { id: 1 name: "%dot.1 = f32[8] dot(...)" display_name: "dot.1"
    stats { metadata_id: 1 str_value: "jit(step)/dot_general" }
    stats { metadata_id: 2 int64_value: 7 } } }
  event_metadata { key: 2 value { id: 2 name: "%dot.2 = f32[8] dot(...)" display_name: "dot.2"
    stats { metadata_id: 1 str_value: "jit(step)/dot_general" }
    stats { metadata_id: 2 int64_value: 7 } } }
  event_metadata { key: 3 value { id: 3 name: "%fusion.3 = f32[8] fusion(...)"
    display_name: "fusion.3"
    stats { metadata_id: 1 str_value: "jit(step)/dot_general" }
    stats { metadata_id: 2 int64_value: 7 } } }
  event_metadata { key: 4 value { id: 4 name: "%dot.1 = f32[8] dot(...)" display_name: "dot.1"
    stats { metadata_id: 1 str_value: "jit(eval)/dot_general" }
    stats { metadata_id: 2 int64_value: 9 } } }
  stat_metadata { key: 1 value { id: 1 name: "tf_op" } }
  stat_metadata { key: 2 value { id: 2 name: "program_id" } }
}
"""


def test_a_tpu_trace_has_one_row_per_instruction_of_each_program(tmp_path):
    # metadata id -> events: dot.1 x4, dot.2 x2, fusion.3 x1 (jit_step), dot.1 x3 (eval).
    order = [1, 2, 1, 3, 1, 4, 2, 1, 4, 4]
    events = " ".join(
        f"events {{ metadata_id: {m} offset_ps: {i * 2_000_000} duration_ps: {m * 100_000} }}"
        for i, m in enumerate(order)
    )
    text = TPU_TRACE.replace("START_NS", str(EPOCH_NS)).replace("EVENTS", events)
    path = tmp_path / "tpu.xplane.pb"
    path.write_bytes(serialized(text))
    p = _report.report_from_trace(path)
    rows = {(o.program, o.name): (o.calls, o.name_stack) for o in p.ops}
    assert rows == {
        ("7", "dot.1"): (4, "jit(step)/dot_general"),
        ("7", "dot.2"): (2, "jit(step)/dot_general"),
        ("7", "fusion.3"): (1, "jit(step)/dot_general"),
        ("9", "dot.1"): (3, "jit(eval)/dot_general"),
    }
    (group,) = [g for g in p.scopes if g.name_stack == "jit(step)/dot_general"]
    assert (group.ops, group.calls) == (3, 7)
    assert group.total_us == pytest.approx((4 * 1 + 2 * 2 + 1 * 3) * 0.1)
