"""`jaxtune cache check -- python serve.py`: records a program's kernel calls and exits 1
listing misses and stale entries, 0 when every call has a current entry.

Covers docs/teams.md, "CI that fails on untuned or stale kernels", and docs/cache.md,
"jaxtune cache"."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from test_code_digest import KERNEL, _package

pytestmark = [pytest.mark.child]

ROOT = pathlib.Path(__file__).resolve().parent.parent

SERVE = textwrap.dedent(
    """
    import jax, jax.numpy as jnp
    from h33pkg.kern import scale

    @jax.jit
    def step(x):
        return scale(x).sum() + scale(x[:8]).sum()

    if __name__ == "__main__":
        print("served", float(step(jnp.ones(16))))
    """
)


def test_check_lists_misses_then_passes_then_lists_stale_entries(tmp_path):
    work = tmp_path / "work"
    pkg = _package(work)
    (work / "serve.py").write_text(SERVE)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(work)]),
        "JAXTUNE_ISOLATION": "inline",
        # A strict setting must not stop the recording: check lists every miss.
        "JAXTUNE_ON_MISS": "error",
    }

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
            cwd=work,
        )

    def check() -> tuple[int, dict]:
        done = run("-m", "jaxtune", "cache", "check", "--json", "--", "python", "serve.py")
        return done.returncode, json.loads(done.stdout)

    code, doc = check()
    assert code == 1
    _documented_keys(doc)
    assert doc["recorded"] == 2 and doc["stale"] == [] and doc["current"] == []
    assert sorted(m["key"] for m in doc["missing"]) == ["f32[16]", "f32[8]"]
    assert {m["kernel"] for m in doc["missing"]} == {"h33.scale"}

    text = run("-m", "jaxtune", "cache", "check", "--", "python", "serve.py")
    assert text.returncode == 1
    assert "missing h33.scale f32[16]" in text.stdout
    assert "tune them: jaxtune tune -- python serve.py" in text.stdout

    tuned = run("serve.py", JAXTUNE_MODE="tune")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    code, doc = check()
    assert code == 0, doc
    assert len(doc["current"]) == 2 and doc["missing"] == [] and doc["stale"] == []

    (pkg / "kern.py").write_text(KERNEL.replace("* factor\n", "* factor + 1.0\n"))
    code, doc = check()
    assert code == 1
    assert sorted((m["key"], m["reason"]) for m in doc["stale"]) == [
        ("f32[16]", "code changed"),
        ("f32[8]", "code changed"),
    ]


def _documented_keys(doc: dict) -> None:
    """docs/cache.md names every key of check's JSON object and of its call objects."""
    text = (ROOT / "docs" / "cache.md").read_text()
    row = re.search(r"^\| `jaxtune cache check` \| (.*) \|$", text, re.M)
    assert row is not None
    assert set(re.findall(r"`(\w+)`:", re.sub(r"\([^()]*\)", "", row.group(1)))) == set(doc)
    start = "A **call object** (`check`) has:"
    sentence = re.split(r"\.\s", re.sub(r"\([^()]*\)", "", text[text.index(start) + len(start) :]))[
        0
    ]
    documented = set(re.findall(r"`(\w+)`", sentence))
    assert documented == set(doc["missing"][0]) | {"reason"}


def test_check_without_a_command_is_refused(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "jaxtune", "cache", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode != 0
    assert "jaxtune cache: it needs a command to run: jaxtune cache check --" in done.stderr
