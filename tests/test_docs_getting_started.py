"""What the first pages a newcomer reads promise: the install line's requirements, the
`jaxtune doctor` rows of a first run, and the index's table of pages.

Covers docs/getting-started.md, "Install" (Python >= 3.11, JAX >= 0.10.2, the ``tpu`` and
``cuda`` extras) and "First run" (``jaxtune doctor`` prints the rows shown, and exits 0 on
a healthy machine), and docs/index.md (every page its table links exists and is built).
"""

from __future__ import annotations

import pathlib
import re
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _page(name: str) -> str:
    return (DOCS / name).read_text()


def test_the_install_section_states_the_supported_python_and_jax():
    text = _page("getting-started.md")
    python = re.search(r"Python >= (\d+\.\d+) and JAX >= (\d+(?:\.\d+)*)", text)
    assert python is not None, "the page no longer states the minimum Python and JAX"
    project = PYPROJECT["project"]
    assert project["requires-python"] == f">={python[1]}"
    assert f"jax>={python[2]}" in project["dependencies"]


def test_every_extra_the_install_section_names_exists():
    text = _page("getting-started.md")
    extras = set(re.findall(r"pip install 'jaxtune\[(\w+)\]'", text))
    assert extras == {"tpu", "cuda"}
    assert extras <= set(PYPROJECT["project"]["optional-dependencies"])


@pytest.mark.child  # the doctor probes the backend in a child process
def test_a_first_jaxtune_doctor_prints_the_rows_the_page_shows(incli):
    shown = re.search(r"```console\n\$ jaxtune doctor\n(.*?)```", _page("getting-started.md"), re.S)
    assert shown is not None
    rows = [line.split()[0] for line in shown[1].splitlines() if line.startswith("  ")]
    assert rows[-1] == "all" and rows[:-1] == [
        "python",
        "jax",
        "jaxlib",
        "libtpu",
        "backend",
        "cache",
        "xprof",
    ]
    done = incli("doctor")
    assert done.returncode == 0, done.stderr
    got = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert got[: len(rows) - 1] == rows[:-1]
    assert done.stdout.splitlines()[0] == "jaxtune doctor"
    assert "all good" in done.stdout


def test_every_page_the_index_links_exists_and_is_in_the_site():
    links = re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]+)?\)", _page("index.md"))
    assert len(links) >= 10
    nav = (ROOT / "mkdocs.yml").read_text()
    for link in links:
        assert (DOCS / link).is_file(), f"docs/index.md links {link}, which does not exist"
        assert link in nav, f"docs/index.md links {link}, which mkdocs.yml does not build"
