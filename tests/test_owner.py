"""An op's owner (the kernel or XLA op its device time goes to) is a typed value from the
rule that finds it to the row that shows it: several kernels XLA fused into one op are one
owner naming each of them, joined with ``" + "`` only where a table or page shows it."""

from __future__ import annotations

import dataclasses

import pytest

from jaxtune._profiling import recover
from jaxtune._profiling.attribution import attribute, classifier
from jaxtune._profiling.events import Walk
from jaxtune._profiling.hlo import HloInstruction, HloModule
from jaxtune._profiling.totals import OpKind, Totals
from jaxtune._program.markers import Owner, owner_of, parse, scope_table

FUSED = Owner(kind="pallas", names=("attn", "mm"))


def test_a_fused_owner_is_labelled_with_every_kernel_it_names():
    assert FUSED.label == "attn + mm"
    assert FUSED.kernel is None
    assert Owner(kind="pallas", names=("attn",)).kernel == "attn"


def test_equal_owners_are_one_dictionary_key_and_any_field_tells_them_apart():
    totals = {FUSED: 1, Owner(kind="xla", names=("fusion.3",), program="7"): 2}
    assert totals[Owner(kind="pallas", names=("attn", "mm"))] == 1
    assert totals[Owner(kind="xla", names=("fusion.3",), program="7")] == 2
    others = [
        Owner(kind="pallas", names=("mm", "attn")),  # the order shown is part of it
        Owner(kind="pallas", names=("attn", "mm"), kernel_id="lib.attn"),
        Owner(kind="xla", names=("fusion.3",), program="8"),
        Owner(kind="autotuned", names=("attn + mm",)),
    ]
    assert not any(o in totals for o in others)
    with pytest.raises(dataclasses.FrozenInstanceError):
        FUSED.names = ("attn",)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("stack", "target", "expected"),
    [
        (
            "jit(step)/jaxtune[lib.mm#0123456789]/mm/pallas_call",
            "tpu_custom_call",
            Owner(kind="pallas", names=("mm",), kernel_id="lib.mm"),
        ),
        (
            "jit(step)/jaxtune[lib.norm#0123456789]/add",
            None,
            Owner(kind="autotuned", names=("lib.norm",), kernel_id="lib.norm"),
        ),
        ("jit(step)/add", None, Owner(kind="xla", names=("add.1",))),
        # Two interpret-mode kernels traced under one scope cannot be told apart.
        ("jit(step)/jit(pair)/while/body/add", None, FUSED),
    ],
)
def test_owner_of_names_the_kernel_or_the_op(stack, target, expected):
    scopes = scope_table([{"name": n, "scope": ["jit(step)", "jit(pair)"]} for n in ("attn", "mm")])
    assert scopes == [(("jit(step)", "jit(pair)"), ("attn", "mm"))]
    assert owner_of(stack, target, "add.1", scopes) == expected


def _kind(op: str, stack: str = "", program: int | None = 1) -> OpKind:
    return OpKind(
        op=op,
        module="jit_step",
        name_stack=stack,
        target=None,
        flops=None,
        bytes_accessed=None,
        program=program,
    )


def test_a_fusion_of_two_kernels_ops_is_one_owner_naming_both():
    classify = classifier(
        fusions={
            "fusion.1": ["jit(step)/mm/pallas_call/dot", "jit(step)/attn/pallas_call/exp"],
            "fusion.2": ["jit(step)/mm/pallas_call/dot", "jit(step)/add"],
        }
    )
    assert classify(_kind("fusion.1")) == FUSED
    assert classify(_kind("fusion.2")) == Owner(kind="pallas", names=("mm",))
    assert classify(_kind("add.3", "jit(step)/add")) == Owner(
        kind="xla", names=("add.3",), program="1"
    )


def test_a_fusion_the_trace_claims_for_two_kernels_is_one_owner_naming_both():
    def ins(name: str, op_name: str) -> HloInstruction:
        return HloInstruction(
            name=name, opcode=name.split(".")[0], op_name=op_name, target=None, frames=(), calls=()
        )

    stacks = {"dot.1": "jit(step)/jit(a)/dot", "exp.2": "jit(step)/jit(b)/exp"}
    module = HloModule(
        name="jit_step",
        instructions={n: ins(n, s) for n, s in {**stacks, "fusion.3": ""}.items()},
        fused={"fusion.3": ("dot.1", "exp.2")},
    )
    sites = [
        recover.Site(name=n, scope=("jit(step)", f"jit({s})"), frames=(), once=True)
        for n, s in (("mm", "a"), ("attn", "b"))
    ]
    claims = recover.claims(module, sites)
    assert claims["fusion.3"] == ("attn", "mm")
    classify = classifier(claims={(1, op): names for op, names in claims.items()})
    assert classify(_kind("fusion.3")) == FUSED


def _walked(owners: dict[Owner, Totals]) -> Walk:
    total = sum(t.total_ps for t in owners.values())
    events = sum(t.events for t in owners.values())
    return Walk(plane=None, owners=owners, spans=[], total_ps=total, events=events)  # type: ignore[arg-type]


def test_a_fused_row_counts_calls_from_each_kernel_and_a_name_is_never_split():
    # On CPU an interpret-mode kernel's calls come from the program: per step x steps.
    # A kernel's own name may hold " + " and is still one kernel.
    walked = _walked(
        {
            FUSED: Totals(total_ps=3_000_000, events=9, runs=9, all_targets=False),
            Owner(kind="pallas", names=("p + q",)): Totals(
                total_ps=1_000_000, events=5, runs=5, all_targets=False
            ),
        }
    )
    kernels = [
        {"name": "attn", "scope": ["jit(step)"], "per_step": 1},
        {"name": "mm", "scope": ["jit(step)"], "per_step": 2},
        {"name": "p + q", "scope": ["jit(step)"], "per_step": 1},
    ]
    rows, ops, _ = attribute(walked, kernels=kernels, iterations=3, host_trace=True)
    assert ops == []
    by_name = {r.name: r for r in rows}
    assert (by_name["attn + mm"].calls, by_name["attn + mm"].calls_exact) == (6, True)
    assert (by_name["p + q"].calls, by_name["p + q"].calls_exact) == (3, True)


def test_markers_are_read_outermost_first_with_the_scope_each_closes():
    stack = "jit(step)/jaxtune[lib.attn#0123456789]/jaxtune[lib.mm#abcdef0123]/dot"
    outer, inner = parse(stack)
    assert (outer.kernel, outer.digest) == ("lib.attn", "0123456789")
    assert (inner.kernel, inner.digest) == ("lib.mm", "abcdef0123")
    assert stack[: inner.end] == "jit(step)/jaxtune[lib.attn#0123456789]/jaxtune[lib.mm#abcdef0123]"
    assert owner_of(stack, None, "dot.1").kernel_id == "lib.mm"
