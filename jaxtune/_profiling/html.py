"""``Profile.to_html()`` and ``jaxtune report --html``: one self-contained page with the
kernel table, a chart of device-time shares, a roofline, the timeline of kernels and, when
it ran, the LLO section."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._core import roofline as _roofline
from .._render import page, units
from .attribution import KernelStat, ScopeStat
from .llo_figures import MODELLED
from .llo_figures import lines as llo_lines
from .table import (
    BOUND_HELP,
    NUMBERS,
    KernelTable,
    device_text,
    kernel_table,
    op_rows,
    part_labels,
    peak_notes,
    scope_rows,
    shorten_left,
    shown_kind,
    tuned_rows,
    unknown_bound_reasons,
)

__all__ = ["profile_html"]

_KIND_COLOURS = {"pallas": "#3867d6", "autotuned": "#20a464", "xla": "#9aa3b2"}
#: Marker per source of a kernel's FLOPs/bytes on the roofline.
_SOURCE_MARKERS = {"cost_estimate": "o", "hint": "s", "xla": "^", "shapes": "D", "none": "x"}
_SHARE_BARS = 15
_TIMELINE_ROWS = 10


def _label(name: str, width: int = 38) -> str:
    """A chart label: a long name is wrapped (after a space, ``:``, ``/``, ``.`` or ``_``
    where it can), not cut, onto at most three lines; only a longer one loses its middle."""
    if len(name) <= width:
        return name
    lines: list[str] = []
    rest = name
    while len(rest) > width and len(lines) < 2:
        cut = max(rest.rfind(c, 0, width) for c in ":/._ ")
        cut = cut + 1 if cut > width // 3 else width
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:]
    if len(rest) > width:
        rest = "..." + rest[-(width - 3) :]
    return "\n".join([*lines, rest])


def _kind(stat: KernelStat) -> str:
    """The colour key of a row: its kind as the tables show it (:func:`.table.shown_kind`)."""
    return shown_kind(stat)


def _span_unit(end_us: float) -> tuple[str, float]:
    return next(((n, f) for n, f in units.TIME_UNITS if end_us >= f), units.TIME_UNITS[-1])


def _share_chart(profile: Any) -> str:
    plt = page.pyplot()
    # One bar per kernel, never per head row of the table, which totals other bars.
    kernels = list(profile.kernels[:_SHARE_BARS])
    labels = part_labels(profile.kernels)
    ops = list(profile.ops)
    bars = [(_label(labels[id(k)]), k.share, _kind(k)) for k in kernels]
    if ops:
        bars.append((f"XLA ops ({len(ops)})", sum(o.share for o in ops), "xla"))
    bars.reverse()
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(bars) + 1.2))
    if bars:
        ax.barh(
            [b[0] for b in bars],
            [100 * b[1] for b in bars],
            color=[_KIND_COLOURS.get(b[2], "#9aa3b2") for b in bars],
        )
        for y, (_, share, _) in enumerate(bars):
            ax.text(100 * share, y, f" {share:.1%}", va="center", fontsize=9)
    ax.set_xlabel("share of device time (%)")
    ax.set_xlim(0, max([100 * b[1] for b in bars] + [1]) * 1.15)
    ax.spines[["top", "right"]].set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c, label=k) for k, c in _KIND_COLOURS.items()]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9
    )
    return page.figure_svg(fig)


def _draw_roofs(ax: Any, peak: _roofline.Peak, lo_x: float, hi_x: float) -> None:
    grid = [lo_x * (hi_x / lo_x) ** (i / 200) for i in range(201)]
    ax.plot(
        grid,
        [min(peak.flops_per_s, x * peak.bytes_per_s) for x in grid],
        color="#1d2330",
        linewidth=1.6,
    )
    ax.axvline(peak.ridge, color="#c0c5cf", linestyle=":", linewidth=1)
    ax.text(
        hi_x / 1.5,
        peak.flops_per_s * 1.1,
        f"compute {peak.flops_per_s / 1e12:.0f} TFLOP/s",
        ha="right",
        fontsize=9,
    )
    ax.text(
        lo_x * 1.5,
        lo_x * 1.5 * peak.bytes_per_s * 1.3,
        f"memory {peak.bytes_per_s / 1e9:.0f} GB/s",
        fontsize=9,
    )


def _roofline_chart(profile: Any) -> tuple[str, str]:
    plt = page.pyplot()
    peak = profile.peak
    points = [k for k in profile.kernels if k.intensity and k.flops_per_s]
    labels = part_labels(profile.kernels)
    fig, ax = plt.subplots(figsize=(9, 5.2))
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [k.intensity or 0.0 for k in points]
    ys = [k.flops_per_s or 0.0 for k in points]
    lo_x, hi_x = min([*xs, 0.1]) / 4, max([*xs, 1000.0]) * 4
    if peak is not None:
        _draw_roofs(ax, peak, lo_x, hi_x)
        caption = (
            f"Roofs: {peak.device} ({peak.source}); ridge at {peak.ridge:.0f} FLOP/byte. "
            "Marker shape: where each kernel's FLOPs and bytes came from."
        )
    else:
        caption = (
            f"No roofs: no peak FLOP/s and bandwidth known for {profile.device_kind!r}. "
            + BOUND_HELP["peak"]
            + ". Marker shape: where each kernel's FLOPs and bytes came from."
        )
    for source, marker in _SOURCE_MARKERS.items():
        group = [k for k in points if k.flops_source == source]
        if group:
            ax.scatter(
                [k.intensity for k in group],
                [k.flops_per_s for k in group],
                marker=marker,
                s=60,
                c=[_KIND_COLOURS.get(_kind(k), "#9aa3b2") for k in group],
                label=f"FLOPs/bytes from {source}",
                zorder=3,
            )
    for k in points:
        ax.annotate(
            _label(labels[id(k)], 28),
            (k.intensity, k.flops_per_s),
            fontsize=8,
            xytext=(5, 4),
            textcoords="offset points",
        )
    if not points:
        ax.text(
            0.5,
            0.5,
            "no kernel has both a FLOP and a byte count",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="#a3262b",
        )
    top = max([*ys, peak.flops_per_s if peak else 0.0, 1e9]) * 3
    bottom = min([*ys, top / 1e4]) / 10
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(bottom, top)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="major", color="#eceef2")
    if points:
        ax.legend(loc="lower right", frameon=False, fontsize=9)
    return page.figure_svg(fig), caption


def _timeline_chart(profile: Any) -> str:
    plt = page.pyplot()
    spans = list(profile.timeline)
    shown = list(profile.kernels[:_TIMELINE_ROWS])
    # One lane per row of the table: spans by (kind, name), labelled as the table is.
    labels = part_labels(profile.kernels)
    lanes = [((k.kind, k.name), labels[id(k)], _kind(k)) for k in shown]
    named = {key for key, _, _ in lanes}
    rest = "XLA ops" if len(profile.kernels) <= len(shown) else "XLA ops, other kernels"
    rows = [*lanes, (None, rest, "xla")]
    end = max((s.start_us + s.duration_us for s in spans), default=1.0)
    unit, scale = _span_unit(end)
    fig, ax = plt.subplots(figsize=(9, 0.38 * len(rows) + 1.3))
    for row, (key, _, kind) in enumerate(reversed(rows)):
        mine = [
            s for s in spans if ((s.kind, s.name) == key if key else (s.kind, s.name) not in named)
        ]
        ax.broken_barh(
            [(s.start_us / scale, max(s.duration_us / scale, 1e-9)) for s in mine],
            (row - 0.4, 0.8),
            color=_KIND_COLOURS.get(kind, "#9aa3b2"),
        )
    ax.set_yticks(range(len(rows)), [_label(r[1], 32) for r in reversed(rows)], fontsize=9)
    ax.set_xlim(0, end / scale * 1.01)
    ax.set_xlabel(f"time since the first op ({unit})")
    ax.spines[["top", "right"]].set_visible(False)
    return page.figure_svg(fig)


def _timeline_caption(profile: Any) -> str:
    """What the timeline draws, and how it was thinned when it was."""
    bars = len(profile.timeline)
    spans = sum(s.spans for s in profile.timeline)
    lanes = "one lane per kernel of the table's first rows, the rest in the last lane"
    if not profile.timeline_joined_us:
        return (
            f"When each kernel ran, from the first op of the trace; {lanes}. All {spans:,} "
            "spans drawn, each a stretch of time one kernel ran without a gap."
        )
    return (
        f"When each kernel ran, from the first op of the trace; {lanes}. {bars:,} bars for "
        f"{spans:,} spans: to draw a trace this long, spans of one kernel less than "
        f"{units.duration(profile.timeline_joined_us)} apart are drawn as one bar, over the "
        "whole run (never only its first part); a longer gap always shows."
    )


def _intra_chart(intra: Any) -> str:
    """The first call of a kernel, from the inside: its ``LLO Ops`` spans (estimates
    lighter) and one lane per unit."""
    plt = page.pyplot()
    lanes = [("LLO Ops", intra.spans), *intra.unit_spans.items()]
    end = max((s.start_us + s.duration_us for _, ss in lanes for s in ss), default=1.0)
    unit, scale = _span_unit(end)
    fig, ax = plt.subplots(figsize=(9, 0.38 * len(lanes) + 1.3))
    for row, (_, spans) in enumerate(reversed(lanes)):
        for estimate, colour in ((False, "#3867d6"), (True, "#b7c4ea")):
            mine = [s for s in spans if s.estimate == estimate]
            ax.broken_barh(
                [(s.start_us / scale, max(s.duration_us / scale, 1e-9)) for s in mine],
                (row - 0.4, 0.8),
                color=colour,
            )
    ax.set_yticks(range(len(lanes)), [name for name, _ in reversed(lanes)], fontsize=9)
    ax.set_xlim(0, end / scale * 1.01)
    ax.set_xlabel(f"time since the call began ({unit}); light: estimated between trace points")
    ax.spines[["top", "right"]].set_visible(False)
    return page.figure_svg(fig)


def _intra_section(profile: Any) -> list[str]:
    if not profile.intrakernel:
        return []
    first = profile.intrakernel[0]
    label = f"{first.kernel_id}:{first.name}" if first.kernel_id else first.name
    out = ["<h2>Inside kernels (custom-call tracing)</h2>"]
    out += [
        f'<p class="note">{page.escape(line)}</p>'
        for k in profile.intrakernel
        for line in k.summary()
    ]
    out.append(
        page.chart(
            "intrakernel",
            _intra_chart(first),
            f"The first call of {label}: measured regions, spans estimated between trace "
            "points (spread evenly, as XProf does), and each unit's lane.",
        )
    )
    return out


def _llo_section(profile: Any) -> list[str]:
    """The LLO section as the text shows it (:func:`.llo_figures.lines`): its line, the
    Pallas kernels, the heaviest other modules and how many were left out."""
    if not getattr(profile, "llo", None):
        return []
    return [f"<h2>LLO analysis ({MODELLED})</h2>", *_notes(llo_lines(profile.llo))]


#: The widest name stack an ops-table cell shows before CSS cuts the rest.
_STACK_CHARS = 72


def _kernel_table(table: KernelTable) -> str:
    """The kernels table grouped as the text's (:func:`.table.kernel_table`): a head row
    per autotuned kernel, its kernels beneath it indented, then each kernel's
    ``pallas_call`` line and call site."""
    header = [*table.header, "source (pallas_call)", "call site"]
    rows = [
        [*row, "" if head else stat.source or "", "" if head else stat.call_site or ""]
        for row, stat, head in zip(table.rows, table.stats, table.heads, strict=True)
    ]
    classes = [
        "head" if head else "part" if below else ""
        for head, below in zip(table.heads, table.beneath, strict=True)
    ]
    sites = (0, len(header) - 2, len(header) - 1)
    return page.table(
        header, rows, numeric=NUMBERS, row_classes=classes, name="kernels", wrap=sites
    )


def _ops_table(ops: Sequence[KernelStat], peak: _roofline.Peak | None) -> str:
    """The XLA ops table, with each op's program (where several) and name stack: cut from
    the left, whole on hover."""
    header, rows = op_rows(ops, width=1_000, peak=peak)
    cells: list[list[Any]] = [list(r) for r in rows]
    for cell, s in zip(cells, ops, strict=True):
        full = s.name_stack or "-"
        cell[-1] = page.Cut(shorten_left(full, _STACK_CHARS), full)
    wrap = (0, *([len(header) - 2] if header[-2] == "program" else []))
    return page.table(header, cells, numeric=NUMBERS, name="ops", wrap=wrap)


def _notes(lines: Sequence[str]) -> list[str]:
    """Footnote lines as notes; an indented line (a footnote's detail) stays indented."""
    return [
        f'<p class="note{" detail" if line.startswith(" ") else ""}">'
        f"{page.escape(line.strip())}</p>"
        for line in lines
    ]


def _scope_section(scopes: Sequence[ScopeStat], top: int) -> list[str]:
    """The scope view: the XLA ops grouped by name stack, apart from the ops table."""
    shown = list(scopes[:top])
    if not shown:
        return []
    header, rows = scope_rows(shown)
    several = header[1] == "program"
    numbers = range(1 + several, 5 + several)
    return [
        f"<h2>XLA ops by scope (top {len(shown)} of {len(scopes)})</h2>",
        page.table(
            header,
            rows,
            numeric=numbers,
            name="scopes",
            wrap=(0, *([1] if several else []), len(header) - 1),
        ),
        '<p class="note">Each row is every instruction XLA compiled from one name stack '
        "(one line of the model, fused or not): how many, their events, their time; the "
        "ops table above has one row per instruction. Ops XLA added without a name stack "
        "(copies) share one row.</p>",
    ]


def _tuned_section(kernels: Sequence[KernelStat], calls: Any) -> list[str]:
    """One row per jaxtune kernel: its config and tuned speedup belong to the wrapper,
    not to each Pallas kernel inside it."""
    header, rows = tuned_rows(kernels, calls)
    if not rows:
        return []
    return [
        "<h2>Autotuned kernels: the config that ran</h2>",
        page.table(header, rows, name="autotuned", wrap=(0, 1, len(header) - 1)),
        '<p class="note">The speedup is the whole autotuned function\'s (every Pallas kernel '
        "inside it), as its sweep measured it against the default config, over the pass "
        "timed (forward, or forward and backward: fwd+bwd); from: where the config came "
        "from (cache, default, ...).</p>",
    ]


def _bound_notes(kernels: Sequence[KernelStat], device_kind: str) -> list[str]:
    notes: list[str] = []
    for reason in ("flops", "bytes", "peak"):
        names = [k.name for k in kernels if reason in unknown_bound_reasons(k)]
        if names:
            what = {"flops": "no FLOP count", "bytes": "no byte count"}.get(
                reason, f"no peaks for {device_kind!r}"
            )
            notes.append(
                f'<p class="note">* bound unknown, {what} ({page.escape(", ".join(names))}): '
                f"{page.escape(BOUND_HELP[reason])}</p>"
            )
    return notes


def profile_html(profile: Any, top: int = 50) -> str:
    """The whole page for :meth:`Profile.to_html`."""
    if profile.iterations:
        summary = (
            f"{profile.iterations} iterations, "
            f"{units.duration(profile.step_us)} of device time per step"
        )
    else:
        summary = f"{units.duration(profile.total_us)} of device time"
    device = device_text(profile.platform, profile.device_kind)
    roofline, roofline_caption = _roofline_chart(profile)
    table = kernel_table(profile.kernels, profile.peak, top)
    kernels = list(table.kernels)
    body: list[Any] = [
        f"<h1>jaxtune profile: {page.escape(device)}</h1>",
        *(f'<p class="warning">warning: {page.escape(w)}</p>' for w in profile.warnings),
        f'<p class="summary">{page.escape(summary)}; {len(profile.kernels)} kernels, '
        f"{len(profile.ops)} XLA ops.</p>",
        "<h2>Share of device time</h2>",
        page.chart(
            "share",
            _share_chart(profile),
            "Kernels by share of device time, one bar each (an autotuned kernel's total is "
            "the kernels table's, not a bar); all plain XLA ops together in one bar.",
        ),
        "<h2>Roofline</h2>",
        page.chart("roofline", roofline, roofline_caption),
        "<h2>Timeline</h2>",
        page.chart(
            "timeline",
            _timeline_chart(profile),
            _timeline_caption(profile),
        ),
        f"<h2>Kernels (top {table.shown_groups} of {table.groups}: one row per autotuned "
        "kernel, its Pallas kernels beneath it)</h2>",
        _kernel_table(table) if table.rows else "<p>No Pallas or jaxtune kernel ran.</p>",
        *_bound_notes(kernels, profile.device_kind),
        *_notes(table.peak_notes),
        *_notes(table.floors),
        *_tuned_section(kernels, profile.calls),
        *_intra_section(profile),
        *_llo_section(profile),
    ]
    ops = list(profile.ops[:top])
    if ops:
        body += [
            f"<h2>XLA ops (top {len(ops)} of {len(profile.ops)})</h2>",
            _ops_table(ops, profile.peak),
            '<p class="note">One row per HLO instruction of each program; its name stack '
            "is cut from the left, whole on hover.</p>",
            *_notes(peak_notes(ops, profile.peak)),
        ]
    body += _scope_section(list(profile.scopes), top)
    notes = [*profile.notes]
    if profile.missing_flags:
        notes.append("captured without profiling flags: " + " ".join(profile.missing_flags))
    if profile.logdir:
        notes.append(f"trace: {profile.logdir} (XProf, TensorBoard and Perfetto open it)")
    body += [f'<p class="note">{page.escape(n)}</p>' for n in notes]
    return page.page(f"jaxtune profile: {device}", body)
