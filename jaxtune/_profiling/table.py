"""The text form of a profile: a kernels table, an ops table, and why a bound is unknown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._core.vocabulary import pass_text
from .._render import configs as _configs
from .._render import text, units
from .attribution import KernelStat, ScopeStat
from .llo_figures import lines as llo_lines

__all__ = [
    "BOUND_HELP",
    "NUMBERS",
    "config_text",
    "device_text",
    "format_profile",
    "op_rows",
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
    "flops": "give the Pallas kernel a cost estimate "
    "(pl.pallas_call(..., cost_estimate=pl.CostEstimate(flops=..., bytes_accessed=..., "
    "transcendentals=0))) or an autotuned kernel flops=/bytes= hints "
    "(@jaxtune.autotuned(..., flops=lambda x, y: 2 * x.shape[0] * ..., bytes=...))",
    "bytes": "add bytes_accessed= to the kernel's cost_estimate, or a bytes= hint to "
    "@jaxtune.autotuned",
    "peak": "jaxtune's peak table (jaxtune._profiling.roofline.PEAKS: TPU v4 to v7x, NVIDIA "
    "A100 to B200) has no entry for this device; a trace whose device plane records "
    "peak_teraflops_per_second and peak_hbm_bw_gigabytes_per_second uses those, and a new "
    "device is a one-line entry in PEAKS",
}


#: The columns of :func:`stat_rows` that hold numbers (never wrapped).
NUMBERS = (2, 3, 4, 5, 6, 7)


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
    stats: Sequence[KernelStat], *, mark_unknown: bool
) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of stats; each time or rate column in one unit."""
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
    for s in stats:
        bound: str = s.bound_by
        if mark_unknown and bound == "unknown":
            bound += "*"
        rows.append(
            [
                shown_name(s),
                shown_kind(s),
                str(s.calls) if s.calls_exact else f"~{s.calls}",
                total(s.total_us),
                mean(s.mean_us),
                f"{s.share:.1%}",
                flops(s.flops_per_s),
                bytes_(s.bytes_per_s),
                bound,
                s.flops_source,
            ]
        )
    return header, rows


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
    ops: Sequence[KernelStat], width: int = text.WIDTH
) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)`` of plain XLA ops: :func:`stat_rows`' columns, the program when
    the ops come from several, and each op's name stack, cut from the left to what the
    rest of a ``width``-column row leaves (at least 24 characters)."""
    header, rows = stat_rows(ops, mark_unknown=False)
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
    stats: Sequence[KernelStat], calls: Sequence[Mapping[str, Any]] = ()
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
        call = next(
            (
                c
                for c in calls
                if c.get("kernel") == kernel_id and dict(c.get("config") or {}) == config
            ),
            {},
        )
        rows.append(
            [
                kernel_id,
                config_text(inside[0]),
                str(call.get("source") or "-"),
                speedup_text(inside[0]),
                pass_text(str(call.get("entry_timing") or "")),
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


def format_profile(profile: Any, top: int = 20) -> str:
    """The summary line, the ``top`` kernels (then where their code is), the ``top`` XLA
    ops with their name stacks, the ``top`` scopes of the scope view, then notes."""
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
    kernels = list(profile.kernels[:top])
    if kernels:
        header, rows = stat_rows(kernels, mark_unknown=True)
        parts += [
            f"kernels (top {len(kernels)} of {len(profile.kernels)})",
            text.table(header, rows, fixed=NUMBERS),
        ]
        parts += _footnote(kernels, profile.device_kind)
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
        parts += ["", *llo_lines(profile.llo)]
    ops = list(profile.ops[:top])
    if ops:
        header, rows = op_rows(ops)
        parts += [
            "",
            f"XLA ops (top {len(ops)} of {len(profile.ops)}): one row per instruction",
            text.table(header, rows, fixed=NUMBERS),
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
