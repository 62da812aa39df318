"""The cache file layout (schema 2: each entry its own msgpack bytes, decoded on first use)
and files written by earlier jaxtune versions (schema 1: each entry a map)."""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import types
import warnings

import msgpack
import pytest

import jaxtune
from jaxtune._core.codec import MAX_FILE_BYTES, UnsafeFileError, packb, read_bounded, unpackb
from jaxtune._core.vocabulary import Entry, Failure, Measurement
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.store.layout import CACHE_SCHEMA

HERE = pathlib.Path(__file__).resolve().parent
#: A cache directory written by jaxtune at commit 358017f (schema 1), from old_entries().
SCHEMA_1_DIR = HERE / "data" / "cache-schema1"


def old_entries() -> list[Entry]:
    """The entries stored in SCHEMA_1_DIR."""
    measured = (
        Measurement(
            config={"block": (8, 128), "order": "kn"},
            median_us=12.5,
            min_us=11.0,
            spread=0.04,
            samples=20,
            compile_s=0.3,
            low_us=12.0,
            high_us=13.0,
        ),
        Failure(config={"block": (16, 256), "order": "nk"}, stage="compile", reason="VMEM"),
    )
    return [
        Entry(
            kernel="tests.schema1",
            device_kind="cpu",
            key=f"f32[{n},512];transpose=False",
            config={"block": (8, 128), "order": "kn"},
            time_us=12.5,
            default_config={"block": (16, 256), "order": "nk"},
            default_time_us=20.0 + n,
            measurements=measured,
            versions={"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": None},
            created=1_700_000_000.0 + n,
            kernel_version="v3",
            shapes=(("f32", (n, 512)),),
            statics="transpose=False",
            search="exhaustive",
            space_size=2,
            speedup_range=(1.5, 1.7),
        )
        for n in (8, 64, 512)
    ]


def entry(key: str = "f32[8]", **kw) -> Entry:
    fields = {
        "kernel": "k",
        "device_kind": "cpu",
        "key": key,
        "config": {"block": 8},
        "time_us": 1.0,
        "default_config": {"block": 4},
        "default_time_us": 3.0,
    }
    return Entry(**{**fields, **kw})


def stored(path: pathlib.Path) -> dict:
    return msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)


def rewrite(path: pathlib.Path, key: str, blob: bytes) -> None:
    doc = stored(path)
    doc["entries"][key] = blob
    path.write_bytes(msgpack.packb(doc, use_bin_type=True))


def test_a_file_holds_each_entry_as_its_own_msgpack(tmp_path):
    store = _cache.CacheStore(tmp_path)
    e = entry(measurements=old_entries()[0].measurements, shapes=(("f32", (8,)),))
    store.write([e])
    doc = stored(store.path_for("cpu", "k"))
    assert (doc["schema"], doc["kernel_version"], CACHE_SCHEMA) == (2, "", 3)
    assert (doc["format"], doc["kernel"], doc["device_kind"]) == ("jaxtune.cache", "k", "cpu")
    assert isinstance(doc["entries"]["f32[8]"], bytes)
    assert Entry.from_dict(unpackb(doc["entries"]["f32[8]"])) == e
    assert _cache.CacheStore(tmp_path).lookup("k", "cpu", "f32[8]") == e


