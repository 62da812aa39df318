"""Every code block of docs/ runs as a reader would run it, and what a page shows it printing
is what it prints.

Sybil parses the pages (fenced blocks and the ``<!-- docs: ... -->`` comments before them,
which mkdocs does not render); each page then runs in a fresh directory of its own, its
blocks in order: a ```python block as a script in a fresh process (a sweep's child
re-imports the script, as it does the reader's), a ```console block's ``$`` commands and a
```bash block's lines in ``bash``, with the page's own user cache. The lines a ```python
block shows after ``# ->`` are the block's output, and a console block's lines after a ``$``
command are that command's, compared with ``...`` matching anything, unless the page says
the output varies. The directives (several separated by ``;``):

- ``not-run REASON``: the block does not run here, and why (one of :data:`NOT_RUN`);
- ``tpu``: runs in the TPU tier only (the ``tpu`` marker), skipped elsewhere with the reason;
- ``files NAME[=DEST] ...``: copies fixtures of ``tests/docs_fixtures/`` into the page's
  directory first (a program the page runs, such as ``train.py``);
- ``setup NAME.py``: runs that fixture script in the page's directory first;
- ``prelude NAME.py``: a fragment runs after that fixture's code (the names it leaves to you);
- ``write PATH``: the block is the file PATH (``mylib/__init__.py``), written, not run;
- ``output-varies``: a console block's output is an example (timings, winners).

Covers docs/development.md, "Docs that run".
"""

from __future__ import annotations

import dataclasses
import doctest
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest
from sybil import Document, Example, Region, Sybil
from sybil.example import SybilFailure
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FIXTURES = ROOT / "tests" / "docs_fixtures"
#: Blocks in these languages run; the others (text, yaml, plain) show output or files.
RUNNABLE = ("python", "console", "bash")
#: Why a block may not run here: a page says which.
NOT_RUN = (
    "installs packages",
    "runs the test suite",
    "nox -s demo and nox -s browser run these",
    "tests/test_docs_getting_started.py checks this output",
    "needs the reader's own program and configs: tests/test_cache_check.py runs this recipe",
    "needs the library's own benchmark: tests/test_cache_cli.py runs export --dir",
)
#: Pages another issue is rewriting: their blocks get directives there. Listed, never run.
PENDING: dict[str, str] = {}
#: How long one command of a page may take.
TIMEOUT_S = 600
#: A console block's commands and the output each shows.
_COMMAND = re.compile(r"^\$ (?P<cmd>.*)$")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Block:
    """One runnable fenced block and what its directives say."""

    page: str
    line: int
    language: str
    source: str
    not_run: str = ""
    tpu: bool = False
    files: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    prelude: str = ""
    write: str = ""
    output_varies: bool = False

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def _directives(page: str, line: int, text: str) -> dict[str, object]:
    """The fields of :class:`Block` that a ``docs:`` comment sets."""
    found: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        word, _, rest = item.partition(" ")
        rest = rest.strip()
        if word == "not-run":
            if rest not in NOT_RUN:
                raise ValueError(f"{page}:{line}: not-run needs one of {NOT_RUN}, got {rest!r}")
            found["not_run"] = rest
        elif word == "tpu":
            found["tpu"] = True
        elif word == "output-varies":
            found["output_varies"] = True
        elif word in ("files", "setup"):
            names = tuple(rest.split())
            for name in names:
                if not (FIXTURES / name.split("=")[0]).exists():
                    raise ValueError(f"{page}:{line}: no fixture tests/docs_fixtures/{name}")
            found[word] = names
        elif word in ("prelude", "write"):
            found[word] = rest
        else:
            raise ValueError(f"{page}:{line}: unknown docs directive {word!r}")
    return found


