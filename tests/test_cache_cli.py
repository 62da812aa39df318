"""`jaxtune cache`: path, list (stale entries marked), show, export/import/merge, prune and
clear, each without importing JAX, and what export refuses, takes and reports.

Covers docs/cache.md, "jaxtune cache" and "JSON output", and "Packaged caches" (the
layout ``export --dir`` writes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import jaxtune
from jaxtune import _cli
from jaxtune._core import versions as _versions
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning.store import cache as _cache

ROOT = pathlib.Path(__file__).resolve().parent.parent


def put(key, kernel="lib.matmul", jax_version=None, config=None, **fields):
    versions = dict(_versions.toolchain())
    if jax_version:
        versions["jax"] = jax_version
    _cache.user_cache().write(
        [
            Entry(
                **{
                    "kernel": kernel,
                    "device_kind": "cpu",
                    "key": key,
                    "config": config or {"block": 128},
                    "time_us": 10.0,
                    "default_config": {"block": 32},
                    "default_time_us": 30.0,
                    "versions": versions,
                    **fields,
                }
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
    assert "lib.matmul (stale: toolchain)" in out and "3.00x" in out
    code, out = run(capsys, "list", "--json")
    doc = json.loads(out)
    assert {e["key"]: e["stale"] for e in doc["entries"]} == {"f32[8]": False, "f32[16]": True}


def test_every_command_says_stale_in_the_judges_words(capsys):
    """``stale`` in any command's JSON is ``staleness.judge``'s (``cache list`` and ``jaxtune
    tune`` print one summary); the entry's own summary holds no staleness of its own."""
    from jaxtune._cli.entries import StaleJudge, entry_summary

    put("f32[16]", jax_version="0.4.1")
    (entry,) = _cache.user_cache().all_entries()
    assert "stale" not in entry.summary()
    summary = entry_summary(entry, StaleJudge())
    assert (summary["stale"], summary["stale_reasons"]) == (True, ["toolchain"])
    (listed,) = json.loads(run(capsys, "list", "--json")[1])["entries"]
    assert {k: listed[k] for k in summary} == summary


def test_show(capsys):
    put("f32[8]")
    code, out = run(capsys, "show", "lib.matmul")
    assert code == 0 and "best block=128 (3.00x over the default block=32" in out
    assert (
        json.loads(run(capsys, "show", "lib.matmul", "--json")[1])["entries"][0]["key"] == "f32[8]"
    )
    assert _cli.main(["cache", "show", "nope"]) == 2
    assert "no entries for kernel 'nope'" in capsys.readouterr().err


