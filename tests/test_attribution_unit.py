"""Attribution from small hand-built event lists: no trace, no capture, no JAX program.

Covers docs/profiling.md, "Attribution" (the owner rule: a Pallas custom call, the
``pallas_call`` frame of a name stack, an interpret-mode kernel's scope, a jaxtune marker,
else a plain XLA op; a fusion judged by what is fused into it; exclusive times, shares
that add up to at most 1; one row per XLA instruction of each program and the scope view;
calls, exact or read off the trace; a tuned kernel's config and speedup) and "KernelStat
and the roofline" (where FLOPs and bytes come from, in order, and ``bound_by`` against
the device's peaks).

Events go through the walk that totals a line's events (``walk_items``) and
:func:`~jaxtune._profiling.attribution.attribute`; what is checked is the rows
(:class:`KernelStat`, :class:`ScopeStat`) people read, never the owners' inner form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from jaxtune._core.vocabulary import PallasKernel, RanConfig
from jaxtune._profiling.attribution import KernelStat, attribute, classifier, kernel_ids, scopes
from jaxtune._profiling.events import Walk
from jaxtune._profiling.totals import Accumulator, OpKind, walk_items

#: A marker as ``@autotuned`` leaves it in the name stack (kernel id ``mm``).
MARK = "jaxtune[mm#0123456789]"


def op(
    name: str,
    stack: str = "",
    *,
    target: str | None = None,
    program: int | None = 1,
    module: str = "jit_step",
    flops: float | None = None,
    bytes_accessed: float | None = None,
) -> OpKind:
    """One executed HLO op as the trace reader gives it."""
    return OpKind(
        op=name,
        module=module,
        name_stack=stack,
        target=target,
        flops=flops,
        bytes_accessed=bytes_accessed,
        program=program,
    )


def calls_of(kind: OpKind, n: int) -> list[tuple[float, float, OpKind, int | None]]:
    """``n`` calls of ``kind``, a plain op between each (consecutive events of one kernel
    are one call), one program run each."""
    between = op("copy.99", "jit(step)/copy")
    return [
        event for i in range(n) for event in ((i * 10, 5, kind, i), (i * 10 + 5, 1, between, i))
    ]


def walked(
    events: Sequence[tuple[float, float, OpKind, int | None]],
    *,
    kernels: Sequence[Mapping[str, Any]] = (),
    fusions: Mapping[str, Sequence[str]] | None = None,
) -> Walk:
    """A line of ``(start µs, duration µs, op, run id)`` events walked and totalled by
    owner, as the trace reader walks a plane's op line."""
    interned: list[OpKind] = []
    acc = Accumulator(interned.__getitem__, classifier(kernels=kernels, fusions=fusions))
    items = []
    for start, duration, kind, run in sorted(events, key=lambda e: (e[0], -e[1])):
        if kind not in interned:
            interned.append(kind)
        items.append((round(start * 1e6), round(duration * 1e6), interned.index(kind), run))
    assert walk_items(items, acc)
    owners = acc.totals()
    return Walk(
        plane=None,  # type: ignore[arg-type]  # attribution reads only the totals
        owners=owners,
        spans=[],
        total_ps=sum(t.total_ps for t in owners.values()),
        events=sum(t.events for t in owners.values()),
    )


def rows(walk: Walk, **kwargs: Any) -> dict[str, KernelStat]:
    """Every row (kernels and XLA ops) by name."""
    kernels, ops, _ = attribute(walk, kernels=kwargs.pop("kernels", ()), **kwargs)
    return {s.name: s for s in [*kernels, *ops]}


# -- who owns an op ---------------------------------------------------------------------


def test_each_op_goes_to_its_owner_by_the_rule():
    events = [
        # 1. a Pallas custom call: its kernel, named by the frame around pallas_call
        (0, 10, op("custom-call.1", "jit(step)/attn/pallas_call", target="tpu_custom_call"), 1),
        # 2. an op below a kernel's pallas_call frame
        (10, 5, op("add.2", "jit(step)/softmax/pallas_call/add"), 1),
        # 3. an op of an interpret-mode kernel, inside the scope the capture recorded
        (15, 4, op("while.3", "jit(step)/jit(flash)/while/body"), 1),
        # 4. an op under a jaxtune marker only: the autotuned kernel
        (19, 6, op("dot.4", f"jit(step)/{MARK}/dot_general"), 1),
        # 5. anything else: a plain XLA op, named by its instruction
        (25, 3, op("tanh.5", "jit(step)/tanh"), 1),
    ]
    kernels = [PallasKernel(name="flash", scope=("jit(step)", "jit(flash)"), per_step=1)]
    got = rows(walked(events, kernels=kernels), kernels=kernels)
    assert {name: s.kind for name, s in got.items()} == {
        "attn": "pallas",
        "softmax": "pallas",
        "flash": "pallas",
        "mm": "autotuned",
        "tanh.5": "xla",
    }
    assert got["mm"].kernel_id == "mm"
    assert got["tanh.5"].hlo_op == "tanh.5" and got["tanh.5"].name_stack == "jit(step)/tanh"


