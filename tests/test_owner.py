"""An op's owner (the kernel or XLA op its device time goes to) is a typed value from the
rule that finds it to the row that shows it: several kernels XLA fused into one op are one
owner naming each of them, joined with ``" + "`` only where a table or page shows it."""

from __future__ import annotations

import dataclasses

import pytest

from jaxtune._core.vocabulary import PallasKernel
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
    scopes = scope_table(
        [PallasKernel(name=n, scope=("jit(step)", "jit(pair)")) for n in ("attn", "mm")]
    )
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
        PallasKernel(name="attn", scope=("jit(step)",), per_step=1),
        PallasKernel(name="mm", scope=("jit(step)",), per_step=2),
        PallasKernel(name="p + q", scope=("jit(step)",), per_step=1),
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


def test_hlo_text_fusions_hold_their_own_computations_ops_alone():
    # A signature that prints a long tuple holds "=" (/*index=5*/): the ENTRY computation
    # was once not told from an instruction, and its op names (the parameters', every
    # kernel's) went to the fusion printed before it.
    import jax
    import jax.numpy as jnp

    from jaxtune._profiling.hlo import hlo_fusions

    def f(*a):
        return tuple(jnp.sin(x) * 2 + 1 for x in a)

    text = jax.jit(f).lower(*[jnp.ones(4) for _ in range(7)]).compile().as_text()
    entry = next(line for line in text.splitlines() if line.startswith("ENTRY"))
    assert "/*index=5*/" in entry
    fusions = hlo_fusions(text)
    assert fusions
    for fusion, names in fusions.items():
        assert set(names) <= {"jit(f)/sin", "jit(f)/mul", "jit(f)/add"}, (fusion, names)


def _compiled_program() -> HloModule:
    """Two Mosaic kernels of one jaxtune kernel: their calls, and a bitcast of each call's
    name stack, fused into one op named after an add of the wrapper's."""
    around = "jit(step)/jaxtune[lib.attn#0123456789]"

    def ins(name: str, opcode: str, stack: str, kernel: str | None = None) -> HloInstruction:
        target = "tpu_custom_call" if kernel else None
        return HloInstruction(
            name=name, opcode=opcode, op_name=stack, target=target, frames=(), calls=(),
            kernel_name=kernel,
        )  # fmt: skip

    instructions = [
        ins("fwd.1", "custom-call", f"{around}/jit(attn)/pallas_call", "_fwd_kernel"),
        ins("bwd.2", "custom-call", f"{around}/jit(attn)/bwd/pallas_call", "_bwd_kernel"),
        ins("bitcast.3", "bitcast", f"{around}/jit(attn)/pallas_call"),
        ins("bitcast.4", "bitcast", f"{around}/jit(attn)/bwd/pallas_call"),
        ins("reduce.5", "reduce", f"{around}/jit(attn)/reduce_sum"),
        ins("fusion.6", "fusion", f"{around}/jit(attn)/add"),
        ins("fusion.7", "fusion", "jit(step)/add"),
        ins("add.8", "add", "jit(step)/add"),
    ]
    return HloModule(
        name="jit_step",
        instructions={i.name: i for i in instructions},
        fused={"fusion.6": ("bitcast.3", "bitcast.4"), "fusion.7": ("add.8",)},
    )


def test_compiled_kernels_are_named_by_their_payload_and_never_joined():
    module = _compiled_program()
    ops = module.instructions
    kernels = [
        PallasKernel(name="_fwd_kernel", scope=("jit(step)", "jaxtune[lib.attn#0123456789]", "jit(attn)")),
        PallasKernel(name="_bwd_kernel", scope=("jit(step)", "jaxtune[lib.attn#0123456789]", "jit(attn)", "bwd")),
    ]  # fmt: skip
    # The capture's reading of the HLO text says fusion.7 fuses both kernels' ops; the
    # program's own HLO, which the trace carries, says it fuses an add alone.
    stacks = [ops["bitcast.3"].op_name, ops["bitcast.4"].op_name]
    classify = classifier(kernels=kernels, fusions={"fusion.7": stacks}, programs={1: module})

    def kind(name: str) -> OpKind:
        i = ops[name]
        return dataclasses.replace(_kind(name, i.op_name), target=i.target)

    fwd = Owner(kind="pallas", names=("_fwd_kernel",), kernel_id="lib.attn")
    wrapper = Owner(kind="autotuned", names=("lib.attn",), kernel_id="lib.attn")
    assert classify(kind("fwd.1")) == fwd
    # An op of the call's name stack is the kernel the call's payload names, not the
    # scope around pallas_call ("attn").
    assert classify(kind("bitcast.3")) == fwd
    # The wrapper's own ops in the kernel's scope are not the kernel's: its time is its
    # calls'.
    assert classify(kind("reduce.5")) == wrapper
    # A fusion of two compiled kernels' ops is their autotuned kernel's, never "a + b".
    assert classify(kind("fusion.6")) == wrapper
    assert classify(kind("fusion.7")) == Owner(kind="xla", names=("fusion.7",), program="1")
