"""``TuningResult.to_html()`` and ``jaxtune cache show --html``: every sweep on one page.

Per (kernel, device kind, key): the stored config, how it won (with the interval the
decision used) and the pass timed; which knobs varied and which were fixed; each config's
time with its spread (interquartile range) and its minimum, fastest first, coloured by how
far it got in the sweep; a heatmap when two knobs vary; then every config in a table,
fastest first, failures last with their stage and reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._core.vocabulary import config_id
from .._render import configs as _configs
from .._render import page, units
from .explain import decision_text

__all__ = ["STAGES", "knobs", "stage", "sweep_html"]

# Entries, measurements and failures are taken by their fields (``m.ok`` tells a
# measurement from a failure), so this module does not import the result module that
# offers ``TuningResult.to_html``.
Entry = Any
Measurement = Any
Failure = Any

_MAX_BARS = 40
_LABEL_WIDTH = 34

#: How far a config got in the sweep, each with its colour and what it means. The colour
#: is not a rank: a config ruled out in the rounds was shown slower than the winner, and
#: may still have a lower median than a config that never reached the rounds.
STAGES: dict[str, tuple[str, str]] = {
    "winner": ("#20a464", "the stored config"),
    "default": ("#e0a526", "the default config"),
    "raced": ("#3867d6", "timed in the rounds to the end, not shown slower than the winner"),
    "ruled out": ("#8fa3d9", "timed in the rounds, shown slower than the winner or clearly behind"),
    "first pass": ("#b6bfd0", "first pass only: not near enough the fastest to race"),
    "dropped": ("#d9dde6", "dropped during the first pass: clearly slower"),
}


def knobs(entry: Entry) -> list[str]:
    """The config keys whose value varies across the entry's measured configs, in the
    order the kernel's author wrote them."""
    return _configs.knobs(m.config for m in entry.measurements)[0]


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return config_id(a) == config_id(b)


def stage(entry: Entry, m: Measurement) -> str:
    """The key in :data:`STAGES` of a measured config."""
    if _same(m.config, entry.config):
        return "winner"
    if _same(m.config, entry.default_config):
        return "default"
    if m.rounds_us:
        return "ruled out" if m.dropped else "raced"
    return "dropped" if m.dropped else "first pass"


def _fastest_first(entry: Entry) -> list[Measurement]:
    return sorted((m for m in entry.measurements if m.ok), key=lambda m: m.time_us)


def _wrapped(label: str) -> str:
    """A bar label on at most three lines, broken after a knob (``, ``)."""
    from .._render import text

    lines = text.wrap(label, _LABEL_WIDTH)
    if len(lines) > 3:
        lines = [*lines[:2], "... " + lines[-1]]
    return "\n".join(lines)


def _bars(entry: Entry, shown: Sequence[str] | None) -> tuple[str, str]:
    plt = page.pyplot()
    ranked = _fastest_first(entry)
    timed = ranked[:_MAX_BARS]
    unit, _ = units.time_column(m.time_us for m in timed)
    scale = dict(units.TIME_UNITS)[unit]
    labels = [_wrapped(_configs.text(m.config, shown) or "(the only config)") for m in timed]
    lines = sum(label.count("\n") + 1 for label in labels)
    fig, ax = plt.subplots(figsize=(9, 0.2 * lines + 0.16 * len(timed) + 1.4))
    y = list(range(len(timed)))[::-1]
    stages = [stage(entry, m) for m in timed]
    ax.barh(
        y,
        [m.time_us / scale for m in timed],
        xerr=[
            [min(m.spread * m.time_us / 2, m.time_us) / scale for m in timed],
            [m.spread * m.time_us / 2 / scale for m in timed],
        ],
        color=[STAGES[s][0] for s in stages],
        error_kw={"ecolor": "#1d2330", "capsize": 2, "linewidth": 0.8},
    )
    ax.scatter([m.min_us / scale for m in timed], y, marker="|", color="#1d2330", s=80, zorder=3)
    ax.set_yticks(y, labels, fontsize=9)
    ax.set_xlim(left=0)
    ax.set_xlabel(f"median time ({unit}); whisker: interquartile range; tick: minimum")
    ax.spines[["top", "right"]].set_visible(False)
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=colour, label=name)
        for name, (colour, _) in STAGES.items()
        if name in stages
    ]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9
    )
    caption = "Each measured config's median time, fastest first"
    if len(ranked) > len(timed):
        caption += f" (the fastest {len(timed)} of {len(ranked)})"
    caption += (
        ". A raced config's time is the median of its per-round times; the others', of "
        "their first-pass samples. The colour says how far a config got, not its rank: "
        + "; ".join(f"{name}: {STAGES[name][1]}" for name in STAGES if name in stages)
        + "."
    )
    return page.figure_svg(fig), caption


