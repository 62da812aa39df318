"""Self-contained HTML pages with matplotlib charts inlined as SVG (no network at view time).

Shared by the profile report (``jaxtune report --html``) and the sweep report
(``jaxtune cache show --html``). matplotlib is the optional ``plots`` extra; without it
:func:`pyplot` raises :class:`PlotsUnavailableError` with the install command.
"""

from __future__ import annotations

import dataclasses
import html
import io
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .._core.errors import PlotsUnavailableError

__all__ = [
    "INSTALL_PLOTS",
    "Cut",
    "breakable",
    "chart",
    "escape",
    "figure_svg",
    "page",
    "pyplot",
    "table",
]

#: What to run when matplotlib is missing.
INSTALL_PLOTS = (
    "HTML reports draw their charts with matplotlib, which is not installed in this "
    "environment. Install the plots extra: pip install 'jaxtune[plots]' (from a checkout: "
    "pip install -e '.[plots]'), or pip install matplotlib."
)

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto;
       max-width: 1180px; color: #1d2330; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.summary { color: #4a5264; margin: 0 0 12px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 4px 8px; border-bottom: 1px solid #e3e6ec; text-align: left; }
td.wrap { overflow-wrap: break-word; }
th { background: #f3f5f8; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap;
                 overflow-wrap: normal; }
h3 { font-size: 14.5px; margin: 16px 0 6px; }
tr.winner td { background: #e8f6ec; font-weight: 600; }
tr.failed td { color: #a3262b; }
tr.head td { font-weight: 600; } tr.part td:first-child { padding-left: 28px; }
figure.chart { margin: 8px 0 16px; } figure.chart svg { max-width: 100%; height: auto; }
figcaption { color: #4a5264; font-size: 12.5px; }
.note { color: #4a5264; font-size: 12.5px; margin: 4px 0; } .note.detail { margin-left: 20px; }
.warning { color: #a1261b; font-weight: 600; margin: 6px 0; }
code { background: #f3f5f8; padding: 0 3px; border-radius: 3px; overflow-wrap: anywhere; }
p { overflow-wrap: anywhere; }
td.cut { max-width: 300px; }
td.cut span { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2;
              overflow: hidden; overflow-wrap: anywhere; }
"""


def pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend.

    Raises:
        PlotsUnavailableError: matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError as e:
        raise PlotsUnavailableError(INSTALL_PLOTS) from e
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def figure_svg(fig: Any) -> str:
    """The figure as an inline ``<svg>`` element (text kept as text), and closes it."""
    plt = pyplot()
    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "jaxtune"}):
        fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def escape(value: Any) -> str:
    """HTML-escaped ``str(value)``."""
    return html.escape(str(value), quote=True)


def chart(name: str, svg: str, caption: str) -> str:
    """A chart as a ``<figure class="chart" data-chart=name>`` with its caption."""
    return (
        f'<figure class="chart" data-chart="{escape(name)}">{svg}'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


@dataclasses.dataclass(frozen=True)
class Cut:
    """A table cell too long to show whole (a name stack): ``shown`` (already cut from
    the left, say) in at most two lines of a 300 px column, the rest hidden by CSS, and
    ``full`` on hover (the cell's ``title``)."""

    shown: str
    full: str


def table(
    header: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    numeric: Iterable[int] = (),
    row_classes: Sequence[str] | None = None,
    name: str = "",
    wrap: Iterable[int] = (),
) -> str:
    """An HTML table; columns in ``numeric`` are right-aligned and never break, columns
    in ``wrap`` (long names, paths, configs) may also break after the ``:`` ``/`` ``.``
    ``_`` of a long word, so the table fits the window; other columns break only between
    words. A :class:`Cut` value shows cut, whole on hover."""
    nums, wraps = set(numeric), set(wrap)

    def cell(tag: str, i: int, value: Any) -> str:
        if isinstance(value, Cut):
            return (
                f'<{tag} class="cut" title="{escape(value.full)}">'
                f"<span>{escape(value.shown)}</span></{tag}>"
            )
        cls = ' class="num"' if i in nums else ' class="wrap"' if i in wraps else ""
        text = breakable(value) if i in wraps else escape(value)
        return f"<{tag}{cls}>{text}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = []
    for n, row in enumerate(rows):
        cls = f' class="{row_classes[n]}"' if row_classes and row_classes[n] else ""
        body.append(f"<tr{cls}>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>")
    attr = f' data-table="{escape(name)}"' if name else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def breakable(value: Any, longest: int = 24) -> str:
    """HTML-escaped ``str(value)`` whose words longer than ``longest`` characters may
    break after a ``:`` ``/`` ``.`` or ``_`` (``<wbr>``), not inside a name's parts.

    Examples:
        >>> breakable("lib.flash:_flash_attention_kernel 1.2 ms")
        'lib.<wbr>flash:<wbr>_<wbr>flash_<wbr>attention_<wbr>kernel 1.2 ms'
    """
    words = str(value).split(" ")
    out = []
    for word in words:
        text = escape(word)
        if len(word) > longest:
            text = re.sub(r"([:/._])", r"\1<wbr>", text)
        out.append(text)
    return " ".join(out)


def page(title: str, body: Sequence[str]) -> str:
    """A complete HTML document: inline style, no scripts, nothing fetched."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
