"""The cache's layout and its guarantees: one file per device kind and kernel, entries that
record their schema and versions, a truncated or future-schema file handled politely,
read-only and registered layers, and concurrent writers that lose nothing.

Covers docs/cache.md, "The cache".
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import pytest

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.codec import packb
from jaxtune._core.vocabulary import Entry, Failure, Measurement
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.store.layout import CACHE_SCHEMA

ROOT = pathlib.Path(__file__).resolve().parent.parent


def make_entry(key="f32[8]", kernel="k", config=None, kind="cpu", **kw):
    return Entry(
        kernel=kernel,
        device_kind=kind,
        key=key,
        config=config or {"block": 8},
        time_us=1.0,
        default_config={"block": 4},
        default_time_us=3.0,
        **kw,
    )


def test_layout_one_file_per_device_kind_and_kernel(tmp_path):
    store = _cache.CacheStore(tmp_path)
    store.write([make_entry(), make_entry(key="f32[16]"), make_entry(kind="TPU v5 lite")])
    files = sorted(str(p.relative_to(tmp_path)) for p in store.files())
    assert files[0] == "cpu/k.msgpack"
    assert files[1].startswith("tpu-v5-lite-") and files[1].endswith("/k.msgpack")
    assert set(store.read("cpu", "k")) == {"f32[8]", "f32[16]"}


@pytest.mark.parametrize("name", ["../../etc/passwd", "a/b", "..", "/abs", "x" * 300, ""])
def test_kernel_names_cannot_leave_the_cache_dir(tmp_path, name):
    store = _cache.CacheStore(tmp_path / "cache")
    path = store.path_for("cpu", name).resolve()
    assert path.parent == (tmp_path / "cache" / "cpu").resolve()
    assert len(path.name) < 120


def test_slugs_do_not_collide():
    assert _cache.slug("a/b") != _cache.slug("a-b")
    assert _cache.slug("examples.matmul") == "examples.matmul"


def test_entries_record_schema_and_versions(tmp_path, fast_timing, monkeypatch):
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")  # a kernel defined in the test

    @jaxtune.autotuned(configs={"c": [1, 2]}, name="tests.versions_recorded")
    def k(x, *, c):
        return x * 1

    (e,) = k.tune(jnp.ones(4)).values()
    assert e.versions["jax"] == jaxtune._core.versions.toolchain()["jax"]
    raw = _cache.user_cache().path_for(e.device_kind, e.kernel).read_bytes()
    doc = jaxtune._core.codec.unpackb(raw)
    # One kernel version in the file: the layout earlier jaxtune versions read (schema 2).
    assert (doc["schema"], doc["kernel_version"], CACHE_SCHEMA) == (2, "", 3)
    stored = jaxtune._core.codec.unpackb(doc["entries"]["f32[4]"])  # each entry its own msgpack
    assert stored["versions"]["jaxlib"] is not None


def test_truncated_file_is_moved_aside_reported_once_and_call_works(fast_timing):
    @jaxtune.autotuned(configs={"c": [1, 2]}, check=False, name="tests.truncated")
    def k(x, *, c):
        return x * c

    store = _cache.user_cache()
    store.write(
        [
            make_entry(
                kernel="tests.truncated",
                key="f32[4]",
                config={"c": 2},
                kind=jaxtune._tuning.lookup.device_kind(),
            )
        ]
    )
    path = store.path_for(jaxtune._tuning.lookup.device_kind(), "tests.truncated")
    path.write_bytes(path.read_bytes()[:17])
    with pytest.warns(jaxtune.JaxtuneWarning, match="unreadable .* moved to .*corrupt-"):
        out = k(jnp.ones(4))
    assert float(out[0]) == 1.0  # default, the entry was lost with the file
    assert not path.exists()
    assert len(list(path.parent.glob("tests.truncated.msgpack.corrupt-*"))) == 1
    k(jnp.ones(5))  # no second report
    store.write(
        [
            make_entry(
                kernel="tests.truncated",
                key="f32[4]",
                config={"c": 2},
                kind=jaxtune._tuning.lookup.device_kind(),
            )
        ]
    )
    assert k.config_for(jnp.ones(4)).source == "cache"


def test_future_schema_is_refused_politely_and_not_overwritten(tmp_path):
    store = _cache.CacheStore(tmp_path)
    path = store.path_for("cpu", "k")
    path.parent.mkdir(parents=True)
    future = packb({"schema": CACHE_SCHEMA + 1, "format": "jaxtune.cache", "entries": {}})
    path.write_bytes(future)
    with pytest.warns(jaxtune.JaxtuneWarning, match="written by a newer jaxtune"):
        assert store.read("cpu", "k") == {}
    with pytest.raises(jaxtune.CacheError, match=r"refusing to overwrite .* newer jaxtune"):
        store.write([make_entry()])
    assert path.read_bytes() == future


def test_read_only_store_refuses_writes(tmp_path):
    store = _cache.CacheStore(tmp_path, read_only=True)
    with pytest.raises(jaxtune.CacheError, match="read-only"):
        store.write([make_entry()])


def test_register_cache_directory_and_errors(tmp_path):
    _cache.CacheStore(tmp_path / "pkg").write([make_entry()])
    jaxtune.register_cache(tmp_path / "pkg")
    assert _cache.layers()[0].lookup("k", "cpu", "f32[8]") is not None
    with pytest.warns(jaxtune.JaxtuneWarning, match=r"ignores the packaged cache .*missing: it "):
        jaxtune.register_cache(tmp_path / "missing")  # never raises: a library's import works
    assert len(_cache.layers()) == 1
    bogus = tmp_path / "bogus.msgpack"
    bogus.write_bytes(b"\x93\x01\x02")
    jaxtune.register_cache(bogus)  # read when a lookup reaches it
    with pytest.warns(jaxtune.JaxtuneWarning, match="bogus.msgpack: not a jaxtune TuningResult"):
        assert _cache.layers()[1].lookup("k", "cpu", "f32[8]") is None


def test_writes_merge_with_other_writers(tmp_path):
    a = _cache.CacheStore(tmp_path)
    b = _cache.CacheStore(tmp_path)
    a.read("cpu", "k")
    b.write([make_entry(key="f32[1]")])
    a.write([make_entry(key="f32[2]")])
    assert set(_cache.CacheStore(tmp_path).read("cpu", "k")) == {"f32[1]", "f32[2]"}


def test_remove_and_clear(tmp_path):
    store = _cache.CacheStore(tmp_path)
    store.write([make_entry(key=f"f32[{i}]") for i in range(5)])
    assert store.remove(lambda e: e.key != "f32[3]") == 1
    assert len(store.all_entries()) == 4
    assert store.clear() == 4
    assert store.files() == []


WRITER = textwrap.dedent(
    """
    import sys
    from jaxtune._tuning.store import cache as _cache
    from jaxtune._tuning.result import Entry
    store = _cache.CacheStore(sys.argv[1])
    worker = int(sys.argv[2])
    for i in range(int(sys.argv[3])):
        store.write([Entry(kernel="shared", device_kind="cpu", key=f"w{worker}-{i}",
                           config={"block": i}, time_us=1.0, default_config={"block": 0},
                           default_time_us=2.0)])
    """
)


@pytest.mark.child
@pytest.mark.slow
def test_eight_processes_writing_one_kernel_lose_nothing(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(w), "25"], env=env)
        for w in range(8)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0] * 8
    keys = set(_cache.CacheStore(tmp_path).read("cpu", "shared"))
    assert keys == {f"w{w}-{i}" for w in range(8) for i in range(25)}


def test_settings_cache_dir_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "here"))
    assert _cache.user_cache().root == tmp_path / "here"
    assert _settings.settings().cache_dir == tmp_path / "here"


def test_measurements_and_failures_survive_the_cache(tmp_path):
    store = _cache.CacheStore(tmp_path)
    measurements = (
        Measurement(
            config={"block": (8, 8)},
            median_us=1.5,
            min_us=1.0,
            spread=0.1,
            samples=9,
            compile_s=0.2,
        ),
        Failure(config={"block": (4, 4)}, stage="compile", reason="ValueError: bad tile"),
    )
    e = make_entry(
        config={"block": (8, 8)},
        measurements=measurements,
        shapes=(("f32", (8,)),),
        statics="t=True",
    )
    store.write([e])
    assert _cache.CacheStore(tmp_path).lookup("k", "cpu", "f32[8]") == e
