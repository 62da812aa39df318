"""``TuningResult.to_html()`` and ``jaxtune cache show --html``: every sweep on one page.

Per (kernel, device kind, key): each config's median time with its spread (interquartile
range) and its minimum, the winner and the default marked; a heatmap when the space has
two knobs; then every config in a table, failures with their stage and reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._core.vocabulary import config_id
from .._render import page, units

__all__ = ["knobs", "sweep_html"]

# Entries, measurements and failures are taken by their fields (``m.ok`` tells a
# measurement from a failure), so this module does not import the result module that
# offers ``TuningResult.to_html``.
Entry = Any
Measurement = Any
Failure = Any

_WINNER, _DEFAULT, _OTHER, _DROPPED = "#20a464", "#e0a526", "#3867d6", "#b6bfd0"
_MAX_BARS = 40


def knobs(entry: Entry) -> list[str]:
    """The config keys whose value varies across the entry's measured configs."""
    values: dict[str, set[str]] = {}
    for m in entry.measurements:
        for name, value in m.config.items():
            values.setdefault(name, set()).add(repr(value))
    return [name for name, seen in values.items() if len(seen) > 1]


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return config_id(a) == config_id(b)


def _colour(entry: Entry, m: Measurement) -> str:
    if _same(m.config, entry.config):
        return _WINNER
    if _same(m.config, entry.default_config):
        return _DEFAULT
    return _DROPPED if m.dropped else _OTHER


def _bars(entry: Entry) -> str:
    plt = page.pyplot()
    timed = sorted((m for m in entry.measurements if m.ok), key=lambda m: m.time_us)[:_MAX_BARS]
    unit, _ = units.time_column(m.time_us for m in timed)
    scale = dict(units.TIME_UNITS)[unit]
    labels = [config_id(m.config) for m in timed]
    fig, ax = plt.subplots(figsize=(9, 0.36 * len(timed) + 1.4))
    y = list(range(len(timed)))[::-1]
    ax.barh(
        y,
        [m.time_us / scale for m in timed],
        xerr=[
            [min(m.spread * m.time_us / 2, m.time_us) / scale for m in timed],
            [m.spread * m.time_us / 2 / scale for m in timed],
        ],
        color=[_colour(entry, m) for m in timed],
        error_kw={"ecolor": "#1d2330", "capsize": 2, "linewidth": 0.8},
    )
    ax.scatter([m.min_us / scale for m in timed], y, marker="|", color="#1d2330", s=80, zorder=3)
    ax.set_yticks(y, [label if len(label) <= 48 else label[:45] + "..." for label in labels])
    ax.set_xlim(left=0)
    ax.set_xlabel(f"median time ({unit}); whisker: interquartile range; tick: minimum")
    ax.spines[["top", "right"]].set_visible(False)
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=c, label=label)
        for label, c in (
            ("winner", _WINNER),
            ("default", _DEFAULT),
            ("other", _OTHER),
            ("out (slower)", _DROPPED),
        )
    ]
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9
    )
    return page.figure_svg(fig)


def _heatmap(entry: Entry, x_knob: str, y_knob: str) -> str:
    plt = page.pyplot()
    xs = sorted({m.config.get(x_knob) for m in entry.measurements}, key=_order)
    ys = sorted({m.config.get(y_knob) for m in entry.measurements}, key=_order)
    grid = [[math.nan] * len(xs) for _ in ys]
    failed: list[tuple[int, int]] = []
    for m in entry.measurements:
        cell = (ys.index(m.config.get(y_knob)), xs.index(m.config.get(x_knob)))
        if m.ok:
            grid[cell[0]][cell[1]] = m.time_us
        else:
            failed.append(cell)
    fig, ax = plt.subplots(figsize=(min(2 + 1.1 * len(xs), 10), 1.4 + 0.6 * len(ys)))
    image = ax.imshow(grid, cmap="viridis_r", aspect="auto")
    fig.colorbar(image, ax=ax, label="median us (darker is slower)")
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


def _config_table(entry: Entry) -> str:
    unit, fmt = units.time_column(m.time_us for m in entry.measurements if m.ok)
    rows: list[Sequence[str]] = []
    classes: list[str] = []
    for m in entry.measurements:
        role = "winner" if _same(m.config, entry.config) else ""
        if _same(m.config, entry.default_config):
            role = (role + ", default").lstrip(", ")
        if m.ok:
            status = m.why_out or "ok"
            rows.append(
                (
                    config_id(m.config),
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
            rows.append((config_id(m.config), role, "-", "-", "-", "-", _failure(m)))
            classes.append("failed")
    header = ("config", "", f"median {unit}", f"min {unit}", "spread", "samples", "status")
    return page.table(header, rows, numeric=(2, 3, 4, 5), row_classes=classes, name="configs")


def _failure(m: Failure) -> str:
    return f"failed at {m.stage}: {m.reason}"


def _section(entry: Entry) -> list[str]:
    speed = f"{entry.speedup:.2f}x over the default" if entry.speedup else "no speedup known"
    failures = sum(1 for m in entry.measurements if not m.ok)
    parts = [
        f"<h2>{page.escape(entry.kernel)} on {page.escape(entry.device_kind)}</h2>",
        f'<p class="summary">key <code>{page.escape(entry.key)}</code>: best '
        f"<code>{page.escape(config_id(entry.config))}</code>, {speed}; default "
        f"<code>{page.escape(config_id(entry.default_config))}</code>; "
        f"{len(entry.measurements)} configs, {failures} failed.</p>",
    ]
    decided = entry.decision_text()
    passes = {"forward": "the forward pass", "vjp": "forward and backward (fwd+bwd)"}
    timed = " ".join(
        x
        for x in (
            passes.get(entry.timing, entry.timing),
            entry.timer and f"with the {entry.timer} timer",
        )
        if x
    )
    if decided or timed:
        parts.append(
            f'<p class="decision">stored config: {page.escape(decided or "-")}'
            f"{'; timed ' + page.escape(timed) if timed else ''}.</p>"
        )
    if any(m.ok for m in entry.measurements):
        parts.append(
            page.chart("sweep", _bars(entry), "Each measured config's median time, fastest first.")
        )
    two = knobs(entry)
    if len(two) == 2:
        parts.append(
            page.chart(
                "heatmap",
                _heatmap(entry, two[1], two[0]),
                f"Median time over the two knobs {two[0]} and {two[1]}.",
            )
        )
    parts.append(_config_table(entry))
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
