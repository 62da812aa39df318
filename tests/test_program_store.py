"""Lowered programs kept on disk (docs/autotuned.md, "Compiled programs kept on disk"): a
second sweep of the same space takes each config's program from the store instead of
tracing it, finds out when the code now lowers to something else, and a kernel
``jax.export`` cannot serialise is swept as before, with nothing kept."""

from __future__ import annotations

import os
import pathlib

import jax
import jax.numpy as jnp
import msgpack
import pytest

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._tuning.sweep import program_store
from jaxtune._tuning.sweep import runner as _runner

SPACE = [{"n": n} for n in (2, 3, 4)]
TRACES: list[int] = []  # one per trace of a kernel below, in this process


@jaxtune.autotuned(configs={"n": [2, 3, 4]}, name="tests.program_store.sines")
def sines(x, *, n):
    TRACES.append(n)
    # What the program is: read where no code digest sees it (an environment variable).
    scale = float(os.environ.get("JAXTUNE_TEST_KEPT_SCALE", "1"))
    for i in range(n):
        x = jnp.abs(jnp.sin(x)) * scale if i == 0 else jnp.abs(x)
    return x


@jaxtune.autotuned(configs={"n": [2, 3, 4]}, name="tests.program_store.calls_back")
def calls_back(x, *, n):
    TRACES.append(n)
    y = jax.pure_callback(lambda v: v, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    for i in range(n):
        y = jnp.abs(jnp.sin(y)) if i == 0 else jnp.abs(y)
    return y


def _sweep(kernel):
    """An in-process sweep of ``kernel`` over SPACE; the traces it made, and its outcome."""
    x = jnp.linspace(0.0, 1.0, 256)
    task = kernel.options.bound(kernel.options.bind((x,), {}), SPACE, SPACE[0]).sweep_task()
    TRACES.clear()
    outcome = _runner.InlineRunner().sweep(task)
    assert {m.config["n"] for m in outcome.measurements if m.ok} == {2, 3, 4}
    return list(TRACES), outcome


def _stored(tmp: pathlib.Path) -> list[pathlib.Path]:
    return sorted((tmp / "xla" / program_store.STORE_DIR).rglob("*.msgpack"))


@pytest.fixture(autouse=True)
def _unscaled(monkeypatch):
    monkeypatch.delenv("JAXTUNE_TEST_KEPT_SCALE", raising=False)


def test_a_second_sweep_traces_one_config_not_every_one(store_on, fast_timing):
    first, outcome = _sweep(sines)
    assert sorted(first) == [2, 3, 4]  # each config traced once (the check's run included)
    assert outcome.phases["lowering"] > 0 and "lowering_kept" not in outcome.phases
    files = _stored(store_on)
    assert len(files) == len(SPACE)
    record = msgpack.unpackb(files[0].read_bytes())
    assert record["format"] == "jaxtune.lowered" and isinstance(record["exported"], bytes)
    second, outcome = _sweep(sines)
    # Only the first config taken from the store is traced again, to compare the two.
    assert len(second) == 1, second
    assert all(m.ok for m in outcome.measurements)
    # The breakdown shows it: the programs loaded are part of the lowering phase.
    assert 0 < outcome.phases["lowering_kept"] <= outcome.phases["lowering"]


def test_code_that_lowers_differently_now_is_traced_again(store_on, monkeypatch, fast_timing):
    _sweep(sines)
    monkeypatch.setenv("JAXTUNE_TEST_KEPT_SCALE", "2")
    second, _ = _sweep(sines)
    # The first kept program no longer matched: every config was traced afresh.
    assert sorted(second) == [2, 3, 4]
    monkeypatch.setenv("JAXTUNE_TEST_KEPT_SCALE", "2")
    third, _ = _sweep(sines)
    assert len(third) == 1, third  # and the programs written again are now the kept ones


def test_a_kernel_export_cannot_serialise_is_swept_as_before(store_on, fast_timing):
    first, outcome = _sweep(calls_back)
    # One config traced twice (the export that failed, then directly), the others once.
    assert len(first) == len(SPACE) + 1, first
    assert not _stored(store_on)
    assert all(m.ok for m in outcome.measurements)


def test_turned_off_nothing_is_kept(monkeypatch, fast_timing):
    monkeypatch.setenv("JAXTUNE_COMPILE_CACHE", "0")
    first, _ = _sweep(sines)
    second, _ = _sweep(sines)
    assert sorted(first) == sorted(second) == [2, 3, 4]
    assert not _stored(pathlib.Path(_settings.settings().cache_dir))


def test_an_unreadable_kept_program_is_lowered_afresh(store_on, fast_timing):
    _sweep(sines)
    for f in _stored(store_on):
        f.write_bytes(b"\x00not msgpack")
    second, outcome = _sweep(sines)
    assert sorted(second) == [2, 3, 4]
    assert all(m.ok for m in outcome.measurements)


def test_without_flatbuffers_nothing_is_kept_and_the_sweep_is_as_before(
    store_on, monkeypatch, fast_timing
):
    monkeypatch.setattr(program_store, "serialisable", lambda: False)
    first, outcome = _sweep(sines)
    assert sorted(first) == [2, 3, 4]
    assert all(m.ok for m in outcome.measurements)
    assert not _stored(store_on)


def test_a_kept_record_is_typed_and_read_only_when_it_is_the_stores_own(tmp_path):
    store = program_store.ProgramStore(tmp_path)
    store.save("a=1", b"program")
    assert store.load("a=1") == b"program"
    path = next(tmp_path.glob("*.msgpack"))
    raw = msgpack.unpackb(path.read_bytes(), raw=False)
    assert raw == {"format": "jaxtune.lowered", "v": 1, "config": "a=1", "exported": b"program"}
    # A record written before the typed codec ("version", not "v") still reads.
    old = {"format": "jaxtune.lowered", "version": 1, "config": "a=1", "exported": b"old"}
    path.write_bytes(msgpack.packb(old, use_bin_type=True))
    assert store.load("a=1") == b"old"
    untagged = {k: v for k, v in raw.items() if k != "format"}
    for wrong in (
        {**raw, "format": "other"},
        {**raw, "v": 2},  # a later version
        {**raw, "exported": "text"},
        {**raw, "config": "a=2"},
        untagged,
        [1, 2],
    ):
        path.write_bytes(msgpack.packb(wrong, use_bin_type=True))
        assert store.load("a=1") is None, wrong
    store.trusted = True
    assert store.remember_failure("a=1", "Mosaic failed: scoped vmem exceeded")
    assert store.failure("a=1") == "Mosaic failed: scoped vmem exceeded"
    assert not store.remember_failure("a=1", "out of host memory")


def test_the_backends_flags_are_part_of_the_key_only_where_set(monkeypatch):
    """A kept failure (Mosaic out of scoped VMEM, a refusal by the filter's VMEM rule)
    holds for the flags it was found under: a flag that raises the limit makes a new store;
    with no flag set, the key is what it always was."""
    from jaxtune._tuning.sweep.program_store import task_key

    key = dict(kernel="k", key="x", code="c", timing="forward", args=(jnp.ones(2),))
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    plain = task_key(**key)
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_scoped_vmem_limit_kib=65536")
    raised = task_key(**key)
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "")
    assert plain != raised and task_key(**key) == plain
