"""The benchmarks page names the script behind each of its figures, and that script is
there to rerun them.

Covers docs/benchmarks.md: each section's script (``bench/bench_*.py`` in its heading)
exists, runs as a script and says in its docstring how to run it. The figures themselves
are measured by ``nox -s bench``, never asserted in tests (no speed assertions).
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "benchmarks.md").read_text()
HEADED = re.findall(r"^##+ .*\(`(bench/[\w.]+\.py)`\)", PAGE, re.M)


def test_each_section_names_its_script():
    sections = re.findall(r"^## ", PAGE, re.M)
    assert HEADED and len(HEADED) == len(sections)


@pytest.mark.parametrize("script", HEADED)
def test_a_named_script_exists_runs_as_a_script_and_says_how(script):
    path = ROOT / script
    assert path.is_file(), f"docs/benchmarks.md names {script}, which does not exist"
    tree = ast.parse(path.read_text(), script)
    main_guard = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
    ]
    assert main_guard, f"{script} has no `if __name__ == '__main__':` to run it"
    doc = ast.get_docstring(tree) or ""
    assert f"python {script}" in doc, f"{script}'s docstring does not say how to run it"
