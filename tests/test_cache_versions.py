"""Entries of different kernel versions (``version=``) coexist in one cache: no write, keep,
import, merge or export of one version removes another's (docs/cache.md, "The cache": kernel
versions coexist)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import jax.numpy as jnp
import msgpack
import pytest

import jaxtune
from jaxtune._core.codec import packb
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache

ROOT = pathlib.Path(__file__).resolve().parent.parent
X = jnp.ones((128,), jnp.float32)


def entry(key="f32[128]", kernel="tests.cv.scale", version="", factor=2, kind=None, **kw):
    return Entry(
        kernel=kernel,
        device_kind=kind or _lookup.device_kind(),
        key=key,
        config={"factor": factor},
        time_us=1.0,
        default_config={"factor": 1},
        default_time_us=3.0,
        kernel_version=version,
        **kw,
    )


def stored(path: pathlib.Path) -> dict:
    return msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)


def scale_of(version: str):
    @jaxtune.autotuned(
        configs={"factor": [1, 2, 3]}, check=False, name="tests.cv.scale", version=version
    )
    def scale(x, *, factor):
        return x * factor

    return scale


def test_two_versions_of_one_key_coexist_in_one_file(tmp_path):
    store = _cache.CacheStore(tmp_path)
    store.write([entry(version="1", factor=2)])
    store.write([entry(version="2", factor=3)])
    store.write([entry(version="", factor=1)])
    fresh = _cache.CacheStore(tmp_path)
    kind = _lookup.device_kind()
    for version, factor in (("1", 2), ("2", 3), ("", 1)):
        found = fresh.lookup("tests.cv.scale", kind, "f32[128]", version=version)
        assert found is not None and found.config == {"factor": factor}
    assert fresh.lookup("tests.cv.scale", kind, "f32[128]", version="3") is None
    assert len(fresh.entries_for("tests.cv.scale", kind)) == 3
    assert fresh.read(kind, "tests.cv.scale", version="2")["f32[128]"].config == {"factor": 3}
    doc = stored(fresh.path_for(kind, "tests.cv.scale"))
    assert doc["schema"] == 3 and set(doc["kernel_versions"]) == {"1", "2", ""}
    # A write replaces its own version's entry only.
    fresh.write([entry(version="2", factor=1)])
    again = _cache.CacheStore(tmp_path)
    assert again.lookup("tests.cv.scale", kind, "f32[128]", version="1").config == {"factor": 2}
    assert again.lookup("tests.cv.scale", kind, "f32[128]", version="2").config == {"factor": 1}


def test_a_kept_entry_of_one_version_never_removes_another(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path))
    _cache.user_cache().save([entry(version="1", factor=2)])
    _cache.user_cache().save([entry(version="2", factor=3)])
    v1, v2 = scale_of("1"), scale_of("2")
    assert (v1.config_for(X).source, dict(v1.config_for(X).config)) == ("cache", {"factor": 2})
    assert (v2.config_for(X).source, dict(v2.config_for(X).config)) == ("cache", {"factor": 3})


def test_importing_another_versions_export_keeps_this_versions_entry(incli, tmp_path):
    """The fault: the import replaced version 2's entry with version 1's (the file is keyed
    by kernel, device and key), and the kernel fell back to its default without a word."""
    v2 = scale_of("2")
    _cache.user_cache().write([entry(version="2", factor=3)])
    assert v2.config_for(X).source == "cache"
    export = jaxtune.TuningResult.of(entry(version="1", factor=2)).save(tmp_path / "v1.msgpack")
    unversioned = jaxtune.TuningResult.of(entry(factor=1)).save(tmp_path / "none.msgpack")
    assert incli("cache", "import", str(export)).returncode == 0
    assert incli("cache", "import", str(unversioned)).returncode == 0
    choice = v2.config_for(X)
    assert (choice.source, dict(choice.config)) == ("cache", {"factor": 3})
    assert (scale_of("1").config_for(X).source, scale_of("").config_for(X).source) == (
        "cache",
        "cache",
    )
    listed = json.loads(incli("cache", "list", "--json").stdout)["entries"]
    assert sorted(e["kernel_version"] for e in listed) == ["", "1", "2"]
    text = incli("cache", "list").stdout
    assert "tests.cv.scale (version 1)" in text and "tests.cv.scale (version 2)" in text


def test_export_import_and_merge_carry_every_version(incli, tmp_path, monkeypatch):
    _cache.user_cache().write([entry(version="1", factor=2), entry(version="2", factor=3)])
    assert incli("cache", "export", str(tmp_path / "both.msgpack")).returncode == 0
    only_v3 = jaxtune.TuningResult.of(entry(version="3", factor=1)).save(tmp_path / "v3.msgpack")
    merged = tmp_path / "merged.msgpack"
    proc = incli("cache", "merge", str(tmp_path / "both.msgpack"), str(only_v3), "-o", str(merged))
    assert proc.returncode == 0 and "(3 entries)" in proc.stdout
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(tmp_path / "other-machine"))
    assert incli("cache", "import", str(merged)).returncode == 0
    kind = _lookup.device_kind()
    found = {
        v: _cache.user_cache().lookup("tests.cv.scale", kind, "f32[128]", version=v)
        for v in ("1", "2", "3")
    }
    assert {v: dict(e.config)["factor"] for v, e in found.items()} == {"1": 2, "2": 3, "3": 1}


def test_a_schema_2_file_of_an_earlier_jaxtune_is_read_then_stored_by_version(tmp_path):
    """Before kernel versions coexisted a file held one entry per key, of any version (schema
    2, no ``kernel_version``): its entries are read with their own versions, and the next
    write stores them by version, bytes unchanged."""
    kind = "cpu"
    old_v3, old_none = entry(key="a", version="v3", kind=kind), entry(key="b", kind=kind)
    blobs = {e.key: packb(e.to_dict()) for e in (old_v3, old_none)}
    path = tmp_path / kind / "tests.cv.scale.msgpack"
    path.parent.mkdir()
    doc = {"schema": 2, "format": "jaxtune.cache", "kernel": "tests.cv.scale"}
    path.write_bytes(msgpack.packb({**doc, "device_kind": kind, "entries": blobs}))
    store = _cache.CacheStore(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.lookup("tests.cv.scale", kind, "a", version="v3") == old_v3
        assert store.lookup("tests.cv.scale", kind, "a", version="") is None
        assert store.lookup("tests.cv.scale", kind, "b", version="") == old_none
        assert store.lookup("tests.cv.scale", kind, "a") == old_v3  # no version: the newest
    new = entry(key="a", version="", factor=3, kind=kind)
    store.write([new])
    after = stored(path)
    assert after["schema"] == 3
    assert after["kernel_versions"]["v3"] == {"a": blobs["a"]}
    assert after["kernel_versions"][""]["b"] == blobs["b"]
    fresh = _cache.CacheStore(tmp_path)
    assert fresh.lookup("tests.cv.scale", kind, "a", version="v3") == old_v3
    assert fresh.lookup("tests.cv.scale", kind, "a", version="") == new


def test_an_entry_stored_under_another_version_than_its_own_is_skipped(tmp_path):
    store = _cache.CacheStore(tmp_path)
    store.write([entry(key="a", version="1", kind="cpu"), entry(key="a", version="2", kind="cpu")])
    path = store.path_for("cpu", "tests.cv.scale")
    doc = stored(path)
    doc["kernel_versions"]["1"]["a"] = doc["kernel_versions"]["2"]["a"]
    path.write_bytes(msgpack.packb(doc))
    fresh = _cache.CacheStore(tmp_path)
    with pytest.warns(jaxtune.JaxtuneWarning, match="stored under kernel version '1' but its"):
        assert fresh.lookup("tests.cv.scale", "cpu", "a", version="1") is None
    assert fresh.lookup("tests.cv.scale", "cpu", "a", version="2").kernel_version == "2"


LIBRARY = textwrap.dedent(
    """
    import sys
    import jax.numpy as jnp
    import jaxtune

    @jaxtune.autotuned(configs={"factor": [1, 2]}, check=False, name="tests.cv.lib",
                       version=sys.argv[1])
    def scale(x, *, factor):
        return x * factor

    x = jnp.ones((16,), jnp.float32)
    print("before", scale.config_for(x).source)
    scale(x)
    print("after", scale.config_for(x).source)
    """
)


@pytest.mark.child
def test_two_library_versions_sharing_a_cache_dir_each_tune_once(tmp_path):
    """The fault: each run of one version replaced the other's entry, so every run swept
    again. Real processes, one cache directory, tune mode."""
    script = tmp_path / "lib.py"
    script.write_text(LIBRARY)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JAXTUNE_CACHE_DIR": str(tmp_path / "shared"),
        "JAXTUNE_MODE": "tune",
        "JAXTUNE_ISOLATION": "inline",
    }

    def run(version: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script), version],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.split())

    assert run("1") == "before default after cache"  # swept
    assert run("2") == "before default after cache"  # swept
    assert run("1") == "before cache after cache"  # version 1's entry is still there
    assert run("2") == "before cache after cache"