def test_a_kernel_inside_an_autotuned_call_keeps_the_kernels_name_and_the_marker_id():
    events = [(0, 4, op("custom-call.1", f"jit(step)/{MARK}/mm_kernel/pallas_call"), 1)]
    got = rows(walked(events))
    assert got["mm_kernel"].kind == "pallas" and got["mm_kernel"].kernel_id == "mm"


def test_a_fusion_is_judged_by_what_is_fused_into_it():
    events = [
        (0, 4, op("fusion.1"), 1),  # the ops of one kernel fused
        (4, 4, op("fusion.2"), 1),  # ops of two kernels fused
        (8, 4, op("fusion.3"), 1),  # plain ops fused: an XLA op
    ]
    fusions = {
        "fusion.1": ["jit(step)/attn/pallas_call/exp", "jit(step)/attn/pallas_call/max"],
        "fusion.2": ["jit(step)/attn/pallas_call/exp", "jit(step)/norm/pallas_call/mul"],
        "fusion.3": ["jit(step)/tanh", "jit(step)/mul"],
    }
    kernels, ops, _ = attribute(walked(events, fusions=fusions))
    assert [k.name for k in kernels if k.name == "attn"] == ["attn"]
    both = [k for k in kernels if k.name != "attn"]
    assert len(both) == 1 and "attn" in both[0].name and "norm" in both[0].name
    assert [o.name for o in ops] == ["fusion.3"]


# -- time -------------------------------------------------------------------------------


def test_nested_events_count_their_exclusive_time_and_shares_add_up():
    events = [
        (0, 100, op("while.1", "jit(step)/while"), 1),  # a loop...
        (10, 30, op("dot.2", "jit(step)/while/body/dot_general"), 1),  # ...and its body
        (50, 20, op("custom-call.3", "jit(step)/attn/pallas_call", target="tpu_custom_call"), 1),
    ]
    walk = walked(events)
    kernels, ops, total_us = attribute(walk)
    by = {s.name: s for s in [*kernels, *ops]}
    assert total_us == pytest.approx(100.0)
    assert by["while.1"].total_us == pytest.approx(50.0)
    assert by["dot.2"].total_us == pytest.approx(30.0)
    assert by["attn"].total_us == pytest.approx(20.0)
    assert sum(s.share for s in by.values()) == pytest.approx(1.0)
    # Sorted by share, kernels and ops apart.
    assert [s.name for s in ops] == ["while.1", "dot.2"]


def test_one_row_per_instruction_of_each_program_and_the_scope_view():
    events = [
        (0, 4, op("dot.1", "jit(step)/dense/dot_general", program=1, module="jit_step"), 1),
        (4, 4, op("dot.1", "jit(eval)/dense/dot_general", program=2, module="jit_eval"), 1),
        (8, 2, op("dot.2", "jit(step)/dense/dot_general", program=1, module="jit_step"), 1),
        (10, 4, op("dot.1", "jit(step)/dense/dot_general", program=1, module="jit_step"), 2),
    ]
    _, ops, _ = attribute(walked(events))
    assert sorted((o.name, o.program, o.calls) for o in ops) == [
        ("dot.1", "jit_eval", 1),
        ("dot.1", "jit_step", 2),
        ("dot.2", "jit_step", 1),
    ]
    view = {(s.program, s.name_stack): s for s in scopes(ops)}
    step = view["jit_step", "jit(step)/dense/dot_general"]
    assert (step.ops, step.calls, step.hlo_ops) == (2, 3, ("dot.1", "dot.2"))
    assert step.total_us == pytest.approx(10.0)
    assert view["jit_eval", "jit(eval)/dense/dot_general"].ops == 1


# -- calls and costs --------------------------------------------------------------------


def _interpret_kernel(per_step: int | None, **extra: Any) -> list[PallasKernel]:
    return [
        PallasKernel(name="flash", scope=("jit(step)", "jit(flash)"), per_step=per_step, **extra)
    ]


