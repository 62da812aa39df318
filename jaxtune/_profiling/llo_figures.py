"""xprof's LLO answers turned into figures per kernel, and the lines a report prints.

Every figure here is xprof's *modelled static schedule* (``"semantics":
"static_modelled_schedule"``): what the compiler scheduled, counted from the LLO program,
not what the hardware did. Measured time inside a kernel comes from custom-call tracing
(:mod:`.intrakernel`).

What is read, by mode of ``get_llo_static_analysis_json`` (shapes as the xprof 2.24 wheel
answers them): ``opcodes`` → ``data.total_instructions``, ``data.top_opcodes`` (``opcode``,
``count``) and ``data.categories``; ``bundle_util`` → ``data.bundles`` (each bundle's
``<unit>_used`` / ``<unit>_avail`` slots), ``data.total_bundles``, ``data.shown_bundles``,
``data.truncated``; ``spills`` → ``data.summary`` (``total_spill_bytes``,
``static_spill_bundles``, ``static_fill_bundles``, ...); ``register_pressure`` →
``data.peak_by_register_type``, ``data.total_live_ranges``.

``bundle_util`` lists only a kernel's first 30 bundles. Slot fill is therefore taken over
every bundle from the trace's own LLO module (:mod:`.llo_bundles`) where that reading agrees
with xprof's listing; only where it cannot be read, or disagrees, is xprof's listing used,
and then labelled as the sample it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._render import units
from .llo_bundles import UNITS, BundleSlots

__all__ = ["ALL_MODULES", "MODELLED", "OTHER_MODULES", "STATIC_MODES", "Scope", "lines", "summary"]

#: The static analyses asked for each kernel.
STATIC_MODES = ("opcodes", "bundle_util", "spills", "register_pressure")

#: How every LLO figure is labelled.
MODELLED = "modelled static schedule, not measured"

#: A text report shows the profiled programs' Pallas kernels, then at most this many of
#: their other LLO modules (XLA's fusions, copies, ...), the heaviest first, and says how
#: many it left out; ``--json`` (the ``llo`` section's ``kernels``) lists every one, and
#: ``jaxtune report --llo-all`` prints every one.
OTHER_MODULES = 10

#: Where the modules a text report leaves out are listed.
ALL_MODULES = 'all in "llo" of --json and of a capture\'s report.json, or jaxtune report --llo-all'

_TOP = 10

_DISAGREES = "the trace's LLO module disagrees with xprof"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Scope:
    """The LLO modules a report analyses: those of the profiled ``programs`` (module
    names), by HLO op, and by their whole LLO module names (``<program>(<n>)::<HLO op>``,
    what xprof is asked for); ``others`` counts the trace's LLO modules of other programs."""

    programs: tuple[str, ...]
    ops: frozenset[str]
    modules: tuple[str, ...] = ()
    others: int = 0


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else None


def _count(value: Any) -> int | None:
    n = _number(value)
    return None if n is None or isinstance(value, bool) else int(n)


def _opcodes(data: Mapping[str, Any], module: Mapping[str, Any]) -> list[list[Any]]:
    """``[opcode, count]`` pairs, most frequent first: the ``opcodes`` mode's
    ``top_opcodes``, else the module's ``opcode_histogram``."""
    pairs: list[tuple[str, float]] = []
    for item in data.get("top_opcodes") or ():
        if isinstance(item, Mapping):
            name, count = item.get("opcode", item.get("name")), item.get("count")
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2:
            name, count = item
        else:
            continue
        if (n := _number(count)) is not None:
            pairs.append((str(name), n))
    if not pairs and isinstance(module.get("opcode_histogram"), Mapping):
        pairs = [
            (str(k), n)
            for k, v in module["opcode_histogram"].items()
            if (n := _number(v)) is not None
        ]
    pairs.sort(key=lambda kv: -kv[1])
    return [[name, int(count)] for name, count in pairs[:_TOP]]


