"""Files of every record kind written by the jaxtune of 2026-12-05, before the records
moved to one typed codec (``tests/data/records-2026-12/``, made by its ``make.py`` from
:mod:`records_2026_12`): they read as they did, and what this jaxtune writes for the same
values is byte for byte what that one wrote."""

from __future__ import annotations

import pathlib
import shutil

import records_2026_12 as made

from jaxtune._core.codec import packb, unpackb
from jaxtune._profiling.sidecar import read_sidecar
from jaxtune._tuning.digest import CodeDigest
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
    assert SweepPlan.from_dict(unpackb(raw)) == made.plan()
    assert packb(made.plan().to_dict()) == raw
    raw = (DATA / "digest.msgpack").read_bytes()
    assert CodeDigest.from_wire(unpackb(raw)) == made.code_digest()
    assert packb(made.code_digest().to_wire()) == raw


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
    assert [dict(k) for k in info.kernels] == [dict(k) for k in expected.kernels]
    (call,) = info.calls
    assert _call_fields(call) == _call_fields(raw["calls"][0])


def _call_fields(call):
    """What a reader of a recorded call uses, read by name (a map or a typed call)."""
    get = call.get if isinstance(call, dict) else lambda name: getattr(call, name)
    return {
        name: get(name)
        for name in ("kernel", "key", "source", "entry_timing", "config", "device_kind", "stale")
    }


def test_a_recording_of_that_format_reads_as_it_did():
    from jaxtune._cli.tune import _read_records

    records, stopped = _read_records(str(DATA / "recording.msgpack"))
    (record,) = records
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
