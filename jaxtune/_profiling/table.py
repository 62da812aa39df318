"""The text form of a profile: a kernels table, an ops table, and why a bound is unknown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core.codec import table
from .._render import units
from .attribution import KernelStat
from .llo_figures import lines as llo_lines

__all__ = ["BOUND_HELP", "format_profile", "stat_rows", "unknown_bound_reasons"]

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
                _shown_name(s),
                s.kind,
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


def shown_name(stat: KernelStat) -> str:
    """A row's full name: a Pallas kernel inside a jaxtune kernel reads
    ``<kernel id>:<pallas name>``, so it matches the tuning table's kernel name."""
    name = stat.name
    if stat.kind == "pallas" and stat.kernel_id and stat.kernel_id != name:
        name = f"{stat.kernel_id}:{name}"
    return name


def _shown_name(stat: KernelStat) -> str:
    """:func:`shown_name`, at most 60 characters (a text table's column)."""
    name = shown_name(stat)
    return name if len(name) <= 60 else "..." + name[-57:]


def config_text(stat: KernelStat) -> str:
    """The config an autotuned kernel ran with and its tuned speedup: ``block_q=128,
    block_k=256 (1.31x tuned)``; empty for other rows."""
    if stat.config is None:
        return ""
    shown = ", ".join(f"{k}={v}" for k, v in stat.config.items())
    if stat.speedup:
        return f"{shown} ({stat.speedup:.2f}x over the default, tuned)"
    return f"{shown} (not tuned here)"


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
        lines.append(f"  {what} ({shown}): {BOUND_HELP[reason]}")
    return lines


def format_profile(profile: Any, top: int = 20) -> str:
    """The summary line, the ``top`` kernels, the ``top`` XLA ops, then notes."""
    if profile.iterations:
        summary = (
            f"{profile.platform} ({profile.device_kind}): {profile.iterations} iterations, "
            f"{units.duration(profile.step_us)} of device time per step"
        )
    else:
        summary = f"{profile.platform} ({profile.device_kind}): {units.duration(profile.total_us)} of device time"
    parts = [f"warning: {w}" for w in getattr(profile, "warnings", ())]
    parts += [summary, ""]
    kernels = list(profile.kernels[:top])
    if kernels:
        header, rows = stat_rows(kernels, mark_unknown=True)
        parts += [
            f"kernels (top {len(kernels)} of {len(profile.kernels)})",
            table(header, rows),
        ]
        parts += _footnote(kernels, profile.device_kind)
    else:
        parts.append("kernels: none (no Pallas or jaxtune kernel ran in this trace)")
    for intra in getattr(profile, "intrakernel", ()):
        parts += ["", *intra.summary()]
    if getattr(profile, "llo", None):
        parts += ["", *llo_lines(profile.llo)]
    ops = list(profile.ops[:top])
    if ops:
        header, rows = stat_rows(ops, mark_unknown=False)
        parts += [
            "",
            f"XLA ops (top {len(ops)} of {len(profile.ops)})",
            table(header, rows),
        ]
    extra = [f"note: {n}" for n in profile.notes]
    if profile.missing_flags:
        extra.append("captured without profiling flags: " + " ".join(profile.missing_flags))
    if profile.logdir:
        extra.append(f"trace: {profile.logdir}")
    if extra:
        parts += ["", *extra]
    return "\n".join(parts)