def _utilisation(data: Mapping[str, Any]) -> dict[str, float]:
    """Per unit, the share of its issue slots the schedule fills over the bundles read:
    the sum of ``<unit>_used`` over the sum of ``<unit>_avail``."""
    used: dict[str, float] = {}
    avail: dict[str, float] = {}
    for bundle in data.get("bundles") or ():
        if not isinstance(bundle, Mapping):
            continue
        for key, value in bundle.items():
            if not (isinstance(key, str) and key.endswith("_used")):
                continue
            unit = key[: -len("_used")]
            u, a = _number(value), _number(bundle.get(f"{unit}_avail"))
            if u is None or a is None:
                continue
            used[unit] = used.get(unit, 0.0) + u
            avail[unit] = avail.get(unit, 0.0) + a
    return {unit: used[unit] / avail[unit] for unit in sorted(used) if avail[unit] > 0}


def _ints(mapping: Any) -> dict[str, int]:
    if not isinstance(mapping, Mapping):
        return {}
    return {str(k): n for k, v in mapping.items() if (n := _count(v)) is not None}


def _data(answer: Any) -> tuple[dict[str, Any], str | None]:
    """A static answer's ``data`` and its error (``None`` when it says ``OK``)."""
    if not isinstance(answer, Mapping):
        return {}, f"no answer ({answer!r})"
    if answer.get("status") != "OK":
        return {}, str(answer.get("error") or answer.get("reason") or answer.get("status"))
    data = answer.get("data")
    return (dict(data) if isinstance(data, Mapping) else {}), None


def _slot_fill(
    bundles: Mapping[str, Any], slots: BundleSlots | str | None, sampled: bool
) -> dict[str, Any]:
    """A kernel's slot fill: over every bundle from the trace's LLO module (``slots``) when
    it reads and agrees with xprof's listing (``bundles``), else over xprof's listing, with
    why the whole was not used (``fill_note``)."""
    listed = bundles.get("bundles")
    listed = listed if isinstance(listed, list) else []
    why = slots if isinstance(slots, str) else None
    if isinstance(slots, BundleSlots):
        why = slots.disagreement(bundles.get("total_bundles"), listed) if sampled else None
        if why is None:
            checked = f"checked against xprof's first {len(listed)}" if listed else "unchecked"
            return {
                "bundles": slots.bundles,
                "bundles_read": slots.bundles,
                "truncated": False,
                "unit_utilisation": slots.utilisation(),
                "unit_slots": {
                    u: [sum(slots.used[u]), slots.bundles * slots.avail[u]] for u in UNITS
                },
                "fill_from": f"llo_proto: every bundle, {checked}",
                "fill_note": None,
            }
        why = f"{_DISAGREES} ({why})"
    return {
        "bundles": _count(bundles.get("total_bundles")),
        "bundles_read": len(listed),
        "truncated": bool(bundles.get("truncated")),
        "unit_utilisation": _utilisation(bundles),
        "unit_slots": {},
        "fill_from": "bundle_util" if listed else None,
        "fill_note": why,
    }


def _distrust_unchecked(kernels: list[dict[str, Any]]) -> None:
    """Where the trace's LLO module disagreed with xprof for one kernel, the readings no
    xprof listing checked (modules without static analyses) are not shown either."""
    wrong = next((k for k in kernels if (k.get("fill_note") or "").startswith(_DISAGREES)), None)
    if wrong is None:
        return
    for k in kernels:
        if str(k.get("fill_from") or "").endswith("unchecked"):
            k.update(
                bundles_read=0,
                unit_utilisation={},
                unit_slots={},
                fill_from=None,
                fill_note=f"not read: the trace's LLO module disagreed with xprof on "
                f"{wrong['kernel']}",
            )


def _kernel(
    op: str,
    module: Mapping[str, Any],
    static: Mapping[str, Any],
    names: Mapping[str, str],
    slots: BundleSlots | str | None = None,
) -> dict[str, Any]:
    """One kernel's figures from its LLO module, its static answers and its bundles' slot
    use read from the trace (``slots``); :func:`summary` adds whether it is a Pallas
    kernel, its autotuned kernel and its device time."""
    read = {mode: _data(static.get(mode)) for mode in STATIC_MODES} if static else {}
    errors = {mode: err for mode, (_, err) in read.items() if err}
    opcodes = read.get("opcodes", ({}, None))[0]
    bundles = read.get("bundle_util", ({}, None))[0]
    spills = read.get("spills", ({}, None))[0]
    registers = read.get("register_pressure", ({}, None))[0]
    llo_name = str(module.get("kernel_name") or "")
    return {
        "hlo_op": op,
        "kernel": names.get(op) or names.get(llo_name) or llo_name or op,
        "llo_module": llo_name,
        "success": bool(static) and not errors,
        "errors": errors,
        "instructions": _count(opcodes.get("total_instructions", module.get("total_instructions"))),
        "unique_registers": _count(module.get("unique_registers")),
        "opcodes": _opcodes(opcodes, module),
        "categories": list(opcodes.get("categories") or ())[:_TOP],
        **_slot_fill(bundles, slots, "bundle_util" in read and not errors.get("bundle_util")),
        "spills": _ints(spills.get("summary")),
        "register_peaks": _ints(registers.get("peak_by_register_type")),
        "live_ranges": _count(registers.get("total_live_ranges")),
    }


