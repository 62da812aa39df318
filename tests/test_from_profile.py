"""`jaxtune tune --from-profile DIR`: tune the autotuned kernels a profile says matter."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest
from profile_models import three_kernels

import jaxtune
from jaxtune._cli import from_profile as _from_profile
from jaxtune._cli import main as cli_main
from jaxtune._isolation import process as _process
from jaxtune._tuning import cache as _cache

KERNELS = {"tests.profile.heavy", "tests.profile.medium", "tests.profile.tiny"}


@pytest.fixture
def captured(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "process")
    x = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    v = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    profile = jaxtune.profile(three_kernels, x, v, iters=3, logdir=str(tmp_path / "p" / "trace"))
    profile.save(tmp_path / "p" / "report.json")
    yield tmp_path / "p", profile
    _process.shutdown_children()


@pytest.mark.slow
def test_tunes_exactly_the_kernels_above_the_threshold(captured, capsys):
    root, _ = captured
    ranked = {r.name: r for r in _from_profile.rank(root)}
    assert {n for n, r in ranked.items() if r.autotuned} == KERNELS
    assert {c["key"] for c in ranked["tests.profile.heavy"].calls} == {"f32[256,256]"}
    # The trace alone (no report.json) ranks the same kernels, with the same calls.
    from_trace = {r.name: r for r in _from_profile.rank(root / "trace")}
    assert {n for n, r in from_trace.items() if r.autotuned} == KERNELS
    assert from_trace["tests.profile.tiny"].calls == ranked["tests.profile.tiny"].calls
    # The profile is what decides: very different shares put the threshold between them.
    assert ranked["tests.profile.heavy"].share > ranked["tests.profile.medium"].share
    assert ranked["tests.profile.medium"].share >= 0.05 > ranked["tests.profile.tiny"].share
    code = cli_main(["tune", "--from-profile", str(root), "--min-share", "0.05", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc["problems"]
    expected = {n for n, r in ranked.items() if r.autotuned and r.share >= 0.05}
    assert expected == {"tests.profile.heavy", "tests.profile.medium"}
    assert set(doc["selected"]) == expected
    assert {(t["kernel"], t["key"]) for t in doc["tuned"]} == {
        ("tests.profile.heavy", "f32[256,256]"),
        ("tests.profile.medium", "f32[256,256]"),
    }
    cached = {e.kernel for e in _cache.user_cache().all_entries()}
    assert cached == expected
    # A higher threshold tunes only the heaviest; the text output says why the rest were not.
    code = cli_main(["tune", "--from-profile", str(root), "--min-share", "0.99", "--retune"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("below --min-share 99%: not tuned") == 3


def test_a_directory_without_reports_says_how_to_capture_one(tmp_path, capsys):
    assert cli_main(["tune", "--from-profile", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "has neither" in err and "jaxtune profile --logdir DIR" in err


def test_raw_pallas_kernels_are_listed_with_a_hint(tmp_path, capsys):
    report = {
        "kernels": [
            {"name": "flash_fwd", "kernel_id": None, "share": 0.4, "kind": "pallas"},
            {"name": "lib.mm", "kernel_id": "lib.mm", "share": 0.01, "kind": "autotuned"},
        ]
    }
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert cli_main(["tune", "--from-profile", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "raw Pallas kernels (no tuning space: wrap" in out
    assert " 40.0%  flash_fwd" in out and "1.0%  lib.mm  below --min-share 5%" in out
