"""Files of every record kind written by the jaxtune of 2026-12-05, before the records
moved to one typed codec (``tests/data/records-2026-12/``, made by its ``make.py`` from
:mod:`records_2026_12`): they read as they did, and what this jaxtune writes for the same
values is byte for byte what that one wrote."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

import pytest
import records_2026_12 as made

from jaxtune._core import typed
from jaxtune._core.codec import packb, unpackb
from jaxtune._core.vocabulary import CaptureInfo, CodeDigest, RecordedCall
from jaxtune._profiling.sidecar import INFO_FILE, read_sidecar, remember
from jaxtune._tuning.store import result_files
from jaxtune._tuning.store.cache import CacheStore
from jaxtune._tuning.sweep.work import SweepPlan

DATA = pathlib.Path(__file__).resolve().parent / "data" / "records-2026-12"


def test_a_cache_file_of_that_format_reads_as_it_did(tmp_path):
    shutil.copytree(DATA / "cache", tmp_path / "cache")
    store = CacheStore(tmp_path / "cache")
    read = store.read("cpu", "tests.records")
    expected = {e.key: e for e in made.entries()}
    assert read == expected
    stored = unpackb((DATA / "cache" / "cpu" / "tests.records.msgpack").read_bytes())
    for key, e in expected.items():
        assert stored["entries"][key] == packb(e.to_dict()), key


def test_a_tuning_result_file_of_that_format_reads_as_it_did():
    assert result_files.load(DATA / "result.msgpack") == made.entries()
    assert result_files.dumps(made.entries()) == (DATA / "result.msgpack").read_bytes()


def test_a_sweep_plan_and_a_code_digest_of_that_format_read_as_they_did():
    raw = (DATA / "plan.msgpack").read_bytes()
    assert typed.decode(SweepPlan, unpackb(raw)) == made.plan()
    assert packb(typed.encode(made.plan())) == raw
    raw = (DATA / "digest.msgpack").read_bytes()
    assert typed.decode(CodeDigest, unpackb(raw)) == made.code_digest()
    assert packb(typed.encode(made.code_digest())) == raw


def test_a_sidecar_of_that_format_reads_as_it_did():
    raw = unpackb((DATA / "jaxtune-info.msgpack").read_bytes())
    info, iterations = read_sidecar(raw)
    assert iterations == 3
    expected = made.capture_info()
    for name in ("logdir", "platform", "device_kind", "fusions", "autotuned", "costs"):
        assert getattr(info, name) == getattr(expected, name), name
    for name in ("sources", "hints", "configs", "timings", "env"):
        assert getattr(info, name) == getattr(expected, name), name
    assert {k: tuple(v) for k, v in info.hlo.items()} == dict(expected.hlo)
    assert info.kernels == expected.kernels
    (call,) = info.calls
    assert _call_fields(call) == _call_fields(raw["calls"][0])
    assert call.code == CodeDigest(digest=raw["calls"][0]["code"][0], parts=(call.code.parts))
    assert call.timing == "forward" and call.request["plan"]["kernel"] == "tests.records"
    # What this jaxtune writes for it is what that one wrote, with the pass its sweep times
    # as a field of its own (that one kept it only in the request's plan), and a version
    # number besides.
    assert call.to_wire() == {**raw["calls"][0], "timing": "forward"}
    # A kernel record is written with all its fields, as every capture wrote it (this
    # file's, made by hand, left three out).
    (kernel,) = raw["kernels"]
    full = {"io_bytes": None, "source": None, "call_site": None, **kernel}
    assert info.to_dict() == {
        **{k: v for k, v in raw.items() if k != "iterations"},
        "kernels": [full],
        "calls": [call.to_wire()],
        "v": 1,
    }


def test_a_sidecar_is_one_typed_record_written_as_it_was(tmp_path):
    """The sidecar is written through the typed codec as one record, byte for byte what
    jaxtune wrote by hand before (the capture info's map, then ``iterations``), and reads
    back as the capture info and the count it was written from."""
    info = made.capture_info()
    remember(tmp_path, info, 3)
    written = (tmp_path / INFO_FILE).read_bytes()
    assert written == packb({**info.to_dict(), "iterations": 3})
    raw = unpackb(written)
    keys = list(raw)
    assert (keys[0], keys[-1]) == ("v", "iterations")
    assert raw["kernels"] == [
        {
            "name": "k",
            "scope": ["jit(f)", "k"],
            "per_step": 1,
            "io_bytes": None,
            "cost_estimate": {"flops": 16.0},
            "source": None,
            "call_site": None,
            "inside": None,
        }
    ]
    back, iterations = read_sidecar(raw)
    assert iterations == 3
    assert dataclasses.replace(back, calls=()) == dataclasses.replace(info, calls=())
    assert back.kernels == info.kernels and back.configs == info.configs


def test_a_calls_file_of_that_format_reads_and_the_new_one_carries_a_version(tmp_path):
    """``report.calls.msgpack`` was the bare list of the calls (version 1): such a file
    reads as it did; this jaxtune writes one record, ``{"v": 2, "calls": [...]}``."""
    from jaxtune._profiling import saved

    raw = unpackb((DATA / "jaxtune-info.msgpack").read_bytes())["calls"]
    old = tmp_path / "old.calls.msgpack"
    old.write_bytes(packb(raw))  # as Profile.save wrote it then
    (call,) = saved.read_calls(old)
    assert _call_fields(call) == _call_fields(raw[0])
    assert saved.calls_bytes((call,)) == packb({"v": 2, "calls": [call.to_wire()]})
    new = tmp_path / "new.calls.msgpack"
    new.write_bytes(saved.calls_bytes((call,)))
    assert saved.read_calls(new) == (call,)


def _call_fields(call):
    """What a reader of a recorded call uses, read by name (a map or a typed call)."""
    get = call.get if isinstance(call, dict) else lambda name: getattr(call, name)
    return {
        name: get(name)
        for name in ("kernel", "key", "source", "entry_timing", "config", "device_kind", "stale")
    }


def test_a_recording_of_that_format_reads_as_it_did():
    from jaxtune._cli.tune import _read_recording
    from jaxtune._tuning.sweep.requests import read_request, with_recorded_values

    recording = _read_recording(str(DATA / "recording.msgpack"))
    (record,) = recording.calls
    stopped = recording.stopped
    assert _call_fields(record) == {
        "kernel": "tests.records",
        "key": "f32[8]",
        "source": "default",
        "entry_timing": "",
        "config": {"scale": 1},
        "device_kind": "cpu",
        "stale": "",
    }
    assert stopped is not None and stopped.compiles == 1 and stopped.settle_s == 0.5
    (values,) = recording.values_of(record)
    assert values.summary == {"x": ""} and values.dropped == ()
    kept = record.request  # carried as it was kept: a request of version 1, its fields on top
    assert "v" not in kept and {"task_id", "plan"} <= set(kept)
    request = with_recorded_values(read_request(kept), [values])
    assert (request.handler, request.op) == ("jaxtune._tuning.sweep.serve", "measure")
    assert request.ref is not None and request.ref.kernel == "tests.records"
    assert request.fields.task_id == kept["task_id"] and request.fields.work is None
    assert request.fields.plan is not None and request.fields.plan.kernel == "tests.records"
    assert request.fields.plan.values.arguments["x"].source == "recorded"
    assert request.args == values.args
    # Written again, it is a request of this version: its fields a record of their own.
    written = request.recorded().to_wire()
    assert written["v"] == 2 and written["fields"]["task_id"] == kept["task_id"]
    assert read_request(written) == request


def test_the_request_a_sidecar_of_that_format_kept_reads_as_a_sweep_request():
    """A profile's sidecar carries its calls' requests as they were kept (the report never
    reads them); ``jaxtune tune --from-profile`` reads each as a sweep request, and a damaged
    one is refused with its field named."""
    from jaxtune._isolation.context import JaxState
    from jaxtune._isolation.frames import FrameError
    from jaxtune._tuning.sweep.requests import read_request

    raw = unpackb((DATA / "jaxtune-info.msgpack").read_bytes())
    info, _ = read_sidecar(raw)
    (call,) = info.calls
    kept = raw["calls"][0]["request"]
    assert call.request == kept
    request = read_request(call.request)
    assert request.fields.plan == typed.decode(SweepPlan, kept["plan"])
    assert request.ref is not None and request.ref.qualname == "scaled"
    assert request.jax_state == typed.decode(JaxState, kept["jax_state"])
    assert request.args == kept["args"]
    damaged = {**kept, "plan": {**kept["plan"], "configs": 5}}
    with pytest.raises(FrameError, match=r"request.fields.plan.configs: expected a list"):
        read_request(damaged)


def test_a_recorded_call_and_a_sidecar_of_another_shape_are_refused_by_field():
    raw = unpackb((DATA / "jaxtune-info.msgpack").read_bytes())
    bad = {**raw, "calls": [{**raw["calls"][0], "code": "abc"}]}
    with pytest.raises(ValueError, match=r"capture info's calls\[0\].code: expected a CodeDigest"):
        CaptureInfo.from_dict(bad)
    with pytest.raises(ValueError, match=r"report.calls.msgpack, call 0: source: expected one of"):
        RecordedCall.read({**raw["calls"][0], "source": "?"}, "report.calls.msgpack, call 0")
    with pytest.raises(ValueError, match=r"a CaptureInfo of version 2, written by a newer"):
        CaptureInfo.from_dict({**raw, "v": 2})


def test_a_recorded_call_keeps_why_its_entry_is_stale_as_a_reason():
    """A stale call's reason is written beside its words, so no reader parses the words;
    a recording written before the field reads its reason from the words, and a fresh call
    is written as before (no new key)."""
    from jaxtune._core.vocabulary import StaleReason
    from jaxtune._tuning.staleness import recorded_reason

    raw = unpackb((DATA / "jaxtune-info.msgpack").read_bytes())["calls"][0]
    words = "tuned with another toolchain (jax 0.4.1, now 0.4.30)"
    call = RecordedCall.read({**raw, "stale": words})
    assert call.stale_reason is None and recorded_reason(call) is StaleReason.TOOLCHAIN
    now = dataclasses.replace(call, stale_reason=StaleReason.TOOLCHAIN)
    written = unpackb(packb(now.to_wire()))
    assert written["stale_reason"] == "toolchain"
    assert RecordedCall.read(written) == now and recorded_reason(now) is StaleReason.TOOLCHAIN
    assert "stale_reason" not in RecordedCall.read(raw).to_wire()


def test_a_recorded_call_keeps_the_pass_its_sweep_times_as_a_field():
    """``timing`` is written beside the request (left out when empty) and read back as
    written; a call of a recording written before the field takes it from its request's
    plan, and a call without a sweep has none."""
    raw = unpackb((DATA / "jaxtune-info.msgpack").read_bytes())["calls"][0]
    assert "timing" not in raw and RecordedCall.read(raw).timing == "forward"
    call = RecordedCall.read({**raw, "timing": "vjp"})
    assert call.timing == "vjp" and RecordedCall.read(call.to_wire()) == call
    bare = RecordedCall(kernel="k", key="f32[8]", source="default")
    assert bare.timing == "" and "timing" not in bare.to_wire()
