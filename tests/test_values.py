"""Sweeps on the values the program runs (docs/values.md).

Each flow is tried on kernels whose work depends on the values of their integer and
boolean inputs (tests/value_kernels.py: a loop count, lengths, group sizes, ids, a mask),
where made-up values pick the wrong config (about 3x slower), and the stored config is
checked against the one the kernels' design makes fastest on the program's own values.
The times themselves (the pick against calls timed on those values, the sweep's time
against the call's) are measured side by side by ``bench/bench_values.py``.
"""

from __future__ import annotations

import dataclasses
import inspect
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import value_kernels as vk

import jaxtune
from jaxtune._core import typed
from jaxtune._core.codec import packb, unpackb
from jaxtune._core.vocabulary import ArgumentValues, Entry, SweepValues, WorkHint
from jaxtune._tuning.lookup import device_kind
from jaxtune._tuning.signature import Signature
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.sweep import inputs as _inputs

pytestmark = [pytest.mark.child, pytest.mark.slow]

TESTS = pathlib.Path(__file__).resolve().parent


def _entries() -> dict[str, Entry]:
    out = {}
    for name in vk.CALLS:
        kernel = getattr(vk, name)
        found = [e for e in _cache.user_cache().all_entries() if e.kernel == kernel.kernel_id]
        assert len(found) == 1, (name, found)
        out[name] = found[0]
    return out


def _check_pick(name: str, entry: Entry, values, *, source: str) -> None:
    """The stored config is the chunk the kernels' design makes fastest on ``values``
    (``vk.right_chunk``: about 3x apart on CPU, where made-up values pick the other one),
    and the entry says where the values came from and summarises these very values. How
    close the stored pick and the sweep's time come to calls timed on the program's values
    is a benchmark's measurement, side by side in one run (``bench/bench_values.py``), not
    a threshold here."""
    assert dict(entry.config) == {"chunk": vk.right_chunk(name, values)}, (name, entry)
    value_arg = vk.CALLS[name][0]
    about = entry.values.arguments[value_arg]
    assert about.source == source, entry.values
    sets = values if isinstance(values, list) else [values]
    assert about.summary == tuple(_inputs.summarise(v) for v in sets), (entry.values, sets)


