"""Profiling JAX's bundled Pallas TPU kernels on CPU in interpret mode, in the default
(child) isolation: one row per kernel, named after it, called once per iteration."""

from __future__ import annotations

import pathlib

import pytest
from jax.experimental.pallas import tpu as pltpu

import jaxtune
from jaxtune._tuning.sweep import runner as _runner

from .kernels import STEPS

pytestmark = pytest.mark.slow

ITERS = 2


@pytest.mark.child
@pytest.mark.parametrize("name", sorted(STEPS))
def test_profile_rows_are_named_after_the_kernel_and_count_iterations(name, tmp_path):
    step, make_args = STEPS[name]
    args = make_args()
    assert isinstance(_runner.default_runner(), _runner.ProcessRunner)
    with pltpu.force_tpu_interpret_mode():
        expected = {s.name for s in jaxtune.locate(step, *args) if s.kind == "pallas"}
        p = jaxtune.profile(step, *args, iters=ITERS, warmup=2, logdir=str(tmp_path))
    assert len(expected) == 1, expected
    rows = {k.name: k for k in p.kernels}
    assert set(rows) == expected, p.table()
    (row,) = rows.values()
    assert row.kind == "pallas"
    assert row.calls == ITERS and row.calls_exact
    assert row.share > 0
    assert not [o for o in p.ops if "io_callback" in o.name], p.table()
    assert row.name in p.table()


# -- one row per kernel, FLOPs once, whatever the tiling (docs/profiling.md, "Attribution") -

SPANNING = {"real.flash_attention", "real.matmul_whole"}


def _rows(profile):
    return {(k.kernel_id, k.name): k for k in profile.kernels}


def _one_row_each(profile, iters):
    rows = _rows(profile)
    assert {i for i, _ in rows} == SPANNING, profile.table()
    assert len(rows) == 2, profile.table()
    for row in rows.values():
        assert row.kind == "pallas" and row.calls == iters, profile.table()
    # Only flash attention has FLOPs (its cost estimate); no other row carries them again.
    flash = next(r for r in rows.values() if r.kernel_id == "real.flash_attention")
    total = sum(r.flops or 0.0 for r in (*profile.kernels, *profile.ops))
    if flash.flops:
        assert total == flash.flops, profile.table()
    return rows


@pytest.mark.child
def test_spanning_tiles_give_one_row_per_kernel_in_profile_and_from_trace(tmp_path):
    from .kernels import spanning_args, spanning_step

    args = spanning_args()
    with pltpu.force_tpu_interpret_mode():
        p = jaxtune.profile(spanning_step, *args, iters=ITERS, warmup=1, logdir=str(tmp_path))
    rows = _one_row_each(p, ITERS)
    flash = next(r for r in rows.values() if r.kernel_id == "real.flash_attention")
    assert flash.flops_source == "cost_estimate" and flash.flops
    again = jaxtune.Profile.from_trace(p.logdir)
    assert _rows(again).keys() == rows.keys()
    for key, row in _rows(again).items():
        assert (row.calls, row.total_us, row.flops) == (
            rows[key].calls,
            rows[key].total_us,
            rows[key].flops,
        )
    # The page's table groups the kernels as the text table does: a head row per
    # autotuned kernel (its id), its Pallas kernels beneath it by name; the chart, which
    # draws each kernel alone, names it "<id>:<name>".
    page = p.to_html().replace("<wbr>", "")  # break hints inside long names
    for kernel_id, name in rows:
        assert f">{kernel_id}<" in page and name in page, (kernel_id, name)
    path = tmp_path / "report.html"
    path.write_text(page)
    labels = _browser_labels(path)
    if labels is not None:  # a headless Chromium read the page as a reader sees it
        cells, chart_text = labels
        shown = {c.strip() for c in cells}
        assert {i for i, _ in rows} | {n for _, n in rows} <= shown, cells
        for kernel_id, name in rows:
            assert f"{kernel_id}:{name}" in chart_text, chart_text


