"""`jaxtune tune --from-profile DIR`: tune the autotuned kernels a profile says matter.

Covers docs/reports.md, "Tune what the profile says matters: jaxtune tune --from-profile
DIR"."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import profile_models
import pytest
from profile_models import three_kernels, with_autotuned

import jaxtune
from jaxtune._cli import from_profile as _from_profile
from jaxtune._cli import main as cli_main
from jaxtune._isolation import process as _process
from jaxtune._tuning.store import cache as _cache

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


@pytest.mark.child
@pytest.mark.slow
def test_tunes_exactly_the_kernels_above_the_threshold(captured, capsys):
    root, _ = captured
    ranked = {r.name: r for r in _from_profile.rank(root)}
    assert {n for n, r in ranked.items() if r.autotuned} == KERNELS
    assert {c.key for c in ranked["tests.profile.heavy"].calls} == {"f32[256,256]"}
    # The trace alone (no report.json) ranks the same kernels, with the same calls.
    from_trace = {r.name: r for r in _from_profile.rank(root / "trace")}
    assert {n for n, r in from_trace.items() if r.autotuned} == KERNELS
    assert from_trace["tests.profile.tiny"].calls == ranked["tests.profile.tiny"].calls
    # The profile is what decides: very different shares put the threshold between them.
    assert ranked["tests.profile.heavy"].share > ranked["tests.profile.medium"].share
    assert ranked["tests.profile.medium"].share >= 0.02 > ranked["tests.profile.tiny"].share
    code = cli_main(["tune", "--from-profile", str(root), "--min-share", "0.02", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc["problems"]
    expected = {n for n, r in ranked.items() if r.autotuned and r.share >= 0.02}
    assert expected == {"tests.profile.heavy", "tests.profile.medium"}
    assert set(doc["selected"]) == expected
    assert {(t["kernel"], t["key"]) for t in doc["tuned"]} == {
        ("tests.profile.heavy", "f32[256,256]"),
        ("tests.profile.medium", "f32[256,256]"),
    }
    assert all(not t["stale"] and t["stale_reasons"] == [] for t in doc["tuned"])
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


def _recorded_profile(root, source):
    """A saved report with one autotuned kernel, and its call as recorded with a config
    from ``source`` (where the capturing process found it)."""
    from jaxtune._core.codec import packb

    root.mkdir(parents=True, exist_ok=True)
    kernels = [{"name": "body", "kernel_id": "lib.k", "kind": "pallas", "share": 0.9}]
    (root / "report.json").write_text(json.dumps({"kernels": kernels}))
    frame = {"kernel": "lib.k", "key": "f32[8]", "device_kind": "cpu", "version": "1"}
    frame |= {"source": source, "request": {"plan": {}}}
    (root / "report.calls.msgpack").write_bytes(packb([frame]))
    return frame


@pytest.mark.parametrize("source", ["cache", "packaged", "scope", "default"])
def test_an_empty_cache_tunes_whatever_the_recording_says(tmp_path, monkeypatch, capsys, source):
    """A profile captured with configs tuned elsewhere (the recorded source a cache
    hit) still tunes into a cache that lacks them; one that has them skips them."""
    _recorded_profile(tmp_path / "p", source)
    swept = []

    def fake_sweep(records):
        swept.append([(r.kernel, r.key) for r in records])
        return [], []

    monkeypatch.setattr(_from_profile, "sweep_records", fake_sweep)
    assert cli_main(["tune", "--from-profile", str(tmp_path / "p")]) == 0
    assert swept == [[("lib.k", "f32[8]")]]
    entry = jaxtune.Entry(
        kernel="lib.k",
        device_kind="cpu",
        key="f32[8]",
        config={"b": 1},
        time_us=1.0,
        default_config={"b": 2},
        default_time_us=2.0,
        kernel_version="1",
    )
    _cache.user_cache().save([entry])
    capsys.readouterr()
    assert cli_main(["tune", "--from-profile", str(tmp_path / "p")]) == 0
    assert swept[-1] == []
    assert (
        "tuning 0 shapes (1 already in this cache; --retune tunes them)" in capsys.readouterr().out
    )
    assert cli_main(["tune", "--from-profile", str(tmp_path / "p"), "--retune"]) == 0
    assert swept[-1] == [("lib.k", "f32[8]")]
    capsys.readouterr()


@pytest.mark.child
def test_a_kernel_in_a_differentiated_step_is_recorded_to_time_its_backward_too(tmp_path):
    """A profile of a ``jax.grad`` step records the autotuned call it saw for ``tune
    --from-profile`` with ``timing="auto"`` resolved as a sweep in that program resolves it:
    forward and backward (``vjp``); the same kernel in a plain step: forward."""
    x = jnp.ones((256, 128), jnp.float32)
    timings = {}
    for name, step in (("grad", profile_models.rowsum_grad_step), ("plain", with_autotuned)):
        profile = jaxtune.profile(step, x, iters=2, logdir=str(tmp_path / name))
        (call,) = [c for c in profile.calls if c.kernel == "tests.profile.rowsum"]
        timings[name] = call.timing
    assert timings == {"grad": "vjp", "plain": "forward"}
    _process.shutdown_children()


@pytest.mark.child
def test_a_transformed_function_is_profiled_itself_not_the_function_it_names(tmp_path):
    """``jax.grad(loss)`` is named ``loss``: the child would profile ``loss``. It is captured
    in this process instead, with one warning that says how to keep the child."""
    x = jnp.ones((256, 128), jnp.float32)
    with pytest.warns(jaxtune.JaxtuneWarning, match=r"names another function.*jax\.grad"):
        profile = jaxtune.profile(
            jax.grad(profile_models.rowsum_loss), x, iters=2, logdir=str(tmp_path / "g")
        )
    (call,) = [c for c in profile.calls if c.kernel == "tests.profile.rowsum"]
    assert call.timing == "vjp"  # the gradient ran, not the loss
    # A jitted function may stand for the function it jits: still captured in the child.
    jaxtune.profile(jax.jit(with_autotuned), x, iters=2, logdir=str(tmp_path / "j"))
    _process.shutdown_children()


@pytest.mark.parametrize(
    ("change", "recorded", "tuned"),
    [
        ({}, "abc", True),
        ({"versions": {"jax": "0.4.1", "jaxlib": "0.4.1", "libtpu": None}}, "abc", False),
        ({"code_digest": "other"}, "abc", False),
        ({"code_digest": ""}, "abc", True),  # an entry of unknown code is never stale for it
        ({}, "", True),  # nor one for a call of unknown code (the lookup's one rule)
        ({"timing": "forward"}, "abc", False),  # the recorded call is differentiated
    ],
)
def test_an_entry_counts_as_tuned_only_when_the_staleness_judge_finds_it_current(
    change, recorded, tuned
):
    """``--from-profile`` skips a recorded call only for an entry a tune-mode lookup would
    use as it is: the toolchain, the code the call recorded and the pass it times count."""
    from jaxtune._core import versions as _versions
    from jaxtune._core.vocabulary import CodeDigest, Entry, RecordedCall

    fields = {
        "kernel": "lib.mm",
        "device_kind": "cpu",
        "key": "f32[8]",
        "config": {"block": 8},
        "time_us": 1.0,
        "default_config": {"block": 4},
        "default_time_us": 2.0,
        "versions": dict(_versions.toolchain()),
        "code_digest": "abc",
        "timing": "vjp",
    }
    _cache.user_cache().write([Entry(**{**fields, **change})])
    frame = RecordedCall(
        kernel="lib.mm",
        device_kind="cpu",
        key="f32[8]",
        source="default",
        code=CodeDigest(digest=recorded),
        request={"plan": {"timing": "vjp"}},
    )
    assert _from_profile.tuned_here(frame) is tuned


# -- the saved files: one typed record each, old folders read as before ---------------------


def _saved_profile(calls=()):
    from jaxtune._profiling.attribution import KernelStat

    return jaxtune.Profile(
        kernels=(
            KernelStat(name="body", kind="pallas", kernel_id="lib.k", share=0.75),
            KernelStat(name="flash_fwd", kind="pallas", share=0.25, config={"b": 1}),
        ),
        ops=(),
        step_us=1.0,
        total_us=2.0,
        iterations=2,
        logdir="/tmp/trace",
        platform="cpu",
        device_kind="cpu",
        calls=tuple(calls),
    )


def test_a_saved_report_and_its_calls_read_back_as_written(tmp_path):
    """``report.calls.msgpack`` is one versioned record (``v`` 2, the calls under
    ``calls``); ``report.json`` is the report's document, whose kernel rows
    ``--from-profile`` reads back."""
    from jaxtune._core.codec import unpackb
    from jaxtune._core.vocabulary import RecordedCall
    from jaxtune._profiling import saved

    call = RecordedCall(kernel="lib.k", key="f32[8]", source="cache", config={"b": 1})
    path = _saved_profile([call]).save(tmp_path / "report.json")
    raw = unpackb((tmp_path / "report.calls.msgpack").read_bytes())
    assert raw == {"v": 2, "calls": [call.to_wire()]}
    assert saved.read_calls(tmp_path / "report.calls.msgpack") == (call,)
    doc = json.loads(path.read_text())
    assert doc["schema"] == 1 and doc["kernels"][1]["config"] == {"b": 1}
    assert saved.read_report(path).kernels == (
        saved.ReportKernel(name="body", kernel_id="lib.k", share=0.75),
        saved.ReportKernel(name="flash_fwd", kernel_id=None, share=0.25),
    )
    ranked = {r.name: r for r in _from_profile.rank(tmp_path)}
    assert ranked["lib.k"].calls == (call,) and ranked["lib.k"].autotuned
    assert ranked["flash_fwd"].share == 0.25 and not ranked["flash_fwd"].autotuned


def test_a_report_folder_of_the_old_format_still_reads(tmp_path):
    """A folder saved before the calls file had a version: its calls file is the bare list
    of the calls (and its report.json a document with no more than the kernel rows read)."""
    from jaxtune._profiling import saved

    frame = _recorded_profile(tmp_path, "cache")
    (call,) = saved.read_calls(tmp_path / "report.calls.msgpack")
    assert (call.kernel, call.key, call.source, call.version) == ("lib.k", "f32[8]", "cache", "1")
    ranked = {r.name: r for r in _from_profile.rank(tmp_path)}
    assert [c.key for c in ranked["lib.k"].calls] == [frame["key"]]
    assert ranked["lib.k"].share == 0.9


@pytest.mark.parametrize(
    ("report", "calls", "named"),
    [
        (
            {"kernels": [{"name": "body", "share": "most"}]},
            None,
            "kernels[0].share: expected float",
        ),
        ({"kernels": [{"share": 0.5}]}, None, "kernels[0].name: missing"),
        ({"rows": []}, None, "kernels: missing"),
        ([1], None, "expected a SavedReport"),
        (
            {"kernels": []},
            [{"kernel": "lib.k", "key": "f32[8]", "source": "?"}],
            "report.calls.msgpack: calls[0].source: expected one of",
        ),
        (
            {"kernels": []},
            {"v": 2, "calls": [{"kernel": 3, "key": "f32[8]", "source": "cache"}]},
            "report.calls.msgpack: calls[0].kernel: expected str",
        ),
        (
            {"kernels": []},
            {"v": 3, "calls": []},
            "a SavedCalls of version 3, written by a newer jaxtune",
        ),
        ({"kernels": []}, "calls", "expected a SavedCalls (a map)"),
    ],
)
def test_a_damaged_saved_report_is_refused_naming_the_field(tmp_path, report, calls, named):
    from jaxtune._core.codec import packb
    from jaxtune._core.errors import JaxtuneError

    (tmp_path / "report.json").write_text(json.dumps(report))
    if calls is not None:
        (tmp_path / "report.calls.msgpack").write_bytes(packb(calls))
    with pytest.raises(JaxtuneError, match="is not a jaxtune profile report") as caught:
        _from_profile.rank(tmp_path)
    assert named in str(caught.value)