def test_jaxtune_tune_sweeps_on_the_values_the_program_ran(cli, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(vk.PROGRAM.format(tests=str(TESTS)))
    proc = cli("tune", "--", "python", str(prog), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "values: " in proc.stdout and "recorded" in proc.stdout, proc.stdout
    assert "synthesised" not in proc.stderr, proc.stderr
    values = vk.program_values()
    for name, entry in _entries().items():
        _check_pick(name, entry, values[vk.CALLS[name][0]], source="recorded")
    # `cache show` says it too.
    shown = cli("cache", "show", vk.by_groups.kernel_id)
    assert shown.returncode == 0, shown.stderr
    assert "values: group_sizes: recorded (s32[4] 1024..4096 sum 8192" in shown.stdout


MIX_PROGRAM = """
import sys
sys.path.insert(0, {tests!r})
import jax, jax.numpy as jnp
import value_kernels as vk

step = jax.jit(vk.loop_count)
x, w, _, _ = vk.arrays()
# A prefill-like call, then decode-like ones: one key, three value sets.
for n in (6000, 12, 12, 40, 12):
    jax.block_until_ready(step(x, w, jnp.int32(n)))
"""


def test_several_value_sets_of_one_call_are_timed_as_a_mix(cli, tmp_path, monkeypatch):
    prog = tmp_path / "prog.py"
    prog.write_text(MIX_PROGRAM.format(tests=str(TESTS)))
    monkeypatch.setenv("JAXTUNE_VALUE_SETS", "3")
    proc = cli("tune", "--", "python", str(prog), timeout=600)
    assert proc.returncode == 0, proc.stderr
    (entry,) = [e for e in _cache.user_cache().all_entries() if e.kernel == vk.loop_count.kernel_id]
    assert entry.values.sets == 3, entry.values
    summaries = entry.values.arguments["n"].summary
    assert summaries == ("s32[] 6000..6000", "s32[] 12..12", "s32[] 40..40"), summaries
    assert "3 value sets timed as a mix" in proc.stdout, proc.stdout
    # 6,052 rows in all: the largest chunk, as for the prefill-like call alone.
    mix = [jnp.int32(6000), jnp.int32(12), jnp.int32(40)]
    assert dict(entry.config) == {"chunk": vk.right_chunk("loop_count", mix)}, entry


def _step_args():
    a = vk.arrays()
    v = vk.program_values()
    return (*a, v["n"], v["lengths"], v["group_sizes"], v["ids"], v["mask"])


def test_jaxtune_tune_with_arrays_sweeps_on_the_values_reaching_each_kernel():
    args = _step_args()
    # A step that donates an argument: the run that collects the values consumes none.
    step = jax.jit(lambda x, *rest: (vk.step(x, *rest), x + 1), donate_argnums=(0,))
    result = jaxtune.tune(step, *args)
    assert not args[0].is_deleted()
    values = vk.program_values()
    for name, entry in _entries().items():
        assert result[entry.kernel, device_kind(), entry.key] == entry
        _check_pick(name, entry, values[vk.CALLS[name][0]], source="caller")


def test_an_eager_call_in_tune_mode_sweeps_on_the_callers_arrays(monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    x, w, _, _ = vk.arrays()
    n = vk.program_values()["n"]
    # A variable changed after import is read at the next jaxtune call (docs/values.md).
    assert vk.loop_count.config_for(x, w, n).source == "default"
    vk.loop_count(x, w, n).block_until_ready()
    (entry,) = [e for e in _cache.user_cache().all_entries() if e.kernel == vk.loop_count.kernel_id]
    _check_pick("loop_count", entry, n, source="caller")


def test_tune_mode_inside_jit_warns_that_the_integers_are_made_up(monkeypatch, fresh_warnings):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    x, w, _, _ = vk.arrays(m=1024, d=32)
    with pytest.warns(jaxtune.SynthesisedValuesWarning, match=r"argument\(s\) n \(integers"):
        jax.jit(vk.loop_count)(x, w, jnp.int32(700)).block_until_ready()
    (entry,) = [e for e in _cache.user_cache().all_entries() if e.kernel == vk.loop_count.kernel_id]
    assert entry.values.arguments["n"].source == "synthesised"
    assert "n: synthesised (integers uniform in 0..16)" in entry.values_text


def test_a_check_failure_on_made_up_integers_says_it_may_be_the_values(fresh_warnings):
    # Made-up ids reach 16, one past a 16-row table: the unclipped config reads inf.
    table = jax.ShapeDtypeStruct((16, 4), jnp.float32)
    ids = jax.ShapeDtypeStruct((64,), jnp.int32)
    with pytest.warns(jaxtune.SynthesisedValuesWarning):
        result = vk.table_rows.tune(table, ids)
    (entry,) = result.values()
    (failure,) = [m for m in entry.measurements if not m.ok]
    assert "the integer/boolean argument(s) ids were synthesised" in failure.reason
    assert "may come from those made-up values, not from the config" in failure.reason


def test_made_up_values_are_placed_on_the_device_once():
    def kernel(x, n, *, c):
        return x[n]

    sig = Signature.bind(
        inspect.signature(kernel),
        (np.zeros((4, 3), np.float32), jax.ShapeDtypeStruct((), jnp.int32)),
        {},
        static_argnames=frozenset(),
        config_names=frozenset({"c"}),
    )
    (made,) = _inputs.make_inputs("k", sig)
    assert all(isinstance(v, jax.Array) for v in made.values()), made
    described = _inputs.describe_values(sig, inputs_given=False)
    assert described.arguments["x"] == ArgumentValues(source="caller")
    assert described.arguments["n"] == ArgumentValues(
        source="synthesised", integer=True, summary=("integers uniform in 0..16",)
    )
    # Written as the map jaxtune wrote by hand before the record: keys only where set.
    assert typed.encode(described) == {
        "sets": 1,
        "arguments": {
            "x": {"source": "caller"},
            "n": {
                "source": "synthesised",
                "integer": True,
                "summary": ["integers uniform in 0..16"],
            },
        },
    }


def _mask(n: int, true: int) -> np.ndarray:
    mask = np.zeros((n,), bool)
    mask[:true] = True
    return mask


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (np.array([5000, 0, 3000, 192], np.int32), "s32[4] 0..5000 sum 8192 median 1596, 1 zero"),
        (np.int32(7), "s32[] 7..7"),
        (_mask(4, 1), "pred[4] 25 % true"),
        (_mask(1000, 3), "pred[1000] 0.3 % true"),
        (np.zeros((2, 3), np.float32), ""),
    ],
)
def test_value_summaries(value, text):
    assert _inputs.summarise(value) == text


#: ``values`` maps as jaxtune wrote them (by hand, before they were a typed record): a
#: recorded mix with work hints, a call without array arguments, and an entry older than
#: the field.
WRITTEN_VALUES = [
    {
        "sets": 2,
        "arguments": {
            "n": {
                "source": "recorded",
                "integer": True,
                "summary": ["s32[] 6000..6000", "s32[] 12..12"],
            },
            "x": {"source": "recorded"},
            "ids": {"source": "recorded, partly synthesised", "integer": True},
            "w": {"source": "inputs="},
        },
        "work": {"flops": 1.4e11, "bytes": 2.5e9},
    },
    {"sets": 1, "arguments": {}, "work": {"bytes": 4096.0}},
    {"sets": 1, "arguments": {"x": {"source": "caller", "summary": []}}},
    {},
]


@pytest.mark.parametrize("values", WRITTEN_VALUES)
def test_an_entry_s_values_read_back_as_written_and_are_written_byte_for_byte(values):
    stored = packb({**_entry_map(), "values": values})
    entry = Entry.from_dict(unpackb(stored))
    assert packb(entry.to_dict()) == stored
    assert entry.summary()["values"] == values
    arguments = values.get("arguments", {})
    assert dict(entry.values.arguments or {}).keys() == arguments.keys()
    for name, about in arguments.items():
        read = entry.values.arguments[name]
        assert (read.source, read.integer) == (about["source"], about.get("integer", False))
        assert read.summary == (None if "summary" not in about else tuple(about["summary"]))
    assert entry.values.set_count == values.get("sets", 1)
    work = values.get("work")
    assert entry.values.work == (None if work is None else WorkHint(**work))


def test_a_recorded_call_s_values_keep_the_work_its_hints_count():
    """Once a recorded call's value sets arrive, its arguments say they were recorded and
    the work the kernel's hints counted stays, so the replayed sweep can flag a time past
    the peak as a traced one does."""
    from jaxtune._tuning.recorded import ValueSet

    described = SweepValues(
        arguments={"n": ArgumentValues(source="synthesised", integer=True)},
        work=WorkHint(flops=2e9, bytes=4e6),
    )
    sets = [
        ValueSet(kernel="k", key="x", args=(), kwargs={}, summary={"n": f"s32[] {v}..{v}"})
        for v in (3, 5)
    ]
    got = _inputs.recorded_values(described, sets)
    assert got.work == WorkHint(flops=2e9, bytes=4e6)
    assert got.sets == 2
    assert got.arguments == {
        "n": ArgumentValues(source="recorded", integer=True, summary=("s32[] 3..3", "s32[] 5..5"))
    }


def test_an_entry_s_values_read_by_attribute_say_where_they_came_from():
    entry = Entry.from_dict({**_entry_map(), "values": WRITTEN_VALUES[0]})
    assert entry.values_text == (
        "2 value sets timed as a mix; n: recorded (s32[] 6000..6000 | s32[] 12..12); "
        "ids: recorded, partly synthesised; w: inputs=; x: recorded"
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (5, r"field 'values' should be a SweepValues \(a map\), got int 5\."),
        ({"sets": "2"}, r"field 'sets' should be an int >= 0, got str '2' \(at values.sets\)"),
        ({"sets": -1}, r"field 'sets' should be an int >= 0, got int -1 \(at values.sets\)"),
        ({"arguments": ["x"]}, r"field 'arguments' should be a map, got list"),
        (
            {"arguments": {"x": {"source": 3}}},
            r"field 'source' should be a string, got int 3 \(at values.arguments\['x'\].source\)",
        ),
        (
            {"arguments": {"x": {"source": "caller", "summary": "s32[4]"}}},
            r"field 'summary' should be a list, got str 's32\[4\]' "
            r"\(at values.arguments\['x'\].summary\)",
        ),
        ({"work": {"flops": "many"}}, r"field 'flops' should be a number, got str 'many'"),
    ],
)
def test_a_damaged_values_field_is_named(values, message):
    with pytest.raises(jaxtune.CacheError, match=r"^entry: " + message):
        Entry.from_dict({**_entry_map(), "values": values})