def _browser_labels(page):
    """``(first cells of the kernel table, text of the share chart)`` as headless Chromium
    renders ``page``; ``None`` without Chromium (``apt-get install -y chromium``)."""
    import html.parser
    import shutil
    import subprocess
    import tempfile

    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout

    class Reader(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.table = self.chart = None
            self.cells, self.texts, self.first = [], [], False
            self.in_text = False

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "table":
                self.table = a.get("data-table") or a.get("class") or a.get("id")
            if tag == "figure":
                self.chart = a.get("data-chart")
            if tag == "tr":
                self.first = True
            if tag == "td" and self.first:
                self.cells.append("")
            self.in_text = tag == "text" and self.chart == "share"

        def handle_endtag(self, tag):
            if tag == "text":
                self.in_text = False
            if tag == "td":
                self.first = False
            if tag == "figure":
                self.chart = None

        def handle_data(self, data):
            if self.first and self.cells and "kernels" in str(self.table):
                self.cells[-1] += data
            if self.in_text:
                self.texts.append(data.strip())

    reader = Reader()
    reader.feed(dom)
    return [c for c in reader.cells if c], "".join(reader.texts)


def test_spanning_tiles_give_one_row_per_kernel_in_a_plain_jax_profiler_trace(tmp_path):
    import jax

    from .kernels import spanning_args, spanning_step

    args = spanning_args()
    step = jax.jit(spanning_step)
    with pltpu.force_tpu_interpret_mode():
        jax.block_until_ready(step(*args))
        with jax.profiler.trace(str(tmp_path)):
            for _ in range(ITERS):
                jax.block_until_ready(step(*args))
    _one_row_each(jaxtune.Profile.from_trace(tmp_path), ITERS)


# -- a training step's report (docs/profiling.md, "Attribution"; docs/reports.md) ---------


def _trace_facts(logdir):
    """From the trace itself: each (module, instruction)'s events, the events of
    instructions without metadata, each instruction's name stack, and how many Python
    tracer events (``$file:line function``) the host plane holds."""
    import collections

    from jaxtune._core.xspace import xplane
    from jaxtune._profiling import events, recover

    space = xplane.load(logdir)
    plane = space.plane("/host:CPU")
    modules, _ = recover.read_programs(space, events.program_ids(plane))
    stacks = {(m.name, n): i.op_name for m in modules.values() for n, i in m.instructions.items()}
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    python = 0
    for line in plane.lines:
        for ev in plane.events(line):
            stats = xplane.stats_of(ev.stats, plane.stat_names)
            if "hlo_op" in stats:
                counts[stats["hlo_module"], stats["hlo_op"]] += 1
            python += plane.metadata(ev.metadata_id).name.startswith("$")
    unnamed = sum(n for key, n in counts.items() if not stacks.get(key))
    return counts, unnamed, stacks, python


def _line_of(path, line):
    return pathlib.Path(path).read_text().splitlines()[int(line) - 1]


@pytest.mark.child
def test_a_training_step_reads_one_row_per_instruction_with_kernel_internals_claimed(tmp_path):
    import profile_models
    from profile_models import attention_args, attention_step

    with pltpu.force_tpu_interpret_mode():
        p = jaxtune.profile(
            attention_step, *attention_args(), iters=ITERS, warmup=2, logdir=str(tmp_path)
        )
    flash = {"_flash_attention_kernel", "_flash_attention_dkv_kernel", "_flash_attention_dq_kernel"}
    assert {k.name for k in p.kernels} == flash, p.table()
    assert all(k.calls == ITERS and k.calls_exact for k in p.kernels), p.table()
    counts, unnamed, stacks, python = _trace_facts(p.logdir)

    # One row per instruction of each program; its calls are its events.
    assert len({(o.program, o.name) for o in p.ops}) == len(p.ops)
    for o in p.ops:
        assert (o.hlo_op, o.calls) == (o.name, counts[o.program, o.name]), o
        assert o.name_stack == stacks[o.program, o.name], o
    # The two projections of the forward pass: two instructions of one scope, two rows.
    forward = [g for g in p.scopes if g.name_stack.endswith("/jvp()/dot_general")]
    assert forward and forward[0].ops >= 2, p.scopes
    assert sum(g.ops for g in p.scopes) == len(p.ops)

    # XLA adds copies without metadata for the kernels' loops (their initial values, their
    # bodies); they ran (the trace holds their events) and every one is a kernel's.
    assert unnamed > 0
    assert [o.name for o in p.ops if not o.name_stack] == [], p.table()

    # Each kernel's own pallas_call line, and the program's call of flash attention.
    sources = {k.name: k.source for k in p.kernels}
    assert len(set(sources.values())) == 3, sources
    for source in sources.values():
        file, _, line = source.rpartition(":")
        assert file.endswith("flash_attention.py") and "pallas_call" in _line_of(file, line)
    for k in p.kernels:
        file, _, line = k.call_site.rpartition(":")
        assert file == profile_models.__file__ and _line_of(file, line).endswith("# CALL")

    # The capture leaves JAX's Python tracer off: no Python events in the trace.
    assert python == 0

    again = jaxtune.Profile.from_trace(p.logdir)
    assert {(o.program, o.name, o.calls) for o in again.ops} == {
        (o.program, o.name, o.calls) for o in p.ops
    }
