"""The text form of a profile: a kernels table, an ops table, and why a bound is unknown."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .._core import roofline as _roofline
from .._core.vocabulary import RecordedCall, pass_text
from .._render import configs as _configs
from .._render import text, units
from .attribution import KernelStat, ScopeStat
from .llo_figures import lines as llo_lines

__all__ = [
    "AROUND",
    "BOUND_COLUMN",
    "BOUND_HELP",
    "NUMBERS",
    "OVER_PEAK",
    "KernelTable",
    "autotuned_total",
    "autotuned_wholes",
    "config_text",
    "device_text",
    "floor_line",
    "format_profile",
    "kernel_table",
    "kernel_tree",
    "op_rows",
    "part_labels",
    "peak_footnote",
    "peak_line",
    "peak_notes",
    "percent",
    "scope_rows",
    "shorten_left",
    "shown_kind",
    "shown_name",
    "site_rows",
    "speedup_text",
    "stat_rows",
    "tuned_rows",
    "unknown_bound_reasons",
]

#: How to give a kernel the figures a roofline bound needs, one line per missing figure.
BOUND_HELP = {
    "flops": "XLA's cost analysis cannot see inside a Pallas call: it counts one as 0 FLOPs "
    "unless the kernel declares a cost_estimate (JAX's flash attention backward kernels, "
    "dkv and dq, declare none), so jaxtune shows no rate (-) rather than 0 FLOP/s. For a "
    "figure, give the Pallas kernel a cost estimate "
    "(pl.pallas_call(..., cost_estimate=pl.CostEstimate(flops=..., bytes_accessed=..., "
    "transcendentals=0))) or an autotuned kernel flops=/bytes= hints "
    "(@jaxtune.autotuned(..., flops=lambda x, y: 2 * x.shape[0] * ..., bytes=...))",
    "bytes": "add bytes_accessed= to the kernel's cost_estimate, or a bytes= hint to "
    "@jaxtune.autotuned",
    "peak": "jaxtune's peak table (jaxtune._core.roofline.PEAKS: TPU v4 to v7x, NVIDIA "
    "A100 to B200) has no entry for this device; a trace whose device plane records "
    "peak_teraflops_per_second and peak_hbm_bw_gigabytes_per_second uses those, and a new "
    "device is a one-line entry in PEAKS",
}


#: The columns of :func:`stat_rows` that hold numbers (never wrapped).
NUMBERS = (2, 3, 4, 5, 6, 7)

#: The column of :func:`stat_rows` that holds the bound.
BOUND_COLUMN = 8


def unknown_bound_reasons(stat: KernelStat) -> tuple[str, ...]:
    """Why a kernel's bound is unknown: ``("flops",)`` (no FLOP count, perhaps no byte
    count either), ``("bytes",)`` or ``("peak",)`` (no peaks for the device); ``()`` when
    the bound is known."""
    if stat.bound_by != "unknown":
        return ()
    if not stat.flops:
        return ("flops",)
    if not stat.bytes_accessed:
        return ("bytes",)
    return ("peak",)


def stat_rows(
    stats: Sequence[KernelStat],
    *,
    mark_unknown: bool,
    peak: _roofline.Peak | None = None,
    shown: Sequence[tuple[str, str]] | None = None,
) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of stats; each time or rate column in one unit. A rate above
    ``peak`` ends in :data:`OVER_PEAK` (:func:`peak_footnote` says why); ``shown`` gives
    each row's name and kind as a tree shows them (:func:`kernel_tree`)."""
    total_unit, total = units.time_column(s.total_us for s in stats)
    mean_unit, mean = units.time_column(s.mean_us for s in stats)
    flops_unit, flops = units.rate_column(s.flops_per_s for s in stats)
    bytes_unit, bytes_ = units.rate_column(s.bytes_per_s for s in stats)
    header = [
        "name",
        "kind",
        "calls",
        f"total {total_unit}",
        f"mean {mean_unit}",
        "share",
        f"{flops_unit}FLOP/s",
        f"{bytes_unit}B/s",
        "bound",
        "flops from",
    ]
    rows = []
    for i, s in enumerate(stats):
        bound: str = s.bound_by
        if mark_unknown and bound == "unknown":
            bound += "*"
        over = _roofline.over_peak(s.flops_per_s, s.bytes_per_s, peak)
        name, kind = shown[i] if shown is not None else (shown_name(s), shown_kind(s))
        rows.append(
            [
                name,
                kind,
                str(s.calls) if s.calls_exact else f"~{s.calls}",
                total(s.total_us),
                mean(s.mean_us),
                f"{s.share:.1%}",
                flops(s.flops_per_s) + (OVER_PEAK if "flops" in over else ""),
                bytes_(s.bytes_per_s) + (OVER_PEAK if "bytes" in over else ""),
                bound,
                s.flops_source,
            ]
        )
    return header, rows