def test_show_gives_each_rivals_time_over_the_stored_configs_round_by_round(capsys):
    """A new user's busy-machine gmm sweep stored a config whose median (90.7 ms) was not
    the lowest: a rival's was 77.1 ms, yet it lost round by round (and took 1.17x the
    stored config's time in the user's own timing). Each config that raced beside the
    stored one now says how it did against it, round by round, the figure the decision
    read."""
    from jaxtune._core.vocabulary import Measurement

    def measured(tm, rounds):
        return Measurement(
            config={"tm": tm},
            median_us=sorted(rounds)[len(rounds) // 2],
            min_us=min(rounds),
            spread=0.1,
            samples=len(rounds),
            compile_s=0.1,
            rounds_us=tuple(rounds),
            calls=len(rounds) + 1,
        )

    # 1.1x the stored config in six rounds of eight; in two the stored one met a spell of
    # load the rival did not, which gives the rival the lower median time.
    stored = [50.0, 120.0, 130.0, 125.0, 55.0, 140.0, 135.0, 60.0]
    ratios = [1.1, 0.6, 1.1, 1.1, 1.1, 0.6, 1.1, 1.1]
    rival = [t * r for t, r in zip(stored, ratios, strict=True)]
    assert measured(256, rival).median_us < measured(128, stored).median_us
    put(
        "f32[9]",
        kernel="lib.lower_median",
        config={"tm": 128},
        default_config={"tm": 256},
        measurements=(measured(128, stored), measured(256, rival)),
    )
    code, out = run(capsys, "show", "lib.lower_median")
    assert code == 0
    assert "; stored)" in out and "; 1.10x the stored, round by round)" in out, out


def test_show_gives_the_sweeps_time_by_phase_and_each_configs_calls(capsys):
    from jaxtune._core.vocabulary import Measurement

    def measured(block, rounds, calls, samples=5):
        return Measurement(
            config={"block": block},
            median_us=10.0 * block,
            min_us=9.0 * block,
            spread=0.1,
            samples=samples,
            compile_s=0.1,
            rounds_us=rounds,
            calls=calls,
        )

    phases = {"start": 0.5, "compile_wait": 1.0, "rounds": 0.25, "other": 0.05, "total": 1.8}
    put(
        "f32[8]",
        kernel="lib.phased",
        config={"block": 1},
        default_config={"block": 3},
        measurements=(
            measured(1, (10.0, 11.0), 9),
            measured(3, (30.0,), 4),
            measured(5, (), 1, samples=1),
        ),
        phases=phases,
    )
    code, out = run(capsys, "show", "lib.phased")
    assert code == 0
    assert "sweep time (s): start 0.50, compile wait 1.00, rounds 0.25, other 0.05, " in out
    assert "total 1.80" in out
    assert "(median of 2 rounds, min 9.00 us, 5 samples, 9 calls; stored)" in out
    # One round beside the stored config's two: too few to read a ratio from.
    assert "(median of 1 round, min 27.0 us, 5 samples, 4 calls)" in out
    assert "(min 45.0 us, 1 sample, 1 call)" in out
    # The JSON gives the same time the text prints (the rounds' median, not the samples'),
    # and why a config is out (docs/cache.md, "JSON output").
    put(
        "f32[2]",
        kernel="lib.phased",
        config={"block": 1},
        default_config={"block": 3},
        measurements=(
            measured(1, (10.0, 11.0), 9),
            dataclasses.replace(measured(3, (30.0, 33.0), 4), dropped=True, behind=True),
        ),
    )
    (shown,) = [
        e
        for e in json.loads(run(capsys, "show", "lib.phased", "--json")[1])["entries"]
        if e["key"] == "f32[2]"
    ]
    first, out_ = shown["measurements"]
    assert (first["time_us"], first["median_us"]) == (10.5, 10.0) and "why_out" not in first
    assert (out_["time_us"], out_["why_out"]) == (31.5, "clearly behind in the rounds")
    put("f32[4]", kernel="lib.nodefault", default_time_us=None)
    code, out = run(capsys, "show", "lib.nodefault")
    assert "best block=128 (the default block=32 has no time; timed" in out


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


def test_import_says_what_a_stale_entry_means_in_the_one_vocabulary(capsys, tmp_path, monkeypatch):
    """The meaning `import` prints comes from staleness's one table, beside the label."""
    from jaxtune._core.vocabulary import StaleReason
    from jaxtune._tuning.staleness import means

    put("f32[16]", jax_version="0.4.1")
    run(capsys, "export", str(tmp_path / "old.msgpack"))
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "other-machine"))
    _, out = run(capsys, "import", str(tmp_path / "old.msgpack"))
    assert "1 stale" in out
    assert (
        "  stale    lib.matmul on cpu, key f32[16]: toolchain (tuned with another JAX, jaxlib "
        "or libtpu, so a lookup uses it with a warning and tune mode re-tunes it; re-tune it:"
    ) in out
    assert means(StaleReason.TOOLCHAIN) in out
    _, out = run(capsys, "import", str(tmp_path / "old.msgpack"), "--json")
    assert [e["stale_reasons"] for e in json.loads(out)["stale"]] == [["toolchain"]]


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


def test_clear_removes_the_sweeps_compiled_programs_and_only_those(capsys, tmp_path):
    put("f32[8]")
    root = _cache.user_cache().root
    compiled = root / "xla" / "jit_scale-0123abcd-cache"
    compiled.parent.mkdir()
    compiled.write_bytes(b"x" * 3 * 2**20)
    theirs = tmp_path / "their-xla"  # a folder JAXTUNE_COMPILE_CACHE names: the user's
    theirs.mkdir()
    (root / "linked").symlink_to(theirs)
    code, out = run(capsys, "clear", "--json")
    assert code == 0 and json.loads(out) == {"dropped": 1, "compiled_bytes": 3 * 2**20}
    assert not compiled.parent.exists() and theirs.is_dir()
    put("f32[8]")
    _, out = run(capsys, "clear")
    assert out.startswith("removed 1 entry from")  # nothing compiled left: not mentioned


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


# -- export and import: what they refuse, take and report (docs/cache.md, "Packaged caches") -