class PageParser:
    """A Sybil parser: each runnable fenced block, with the ``docs:`` comment right above it."""

    fences = FencedCodeBlockLexer(language=r"\w+")
    comments = DirectiveInHTMLCommentLexer(directive="docs")

    def __call__(self, document: Document) -> list[Region]:
        page = pathlib.Path(document.path).name
        # Each comment by where it ends, so that the block right below it finds it.
        said = {
            document.text.index("-->", r.end) + 3: r.lexemes["arguments"]
            for r in self.comments(document)
        }
        regions = []
        for region in self.fences(document):
            language = region.lexemes["language"]
            if language not in RUNNABLE:
                continue
            line = document.text.count("\n", 0, region.start) + 1
            fields = _directives(
                page, line, said.get(len(document.text[: region.start].rstrip()), "")
            )
            if page in PENDING:
                fields = {"not_run": PENDING[page]}
            block = Block(
                page=page,
                line=line,
                language=language,
                source=str(region.lexemes["source"]),
                **fields,
            )
            regions.append(Region(region.start, region.end, block, _evaluate))
        return regions


@dataclasses.dataclass(kw_only=True, slots=True)
class Page:
    """Where a page's blocks run: its directory, environment and tier."""

    folder: pathlib.Path
    tier: str  # "cpu" or "tpu"
    ran: list[str] = dataclasses.field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JAXTUNE_")}
        for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):
            env.pop(name, None)
        # `jaxtune` and `python` are this Python's, as in the reader's virtual environment.
        env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["JAXTUNE_CACHE_DIR"] = str(self.folder / "cache")
        return env

    def sh(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.folder,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )


def _same(want: str, got: str) -> bool:
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    return doctest.OutputChecker().check_output(want.strip() + "\n", got.strip() + "\n", flags)


def _failed(block: Block, what: str, done: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{block.name}: {what} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-3000:]}"
    )


def _prepare(block: Block, page: Page) -> str | None:
    for name in block.files:
        source, _, dest = name.partition("=")
        target = page.folder / (dest or source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if (FIXTURES / source).is_dir():
            shutil.copytree(FIXTURES / source, target, dirs_exist_ok=True)
        else:
            shutil.copy(FIXTURES / source, target)
    for name in block.setup:
        done = page.sh(f"python {FIXTURES / name}")
        if done.returncode:
            return _failed(block, f"the setup {name}", done)
    return None


def _run_python(block: Block, page: Page) -> str | None:
    if block.write:
        target = page.folder / block.write
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.source)
        return None
    code = block.source
    if block.prelude:
        code = (FIXTURES / block.prelude).read_text() + "\n" + code
    script = page.folder / f"block_{block.line}.py"
    script.write_text(code)
    done = page.sh(f"python {script.name}")
    if done.returncode or "Traceback" in done.stderr:
        return _failed(block, "the block", done)
    shown = [
        line.strip()[5:] for line in block.source.splitlines() if line.strip().startswith("# -> ")
    ]
    if shown and not _same("\n".join(shown), done.stdout):
        return (
            f"{block.name}: the page shows\n"
            + "\n".join(shown)
            + f"\nbut it printed\n{done.stdout}"
        )
    return None


def _commands(block: Block) -> list[tuple[str, str]]:
    """(command, the output the page shows for it) in order."""
    if block.language == "bash":
        lines = [line.strip() for line in block.source.splitlines()]
        return [(line, "") for line in lines if line and not line.startswith("#")]
    found: list[tuple[str, list[str]]] = []
    for line in block.source.splitlines():
        m = _COMMAND.match(line)
        if m:
            found.append((m["cmd"], []))
        elif found:
            found[-1][1].append(line)
    return [(cmd, "\n".join(out)) for cmd, out in found]


def _run_shell(block: Block, page: Page) -> str | None:
    for command, shown in _commands(block):
        done = page.sh(command)
        if done.returncode:
            return _failed(block, f"`{command}`", done)
        if shown.strip() and not block.output_varies and not _same(shown, done.stdout):
            return f"{block.name}: `{command}` shows\n{shown}\nbut printed\n{done.stdout}"
    return None


def _evaluate(example: Example) -> str | None:
    block: Block = example.parsed
    page: Page = example.namespace["page"]
    if block.not_run or block.tpu != (page.tier == "tpu"):
        return None
    start = time.perf_counter()
    failed = _prepare(block, page)
    if failed is None:
        run = _run_python if block.language == "python" else _run_shell
        failed = run(block, page)
    page.ran.append(f"{block.name} ran in {time.perf_counter() - start:.1f} s")
    return failed