def percent(share: float | None) -> str:
    """A fraction of a peak as a percentage (``-`` for none)."""
    if share is None:
        return "-"
    return f"{share:.0%}" if share >= 0.1 else f"{share:.1%}"


def peak_line(stat: KernelStat, name: str) -> str | None:
    """A kernel row's rates as shares of the device's peaks, as the line under the
    kernels table shows them (``"name: 29% of peak FLOP/s, 117%! of peak bandwidth"``,
    marked above the peak); ``None`` for a row with neither."""
    parts = []
    if stat.compute_peak is not None:
        mark = OVER_PEAK if "flops" in stat.over_peak else ""
        parts.append(f"{percent(stat.compute_peak)}{mark} of peak FLOP/s")
    if stat.memory_peak is not None:
        mark = OVER_PEAK if "bytes" in stat.over_peak else ""
        parts.append(f"{percent(stat.memory_peak)}{mark} of peak bandwidth")
    return f"{name}: {', '.join(parts)}" if parts else None


def floor_line(stat: KernelStat) -> str | None:
    """How close a kernel runs to its roofline floor, per call: ``"<name>: x % of the
    roofline floor: the floor is y us, it takes z us"`` (x is the floor over the time
    taken); ``None`` without a floor."""
    if stat.floor_us is None or stat.floor_share is None or not stat.calls:
        return None
    floor = stat.floor_us / stat.calls
    return (
        f"{stat.name}: {percent(stat.floor_share)} of the roofline floor: the floor is "
        f"{units.duration(floor)}, it takes {units.duration(stat.mean_us)} (per call; "
        f"flops and bytes from {stat.flops_source})"
    )


#: The mark after a FLOP/s or B/s figure above the device's peak.
OVER_PEAK = "!"

#: Why a count may exceed what ran, by where it came from (:func:`peak_footnote`).
_OVERCOUNT = {
    "flops": {
        "cost_estimate": "FLOPs from the kernel's own cost_estimate, which may count work "
        "the kernel skips (a causal attention kernel's masked blocks)",
        "xla": "FLOPs from XLA's cost analysis; for a Pallas kernel that is its "
        "cost_estimate, which may count work the kernel skips (a causal kernel's masked "
        "blocks)",
        "hint": "FLOPs from the @autotuned flops= hint, which may count more than the kernel does",
        "mosaic": "FLOPs counted from the kernel's Mosaic body, which counts both branches "
        "of a condition (a causal kernel's masked blocks) as taken",
        "mixed": "FLOPs summed over the kernel's parts",
    },
    "bytes": {
        "cost_estimate": "bytes from the kernel's own cost_estimate, which may count "
        "blocks the kernel never loads",
        "xla": "bytes from XLA's cost analysis, which counts every operand and result in "
        "full (an async op's whole transfer against its start event alone, a slice's or "
        "broadcast's whole buffer)",
        "hint": "bytes from the @autotuned bytes= hint",
        "shapes": "bytes from the operands' and results' sizes",
        "mosaic": "bytes counted from the kernel's Mosaic body, which counts a block as "
        "copied at every grid step whose index its index map reads, even where the index "
        "stays the same (a causal kernel's clamped blocks)",
        "mixed": "bytes summed over the kernel's parts",
    },
}