def _entry_map() -> dict:
    return Entry(
        kernel="k",
        device_kind="cpu",
        key="f32[4]",
        config={"b": 1},
        time_us=1.0,
        default_config={"b": 1},
        default_time_us=2.0,
    ).to_dict()


def test_an_entry_older_than_values_reads_and_shows_nothing_new():
    old = {
        "kernel": "k",
        "device_kind": "cpu",
        "key": "f32[4]",
        "config": {"b": 1},
        "time_us": 1.0,
        "default_config": {"b": 1},
        "default_time_us": 1.0,
    }
    entry = Entry.from_dict(old)
    assert entry.values == SweepValues() and entry.values_text == ""


def test_a_time_past_the_peak_is_flagged():
    entry = Entry(
        kernel="k",
        device_kind="TPU v5 lite",
        key="bf16[8192,2048]",
        config={"t": 1},
        time_us=200.0,
        default_config={"t": 1},
        default_time_us=400.0,
        decision="single",
        values=SweepValues(sets=1, arguments={}, work=WorkHint(flops=1.4e11)),
    )
    from jaxtune._tuning.explain import decision_text

    text = decision_text(entry)
    assert "700 TFLOP/s (peak 197) on TPU v5e, past the peak" in text, text
    slower = dataclasses.replace(entry, time_us=800.0)  # 175 TFLOP/s: under the peak
    assert decision_text(slower) == "single"


