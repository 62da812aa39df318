"""tools/build_kernels_cache.py, the command that builds the packaged cache of
``jaxtune.kernels`` (docs/kernels.md, "How the packaged table is made"): its dry run (CPU, TPU
interpret mode, tiny shapes) tunes a one-shape grid into a fresh cache, exports it as a
cache directory with a BUILD.json, and the exported table is what a registered packaged
cache answers: the exact shape from it, a nearby shape through nearest. A second run keeps
what the table holds."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.child]

LOOKUP = textwrap.dedent(
    """
    import sys
    import jax
    import jaxtune
    from jaxtune.kernels import autotuned_gmm

    jaxtune.register_cache(sys.argv[1])
    sizes = jax.ShapeDtypeStruct((4,), "int32")
    for rows in (512, 1024):
        lhs = jax.ShapeDtypeStruct((rows, 256), "float32")
        rhs = jax.ShapeDtypeStruct((4, 256, 256), "float32")
        choice = autotuned_gmm.config_for(lhs, rhs, sizes)
        print(rows, choice.source, sorted(choice.config.items()))
    """
)


def test_dry_run_exports_a_table_that_a_registered_packaged_cache_answers(tmp_path):
    out, summary = tmp_path / "cache", tmp_path / "summary.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        str(ROOT / "tools" / "build_kernels_cache.py"),
        "--dry",
        "--only",
        "gmm",
        "--shapes",
        "1",
        "--out",
        str(out),
        "--cache-dir",
        str(tmp_path / "tune"),
        "--json",
        str(summary),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1/1] gmm [512,256] @ [4,256,256]" in done.stdout
    assert "2 value sets timed as a mix" in done.stdout

    (row,) = json.loads(summary.read_text())["shapes"]
    assert row["kernel"] == "jaxtune.kernels.gmm"
    assert row["measured"] == 3  # the dry run's budget
    assert sorted(p.name for p in out.glob("*/*.msgpack")) == ["jaxtune.kernels.gmm.msgpack"]
    build = json.loads((out / "BUILD.json").read_text())
    (run,) = build["runs"]
    assert run["device"] == "cpu" and run["versions"]["jax"] and run["date"]

    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[1/1] gmm [512,256] @ [4,256,256]: kept, already tuned" in again.stdout

    tuned = sorted(row["config"].items())
    looked = subprocess.run(
        [sys.executable, "-c", LOOKUP, str(out)],
        env={**env, "JAXTUNE_CACHE_DIR": str(tmp_path / "empty")},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert looked.returncode == 0, looked.stderr
    exact, near = looked.stdout.splitlines()
    assert exact == f"512 packaged {tuned}"
    assert near == f"1024 nearest {tuned}"


def _build_tool() -> types.ModuleType:
    """tools/build_kernels_cache.py as a module (it is a script, not a package)."""
    name = "build_kernels_cache"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def test_the_shipped_table_is_listed_from_the_package_with_the_build_it_came_from():
    """The table in jaxtune/kernels/data/cache (tuned on the lent v5e) decodes whole, is
    listed as a packaged layer of ``jaxtune.kernels``, and its BUILD.json names where and
    with what each run made it."""
    table = ROOT / "jaxtune" / "kernels" / "data" / "cache"
    build = json.loads((table / "BUILD.json").read_text())
    for run in build["runs"]:
        assert run["device"] == "TPU v5 lite"
        assert run["versions"]["jax"] and run["versions"]["libtpu"] and run["date"]
        assert run["commit"], "a run that recorded no commit"
    command = [sys.executable, "-m", "jaxtune", "cache", "list", "--package", "jaxtune.kernels"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAXTUNE_CACHE_DIR": "/nonexistent-jaxtune"}
    done = subprocess.run(
        [*command, "--json"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads(done.stdout)
    shipped = [e for e in listed["entries"] if e["source"] == "packaged"]
    assert pathlib.Path(shipped[0]["layer"]) == table
    kernels = {e["kernel"] for e in shipped}
    assert kernels == {"jaxtune.kernels.flash_attention", "jaxtune.kernels.gmm"}
    assert {e["device_kind"] for e in shipped} == {"TPU v5 lite"}
    # A run keeps the shapes the table holds and tunes the rest as far as its deadline, so
    # the table holds every shape of the last run's grid that it did not skip.
    last = build["runs"][-1]
    grid_size = len(_build_tool().grid(last["grid"]))
    assert len(shipped) == grid_size - len(last["skipped"]), (len(shipped), last["skipped"])
    assert len(shipped) >= last["export"]["entries"]
    # Every entry kept its measurements and beat JAX's default blocks on the chip.
    assert all(e["measured"] > 1 and e["speedup"] > 1 for e in shipped)