def summary(
    answer: Mapping[str, Any],
    static: Mapping[str, Any],
    names: Mapping[str, str],
    scope: Scope | None = None,
    slots: Mapping[str, BundleSlots | str] | None = None,
    *,
    pallas: Collection[str] | None = None,
    autotuned: Mapping[str, str] | None = None,
    device_us: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The report's ``llo`` section from ``analyze_llo``'s successful ``answer`` and the
    static answers per HLO op (``static[op][mode]``); ``names`` maps HLO op names (or LLO
    module names) to the kernel names the report uses; ``scope``: only the modules of the
    profiled programs are shown and counted (their own totals summed), the rest only
    counted as left out. An answer ``scoped`` by xprof itself (asked per program) keeps
    its opcode histogram, and its register count where it has one. ``slots``: each HLO
    op's bundles as the trace's LLO module holds them (:func:`.llo_bundles.read`), for the
    slot fill over every bundle.

    ``kernels`` lists every module, the Pallas kernels first (``pallas``: their HLO ops,
    the keys of ``names`` when not given; each one's ``"pallas"`` is true), then the
    others, each part the heaviest first: by device time over the trace (``device_us``
    by HLO op, the module's ``"device_us"``), then by instructions. ``autotuned``: the
    autotuned kernel each HLO op belongs to, shown before its name.
    ``pallas_kernels`` counts the first part."""
    modules = [m for m in answer.get("modules") or () if isinstance(m, Mapping)]
    by_op = {str(m.get("hlo_instruction_name") or m.get("kernel_name") or ""): m for m in modules}
    if scope is not None:
        static = {op: v for op, v in static.items() if op in scope.ops}
        by_op = {op: m for op, m in by_op.items() if op in scope.ops}
    ops = list(static) + [op for op in by_op if op not in static]
    slots = slots or {}
    leading = set(names) if pallas is None else set(pallas)
    kernels = [
        _kernel(op, by_op.get(op, {}), static.get(op) or {}, names, slots.get(op))
        | {
            "pallas": op in leading,
            "autotuned": (autotuned or {}).get(op),
            "device_us": (device_us or {}).get(op),
        }
        for op in ops
    ]
    kernels.sort(key=_weight)
    _distrust_unchecked(kernels)
    mosaic = sum(1 for k in kernels if k["pallas"])
    total = _count(answer.get("total_instructions"))
    registers = _count(answer.get("unique_registers"))
    where = ""
    if scope is not None:
        counts = [_count(m.get("total_instructions")) for m in by_op.values()]
        total = sum(c for c in counts if c is not None) if by_op else None
        # The trace's register count spans every program; a scoped answer's, only one.
        registers = _count(answer.get("unique_registers")) if answer.get("scoped") else None
        where = f" of {', '.join(scope.programs) or 'the profiled programs'}"
        if scope.others:
            where += f" ({scope.others} LLO modules of other programs left out)"
    out = {
        "success": True,
        "semantics": "static_modelled_schedule",
        "total_instructions": total,
        "unique_registers": registers,
        "top_opcodes": _opcodes({}, answer) if scope is None or answer.get("scoped") else [],
        "kernels": kernels,
        "pallas_kernels": mosaic,
        "line": (
            f"LLO analysis ({MODELLED}): {mosaic} Pallas kernel(s) and "
            f"{len(kernels) - mosaic} other module(s){where}, {total} instructions"
            + (f", {registers} registers" if registers is not None else "")
        ),
    }
    if scope is not None:
        out["programs"] = list(scope.programs)
        out["left_out"] = scope.others
    return out


def _weight(k: Mapping[str, Any]) -> tuple[bool, float, float, str]:
    """The order of :func:`summary`'s modules: Pallas kernels first, then the most device
    time, then the most instructions (a module the trace shows no time for sorts by its
    instructions after those it does)."""
    time, count = k.get("device_us"), k.get("instructions")
    return (
        not k.get("pallas"),
        -(time if isinstance(time, (int, float)) else -1.0),
        -(count if isinstance(count, int) else -1),
        str(k.get("hlo_op") or ""),
    )


def _kernel_line(k: Mapping[str, Any]) -> str:
    name = k["kernel"] + (f" ({k['hlo_op']})" if k["hlo_op"] and k["hlo_op"] != k["kernel"] else "")
    if k.get("autotuned") and k["autotuned"] != k["kernel"]:
        name = f"{k['autotuned']}: {name}"
    parts = [f"{k['instructions']} instructions"]
    if k.get("unique_registers") is not None:
        parts[0] += f", {k['unique_registers']} registers"
    if isinstance(k.get("device_us"), (int, float)):
        parts.insert(0, f"{units.duration(k['device_us'])} on the device")
    if k.get("opcodes"):
        parts.append("opcodes " + ", ".join(f"{n} {c}" for n, c in k["opcodes"][:5]))
    if k.get("unit_utilisation"):
        use = ", ".join(f"{u} {_percent(f)}" for u, f in k["unit_utilisation"].items())
        if k["truncated"]:
            parts.append(
                f"bundle slots filled {use} in a sample: the first {k['bundles_read']} of "
                f"{k['bundles']} bundles, not the kernel's whole schedule"
                + (f" ({k['fill_note']})" if k.get("fill_note") else "")
            )
        else:
            parts.append(f"bundle slots filled {use} (over all {k['bundles']} bundles)")
    elif k.get("fill_note"):
        parts.append(f"bundle slots not shown: {k['fill_note']}")
    spills = k.get("spills") or {}
    if spills:
        parts.append(
            f"spills {spills.get('total_spill_bytes', 0)} B in "
            f"{spills.get('static_spill_bundles', 0)} bundles, fills in "
            f"{spills.get('static_fill_bundles', 0)}"
        )
    if k.get("register_peaks"):
        peaks = ", ".join(f"{t} {n}" for t, n in k["register_peaks"].items())
        parts.append(f"peak live registers {peaks}")
    errors = k.get("errors") or {}
    if errors:
        parts.append("; ".join(f"{mode} failed: {err}" for mode, err in errors.items()))
    return f"  {name}: " + "; ".join(parts)


def _percent(fraction: float) -> str:
    """A fill as a percentage: a unit used at all never reads as 0 %."""
    if 0 < fraction < 0.005:
        return "<1%"
    return f"{100 * fraction:.0f}%"


def lines(llo: Mapping[str, Any] | None, others: int | None = OTHER_MODULES) -> list[str]:
    """What a text report prints of its ``llo`` section: the one line, then, when the
    analysis succeeded, one line per Pallas kernel and one for each of the heaviest
    ``others`` other modules (every one when ``None``), and how many were left out, with
    their device time, and where they are listed (:data:`ALL_MODULES`)."""
    if not llo:
        return []
    out = [f"llo: {llo.get('line', '')}"]
    if not llo.get("success"):
        return out
    kernels = [k for k in llo.get("kernels") or () if isinstance(k, Mapping)]
    mine = [k for k in kernels if k.get("pallas", True)]
    rest = [k for k in kernels if not k.get("pallas", True)]
    shown = rest if others is None else rest[: max(others, 0)]
    out += [_kernel_line(k) for k in mine]
    if shown:
        out.append(
            f"  other modules, the heaviest first ({len(shown)} of {len(rest)}):"
            if len(shown) < len(rest)
            else "  other modules, the heaviest first:"
        )
        out += ["  " + _kernel_line(k) for k in shown]
    left = rest[len(shown) :]
    if left:
        times = [t for k in left if isinstance(t := k.get("device_us"), (int, float))]
        when = f", {units.duration(sum(times))} on the device" if times else ""
        noun = "module" if len(left) == 1 else "modules"
        out.append(f"  ... and {len(left)} other {noun}{when}: {ALL_MODULES}")
    return out
