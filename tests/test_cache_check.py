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
from collections.abc import Callable

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


def _python_in(work: pathlib.Path, **env: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run(*args, **more_env)``: ``python ARGS`` in a fresh process in ``work``, which is
    importable, with the sweeps inline."""
    base = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(work)]),
        "JAXTUNE_ISOLATION": "inline",
        **env,
    }

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            env={**base, **extra},
            capture_output=True,
            text=True,
            timeout=300,
            cwd=work,
        )

    return run


def test_check_lists_misses_then_passes_then_lists_stale_entries(tmp_path):
    work = tmp_path / "work"
    pkg = _package(work)
    (work / "serve.py").write_text(SERVE)
    # A strict setting must not stop the recording: check lists every miss.
    run = _python_in(work, JAXTUNE_ON_MISS="error")

    def check() -> tuple[int, dict]:
        done = run("-m", "jaxtune", "cache", "check", "--json", "--", "python", "serve.py")
        return done.returncode, json.loads(done.stdout)

    # The misses as a person reads them (the JSON document is read below, once the
    # program has entries to list: one check run fewer).
    text = run("-m", "jaxtune", "cache", "check", "--", "python", "serve.py")
    assert text.returncode == 1
    assert "recorded 2 autotuned calls: 0 current, 2 missing, 0 stale" in text.stdout
    lines = [line.split()[:3] for line in text.stdout.splitlines()]
    missing = sorted(words for words in lines if words[:1] == ["missing"])
    assert missing == [["missing", "h33.scale", "f32[16]"], ["missing", "h33.scale", "f32[8]"]]
    assert "tune them: jaxtune tune -- python serve.py" in text.stdout

    tuned = run("serve.py", JAXTUNE_MODE="tune")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    code, doc = check()
    assert code == 0, doc
    assert len(doc["current"]) == 2 and doc["missing"] == [] and doc["stale"] == []

    (pkg / "kern.py").write_text(KERNEL.replace("* factor\n", "* factor + 1.0\n"))
    code, doc = check()
    assert code == 1
    _documented_keys(doc, doc["stale"][0])
    assert doc["recorded"] == 2 and doc["missing"] == [] and doc["current"] == []
    assert {m["kernel"] for m in doc["stale"]} == {"h33.scale"}
    assert sorted((m["key"], m["reason"]) for m in doc["stale"]) == [
        ("f32[16]", "code changed"),
        ("f32[8]", "code changed"),
    ]


def _documented_keys(doc: dict, call: dict) -> None:
    """docs/cache.md names every key of check's JSON object and of its call objects (a
    missing or stale ``call``, which has a ``reason`` too)."""
    text = (ROOT / "docs" / "cache.md").read_text()
    row = re.search(r"^\| `jaxtune cache check` \| (.*) \|$", text, re.M)
    assert row is not None
    assert set(re.findall(r"`(\w+)`:", re.sub(r"\([^()]*\)", "", row.group(1)))) == set(doc)
    start = "A **call object** (`check`) has:"
    sentence = re.split(r"\.\s", re.sub(r"\([^()]*\)", "", text[text.index(start) + len(start) :]))[
        0
    ]
    documented = set(re.findall(r"`(\w+)`", sentence))
    assert documented == set(call) | {"reason"}


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


#: A service's kernels: one bucketed by length (three buckets), one in another jitted
#: function that runs from the third request on.
SERVICE_KERNELS = textwrap.dedent(
    """
    import jaxtune

    @jaxtune.autotuned(
        configs={"factor": [1, 2, 3]}, check=False, buckets={"x": {0: [16, 64, 256]}},
        name="h45.prefill",
    )
    def prefill_kernel(x, *, factor):
        return x * factor

    @jaxtune.autotuned(configs={"shift": [0, 1]}, check=False, name="h45.decode")
    def decode_kernel(x, *, shift):
        return x + shift
    """
)

#: A server: requests of lengths in three buckets, then it keeps serving the same lengths
#: until it is stopped (or for SECONDS, when given): only the settle rule can end a
#: recording of it.
SERVICE = textwrap.dedent(
    """
    import sys, time
    import jax, jax.numpy as jnp
    from h45svc.kernels import decode_kernel, prefill_kernel

    @jax.jit
    def prefill(x):
        return prefill_kernel(x).sum()

    @jax.jit
    def decode(x):
        return decode_kernel(x).mean()

    LENGTHS = [5, 9, 40, 12, 100, 50, 200, 3]  # buckets 16, 64 and 256

    def serve(seconds):
        end = time.monotonic() + seconds
        served = 0
        while time.monotonic() < end:
            out = float(prefill(jnp.ones(LENGTHS[served % len(LENGTHS)])))
            if served >= 2:
                out += float(decode(jnp.ones(4)))
            served += 1
            time.sleep(0.01)
        print("served", served, flush=True)

    if __name__ == "__main__":
        serve(float(sys.argv[1]) if len(sys.argv) > 1 else float("inf"))
    """
)


def test_the_teams_ci_recipe_fails_before_tuning_and_passes_after(tmp_path):
    """docs/teams.md, "CI that fails on untuned or stale kernels", on a server with kernels
    in two jitted functions and three buckets that serves until stopped: `cache check`
    exits 1 before tuning, `jaxtune tune --` tunes every call the check saw, the export
    imported on another machine makes the check exit 0, and the job then runs clean under
    JAXTUNE_ON_MISS=error."""
    work = tmp_path / "work"
    (work / "h45svc").mkdir(parents=True)
    (work / "h45svc" / "__init__.py").write_text("")
    (work / "h45svc" / "kernels.py").write_text(SERVICE_KERNELS)
    (work / "serve.py").write_text(SERVICE)
    run = _python_in(work, JAXTUNE_CACHE_DIR=str(tmp_path / "tuning-machine"))

    def check(**extra: str) -> tuple[int, dict]:
        done = run(
            "-m", "jaxtune", "cache", "check", "--settle", "1", "--json", "--", "python",
            "serve.py", **extra,
        )  # fmt: skip
        return done.returncode, json.loads(done.stdout)

    code, doc = check()
    assert code == 1, doc
    assert doc["current"] == [] and doc["stale"] == [] and doc["program_status"] == 0
    assert sorted((m["kernel"], m["key"]) for m in doc["missing"]) == [
        ("h45.decode", "f32[4]"),
        ("h45.prefill", "f32[1..16]"),
        ("h45.prefill", "f32[17..64]"),
        ("h45.prefill", "f32[65..256]"),
    ], doc["missing"]

    tuned = run("-m", "jaxtune", "tune", "--settle", "1", "--", "python", "serve.py")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    exported = tmp_path / "tuned-cpu.msgpack"
    done = run("-m", "jaxtune", "cache", "export", str(exported))
    assert done.returncode == 0, done.stderr

    # The CI machine: its own cache, the recipe's three steps.
    ci = {"JAXTUNE_CACHE_DIR": str(tmp_path / "ci-machine")}
    done = run("-m", "jaxtune", "cache", "import", str(exported), **ci)
    assert done.returncode == 0, done.stderr
    code, doc = check(**ci)
    assert code == 0, doc
    assert len(doc["current"]) == 4 and doc["missing"] == [] and doc["stale"] == []
    job = run("serve.py", "3", JAXTUNE_ON_MISS="error", **ci)
    assert job.returncode == 0, job.stderr[-3000:]
    assert "served" in job.stdout
