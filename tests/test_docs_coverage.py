"""Every docs page has tests that say so: a test module whose docstring cites the page
(``docs/<page>.md``) and, after it, the sections it covers (``docs/cache.md, "Shared
store"``). A cited section must be a heading of that page, so a renamed section or page
fails here rather than leaving a test that points at nothing.

Covers docs/development.md, "Test tiers" (tests map to the promises the docs make).
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(p.stem for p in DOCS.glob("*.md"))

#: ``docs/page.md`` and the sections quoted right after it: ``docs/x.md, "A", "B" and "C"``.
CITATION = re.compile(r'docs/([\w-]+)\.md((?:(?:,|,? and)\s+"[^"]+")*)')
SECTION = re.compile(r'"([^"]+)"')


def _plain(text: str) -> str:
    """A heading or a cited section as compared: no backticks, one space between words."""
    return " ".join(text.replace("`", "").split())


def _docstrings() -> dict[str, str]:
    found = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(), str(path)))
        if doc:
            found[str(path.relative_to(ROOT))] = doc
    return found


DOCSTRINGS = _docstrings()


def _citations() -> list[tuple[str, str, list[str]]]:
    """``(test module, page, sections)`` for each page a module docstring cites."""
    out = []
    for module, doc in DOCSTRINGS.items():
        for match in CITATION.finditer(doc):
            out.append((module, match[1], [_plain(s) for s in SECTION.findall(match[2])]))
    return out


CITATIONS = _citations()


def _headings(page: str) -> set[str]:
    text = (DOCS / f"{page}.md").read_text()
    # Headings outside code blocks (a ``# comment`` in a snippet is no heading).
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {_plain(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES)
def test_every_docs_page_has_a_test_module_citing_it(page):
    citing = sorted({module for module, cited, _ in CITATIONS if cited == page})
    assert citing, (
        f"no test module's docstring cites docs/{page}.md: say in the docstring of the module "
        f"that checks its promises which page and sections it covers (docs/{page}.md, "
        '"Section"), or add tests/test_docs_<page>.py'
    )


@pytest.mark.parametrize(
    ("module", "page", "sections"), CITATIONS, ids=[f"{m}:{p}" for m, p, _ in CITATIONS]
)
def test_every_cited_page_and_section_exists(module, page, sections):
    assert page in PAGES, f"{module} cites docs/{page}.md, which does not exist"
    missing = [s for s in sections if s not in _headings(page)]
    assert not missing, f"{module} cites sections of docs/{page}.md it does not have: {missing}"


def test_the_citation_pattern_reads_sections():
    doc = 'Covers docs/cache.md, "The `cache`", "Stale  entries" and "Locks" (not "this").'
    (match,) = CITATION.finditer(doc)
    assert match[1] == "cache"
    assert [_plain(s) for s in SECTION.findall(match[2])] == ["The cache", "Stale entries", "Locks"]
