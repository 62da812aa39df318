"""Text tables that fit a terminal: columns aligned, and a table wider than
:data:`WIDTH` wraps its widest text columns (at ``, `` ``/`` ``.`` ``:`` ``_`` where it
can) onto continuation lines instead of printing 270-character rows.

Examples:
    >>> print(table(("kernel", "config"), [("mm", "block_m=128, block_n=256")], width=24))
    kernel  config
    ------  ----------------
    mm      block_m=128,
            block_n=256
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Collection, Sequence

__all__ = ["WIDTH", "blocks", "paragraph", "table", "wrap"]

#: The widest line a text table prints (a terminal of 120 columns).
WIDTH = 120
#: Where a long cell may break, best first; the break goes after the separator.
_BREAKS = (", ", "; ", "],", " ", ",", ":", "/", ".", "_", "=")
#: What splits a cell into the words a column should not break (a kernel id, a shape).
_WORDS = re.compile(r" |(?<=\],)")
_GAP = "  "


def wrap(text: str, width: int) -> list[str]:
    """``text`` as lines of at most ``width`` characters, each broken after the best
    separator in its second half (a knob's ``, `` before a name's ``.``), else after any
    in its last two thirds, else cut.

    Examples:
        >>> wrap("jaxtune.examples.flash:_flash_kernel", 20)
        ['jaxtune.examples.', 'flash:_flash_kernel']
    """
    width = max(width, 1)
    lines: list[str] = []
    rest = text
    while len(rest) > width:
        cuts = [rest.rfind(sep, 0, width - len(sep) + 1) + len(sep) for sep in _BREAKS]
        cut = next((c for c in cuts if c > width // 2), 0) or max(cuts)
        if cut <= width // 3:
            cut = width
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    lines.append(rest)
    return lines


def paragraph(line: str, width: int = WIDTH, hang: int = 4) -> list[str]:
    """A long line as lines of at most ``width`` characters, broken only between words
    (a flag or a command longer than a line stays whole, to be copied); the continuation
    lines are indented ``hang`` more than the line's own indent.

    Examples:
        >>> paragraph("  best block_q=256, block_k=128, block_b=1", 24)
        ['  best block_q=256,', '      block_k=128,', '      block_b=1']
    """
    if len(line) <= width:
        return [line]
    own = len(line) - len(line.lstrip())
    return textwrap.wrap(
        line.lstrip(),
        width,
        initial_indent=" " * own,
        subsequent_indent=" " * (own + hang),
        break_long_words=False,
        break_on_hyphens=False,
    )


def _widths(
    header: Sequence[str], rows: Sequence[Sequence[str]], width: int, fixed: Collection[int]
) -> list[int]:
    """Each column's width: its longest cell's, the widest text columns narrowed until
    the table fits ``width`` (none narrower than its header, its longest word up to 20
    characters, or 12)."""
    natural = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    floor = []
    for i, n in enumerate(natural):
        words = (len(w) for r in rows for w in _WORDS.split(r[i]))
        least = max(len(header[i]), min(max(words, default=0), 20), 12)
        floor.append(n if i in fixed else min(n, least))
    widths = list(natural)
    excess = sum(widths) + len(_GAP) * (len(widths) - 1) - width
    while excess > 0:
        room = [(w - f, i) for i, (w, f) in enumerate(zip(widths, floor, strict=True)) if w > f]
        if not room:
            break
        i = max(room, key=lambda r: (widths[r[1]], r[0]))[1]
        widths[i] -= 1
        excess -= 1
    return widths


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int = WIDTH,
    fixed: Collection[int] = (),
) -> str:
    """An aligned text table no wider than ``width`` where it can be: the header, a rule,
    then each row, its long cells wrapped onto continuation lines. Columns in ``fixed``
    (numbers) never wrap."""
    return "\n".join(
        line for block in blocks(header, rows, width=width, fixed=fixed) for line in block
    )


def blocks(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int = WIDTH,
    fixed: Collection[int] = (),
) -> list[list[str]]:
    """:func:`table`'s lines, grouped: the header with its rule, then each row's lines."""
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = _widths(tuple(header), rows, width, set(fixed))

    def lines_of(row: Sequence[str]) -> list[str]:
        cells = [wrap(c, w) for c, w in zip(row, widths, strict=True)]
        height = max(len(c) for c in cells)
        return [
            _GAP.join(
                (c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths, strict=True)
            ).rstrip()
            for k in range(height)
        ]

    head = [*lines_of(header), _GAP.join("-" * w for w in widths)]
    return [head, *(lines_of(row) for row in rows)]