def test_a_schema_1_file_written_by_the_previous_jaxtune_still_loads(tmp_path):
    shutil.copytree(SCHEMA_1_DIR, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "cpu" / "tests.schema1.msgpack"
    assert stored(path)["schema"] == 1
    expected = {e.key: e for e in old_entries()}
    store = _cache.CacheStore(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        key = "f32[64,512];transpose=False"
        assert store.lookup("tests.schema1", "cpu", key) == expected[key]
        assert store.read("cpu", "tests.schema1") == expected
    # The next write stores the old entries in the new layout, unchanged.
    new = entry(key="f32[9]", kernel="tests.schema1")
    store.write([new])
    assert stored(path)["schema"] == CACHE_SCHEMA
    assert _cache.CacheStore(tmp_path).read("cpu", "tests.schema1") == {**expected, new.key: new}


def test_an_entry_is_checked_when_first_looked_up_not_when_the_file_is_read(tmp_path):
    store = _cache.CacheStore(tmp_path)
    store.write([entry(key=f"f32[{i}]") for i in range(5)])
    path = store.path_for("cpu", "k")
    rewrite(path, "f32[3]", packb({**entry(key="f32[3]").to_dict(), "time_us": "fast"}))
    fresh = _cache.CacheStore(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the bad entry is not decoded: nothing to report
        assert fresh.lookup("k", "cpu", "f32[1]") == entry(key="f32[1]")
    with pytest.warns(jaxtune.JaxtuneWarning, match=r"an entry is malformed .*'f32\[3\]'.*"):
        assert fresh.lookup("k", "cpu", "f32[3]") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once per file
        assert fresh.lookup("k", "cpu", "f32[3]") is None
        assert set(fresh.read("cpu", "k")) == {"f32[0]", "f32[1]", "f32[2]", "f32[4]"}
    assert path.exists() and not list(tmp_path.glob("cpu/*.corrupt-*"))


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (b"\xc1garbage", "not readable msgpack"),
        (packb(entry(key="f32[16]").to_dict()), r"stored under 'f32\[8\]' but its key is"),
        (packb([1, 2]), "expected a dict"),
        (7, "expected a dict"),
    ],
)
def test_a_bad_entry_is_skipped_and_dropped_at_the_next_write(tmp_path, blob, why):
    store = _cache.CacheStore(tmp_path)
    store.write([entry(), entry(key="f32[9]")])
    path = store.path_for("cpu", "k")
    rewrite(path, "f32[8]", blob)
    fresh = _cache.CacheStore(tmp_path)
    with pytest.warns(jaxtune.JaxtuneWarning, match=why):
        assert fresh.lookup("k", "cpu", "f32[8]") is None
    fresh.write([entry(key="f32[10]")])
    assert set(stored(path)["entries"]) == {"f32[9]", "f32[10]"}


def test_a_write_keeps_entries_it_never_decoded_as_they_were(tmp_path):
    store = _cache.CacheStore(tmp_path)
    store.write([entry(key=f"f32[{i}]") for i in range(3)])
    path = store.path_for("cpu", "k")
    before = stored(path)["entries"]
    _cache.CacheStore(tmp_path).write([entry(key="f32[3]")])
    after = stored(path)["entries"]
    assert {k: after[k] for k in before} == before


def test_an_entry_another_process_replaced_is_read_again(tmp_path):
    mine = _cache.CacheStore(tmp_path)
    mine.write([entry(), entry(key="f32[9]")])
    assert mine.lookup("k", "cpu", "f32[8]").config == {"block": 8}
    assert len(mine.read("cpu", "k")) == 2
    _cache.CacheStore(tmp_path).write([entry(config={"block": 16})])
    assert mine.lookup("k", "cpu", "f32[8]").config == {"block": 16}
    assert mine.read("cpu", "k")["f32[8]"].config == {"block": 16}
    assert mine.lookup("k", "cpu", "f32[9]") == entry(key="f32[9]")


def test_user_cache_follows_the_cache_dir_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "a"))
    first = _cache.user_cache()
    assert _cache.user_cache() is first and first.root == tmp_path / "a"
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "b"))
    assert _cache.user_cache().root == tmp_path / "b"
    with jaxtune._core.settings.override(cache_dir=str(tmp_path / "c")):
        assert _cache.user_cache().root == tmp_path / "c"
    monkeypatch.delenv("JAXTUNE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _cache.user_cache().root == tmp_path / "xdg" / "jaxtune"
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "a"))
    assert _cache.user_cache() is first


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("time_us", 2, True),
        ("time_us", 2.5, True),
        ("time_us", None, True),
        ("time_us", True, False),
        ("time_us", float("nan"), False),
        ("time_us", float("inf"), False),
        ("time_us", -1.0, False),
        ("created", 2**63, True),
        ("created", float("-inf"), False),
        ("config", types.MappingProxyType({"block": 8}), True),
        ("config", {"block": [8]}, False),
        ("config", {8: 8}, False),
    ],
)
def test_stored_fields_are_checked_by_type(field, value, ok):
    record = {**entry().to_dict(), field: value}
    if ok:
        assert getattr(Entry.from_dict(record), field) == value
    else:
        with pytest.raises(jaxtune.CacheError, match=f"field '{field}' should be"):
            Entry.from_dict(record)


def test_reads_are_bounded_by_the_size_limit(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, limit=100) == b"x" * 100
    with pytest.raises(UnsafeFileError, match="holds 100 bytes, over the 99 limit"):
        read_bounded(path, limit=99)