def test_export_refuses_an_unknown_kernel_naming_the_known_ones(incli, tmp_path):
    """The fault: `--kernel typo` wrote an empty file and exited 0."""
    put("f32[8]")
    put("f32[4]", kernel="other")
    target = tmp_path / "out.msgpack"
    proc = incli("cache", "export", str(target), "--kernel", "lib.matmull")
    assert proc.returncode == 2
    assert (
        "no entries for kernel 'lib.matmull' in" in proc.stderr
        and "nothing was written. Its kernels: lib.matmul, other." in proc.stderr
    )
    assert not target.exists()


def test_export_takes_several_kernels(incli, tmp_path):
    """The fault: a repeated --kernel kept only the last."""
    put("f32[8]")
    put("f32[4]", kernel="other")
    put("f32[2]", kernel="third")
    target = tmp_path / "two.msgpack"
    proc = incli("cache", "export", str(target), "--kernel", "other", "--kernel", "lib.matmul")
    assert proc.returncode == 0 and "exported 2 entries" in proc.stdout
    assert {e.kernel for e in jaxtune.TuningResult.load(target).values()} == {"lib.matmul", "other"}


def test_export_can_leave_out_the_measurements(incli, tmp_path):
    from jaxtune._core.vocabulary import Measurement

    measured = Measurement(
        config={"block": 128}, median_us=10.0, min_us=9.0, spread=0.1, samples=5, compile_s=0.1
    )
    _cache.user_cache().write(
        [
            Entry(
                kernel="lib.matmul",
                device_kind="cpu",
                key="f32[8]",
                config={"block": 128},
                time_us=10.0,
                default_config={"block": 32},
                default_time_us=30.0,
                measurements=(measured,),
            )
        ]
    )
    full, lean = tmp_path / "full.msgpack", tmp_path / "lean.msgpack"
    assert incli("cache", "export", str(full)).returncode == 0
    proc = incli("cache", "export", str(lean), "--no-measurements", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["measurements"] is False
    (kept,) = jaxtune.TuningResult.load(full).values()
    (stripped,) = jaxtune.TuningResult.load(lean).values()
    assert kept.measurements == (measured,) and stripped.measurements == ()
    assert (stripped.config, stripped.time_us, stripped.default_time_us) == (
        {"block": 128},
        10.0,
        30.0,
    )


def test_export_dir_writes_the_cache_layout_a_library_registers(incli, tmp_path):
    put("f32[8]")
    target = tmp_path / "mylib" / "tuned"
    proc = incli("cache", "export", "--dir", str(target), "--json")
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert (doc["layout"], doc["entries"], doc["path"]) == ("directory", 1, str(target))
    # What a library ships: the cache files, without the lock files the writes took.
    assert [p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()] == [
        "cpu/lib.matmul.msgpack"
    ]
    jaxtune.register_cache(target)
    assert _cache.layers()[0].lookup("lib.matmul", "cpu", "f32[8]").config == {"block": 128}
    proc = incli("cache", "export")
    assert proc.returncode == 2 and "needs FILE" in proc.stderr


def _tuned(key: str, block: int, created: float) -> Entry:
    return Entry(
        kernel="lib.matmul",
        device_kind="cpu",
        key=key,
        config={"block": block},
        time_us=10.0,
        default_config={"block": 32},
        default_time_us=30.0,
        created=created,
    )


NEWER, OLDER = 1_800_000_000.0, 1_700_000_000.0


@pytest.mark.parametrize("keep_newer", [False, True])
def test_import_reports_each_conflict_and_can_keep_the_newer_entry(incli, tmp_path, keep_newer):
    """The fault: import overwrote newer entries and said only "imported 2 entries"."""
    _cache.user_cache().write([_tuned("f32[8]", 128, NEWER), _tuned("f32[16]", 64, NEWER)])
    file = jaxtune.TuningResult.of(
        _tuned("f32[8]", 256, OLDER),  # an older entry of a key the cache holds
        _tuned("f32[16]", 64, NEWER),  # the same entry
        _tuned("f32[32]", 32, OLDER),  # a new key
    ).save(tmp_path / "in.msgpack")
    flags = ["--keep-newer"] if keep_newer else []
    proc = incli("cache", "import", str(file), *flags)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0].endswith(
        "1 new, 1 unchanged, 0 replaced, 1 kept"
        if keep_newer
        else "1 new, 1 unchanged, 1 replaced, 0 kept"
    )
    if keep_newer:
        assert lines[1] == (
            "  kept lib.matmul on cpu, key f32[8]: the cache's entry, tuned 2027-01-15 08:00:00 "
            "UTC, is newer than the file's, tuned 2023-11-14 22:13:20 UTC"
        )
    else:
        assert lines[1] == (
            "  replaced lib.matmul on cpu, key f32[8]: the cache's entry, tuned 2027-01-15 "
            "08:00:00 UTC, by the file's, tuned 2023-11-14 22:13:20 UTC (the file's is older; "
            "--keep-newer keeps the newer)"
        )
    assert len(lines) == 2
    stored = _cache.user_cache().lookup("lib.matmul", "cpu", "f32[8]")
    assert stored.config == ({"block": 128} if keep_newer else {"block": 256})
    # The JSON document holds the same report.
    _cache.user_cache().write([_tuned("f32[8]", 128, NEWER)])
    doc = json.loads(incli("cache", "import", str(file), "--json", *flags).stdout)
    conflict = {
        "kernel": "lib.matmul",
        "device_kind": "cpu",
        "key": "f32[8]",
        "kernel_version": "",
        "file_created": OLDER,
        "cache_created": NEWER,
    }
    assert (doc["entries"], doc["new"], doc["unchanged"]) == (3, 0, 2)
    assert (doc["replaced"], doc["kept"]) == (([], [conflict]) if keep_newer else ([conflict], []))