def peak_notes(
    stats: Sequence[KernelStat],
    peak: _roofline.Peak | None,
    *,
    names: Sequence[str] | None = None,
) -> list[str]:
    """The notes under a table that marked a figure with :data:`OVER_PEAK`, unwrapped:
    the peaks, then (indented two spaces) for the marked rows (by their names in
    ``names``, else their own) where their counts came from and why they may overcount."""
    marked = [
        (s, over, names[i] if names is not None else shown_name(s))
        for i, s in enumerate(stats)
        if (over := _roofline.over_peak(s.flops_per_s, s.bytes_per_s, peak))
    ]
    if not marked or peak is None:
        return []
    notes = [
        f"{OVER_PEAK} above the device's peak ({peak.device}: "
        f"{peak.flops_per_s / 1e12:g} TFLOP/s, {peak.bytes_per_s / 1e9:g} GB/s, "
        f"{peak.source}): no chip runs past its peak, so the count divided is larger than "
        "the work done; read the figure as a bound on that count, not as a measurement."
    ]
    by_reason: dict[str, list[str]] = {}
    for s, over, name in marked:
        why = "; ".join(
            _OVERCOUNT[what].get(s.flops_source, f"{what} from {s.flops_source}") for what in over
        )
        by_reason.setdefault(why, []).append(name)
    for why, names in by_reason.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        notes.append(f"  {shown}: {why}")
    return notes


def peak_footnote(
    stats: Sequence[KernelStat],
    peak: _roofline.Peak | None,
    *,
    names: Sequence[str] | None = None,
) -> list[str]:
    """:func:`peak_notes` as the lines under a text table, wrapped."""
    return [x for note in peak_notes(stats, peak, names=names) for x in text.paragraph(note)]


#: A jaxtune kernel's own ops, outside its Pallas calls, as its last row in the tree.
AROUND = "(its ops outside Pallas calls)"


def kernel_tree(
    kernels: Sequence[KernelStat], peak: _roofline.Peak | None = None
) -> list[list[tuple[KernelStat, str, str]]]:
    """The kernels table's rows in groups, by share: per jaxtune kernel, one row named by
    its id over everything it ran (:func:`autotuned_total`), then its Pallas kernels
    beneath it, named by their kernel functions, then its own ops outside them
    (:data:`AROUND`); a Pallas kernel of no jaxtune kernel is a group of its own. Each row
    is ``(stat, name, kind)``."""
    members: dict[str, list[KernelStat]] = {}
    groups: list[list[tuple[KernelStat, str, str]]] = []
    for k in kernels:
        if k.kernel_id and k.kind != "xla":
            members.setdefault(k.kernel_id, []).append(k)
        else:
            groups.append([(k, k.name, k.kind)])
    for kernel_id, inside in members.items():
        pallas = sorted((k for k in inside if k.kind == "pallas"), key=lambda k: -k.share)
        own = [k for k in inside if k.kind != "pallas"]
        if not pallas:
            groups += [[(k, k.name, k.kind)] for k in own]
            continue
        head = autotuned_total(kernel_id, inside, peak)
        rows = [(head, kernel_id, "autotuned")]
        rows += [(k, f"  {k.name}", "pallas") for k in pallas]
        rows += [(k, f"  {AROUND}", "xla") for k in own]
        groups.append(rows)
    groups.sort(key=lambda g: (-g[0][0].share, g[0][1]))
    return groups


def autotuned_wholes(
    kernels: Sequence[KernelStat], peak: _roofline.Peak | None = None
) -> tuple[KernelStat, ...]:
    """Each autotuned kernel that ran a Pallas kernel, over everything it ran: the kernels
    table's head rows (:func:`autotuned_total`), in the table's order. (A ``kernels`` row
    of kind ``autotuned`` is only its own ops outside its Pallas calls.)"""
    return tuple(
        group[0][0]
        for group in kernel_tree(kernels, peak)
        if len(group) > 1 and group[0][2] == "autotuned"
    )


