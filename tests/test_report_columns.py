"""docs/profiling.md, "The tables", and docs/reports.md, "Text tables": the text table and the
HTML page show each XLA op's name stack and program, the scope view as a section of its own, and
each kernel's ``pallas_call`` line and call site."""

from __future__ import annotations

import dataclasses
import re

from test_op_rows import STEP_RUNS, trace

from jaxtune._core.vocabulary import CaptureInfo, PallasKernel
from jaxtune._profiling import report as _report
from jaxtune._profiling.attribution import scopes
from jaxtune._profiling.table import shorten_left

#: A name stack as a Flax model writes it: longer than any column.
LONG = (
    "jit(train_step)/jit(main)/jvp(Transformer)/layers/3/MultiHeadAttention/"
    "attention_kernel/dot_general"
)


def profile(tmp_path):
    info = CaptureInfo(
        platform="cpu",
        kernels=(
            PallasKernel(
                name="_attn_kernel",
                scope=("jit(step)", "jit(attn)"),
                per_step=1,
                source="/app/kern.py:40",
                call_site="/app/train.py:9",
            ),
        ),
        sources={"_attn_kernel": "/app/kern.py:40"},
    )
    return _report.report_from_trace(trace(tmp_path), info=info, iterations=STEP_RUNS)


def long_stacked(p):
    """``p`` with its heaviest op's name stack made :data:`LONG`."""
    ops = (dataclasses.replace(p.ops[0], name_stack=LONG), *p.ops[1:])
    return dataclasses.replace(p, ops=ops, scopes=tuple(scopes(ops)))


def _section(text, title):
    """The lines of the text table's section whose title starts with ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]


def test_the_text_table_shows_name_stacks_programs_scopes_and_sites(tmp_path):
    p = profile(tmp_path)
    text = p.table()
    assert max(len(line) for line in text.splitlines()) <= 120, text
    ops = _section(text, "XLA ops (top 10 of 10")
    assert ops[1].split()[-2:] == ["program", "name"] or ops[1].rstrip().endswith(
        "program   name stack"
    )
    rows = {tuple(line.split()[i] for i in (0, -2, -1)) for line in ops[3:]}
    assert ("dot.6", "jit_step", "jit(step)/dot_general") in rows
    assert ("dot.6", "jit_eval", "jit(eval)/dot_general") in rows
    assert ("add.15", "jit_step", "jit(step)/while/body/add") in rows
    assert ("copy.9", "jit_step", "-") in rows
    scopes = _section(text, "XLA ops by scope (top 6 of 6")
    dots = next(line for line in scopes if line.startswith("jit(step)/dot_general"))
    assert dots.split()[1:4] == ["jit_step", "3", str(3 * STEP_RUNS)]
    assert dots.endswith("dot.6, dot.7, fusion.8")
    assert any(line.startswith("(none: ops XLA added)") for line in scopes)
    sites = _section(text, "kernel sources")
    assert sites[3].split() == ["_attn_kernel", "/app/kern.py:40", "/app/train.py:9"]


def test_a_long_name_stack_is_cut_from_the_left_within_120_columns(tmp_path):
    p = long_stacked(profile(tmp_path))
    text = p.table()
    assert max(len(line) for line in text.splitlines()) <= 120, text
    (row,) = [line for line in _section(text, "XLA ops") if line.startswith("while.12 ")]
    shown = row.split()[-1]
    assert shown.startswith("…") and LONG.endswith(shown[1:]) and len(shown) >= 24
    # The scope view shows the whole stack (wrapped), it is what its rows are.
    scopes = "".join(x.split()[0] for x in _section(text, "XLA ops by scope")[3:6])
    assert LONG in scopes


def test_the_scope_view_is_one_line_where_each_scope_is_one_op(tmp_path):
    p = profile(tmp_path)
    ones = dataclasses.replace(p, scopes=tuple(g for g in p.scopes if g.ops == 1))
    text = ones.table()
    assert "XLA ops by scope (" not in text
    (line,) = [x for x in text.splitlines() if x.startswith("XLA ops by scope")]
    assert "Profile.scopes" in line and len(line) <= 120
    cut = p.table(top=2)
    assert "XLA ops by scope (top 2 of 6" in cut
    assert 'all 6 scopes: Profile.scopes, "scopes" in --json' in cut


def test_shorten_left_keeps_the_last_frames():
    assert shorten_left("a/b", 10) == "a/b"
    assert shorten_left(LONG, 30) == "…/attention_kernel/dot_general"
    assert len(shorten_left(LONG, 30)) <= 30
    assert shorten_left("x" * 40, 10) == "…" + "x" * 9


def p_row(ops, stack):
    """Whether the ops table shows ``stack`` whole, titled with itself."""
    return f'<td class="cut" title="{stack}"><span>{stack}</span></td>' in ops


def test_the_page_shows_name_stacks_scopes_and_sites(tmp_path):
    page = long_stacked(profile(tmp_path)).to_html()
    kernels = page[page.index('data-table="kernels"') :]
    kernels = kernels[: kernels.index("</table>")]
    assert ">source (pallas_call)</th>" in kernels and ">call site</th>" in kernels
    assert ">/app/kern.py:40</td>" in kernels and ">/app/train.py:9</td>" in kernels
    ops = page[page.index('data-table="ops"') :]
    ops = ops[: ops.index("</table>")]
    assert "<th>name stack</th>" in ops and ">program</th>" in ops
    assert f'<td class="cut" title="{LONG}"><span>…/' in ops
    assert p_row(ops, "jit(eval)/dot_general")
    assert ">jit_eval</td>" in ops
    assert "<h2>XLA ops by scope (top 6 of 6)</h2>" in page
    scopes = page[page.index('data-table="scopes"') :]
    scopes = scopes[: scopes.index("</table>")]
    row = re.search(r"<tr><td[^>]*>jit\(step\)/dot_general</td>(.*?)</tr>", scopes)
    assert row, scopes
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    assert cells[:3] == ["jit_step", "3", str(3 * STEP_RUNS)]
    assert cells[-1] == "dot.6, dot.7, fusion.8"
    assert "td.cut span" in page and "-webkit-line-clamp: 2" in page
