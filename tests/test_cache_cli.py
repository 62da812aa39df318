from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import jaxtune
from jaxtune import _cli
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning.store import cache as _cache

ROOT = pathlib.Path(__file__).resolve().parent.parent


def put(key, kernel="lib.matmul", jax_version=None, config=None):
    versions = dict(jaxtune._core.versions.toolchain())
    if jax_version:
        versions["jax"] = jax_version
    _cache.user_cache().write(
        [
            Entry(
                kernel=kernel,
                device_kind="cpu",
                key=key,
                config=config or {"block": 128},
                time_us=10.0,
                default_config={"block": 32},
                default_time_us=30.0,
                versions=versions,
            )
        ]
    )


def run(capsys, *argv):
    code = _cli.main(["cache", *argv])
    return code, capsys.readouterr().out


def test_path(capsys):
    code, out = run(capsys, "path")
    assert code == 0 and out.strip() == str(_cache.user_cache().root)
    code, out = run(capsys, "path", "--json")
    assert json.loads(out) == {"path": str(_cache.user_cache().root)}


def test_list_marks_stale_entries(capsys):
    put("f32[8]")
    put("f32[16]", jax_version="0.4.1")
    code, out = run(capsys, "list")
    assert code == 0
    assert "(stale)" in out and "3.00x" in out
    code, out = run(capsys, "list", "--json")
    doc = json.loads(out)
    assert {e["key"]: e["stale"] for e in doc["entries"]} == {"f32[8]": False, "f32[16]": True}


def test_show(capsys):
    put("f32[8]")
    code, out = run(capsys, "show", "lib.matmul")
    assert code == 0 and "best {'block': 128}" in out
    assert (
        json.loads(run(capsys, "show", "lib.matmul", "--json")[1])["entries"][0]["key"] == "f32[8]"
    )
    assert _cli.main(["cache", "show", "nope"]) == 2
    assert "no entries for kernel 'nope'" in capsys.readouterr().err


def test_export_import_merge(capsys, tmp_path, monkeypatch):
    put("f32[8]")
    put("f32[4]", kernel="other")
    code, out = run(capsys, "export", str(tmp_path / "all.msgpack"))
    assert code == 0 and "exported 2 entries" in out
    run(capsys, "export", str(tmp_path / "one.msgpack"), "--kernel", "other")
    assert len(jaxtune.TuningResult.load(tmp_path / "one.msgpack")) == 1

    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "other-machine"))
    code, out = run(capsys, "import", str(tmp_path / "all.msgpack"), "--json")
    assert json.loads(out)["entries"] == 2
    assert len(_cache.user_cache().all_entries()) == 2

    code, out = run(
        capsys,
        "merge",
        str(tmp_path / "all.msgpack"),
        str(tmp_path / "one.msgpack"),
        "-o",
        str(tmp_path / "merged.msgpack"),
    )
    assert code == 0 and len(jaxtune.TuningResult.load(tmp_path / "merged.msgpack")) == 2


def test_prune_and_clear(capsys):
    put("f32[8]")
    put("f32[16]", jax_version="0.4.1")
    put("f32[4]", kernel="other")
    assert _cli.main(["cache", "prune"]) == 2
    assert "prune needs --stale" in capsys.readouterr().err
    code, out = run(capsys, "prune", "--stale", "--json")
    assert code == 0 and json.loads(out) == {"dropped": 1}
    code, out = run(capsys, "prune", "--kernel", "other")
    assert code == 0 and "dropped 1 entry\n" in out
    _, out = run(capsys, "clear")
    assert "removed 1 entry from" in out
    assert _cache.user_cache().all_entries() == []


@pytest.mark.slow
def test_module_entry_point(cli):
    proc = cli("cache", "path")
    assert proc.returncode == 0 and proc.stdout.strip()


def test_one_entry_is_one_entry_and_export_honours_the_umask(capsys, tmp_path):
    import os

    put("f32[8]")
    old = os.umask(0o022)
    try:
        code, out = run(capsys, "export", str(tmp_path / "one.msgpack"))
    finally:
        os.umask(old)
    assert code == 0 and f"exported 1 entry to {tmp_path / 'one.msgpack'}" in out
    assert (tmp_path / "one.msgpack").stat().st_mode & 0o777 == 0o644
    _, out = run(capsys, "import", str(tmp_path / "one.msgpack"))
    assert "imported 1 entry into" in out


@pytest.mark.child
def test_every_cache_action_runs_without_importing_jax(tmp_path):
    put("f32[8]")
    put("f32[16]", kernel="lib.other", jax_version="0.4.1")
    out = tmp_path / "out.msgpack"
    actions = [
        ["path"],
        ["list"],
        ["list", "--json"],
        ["show", "lib.matmul"],
        ["export", str(out)],
        ["import", str(out)],
        ["merge", str(out), str(out), "-o", str(tmp_path / "merged.msgpack")],
        ["prune", "--kernel", "lib.other"],
        ["prune", "--stale"],
        ["clear"],
    ]
    code = (
        "import contextlib, io, sys\n"
        "from jaxtune._cli import main\n"
        "codes = []\n"
        f"for argv in {actions!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        codes.append(main(['cache', *argv]))\n"
        "print(codes, sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == f"{[0] * len(actions)} []"
    assert _cache.user_cache().all_entries() == []  # the driver really ran every action