def autotuned_total(
    kernel_id: str, inside: Sequence[KernelStat], peak: _roofline.Peak | None = None
) -> KernelStat:
    """One jaxtune kernel over everything it ran (its Pallas kernels and its own ops): time
    and share summed; calls those of its own row (the program's call sites, else its
    busiest Pallas kernel's calls); FLOPs and bytes summed where every part has them from
    one source (``"mixed"`` where they came from several), else none; against ``peak``."""
    own = next((k for k in inside if k.kind != "pallas"), None)
    calls = own.calls if own is not None else max(k.calls for k in inside)
    total = sum(k.total_us for k in inside)
    sources = {k.flops_source for k in inside}
    pallas = [k for k in inside if k.kind == "pallas"]
    # Its own ops outside the Pallas calls count where XLA gave them a figure.
    counted = [k for k in inside if k.kind == "pallas" or k.flops or k.bytes_accessed]
    flops = sum(k.flops or 0.0 for k in counted) if all(k.flops for k in pallas) else None
    bytes_ = (
        sum(k.bytes_accessed or 0.0 for k in counted)
        if all(k.bytes_accessed for k in pallas)
        else None
    )
    seconds = total * 1e-6
    ran = next((k for k in inside if k.config is not None), None)
    source = next(iter(sources)) if len(sources) == 1 else "mixed"
    head = KernelStat(
        name=kernel_id,
        kind="autotuned",
        kernel_id=kernel_id,
        calls=calls,
        calls_exact=all(k.calls_exact for k in inside),
        total_us=total,
        mean_us=total / max(calls, 1),
        share=sum(k.share for k in inside),
        flops=flops or None,
        bytes_accessed=bytes_ or None,
        flops_per_s=flops / seconds if flops and seconds else None,
        bytes_per_s=bytes_ / seconds if bytes_ and seconds else None,
        intensity=flops / bytes_ if flops and bytes_ else None,
        flops_source=source if flops or bytes_ else "none",
        config=ran.config if ran is not None else None,
        speedup=ran.speedup if ran is not None else None,
    ).with_peaks(peak)
    floors = [k.floor_us for k in counted]
    if head.floor_us is None or any(f is None for f in floors):
        return head
    # The parts run one after another: the floor is the sum of theirs.
    floor = sum(f or 0.0 for f in floors)
    return dataclasses.replace(head, floor_us=floor, floor_share=floor / total if total else None)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KernelTable:
    """The kernels table as the text report and the HTML page both show it: the first
    groups of :func:`kernel_tree`, each row :func:`stat_rows`' cells (its name not
    indented: ``beneath`` says which rows sit under a head row), and the notes under it."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    #: Each row's stat: a head row's is its kernel's total (:func:`autotuned_total`).
    stats: tuple[KernelStat, ...]
    #: Whether each row totals an autotuned kernel's parts, the rows beneath it.
    heads: tuple[bool, ...]
    beneath: tuple[bool, ...]
    #: The kernels of the rows shown, without the head rows (what footnotes, the sources
    #: and the autotuned table list: nothing counted twice).
    kernels: tuple[KernelStat, ...]
    #: :func:`peak_notes` for the rows' marked figures.
    peak_notes: tuple[str, ...]
    #: :func:`peak_line` of each row with a rate, then :func:`floor_line` of each
    #: autotuned kernel shown (its head row) that has a floor.
    floors: tuple[str, ...]
    groups: int
    shown_groups: int


def kernel_table(
    kernels: Sequence[KernelStat], peak: _roofline.Peak | None, top: int
) -> KernelTable:
    """The kernels table of the first ``top`` groups of :func:`kernel_tree`: a head row's
    bound is ``-`` where unknown (its parts' rows say why), and a figure above ``peak`` is
    marked, the notes naming its row (an autotuned kernel's own ops by its id)."""
    groups = kernel_tree(kernels, peak)
    shown = groups[:top]
    tree = [row for group in shown for row in group]
    heads = [i == 0 and len(group) > 1 for group in shown for i in range(len(group))]
    beneath = [i > 0 for group in shown for i in range(len(group))]
    stats = [stat for stat, _, _ in tree]
    header, rows = stat_rows(
        stats, mark_unknown=True, peak=peak, shown=[(name.strip(), k) for _, name, k in tree]
    )
    for row, stat, head in zip(rows, stats, heads, strict=True):
        if head and stat.bound_by == "unknown":
            row[BOUND_COLUMN] = "-"  # its parts' rows say why
    names = [
        f"{stat.name} {AROUND}" if name.strip() == AROUND else name.strip()
        for stat, name, _ in tree
    ]
    return KernelTable(
        header=tuple(header),
        rows=tuple(tuple(row) for row in rows),
        stats=tuple(stats),
        heads=tuple(heads),
        beneath=tuple(beneath),
        kernels=tuple(stat for stat, head in zip(stats, heads, strict=True) if not head),
        peak_notes=tuple(peak_notes(stats, peak, names=names)),
        floors=(
            *(
                line
                for stat, name in zip(stats, names, strict=True)
                if (line := peak_line(stat, name))
            ),
            *(
                line
                for stat, head in zip(stats, heads, strict=True)
                if head and (line := floor_line(stat)) is not None
            ),
        ),
        groups=len(groups),
        shown_groups=len(shown),
    )


def part_labels(kernels: Sequence[KernelStat]) -> dict[int, str]:
    """Each kernel's name (by ``id()`` of its stat) where it stands without its group, as
    a chart bar does: a Pallas kernel inside a jaxtune kernel ``<kernel id>:<kernel
    function>``, the kernel's own ops ``<kernel id> (its ops outside Pallas calls)``."""
    labels = {}
    for group in kernel_tree(kernels):
        for stat, name, _ in group[1:] if len(group) > 1 else group:
            around = name.strip() == AROUND
            labels[id(stat)] = f"{stat.name} {AROUND}" if around else shown_name(stat)
    return labels


def shorten_left(stack: str, width: int) -> str:
    """``stack`` in at most ``width`` characters, its start cut (a name stack's last
    frames say most): ``…/jvp(mlp)/dot_general``, cut after a ``/`` where it can.

    Examples:
        >>> shorten_left("jit(train_step)/jvp(model)/mlp/dot_general", 24)
        '…/mlp/dot_general'
    """
    if len(stack) <= width:
        return stack
    tail = stack[len(stack) - max(width - 1, 1) :]
    slash = tail.find("/")
    if 0 <= slash < len(tail) - 1 and slash <= len(tail) // 2:
        tail = tail[slash:]
    return "…" + tail


def _programs(ops: Sequence[KernelStat | ScopeStat]) -> bool:
    """Whether the rows come from more than one program (then a program column shows)."""
    return len({o.program for o in ops}) > 1


def op_rows(
    ops: Sequence[KernelStat], width: int = text.WIDTH, *, peak: _roofline.Peak | None = None
) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of plain XLA ops: :func:`stat_rows`' columns, the program when
    the ops come from several, and each op's name stack, cut from the left to what the
    rest of a ``width``-column row leaves (at least 24 characters)."""
    header, rows = stat_rows(ops, mark_unknown=False, peak=peak)
    if _programs(ops):
        header.append("program")
        for row, o in zip(rows, ops, strict=True):
            row.append(o.program or "-")
    used = sum(max(len(r[i]) for r in (header, *rows)) for i in range(len(header)))
    room = max(width - used - 2 * len(header), 24)
    header.append("name stack")
    for row, o in zip(rows, ops, strict=True):
        row.append(shorten_left(o.name_stack or "-", room))
    return header, rows


def scope_rows(scopes: Sequence[ScopeStat]) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of the scope view: each name stack (of each program, when the
    scopes come from several), how many instructions XLA compiled from it, their events,
    time and share, and the heaviest of them."""
    total_unit, total = units.time_column(g.total_us for g in scopes)
    several = _programs(scopes)
    header = [
        "name stack",
        *(["program"] if several else []),
        "ops",
        "calls",
        f"total {total_unit}",
        "share",
        "heaviest ops",
    ]
    rows = []
    for g in scopes:
        heaviest = ", ".join(g.hlo_ops[:3])
        if len(g.hlo_ops) > 3:
            heaviest += f" +{len(g.hlo_ops) - 3}"
        rows.append(
            [
                g.name_stack or "(none: ops XLA added)",
                *([g.program or "-"] if several else []),
                str(g.ops),
                str(g.calls),
                total(g.total_us),
                f"{g.share:.1%}",
                heaviest,
            ]
        )
    return header, rows


def site_rows(kernels: Sequence[KernelStat]) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)``: each kernel whose code the capture located, its ``pallas_call``
    line (``source``) and the line of the program that called into it (``call site``)."""
    rows = [
        [shown_name(k), k.source or "-", k.call_site or "-"]
        for k in kernels
        if k.source or k.call_site
    ]
    return ["kernel", "source (pallas_call)", "call site"], rows


def shown_name(stat: KernelStat) -> str:
    """A row's full name: a Pallas kernel inside a jaxtune kernel reads
    ``<kernel id>:<pallas name>``, so it matches the tuning table's kernel name."""
    name = stat.name
    if stat.kind == "pallas" and stat.kernel_id and stat.kernel_id != name:
        name = f"{stat.kernel_id}:{name}"
    return name


def shown_kind(stat: KernelStat) -> str:
    """A row's kind as every table and chart shows it: a Pallas kernel inside a jaxtune
    kernel is ``autotuned`` (its config came from tuning), others their own kind."""
    return "autotuned" if stat.kernel_id and stat.kind != "xla" else stat.kind


def device_text(platform: str, device_kind: str) -> str:
    """``tpu (TPU v5 lite)``; just ``cpu`` when the device kind repeats the platform."""
    if not device_kind or device_kind.lower() == platform.lower():
        return platform or device_kind
    return f"{platform} ({device_kind})"


def config_text(stat: KernelStat) -> str:
    """The config an autotuned kernel ran with, its knobs in the order the kernel's author
    wrote them: ``block_q=128, block_k=256``; empty for other rows."""
    if stat.config is None:
        return ""
    return _configs.text(stat.config)


def speedup_text(stat: KernelStat) -> str:
    """What tuning measured the config gained: ``1.31x over the default``, or ``not
    tuned here`` (a default, or an entry of another key)."""
    return f"{stat.speedup:.2f}x over the default" if stat.speedup else "not tuned here"


def tuned_rows(
    stats: Sequence[KernelStat], calls: Sequence[RecordedCall] = ()
) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)``: one row per jaxtune kernel that ran (not one per Pallas kernel
    inside it: the config and its speedup are the wrapper's), where its config came from
    and the pass its cache entry timed (from the profile's recorded ``calls``), and the
    kernels it ran."""
    by_id: dict[str, list[KernelStat]] = {}
    for s in stats:
        if s.kernel_id and s.config is not None:
            by_id.setdefault(s.kernel_id, []).append(s)
    rows = []
    for kernel_id, inside in by_id.items():
        names = [s.name for s in inside if s.name != kernel_id]
        config = dict(inside[0].config or {})
        call = next((c for c in calls if c.kernel == kernel_id and dict(c.config) == config), None)
        rows.append(
            [
                kernel_id,
                config_text(inside[0]),
                call.source if call is not None else "-",
                speedup_text(inside[0]),
                pass_text(call.entry_timing if call is not None else ""),
                ", ".join(names) or "-",
            ]
        )
    header = ["autotuned kernel", "config that ran", "from", "tuned", "pass timed"]
    return [*header, "kernels inside"], rows


def _footnote(kernels: Sequence[KernelStat], device_kind: str) -> list[str]:
    by_reason: dict[str, list[str]] = {}
    for k in kernels:
        for reason in unknown_bound_reasons(k):
            by_reason.setdefault(reason, []).append(k.name)
    if not by_reason:
        return []
    lines = ["* bound unknown: the roofline needs FLOPs, bytes and the device's peaks."]
    for reason, names in by_reason.items():
        what = {
            "flops": "no FLOP count",
            "bytes": "no byte count",
            "peak": f"no peak FLOP/s and bandwidth for device {device_kind!r}",
        }[reason]
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines += text.paragraph(f"  {what} ({shown}): {BOUND_HELP[reason]}")
    return lines


def _scope_lines(scopes: Sequence[ScopeStat], top: int) -> list[str]:
    """The scope view's section: its ``top`` rows, or, where every scope holds one
    instruction (the view would repeat the op table), one line saying where it is."""
    if not scopes:
        return []
    if all(g.ops == 1 for g in scopes):
        return [
            "",
            "XLA ops by scope: one instruction per name stack, as above (Profile.scopes, "
            '"scopes" in --json)',
        ]
    shown = list(scopes[:top])
    header, rows = scope_rows(shown)
    fixed = range(1 + ("program" in header), 5 + ("program" in header))
    lines = [
        "",
        f"XLA ops by scope (top {len(shown)} of {len(scopes)}: every instruction XLA "
        "compiled from one name stack)",
        text.table(header, rows, fixed=fixed),
    ]
    if len(scopes) > len(shown):
        lines.append(f'all {len(scopes)} scopes: Profile.scopes, "scopes" in --json')
    return lines


def format_profile(profile: Any, top: int = 20, *, llo_all: bool = False) -> str:
    """The summary line, the ``top`` kernels (then where their code is), the LLO section
    (every module with ``llo_all``, else :func:`.llo_figures.lines`' default), the ``top``
    XLA ops with their name stacks, the ``top`` scopes of the scope view, then notes."""
    device = device_text(profile.platform, profile.device_kind)
    if profile.iterations:
        summary = (
            f"{device}: {profile.iterations} iterations, "
            f"{units.duration(profile.step_us)} of device time per step"
        )
    else:
        summary = f"{device}: {units.duration(profile.total_us)} of device time"
    parts = [x for w in getattr(profile, "warnings", ()) for x in text.paragraph(f"warning: {w}")]
    parts += [summary, ""]
    peak = getattr(profile, "peak", None)
    table = kernel_table(profile.kernels, peak, top)
    kernels = list(table.kernels)
    if table.rows:
        rows = [
            ["  " + row[0] if below else row[0], *row[1:]]
            for row, below in zip(table.rows, table.beneath, strict=True)
        ]
        parts += [
            f"kernels (top {table.shown_groups} of {table.groups}: one row per autotuned "
            "kernel, its Pallas kernels beneath it)",
            text.table(list(table.header), rows, fixed=NUMBERS),
        ]
        parts += _footnote(kernels, profile.device_kind)
        parts += [x for note in table.peak_notes for x in text.paragraph(note)]
        if table.floors:
            parts += ["", "how far each kernel is from the device's peaks"]
            parts += [x for line in table.floors for x in text.paragraph(line)]
        header, rows = site_rows(kernels)
        if rows:
            parts += ["", "kernel sources", text.table(header, rows)]
        header, rows = tuned_rows(kernels, getattr(profile, "calls", ()))
        if rows:
            parts += ["", "autotuned kernels", text.table(header, rows)]
    else:
        parts.append("kernels: none (no Pallas or jaxtune kernel ran in this trace)")
    for intra in getattr(profile, "intrakernel", ()):
        parts += ["", *intra.summary()]
    if getattr(profile, "llo", None):
        parts += ["", *(llo_lines(profile.llo, None) if llo_all else llo_lines(profile.llo))]
    ops = list(profile.ops[:top])
    if ops:
        header, rows = op_rows(ops, peak=peak)
        parts += [
            "",
            f"XLA ops (top {len(ops)} of {len(profile.ops)}): one row per instruction",
            text.table(header, rows, fixed=NUMBERS),
            *peak_footnote(ops, peak),
        ]
    parts += _scope_lines(list(getattr(profile, "scopes", ())), top)
    extra = [f"note: {n}" for n in profile.notes]
    if profile.missing_flags:
        extra.append("captured without profiling flags: " + " ".join(profile.missing_flags))
    if profile.logdir:
        extra.append(f"trace: {profile.logdir}")
    if extra:
        parts += ["", *(x for line in extra for x in text.paragraph(line))]
    return "\n".join(parts)
