"""Property-based fuzzing of cache files, TuningResult files and traces (docs/errors.md,
"Hostile input": a failure is a jaxtune error or warning, never a crash).

Run as ``python fuzzing.py [examples]`` in a child process (a crash there is a test failure,
not a dead test run): prints one JSON line of outcome counts; exits 1 on any exception that
is not a jaxtune error, 0 otherwise. Warnings are outcomes, not failures.
"""

from __future__ import annotations

import collections
import json
import pathlib
import sys
import tempfile
import traceback
import warnings

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.profiler import ProfileData
from traces import GPU_TRACE, TPU_TRACE

import jaxtune
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning.result import TuningResult
from jaxtune._tuning.store.cache import CacheStore
from jaxtune._tuning.store.layout import CACHE_SCHEMA
from jaxtune._tuning.store.result_files import SCHEMA_VERSION

COUNTS: collections.Counter[str] = collections.Counter()

GOOD = Entry(
    kernel="k",
    device_kind="cpu",
    key="f32[8]",
    config={"block": 8, "order": ("a", 1)},
    time_us=1.0,
    default_config={"block": 4, "order": ("b", 2)},
    default_time_us=3.0,
)
#: A cache file in the current layout (each entry its own msgpack) and in schema 1 (maps).
GOOD_FILES = [
    msgpack.packb(
        {
            "schema": CACHE_SCHEMA,
            "format": "jaxtune.cache",
            "entries": {GOOD.key: msgpack.packb(GOOD.to_dict())},
        }
    ),
    msgpack.packb({"schema": 1, "format": "jaxtune.cache", "entries": {GOOD.key: GOOD.to_dict()}}),
]
GOOD_RESULT = TuningResult.of(GOOD).dumps()
TRACES = [ProfileData.text_proto_to_serialized_xspace(t) for t in (TPU_TRACE, GPU_TRACE)]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=20),
)


def _ext(pair: tuple[int, object]) -> msgpack.ExtType:
    code, inner = pair
    return msgpack.ExtType(code, msgpack.packb(inner))


values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=10), inner, max_size=4),
        st.tuples(st.integers(0, 6), inner).map(_ext),
    ),
    max_leaves=30,
)


@st.composite
def damaged_entries(draw: st.DrawFn) -> dict:
    record = GOOD.to_dict()
    field = draw(st.sampled_from(sorted(record)))
    if draw(st.booleans()):
        record[field] = draw(values)
    else:
        del record[field]
    return record


@st.composite
def cache_files(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["bytes", "flip", "value", "doc"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "flip":
        return _mutate(draw, draw(st.sampled_from(GOOD_FILES)))
    if kind == "value":
        return msgpack.packb(draw(values))
    records = st.one_of(values, damaged_entries(), st.just(GOOD.to_dict()))
    # In the current layout each entry is its own msgpack, itself possibly damaged.
    packed = st.one_of(records.map(msgpack.packb), records.map(msgpack.packb).map(_damaged))
    entries = draw(
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.just(GOOD.key)),
            st.one_of(records, packed),
            max_size=4,
        )
    )
    schemas = st.one_of(st.sampled_from([1, CACHE_SCHEMA]), values)
    doc = {"schema": draw(schemas), "format": "jaxtune.cache", "entries": entries}
    return msgpack.packb(doc)


def _damaged(data: bytes) -> bytes:
    return data[: len(data) // 2] + b"\xc1" + data[len(data) // 2 + 1 :]


def _mutate(draw: st.DrawFn, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if op == "flip" and out:
            out[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del out[at : at + draw(st.integers(1, 16))]
        else:
            out[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(out)


@st.composite
def result_files(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return _mutate(draw, GOOD_RESULT)
    records = st.one_of(values, damaged_entries(), st.just(GOOD.to_dict()))
    doc = {"schema": SCHEMA_VERSION, "format": "jaxtune.TuningResult"}
    doc["entries"] = draw(st.lists(records, max_size=3))
    return msgpack.packb(doc)


@st.composite
def trace_files(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=300))
    if kind <= 3:  # one byte changed: often still a trace, so both outcomes are reached
        data = bytearray(draw(st.sampled_from(TRACES)))
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    return _mutate(draw, draw(st.sampled_from(TRACES)))


def _outcome(name: str, caught: list[warnings.WarningMessage]) -> None:
    for w in caught:
        assert issubclass(w.category, jaxtune.JaxtuneWarning), w
    COUNTS[f"{name}: " + ("warning" if caught else "ok")] += 1


#: No deadline (a loaded machine is slow), no example database written into the repository.
FUZZ = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


@given(cache_files())
def fuzz_cache_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = pathlib.Path(root) / "cpu" / "k.msgpack"
        path.parent.mkdir()
        path.write_bytes(data)
        store = CacheStore(root)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            entries = store.read("cpu", "k")
            assert all(isinstance(e, Entry) for e in entries.values())
            # A write may be refused (a file from a newer schema): then it is kept in memory.
            saved = store.save([GOOD.__class__(**{**_fields(GOOD), "key": "new"})])
            after = (CacheStore(root) if saved else store).read("cpu", "k")
            assert after["new"].config == GOOD.config  # the write is never lost
            assert set(entries) <= set(after)  # nor what was readable before it
            COUNTS["write after: " + ("saved" if saved else "kept in memory")] += 1
        _outcome("cache file", caught)


def _fields(entry: Entry) -> dict:
    return {name: getattr(entry, name) for name in entry.__dataclass_fields__}


@given(result_files())
def fuzz_result_file(data: bytes) -> None:
    try:
        TuningResult.loads(data)
    except jaxtune.CacheError:
        COUNTS["result file: CacheError"] += 1
    else:
        COUNTS["result file: ok"] += 1


@given(trace_files())
def fuzz_trace(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = pathlib.Path(root) / "t.xplane.pb"
        path.write_bytes(data)
        try:
            jaxtune.Profile.from_trace(path)
        except jaxtune.ProfileError:
            COUNTS["trace: ProfileError"] += 1
        else:
            COUNTS["trace: ok"] += 1


def main(examples: int) -> int:
    failed = False
    for fuzz in (fuzz_cache_file, fuzz_result_file, fuzz_trace):
        try:
            settings(max_examples=examples, **FUZZ)(fuzz)()
        except Exception:
            traceback.print_exc()
            failed = True
    print(json.dumps(dict(sorted(COUNTS.items()))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