def _has_tpu() -> bool:
    """Whether JAX's backend here is a TPU, asked in a fresh process as tests/tpu/ asks it
    (asking in this one would hold the chip the blocks' processes need)."""
    done = subprocess.run(
        [sys.executable, "-c", "import jax; print(jax.default_backend())"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return done.returncode == 0 and done.stdout.split()[-1:] == ["tpu"]


SYBIL = Sybil(parsers=[PageParser()], patterns=["*.md"], path="../docs")


def _blocks(page: pathlib.Path) -> list[Block]:
    return [example.parsed for example in SYBIL.parse(page).examples()]


PAGES = sorted(DOCS.glob("*.md"))
BLOCKS = [b for page in PAGES for b in _blocks(page)]


def _runs_on_cpu(page: pathlib.Path) -> bool:
    return any(not b.not_run and not b.tpu for b in BLOCKS if b.page == page.name)


def test_every_block_runs_or_says_why_not():
    """Parsing every page here, without running anything: each runnable block runs on CPU,
    in the TPU tier, or names its reason; fragments name the fixture that completes them."""
    counts = {"cpu": 0, "tpu": 0, "not run": 0}
    for b in BLOCKS:
        counts["not run" if b.not_run else "tpu" if b.tpu else "cpu"] += 1
        if b.language == "python" and b.source.startswith("# fragment:") and not b.not_run:
            assert b.prelude or b.write, f"{b.name}: a fragment runs with a prelude fixture"
        if b.language == "console" and not b.not_run:
            assert _commands(b), f"{b.name}: a console block without `$ ` commands is output"
    assert counts["cpu"] >= 30, counts
    assert counts["not run"] <= 16, [(b.name, b.not_run) for b in BLOCKS if b.not_run]


@pytest.mark.child
@pytest.mark.slow
@pytest.mark.parametrize("page", [p.name for p in PAGES if _runs_on_cpu(p)])
def test_page_runs_as_shown(page, tmp_path):
    document = SYBIL.parse(DOCS / page)
    document.namespace["page"] = state = Page(folder=tmp_path, tier="cpu")
    for example in document.examples():
        example.evaluate()
    assert state.ran
    print("\n".join(state.ran))  # pytest -rP shows each block's time


TPU_BLOCKS = [b for b in BLOCKS if b.tpu and not b.not_run]


@pytest.mark.tpu
@pytest.mark.child
@pytest.mark.parametrize("name", [b.name for b in TPU_BLOCKS] or ["none"])
def test_tpu_block_runs_on_a_tpu(name, tmp_path):
    if name == "none":
        pytest.skip(
            "no block of docs/ is marked `tpu`: every block runs on the CPU "
            "(test_page_runs_as_shown), none is left for a chip"
        )
    if not _has_tpu():
        pytest.skip(
            f"needs a TPU chip: {name} is marked `tpu` in its page, as it shows what only a "
            "chip does; JAX's backend here is not a TPU"
        )
    page, _, line = name.partition(":")
    document = SYBIL.parse(DOCS / page)
    document.namespace["page"] = Page(folder=tmp_path, tier="tpu")
    (example,) = [e for e in document.examples() if e.parsed.line == int(line)]
    example.evaluate()


@pytest.mark.child
@pytest.mark.parametrize(
    ("block", "says"),
    [
        ("```python\nprint(1 + 1)\n# -> 3\n```", "the page shows\n3\nbut it printed\n2"),
        ("```python\nraise SystemExit(4)\n```", "the block exited 4"),
        ("```console\n$ echo 2\n3\n```", "`echo 2` shows\n3\nbut printed\n2"),
        ("```bash\ntrue\nfalse  # the second line\n```", "`false  # the second line` exited 1"),
    ],
)
def test_a_block_that_breaks_fails_its_page(block, says, tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        f"# A page\n\n<!-- docs: output-varies -->\n```console\n$ echo 1\n0\n```\n\n{block}\n"
    )
    document = SYBIL.parse(page)
    document.namespace["page"] = Page(folder=tmp_path, tier="cpu")
    first, second = document.examples()
    first.evaluate()  # its output varies, as the page says
    with pytest.raises(SybilFailure, match=re.escape(says)):
        second.evaluate()
