from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

import jaxtune

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_public_name_has_a_docstring_and_a_docs_page():
    docs = "\n".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    for name in jaxtune.__all__:
        if name == "__version__":
            continue
        assert getattr(jaxtune, name).__doc__, f"{name} has no docstring"
        assert name in docs, f"{name} is not mentioned under docs/"
    for name in jaxtune.flags.__all__:
        assert name in docs or name.isupper(), f"flags.{name} is not documented"


def test_readme_says_how_to_install_from_a_checkout():
    readme = (ROOT / "README.md").read_text()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "not on the package index yet" in install
    checkout = install.index("pip install -e .")
    published = install.index("pip install jaxtune ")
    assert checkout < published  # what works today comes first
    assert "pip install -e '.[plots]'" in install and "'jaxtune[plots]'" in install


@pytest.mark.child
@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "examples").glob("*.py")))
def test_example_scripts_run(script, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip()


@pytest.mark.slow
def test_demo_tunes_and_uses_the_examples(cli):
    proc = cli("demo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "jaxtune.examples.chunked_logsumexp" in proc.stdout
    assert "jaxtune.examples.pallas_matmul" in proc.stdout
    assert "the jitted step now runs jaxtune.examples.chunked_logsumexp" in proc.stdout
    assert "profiling the tuned step" in proc.stdout
    assert "jaxtune_example_matmul" in proc.stdout.split("profiling the tuned step")[1]
    profiled = proc.stdout.split("profiling the tuned step")[1]
    assert "kernels (top" in profiled and "XLA ops (top" in profiled
    assert "--html jaxtune-report.html" in profiled and "tune --from-profile" in profiled
