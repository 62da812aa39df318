"""Every ```python snippet under docs/ runs, as written, in a fresh process.

A snippet that only shows the shape of a call (its first line says ``# fragment: ...``
and what the reader supplies) is listed, not run.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```$", re.S | re.M)


def _snippets() -> list[tuple[str, str]]:
    found = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for i, m in enumerate(_BLOCK.finditer(page.read_text())):
            found.append((f"{page.name}#{i}", m["code"]))
    return found


SNIPPETS = _snippets()
RUNNABLE = [(n, c) for n, c in SNIPPETS if not c.startswith("# fragment:")]


def test_fragments_are_few_and_say_what_they_need():
    fragments = [n for n, c in SNIPPETS if c.startswith("# fragment:")]
    assert len(fragments) <= 6, fragments
    assert len(RUNNABLE) >= 8


@pytest.mark.child
@pytest.mark.slow
@pytest.mark.parametrize(("name", "code"), RUNNABLE, ids=[n for n, _ in RUNNABLE])
def test_docs_snippet_runs_in_a_fresh_process(name, code, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAXTUNE_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