def _host_events() -> list[tuple[float, float, OpKind, int | None]]:
    """An interpret-mode kernel's pieces on host threads: 6 events over 2 program runs."""
    return [
        (i * 10, 5, op(f"callback.{i % 3}", "jit(step)/jit(flash)/while/body"), i // 3)
        for i in range(6)
    ]


def test_calls_come_from_the_program_and_costs_from_the_kernels_estimate():
    kernels = _interpret_kernel(2, cost_estimate={"flops": 1e6, "bytes_accessed": 1e3})
    got = rows(walked(_host_events(), kernels=kernels), kernels=kernels, host_trace=True)
    flash = got["flash"]
    # Twice a step, two runs of the program: 4 calls, whatever the events say.
    assert (flash.calls, flash.calls_exact) == (4, True)
    assert (flash.flops, flash.bytes_accessed, flash.flops_source) == (4e6, 4e3, "cost_estimate")
    assert flash.flops_per_s == pytest.approx(4e6 / 30e-6)
    assert flash.intensity == pytest.approx(1e3)
    # The iterations the capture traced win over the runs the trace shows.
    got = rows(
        walked(_host_events(), kernels=kernels), kernels=kernels, host_trace=True, iterations=5
    )
    assert got["flash"].calls == 10


def test_calls_the_program_cannot_say_are_read_off_the_trace_and_derive_no_figure():
    kernels = _interpret_kernel(None, cost_estimate={"flops": 1e6, "bytes_accessed": 1e3})
    flash = rows(walked(_host_events(), kernels=kernels), kernels=kernels, host_trace=True)["flash"]
    assert flash.calls_exact is False
    assert flash.flops is None and flash.bytes_accessed is None
    assert flash.flops_source == "none" and flash.bound_by == "unknown"


@pytest.mark.parametrize(
    ("extra", "flops", "bytes_", "source"),
    [
        # the kernel's own cost_estimate first...
        (
            {"costs": {"attn": {"flops": 100.0, "bytes_accessed": 10.0}}},
            300.0,
            30.0,
            "cost_estimate",
        ),
        # ...then XLA's figures in the trace...
        ({}, 3 * 50.0, 3 * 5.0, "xla"),
    ],
)
def test_flops_and_bytes_come_from_the_first_source_that_has_them(extra, flops, bytes_, source):
    kind = op(
        "custom-call.1",
        "jit(step)/attn/pallas_call",
        target="tpu_custom_call",
        flops=50.0,
        bytes_accessed=5.0,
    )
    events = calls_of(kind, 3)  # three calls on a device
    attn = rows(walked(events), **extra)["attn"]
    assert (attn.calls, attn.calls_exact) == (3, True)
    assert (attn.flops, attn.bytes_accessed, attn.flops_source) == (flops, bytes_, source)


def test_a_hint_counts_for_an_autotuned_kernel_and_shapes_give_bytes_only():
    events = calls_of(op("dot.1", f"jit(step)/{MARK}/dot_general"), 2)
    mm = rows(walked(events), hints={"mm": {"flops": 8.0, "bytes": 4.0}})["mm"]
    assert (mm.flops, mm.bytes_accessed, mm.flops_source) == (16.0, 8.0, "hint")

    kind = op("custom-call.1", "jit(step)/attn/pallas_call", target="tpu_custom_call")
    kernels = [PallasKernel(name="attn", scope=("jit(step)",), per_step=1, io_bytes=64)]
    attn = rows(walked(calls_of(kind, 2)), kernels=kernels)["attn"]
    assert (attn.flops, attn.bytes_accessed, attn.flops_source) == (None, 128.0, "shapes")
    attn = rows(walked([(0, 5, kind, 0)]))["attn"]
    assert (attn.flops, attn.bytes_accessed, attn.flops_source) == (None, None, "none")


@pytest.mark.parametrize(
    ("flops", "bytes_", "bound"),
    [(1e12, 1e6, "compute"), (1e6, 1e9, "memory"), (None, None, "unknown")],
)
def test_bound_by_is_read_against_the_devices_peaks(flops, bytes_, bound):
    costs = {} if flops is None else {"attn": {"flops": flops, "bytes_accessed": bytes_}}
    kind = op("custom-call.1", "jit(step)/attn/pallas_call", target="tpu_custom_call")
    attn = rows(walked([(0, 5, kind, 0)]), costs=costs, device_kind="TPU v5 lite")["attn"]
    assert attn.bound_by == bound
    # No peak for a CPU: never a verdict.
    cpu = rows(walked([(0, 5, kind, 0)]), costs=costs, device_kind="cpu")["attn"]
    assert cpu.bound_by == "unknown"


def test_a_tuned_kernels_row_carries_its_config_speedup_and_call_site():
    events = [(0, 5, op("dot.1", f"jit(step)/{MARK}/dot_general"), 0)]
    mm = rows(
        walked(events),
        configs={"mm": RanConfig(config={"block": 128}, speedup=1.7)},
        sources={"mm": "kernels.py:12"},
    )["mm"]
    assert (dict(mm.config or {}), mm.speedup, mm.source) == ({"block": 128}, 1.7, "kernels.py:12")
    untuned = rows(walked(events))["mm"]
    assert untuned.config is None and untuned.speedup is None


def test_kernel_ids_name_the_marker_around_each_kernel_when_it_is_one():
    kernels = [
        PallasKernel(name="attn", scope=("jit(step)", MARK)),
        PallasKernel(name="norm", scope=(), inside="ln"),
        PallasKernel(name="both", scope=(MARK,)),
        PallasKernel(name="both", scope=("jaxtune[other#0123456789]",)),
        PallasKernel(name="plain", scope=("jit(step)",)),
    ]
    assert kernel_ids(kernels) == {"attn": "mm", "norm": "ln"}