def _heatmap(entry: Entry, x_knob: str, y_knob: str) -> str:
    plt = page.pyplot()
    xs = sorted({m.config.get(x_knob) for m in entry.measurements}, key=_order)
    ys = sorted({m.config.get(y_knob) for m in entry.measurements}, key=_order)
    unit, _ = units.time_column(m.time_us for m in entry.measurements if m.ok)
    scale = dict(units.TIME_UNITS)[unit]
    grid = [[math.nan] * len(xs) for _ in ys]
    failed: list[tuple[int, int]] = []
    for m in entry.measurements:
        cell = (ys.index(m.config.get(y_knob)), xs.index(m.config.get(x_knob)))
        if m.ok:
            grid[cell[0]][cell[1]] = m.time_us / scale
        else:
            failed.append(cell)
    fig, ax = plt.subplots(figsize=(min(2 + 1.1 * len(xs), 10), 1.4 + 0.6 * len(ys)))
    image = ax.imshow(grid, cmap="viridis_r", aspect="auto")
    fig.colorbar(image, ax=ax, label=f"median {unit} (darker is slower)")
    ax.set_xticks(range(len(xs)), [repr(x) for x in xs])
    ax.set_yticks(range(len(ys)), [repr(y) for y in ys])
    ax.set_xlabel(x_knob)
    ax.set_ylabel(y_knob)
    for row, col in failed:
        ax.text(col, row, "failed", ha="center", va="center", color="#a3262b", fontsize=8)
    for config, text in ((entry.config, "best"), (entry.default_config, "default")):
        if config.get(x_knob) in xs and config.get(y_knob) in ys:
            col, row = xs.index(config.get(x_knob)), ys.index(config.get(y_knob))
            ax.text(
                col,
                row,
                text,
                ha="center",
                va="center",
                fontsize=9,
                bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0},
            )
    return page.figure_svg(fig)


def _order(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, (int, float)) else (1, repr(value))


def _config_table(entry: Entry, shown: Sequence[str] | None) -> str:
    unit, fmt = units.time_column(m.time_us for m in entry.measurements if m.ok)
    rows: list[Sequence[str]] = []
    classes: list[str] = []
    failed = [m for m in entry.measurements if not m.ok]
    for m in [*_fastest_first(entry), *failed]:
        name = _configs.text(m.config, shown) or "(the only config)"
        role = "winner" if _same(m.config, entry.config) else ""
        if _same(m.config, entry.default_config):
            role = (role + ", default").lstrip(", ")
        if m.ok:
            status = m.why_out or ("raced" if m.rounds_us else "first pass")
            rows.append(
                (
                    name,
                    role,
                    fmt(m.time_us),
                    fmt(m.min_us),
                    f"{m.spread:.1%}",
                    str(m.samples),
                    status,
                )
            )
            classes.append("winner" if role.startswith("winner") else "")
        else:
            rows.append((name, role, "-", "-", "-", "-", _failure(m)))
            classes.append("failed")
    header = ("config", "", f"median {unit}", f"min {unit}", "spread", "samples", "status")
    return page.table(
        header, rows, numeric=(2, 3, 4, 5), row_classes=classes, name="configs", wrap=(0,)
    )


def _failure(m: Failure) -> str:
    return f"failed at {m.stage}: {m.reason}"


_PASSES = {"forward": "the forward pass", "vjp": "forward and backward (fwd+bwd)"}


def _section(entry: Entry) -> list[str]:
    speed = f"{entry.speedup:.2f}x over the default" if entry.speedup else "no speedup known"
    failures = sum(1 for m in entry.measurements if not m.ok)
    varying, fixed = _configs.knobs(m.config for m in entry.measurements)
    timed = " ".join(
        x
        for x in (
            _PASSES.get(entry.timing, entry.timing) or "an unknown pass (an older entry)",
            entry.timer and f"with the {entry.timer} timer",
        )
        if x
    )
    decided = decision_text(entry) or "-"
    parts = [
        f"<h2>{page.escape(entry.kernel)} on {page.escape(entry.device_kind)}</h2>",
        f'<p class="summary">key <code>{page.escape(entry.key)}</code>; '
        f"{len(entry.measurements)} configs measured, {failures} failed.</p>",
        f'<p class="stored" data-stored="{page.escape(config_id(entry.config))}">'
        f"stored config: <code>{page.escape(_configs.text(entry.config))}</code>, {speed} "
        f"(default <code>{page.escape(_configs.text(entry.default_config))}</code>); "
        f'timed <span class="pass">{page.escape(timed)}</span>.</p>',
        f'<p class="decision">decided: {page.escape(decided)}.</p>',
    ]
    if entry.values_text:
        parts.append(f'<p class="values">values: {page.escape(entry.values_text)}.</p>')
    if entry.measurements:
        knob_line = f"knobs varied: {', '.join(varying) or 'none'}"
        if fixed:
            knob_line += f"; {_configs.fixed_text(fixed)}"
        parts.append(f'<p class="knobs">{page.escape(knob_line)}.</p>')
    shown = varying or None
    if any(m.ok for m in entry.measurements):
        svg, caption = _bars(entry, shown)
        parts.append(page.chart("sweep", svg, caption))
    if len(varying) == 2:
        parts.append(
            page.chart(
                "heatmap",
                _heatmap(entry, varying[1], varying[0]),
                f"Median time over the two knobs that vary, {varying[0]} and {varying[1]}.",
            )
        )
    parts.append("<h3>Every config, fastest first (failures last)</h3>")
    parts.append(_config_table(entry, shown))
    return parts


def sweep_html(entries: Iterable[Entry], title: str = "jaxtune sweeps") -> str:
    """The whole page: one section per entry, sorted by kernel, device kind and key."""
    ordered = sorted(entries, key=lambda e: (e.kernel, e.device_kind, e.key))
    body = [f"<h1>{page.escape(title)}</h1>"]
    if not ordered:
        body.append("<p>No tuned entries.</p>")
    for entry in ordered:
        body += _section(entry)
    return page.page(title, body)