def test_an_oversized_cache_file_is_reported_and_left_alone(tmp_path):
    path = tmp_path / "cpu" / "k.msgpack"
    path.parent.mkdir()
    with open(path, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: no disk space used
    store = _cache.CacheStore(tmp_path)
    with pytest.warns(jaxtune.JaxtuneWarning, match="over the .* limit"):
        assert store.lookup("k", "cpu", "f32[8]") is None
    assert path.stat().st_size == MAX_FILE_BYTES + 1 and not list(tmp_path.glob("cpu/*.corrupt*"))


def test_why_a_config_left_the_rounds_is_kept_by_the_cache(tmp_path):
    """``behind`` (clearly behind in the rounds) is stored only when true, read back, and
    checked by type; entries without it read as not behind."""
    base = old_entries()[0].measurements[0]
    raced = dataclasses.replace(base, rounds_us=(20.0, 21.0, 20.5), dropped=True)
    behind = dataclasses.replace(raced, config={"block": (4, 64), "order": "kn"}, behind=True)
    store = _cache.CacheStore(tmp_path)
    e = entry(measurements=(behind, raced))
    store.write([e])
    (got_behind, got_raced) = _cache.CacheStore(tmp_path).lookup("k", "cpu", "f32[8]").measurements
    assert got_behind.why_out == "clearly behind in the rounds"
    assert got_raced.why_out == "shown slower in the rounds"
    assert base.why_out == "" and "behind" not in raced.to_dict()
    bad = {**e.to_dict(), "measurements": [{**behind.to_dict(), "behind": "yes"}]}
    with pytest.raises(jaxtune.CacheError, match="field 'behind' should be a bool"):
        Entry.from_dict(bad)


@pytest.mark.parametrize(
    ("decision", "ratio", "text"),
    [
        ("clear", 1.31, "clear: 1.31x ahead of block=4 (95 % interval 1.25-1.40)"),
        ("tie", 1.01, "tie with block=4: 1.01x (95 % interval 1.25-1.40)"),
        (
            "undecided",
            1.10,
            "undecided vs block=4: 1.10x (95 % interval 1.25-1.40)",
        ),
    ],
)
def test_an_entrys_decision_text_names_its_intervals_level(decision, ratio, text):
    margin = {"rival": {"block": 4}, "ratio": ratio, "low": 1.25, "high": 1.40}
    assert entry(decision=decision, margin=margin).decision_text() == text
    assert entry(decision="single").decision_text() == "single"


def test_a_ratio_near_1_is_shown_with_the_digits_that_part_it_from_1():
    """Tokamax's ragged_dot on the chip stored a config 0.3 % ahead of its twin with a
    wider input buffer, which read "clear: 1.00x ahead of ... (95 % interval 1.00-1.00)"."""
    from jaxtune._core.vocabulary import ratio_texts

    margin = {"rival": {"block": 4}, "ratio": 1.0031, "low": 1.0012, "high": 1.0049}
    assert entry(decision="clear", margin=margin).decision_text() == (
        "clear: 1.003x ahead of block=4 (95 % interval 1.001-1.005)"
    )
    assert ratio_texts(1.31, 1.22, 1.4) == ("1.31", "1.22", "1.40")
    assert ratio_texts(0.99951, 1.0) == ("0.9995", "1.0000")
    # A low bound a hair above 1 never reads as 1 beside "ahead" (up to six decimals),
    # and a ratio shares its interval's decimals.
    assert ratio_texts(1.001, 1.00004, 1.0014) == ("1.00100", "1.00004", "1.00140")
    assert ratio_texts(1.0000001) == ("1.000000",)  # six decimals at most
    near = {"rival": {"block": 4}, "ratio": 1.001, "low": 1.00004, "high": 1.0014}
    assert entry(decision="clear", margin=near).decision_text() == (
        "clear: 1.00100x ahead of block=4 (95 % interval 1.00004-1.00140)"
    )


def test_the_outer_layout_is_read_by_the_typed_codec_and_a_bad_field_is_named():
    from jaxtune._core.codec import DecodeError
    from jaxtune._tuning.store import layout

    two = layout.encode("k", "cpu", {("", "a"): b"x"})
    assert unpackb(two) == {
        "format": "jaxtune.cache",
        "schema": 2,
        "kernel": "k",
        "device_kind": "cpu",
        "kernel_version": "",
        "entries": {"a": b"x"},
    }
    three = layout.encode("k", "cpu", {("", "a"): b"x", ("v2", "a"): b"y"})
    assert layout.parse(three) == {("", "a"): b"x", ("v2", "a"): b"y"}
    # Written before kernel versions: the entries name theirs.
    head = {"format": "jaxtune.cache", "schema": 2}
    assert layout.parse(packb({**head, "entries": {"a": b"x"}})) == {(None, "a"): b"x"}
    for bad, field in (
        ({**head, "entries": {1: b"x"}}, "entries"),
        ({**head, "entries": [1]}, "entries"),
        ({**head, "entries": {}, "kernel_version": 3}, "kernel_version"),
        ({**head, "schema": 3, "kernel_versions": {"": [1]}}, "kernel_versions"),
        (head, "entries"),
    ):
        with pytest.raises(DecodeError, match=field):
            layout.parse(packb(bad))
    # Only the fields a schema holds are read, as before; a file without entries reads.
    odd = {**head, "entries": {}, "kernel": 5, "kernel_versions": [], "device_kind": None}
    assert layout.parse(packb(odd)) == {}
    assert layout.parse(layout.encode("k", "cpu", {})) == {}


def test_an_entrys_repr_counts_its_measurements_instead_of_showing_them():
    """``print(kernel.config_for(x))`` of a tuned call shows the entry: its repr stays
    one readable line however many configs the sweep measured."""
    one = old_entries()[0].measurements[0]
    small, large = entry(measurements=(one,)), entry(measurements=(one,) * 540)
    assert "measurements=<540>" in repr(large) and "Measurement(" not in repr(large)
    assert len(repr(large)) == len(repr(small)) + 2  # "<540>" against "<1>"
    # Every other field is there, by name and value, in the fields' order.
    assert repr(large).startswith("Entry(kernel='k', device_kind='cpu', key='f32[8]', ")
    assert "default_time_us=3.0, measurements=<540>, versions={}" in repr(large)
