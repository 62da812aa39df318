"""`TuningResult`: lossless bytes and file round trips, an immutable mapping, merging,
the table (the pass timed, how the winner was decided, one unit a column), scopes, and
packing that never runs code.

Covers docs/tuning-result.md, "TuningResult".
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import jaxtune
from jaxtune._core.codec import packb, unpackb
from jaxtune._core.vocabulary import Entry, Failure, Measurement


def full_entry(key="f32[8]", config=None, kernel="k"):
    return Entry(
        kernel=kernel,
        device_kind="cpu",
        key=key,
        config=config or {"block": (8, 16), "layout": "nt", "fast": True},
        time_us=2.5,
        default_config={"block": (4, 4), "layout": "nn", "fast": False},
        default_time_us=10.0,
        measurements=(
            Measurement(
                config={"block": (8, 16)},
                median_us=2.5,
                min_us=2.0,
                spread=0.05,
                samples=40,
                compile_s=0.1,
            ),
            Measurement(
                config={"block": (16, 16)},
                median_us=9.0,
                min_us=8.5,
                spread=0.0,
                samples=3,
                compile_s=0.1,
                dropped=True,
            ),
            Failure(config={"block": (2, 2)}, stage="check", reason="max abs error 3 > 1e-4"),
            Failure(config={"block": (1, 1)}, stage="crash", reason="SIGSEGV"),
        ),
        versions={"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": None},
        created=1234.5,
        kernel_version="3",
        shapes=(("f32", (8,)),),
        statics="transpose=False",
    )


def test_bytes_round_trip_is_lossless_failures_included():
    r = jaxtune.TuningResult.of(full_entry(), full_entry(key="f32[16]"))
    back = jaxtune.TuningResult.loads(r.dumps())
    assert back == r
    e = back[("k", "cpu", "f32[8]")]
    assert e.config["block"] == (8, 16)  # tuples stay tuples
    assert isinstance(e.measurements[2], Failure) and e.measurements[2].stage == "check"
    assert e.measurements[1].dropped is True
    assert e.speedup == pytest.approx(4.0)


def test_file_round_trip(tmp_path):
    r = jaxtune.TuningResult.of(full_entry())
    path = r.save(tmp_path / "sub" / "tuned.msgpack")
    assert jaxtune.TuningResult.load(path) == r


def test_mapping_is_immutable():
    r = jaxtune.TuningResult.of(full_entry())
    with pytest.raises(TypeError):
        r[("k", "cpu", "x")] = full_entry()  # type: ignore[index]
    with pytest.raises(TypeError):
        hash(r)
    assert len(r) == 1 and list(r) == [("k", "cpu", "f32[8]")]


def test_merge_right_side_wins():
    left = jaxtune.TuningResult.of(full_entry(config={"block": 1}), full_entry(key="a"))
    right = jaxtune.TuningResult.of(full_entry(config={"block": 2}))
    merged = left | right
    assert merged[("k", "cpu", "f32[8]")].config == {"block": 2}
    assert len(merged) == 2
    assert (right | left)[("k", "cpu", "f32[8]")].config == {"block": 1}


def test_loads_rejects_garbage_and_future_schema():
    with pytest.raises(jaxtune.CacheError, match="not a jaxtune TuningResult"):
        jaxtune.TuningResult.loads(b"\xc1")
    with pytest.raises(jaxtune.CacheError, match="'format' field is missing"):
        jaxtune.TuningResult.loads(packb({"entries": []}))
    future = packb({"format": "jaxtune.TuningResult", "schema": 99, "entries": []})
    with pytest.raises(jaxtune.CacheError, match="schema 99, newer than"):
        jaxtune.TuningResult.loads(future)


def test_table_lists_each_entry():
    table = jaxtune.TuningResult.of(full_entry()).table()
    header, _, row = table.splitlines()
    assert header.split() == [
        "kernel",
        "device",
        "key",
        "default",
        "us",
        "best",
        "us",
        "speedup",
        "pass",
        "config",
    ]
    assert "4.00x" in row and " 10.0 " in row and " 2.50 " in row and "layout='nt'" in row


@pytest.mark.parametrize(("timing", "shown"), [("forward", "forward"), ("vjp", "fwd+bwd")])
def test_the_table_names_the_pass_timed(timing, shown):
    table = jaxtune.TuningResult.of(dataclasses.replace(full_entry(), timing=timing)).table()
    header, _, row = table.splitlines()
    column = header.split().index("pass") - 2  # "default us" and "best us" are two words
    assert row.split()[column] == shown


def test_the_table_says_how_the_winner_was_decided():
    margin = {"rival": {"block": 64}, "ratio": 1.31, "low": 1.25, "high": 1.4}
    clear = dataclasses.replace(full_entry(), key="a", decision="clear", margin=margin)
    tie = dataclasses.replace(
        full_entry(), key="b", decision="tie", tie=True, margin={**margin, "ratio": 1.01}
    )
    table = jaxtune.TuningResult.of(clear, tie).table()
    assert "decided: clear: 1.31x ahead of block=64 (95 % interval 1.25-1.40)" in table
    assert "decided: tie with block=64: 1.01x (95 % interval 1.25-1.40)" in table
    # Through the codec and back, with the timer and the pass.
    again = jaxtune.TuningResult.loads(
        jaxtune.TuningResult.of(dataclasses.replace(clear, timer="wall", timing="vjp")).dumps()
    )
    (entry,) = again.values()
    assert (entry.decision, entry.margin, entry.timer, entry.timing) == (
        "clear",
        margin,
        "wall",
        "vjp",
    )


def test_table_uses_one_unit_per_time_column():
    slow = dataclasses.replace(full_entry(), key="a", time_us=33_516.7, default_time_us=957_000.0)
    fast = dataclasses.replace(full_entry(), key="b", time_us=12.0, default_time_us=40.0)
    table = jaxtune.TuningResult.of(slow, fast).table()
    assert "default ms" in table and "best ms" in table
    assert "957.0" in table and "33.5" in table and "0.012" in table and "0.040" in table
    assert " us" not in table.splitlines()[2] and "33516.7" not in table
    # Values far below the column's unit keep three significant digits, not 0.000.
    huge = dataclasses.replace(full_entry(), key="c", time_us=1_170_000.0, default_time_us=None)
    table = jaxtune.TuningResult.of(huge, fast).table()
    assert "best s" in table and "1.17" in table and "0.0000120" in table


def test_packing_never_runs_code_and_rejects_objects():
    with pytest.raises(TypeError, match="cannot store"):
        packb({"x": object()})
    assert unpackb(packb({"a": (1, (2, 3)), "b": np.int64(3)})) == {"a": (1, (2, 3)), "b": 3}
    assert unpackb(packb(np.float32(1.5))) == 1.5
    assert ml_dtypes.bfloat16  # the dtype module the sweep uses is importable


def test_scopes_nest_and_unwind():
    a = jaxtune.TuningResult.of(full_entry())
    b = jaxtune.TuningResult.of(full_entry(config={"block": 2}))
    assert jaxtune._tuning.result.active_scopes() == ()
    with a:
        with b:
            assert jaxtune._tuning.result.active_scopes() == (a, b)
        assert jaxtune._tuning.result.active_scopes() == (a,)
    assert jaxtune._tuning.result.active_scopes() == ()


def test_deeply_nested_tuples_are_refused_not_a_crash():
    import msgpack

    from jaxtune._core.codec import MAX_DEPTH, DecodeError

    value: object = ()
    for _ in range(MAX_DEPTH - 1):  # `()` itself is the innermost level
        value = (value,)
    assert unpackb(packb(value)) == value
    with pytest.raises(DecodeError, match="nested deeper"):
        unpackb(packb((value,)))
    # A 1 KB file of 250 nested tuple extensions used to overflow the reader's C stack.
    hostile = msgpack.packb([])
    for _ in range(250):
        hostile = msgpack.packb([msgpack.ExtType(1, hostile)])
    assert len(hostile) < 1300
    with pytest.raises(DecodeError):
        unpackb(hostile)
    with pytest.raises(jaxtune.CacheError, match="decode failed"):
        jaxtune.TuningResult.loads(hostile)


def test_a_configs_time_is_what_the_decision_used():
    """A config timed in the rounds is shown at the median of its per-round times (what the
    entry's time and the decision use), not at the median of every sample it took."""
    raced = Measurement(
        config={"b": 1},
        median_us=266.6,
        min_us=170.0,
        spread=0.1,
        samples=40,
        compile_s=0.0,
        rounds_us=(180.0, 190.0, 182.6),
    )
    assert raced.time_us == 182.6
    first_pass_only = dataclasses.replace(raced, rounds_us=())
    assert first_pass_only.time_us == 266.6