def _documented(doc: str, start: str) -> set[str]:
    """The backticked names of the first sentence of docs/cache.md from ``start`` on,
    parenthesised remarks left out."""
    text = doc[doc.index(start) + len(start) :]
    text = re.sub(r"\([^()]*\)", "", text).split(". ")[0]
    return set(re.findall(r"`(\w+)`", text))


def test_the_json_of_every_cache_action_is_documented(incli, tmp_path):
    """docs/cache.md names every key of every action's --json object, and no other."""
    doc = (ROOT / "docs" / "cache.md").read_text()
    put("f32[8]")
    layer = jaxtune.TuningResult.of(
        Entry(
            kernel="lib.matmul",
            device_kind="cpu",
            key="f32[8]",
            config={"block": 64},
            time_us=10.0,
            default_config={"block": 32},
            default_time_us=30.0,
        )
    ).save(tmp_path / "layer.msgpack")
    export = tmp_path / "export.msgpack"
    runs = {
        "path": ["path"],
        "list": ["list", "--layer", str(layer)],
        "show": ["show", "lib.matmul"],
        "export": ["export", str(export)],
        "import": ["import", str(layer)],
        "merge": ["merge", str(export), "-o", str(tmp_path / "merged.msgpack")],
        "prune": ["prune", "--kernel", "nothing"],
        "clear": ["clear"],
    }
    json_section = doc[doc.index("### JSON output") :]
    outputs = {}
    for action, argv in runs.items():
        proc = incli("cache", *argv, "--json")
        assert proc.returncode == 0, proc.stderr
        outputs[action] = json.loads(proc.stdout)
        row = re.search(rf"^\| `jaxtune cache {action}` \| (.*) \|$", json_section, re.M)
        assert row, f"docs/cache.md has no JSON row for {action}"
        keys = set(re.findall(r"`(\w+)`:", re.sub(r"\([^()]*\)", "", row.group(1))))
        assert keys == set(outputs[action]), action
    entry_fields = _documented(doc, "An **entry object** (`list`, `show`) has:")
    (listed,) = [e for e in outputs["list"]["entries"] if e["source"] == "packaged"]
    assert entry_fields == set(listed)
    assert set(outputs["show"]["entries"][0]) == entry_fields | {"measurements"}
    assert "In `show` it also has `measurements`" in doc
    assert _documented(doc, "A **conflict object** (`import`) has:") == set(
        outputs["import"]["replaced"][0]
    )
    layers = re.search(r"`layers`: one object per layer shown \(([^()]*)\)", doc).group(1)
    assert set(re.findall(r"`(\w+)`:", layers)) == set(outputs["list"]["layers"][0])


def test_package_is_found_in_the_directory_the_command_runs_in(incli, tmp_path, monkeypatch):
    """As `python -m jaxtune` finds it, though the `jaxtune` script's sys.path starts with
    the script's folder, not the working directory."""
    (tmp_path / "herelib").mkdir()
    (tmp_path / "herelib" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "herelib", raising=False)
    proc = incli("cache", "list", "--package", "herelib")
    assert proc.returncode == 0, proc.stderr
    assert sys.modules.pop("herelib").__file__ == str(tmp_path / "herelib" / "__init__.py")