EXPORTS = """
import sys
sys.path.insert(0, {tests!r})
import jax, jax.numpy as jnp
import value_kernels as vk

x, w, _, _ = vk.arrays(m=1024, d=32)
step = jax.jit(vk.loop_count)
jax.block_until_ready(step(x, w, jnp.int32(700)))
jax.export.export(step)(x, w, jnp.int32(700))  # a host callback cannot be exported
"""


def test_a_program_that_exports_records_no_values_with_value_sets_0(cli, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(EXPORTS.format(tests=str(TESTS)))
    proc = cli("tune", "--", "python", str(prog), env={"JAXTUNE_VALUE_SETS": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no values were recorded for integer/boolean argument(s) n" in proc.stderr
    assert "(JAXTUNE_VALUE_SETS=0 keeps none)" in proc.stderr  # the cause, not a guess
    (entry,) = [e for e in _cache.user_cache().all_entries() if e.kernel == vk.loop_count.kernel_id]
    assert entry.values.arguments["n"].source == "synthesised"


def test_jaxtune_tune_inside_a_recorded_program_exports_for_the_tpu(monkeypatch):
    """jaxtune.tune's kernel-finding traces add no callback to a recorded program: they
    may lower for another platform through jax.export, which cannot serialize one."""
    from jaxtune._tuning import values

    x, w, _, _ = vk.arrays(m=1024, d=32)
    with values.collecting():
        sites = jaxtune.locate(
            vk.loop_count, x, w, jax.ShapeDtypeStruct((), jnp.int32), platform="tpu"
        )
        assert values.collector() is not None
    assert [s.kernel_id for s in sites] == [vk.loop_count.kernel_id]
