"""Hostile and unlucky cache directories: truncated, future-schema, symlinked, unreadable and
racing cache files, each a warning or a jaxtune error and never a crash.

Covers docs/errors.md, "Hostile input", and docs/cache.md, "The cache" (nothing odd in the
directory is opened or followed; a corrupt file is moved aside).
"""

from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys
import time
import warnings

import msgpack
import pytest
from hostile_helpers import one_line_error

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.codec import atomic_write, packb, unpackb
from jaxtune._core.vocabulary import Entry
from jaxtune._tuning.result import TuningResult
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.store.layout import CACHE_SCHEMA
from jaxtune._tuning.store.result_files import SCHEMA_VERSION


def entry(key="f32[8]", kernel="k", kind="cpu", **kw):
    fields = {
        "kernel": kernel,
        "device_kind": kind,
        "key": key,
        "config": {"block": 8},
        "time_us": 1.0,
        "default_config": {"block": 4},
        "default_time_us": 3.0,
    }
    fields.update(kw)
    return Entry(**fields)


#: Cache file layouts: each entry a map (schema 1, read only), its own msgpack (schema 2),
#: and by kernel version (schema 3).
LAYOUTS = [1, 2, CACHE_SCHEMA]


def cache_doc(records: dict, schema: int = 1) -> dict:
    if schema >= 2:
        records = {k: msgpack.packb(r, use_bin_type=True) for k, r in records.items()}
    if schema >= 3:  # every entry of these tests is of the kernel version ""
        return {"schema": schema, "format": "jaxtune.cache", "kernel_versions": {"": records}}
    return {"schema": schema, "format": "jaxtune.cache", "entries": records}


def nested_tuples(depth: int) -> msgpack.ExtType:
    value = msgpack.ExtType(1, msgpack.packb([]))
    for _ in range(depth):
        value = msgpack.ExtType(1, msgpack.packb([value]))
    return value


# -- 1. a 1 KB file of nested extension values ----------------------------------------------


@pytest.mark.parametrize("schema", LAYOUTS)
def test_deeply_nested_cache_file_is_moved_aside_not_a_segfault(py, tmp_path, schema):
    good = entry().to_dict()
    good["config"] = {"block": nested_tuples(250)}
    path = tmp_path / "cpu" / "k.msgpack"
    path.parent.mkdir()
    records = {"f32[8]": good, "f32[9]": entry(key="f32[9]").to_dict()}
    path.write_bytes(msgpack.packb(cache_doc(records, schema)))
    assert path.stat().st_size < 2048
    proc = py(
        f"""
        from jaxtune._tuning.store.cache import CacheStore
        print("entries", len(CacheStore({str(tmp_path)!r}).read("cpu", "k")))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "nested deeper than" in proc.stderr
    if schema == 1:  # the whole file is one msgpack value: it cannot be read
        assert "entries 0" in proc.stdout
        assert "moved to k.msgpack.corrupt-" in proc.stderr
        assert not path.exists()
    else:  # the nested entry is its own msgpack: it alone is skipped
        assert "entries 1" in proc.stdout
        assert "1 of 2 entries are malformed" in proc.stderr
        assert path.exists() and not list(tmp_path.glob("cpu/*.corrupt-*"))


def test_deeply_nested_result_file_is_one_line_from_cache_import(cli, tmp_path):
    bad = tmp_path / "deep.msgpack"
    record = entry().to_dict()
    record["config"] = {"block": nested_tuples(250)}
    doc = {"schema": SCHEMA_VERSION, "format": "jaxtune.TuningResult", "entries": [record]}
    bad.write_bytes(msgpack.packb(doc))
    line = one_line_error(cli("cache", "import", str(bad)))
    assert "nested deeper than" in line
    assert "imported" not in line


# -- 2. wrongly typed fields ----------------------------------------------------------------

WRONG = [
    ("config", 5),
    ("time_us", "fast"),
    ("default_config", [1, 2]),
    ("default_time_us", {"a": 1}),
    ("key", 7),
    ("versions", 3),
    ("shapes", "f32[8]"),
    ("created", "yesterday"),
    ("measurements", [{"ok": True, "config": {"block": 8}, "median_us": "x"}]),
    ("measurements", [{"ok": False, "config": {"block": 8}, "stage": "lunch", "reason": ""}]),
]


@pytest.mark.parametrize(("field", "value"), WRONG)
def test_wrongly_typed_entry_is_refused_by_cache_import(cli, tmp_path, field, value):
    record = entry().to_dict()
    record[field] = value
    doc = {"schema": SCHEMA_VERSION, "format": "jaxtune.TuningResult", "entries": [record]}
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(packb(doc))
    line = one_line_error(cli("cache", "import", str(bad)))
    assert "nothing was loaded" in line and "should be" in line
    listing = cli("cache", "list")
    assert listing.returncode == 0 and "(no tuned entries)" in listing.stdout


@pytest.mark.parametrize("schema", LAYOUTS)
@pytest.mark.parametrize(("field", "value"), WRONG)
def test_one_bad_entry_is_skipped_with_one_warning_the_rest_are_used(
    tmp_path, field, value, schema
):
    store = _cache.CacheStore(tmp_path)
    good = [entry(key=f"f32[{i}]") for i in range(10)]
    store.write(good)
    path = store.path_for("cpu", "k")
    records = {e.key: e.to_dict() for e in good}
    bad = entry(key="f32[99]").to_dict()
    bad[field] = value
    records["f32[99]"] = bad
    path.write_bytes(packb(cache_doc(records, schema)))
    fresh = _cache.CacheStore(tmp_path)
    with pytest.warns(jaxtune.JaxtuneWarning, match=r"1 of 11 entries are malformed") as seen:
        assert set(fresh.read("cpu", "k")) == {e.key for e in good}
        fresh.read("cpu", "k")
        fresh.all_entries()
    assert len(seen) == 1
    assert path.exists() and not list(tmp_path.glob("cpu/*.corrupt-*"))
    fresh.write([entry(key="f32[100]")])  # a write keeps the good entries, drops the bad one
    assert len(_cache.CacheStore(tmp_path).read("cpu", "k")) == 11


def test_unknown_extra_field_is_ignored_not_quarantined(tmp_path):
    store = _cache.CacheStore(tmp_path)
    store.write([entry(key=f"f32[{i}]") for i in range(10)])
    path = store.path_for("cpu", "k")
    doc = msgpack.unpackb(path.read_bytes(), strict_map_key=False)
    record = unpackb(doc["entries"]["f32[3]"])
    record["added_by_a_newer_jaxtune"] = {"x": 1}
    doc["entries"]["f32[3]"] = packb(record)
    path.write_bytes(msgpack.packb(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(_cache.CacheStore(tmp_path).read("cpu", "k")) == 10


# -- 3. permissions and odd files -----------------------------------------------------------

SWEEP = """
import warnings, jax.numpy as jnp
from hostile_kernels import plain
print("out", float(plain(jnp.ones(4))[0]))
print("source", plain.config_for(jnp.ones(4)).source)
"""


def _sweep_env(cache_dir: pathlib.Path | str) -> dict[str, str]:
    return {
        "JAXTUNE_CACHE_DIR": str(cache_dir),
        "JAXTUNE_MODE": "tune",
        "JAXTUNE_ISOLATION": "inline",
        "PYTHONWARNINGS": "default",
    }


@pytest.mark.parametrize("mode", [0o000, 0o555])
def test_unwritable_cache_dir_keeps_the_sweep_result_and_says_how_to_fix(py, tmp_path, mode):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    cache_dir.chmod(mode)
    try:
        proc = py(SWEEP, env=_sweep_env(cache_dir), unprivileged=True)
    finally:
        cache_dir.chmod(0o755)
    assert proc.returncode == 0, proc.stderr
    assert "out 1.0" in proc.stdout
    assert "source cache" in proc.stdout  # the measurements were kept in the process
    assert str(cache_dir) in proc.stderr and "chmod" in proc.stderr
    assert "used in this process but is not saved" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cache_dir_below_a_file_keeps_the_sweep_result(py, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    proc = py(SWEEP, env=_sweep_env(blocker / "cache"))
    assert proc.returncode == 0, proc.stderr
    assert "source cache" in proc.stdout
    assert "is a file; set JAXTUNE_CACHE_DIR to a directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_mode_000_cache_file_is_reported_not_renamed(py, tmp_path):
    store = _cache.CacheStore(tmp_path)
    store.write([entry()])
    path = store.path_for("cpu", "k")
    path.chmod(0)
    proc = py(
        f"""
        from jaxtune._tuning.store.cache import CacheStore
        print("entries", len(CacheStore({str(tmp_path)!r}).read("cpu", "k")))
        """,
        unprivileged=True,
    )
    path.chmod(0o644)
    assert proc.returncode == 0, proc.stderr
    assert "entries 0" in proc.stdout and "Permission denied" in proc.stderr
    assert path.exists() and not list(tmp_path.glob("cpu/*.corrupt-*"))
    assert len(_cache.CacheStore(tmp_path).read("cpu", "k")) == 1


READ_ODD = """
import os, resource
from jaxtune._tuning.store.cache import CacheStore
store = CacheStore({root!r})
print("entries", len(store.read("cpu", "k")))
print("maxrss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "symlink-to-good"])
def test_odd_files_in_the_cache_dir_are_neither_opened_nor_followed(py, tmp_path, kind):
    path = tmp_path / "cpu" / "k.msgpack"
    path.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    else:
        elsewhere = tmp_path / "elsewhere"
        _cache.CacheStore(elsewhere).write([entry()])
        path.symlink_to(elsewhere / "cpu" / "k.msgpack")
    proc = py(READ_ODD.format(root=str(tmp_path)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "entries 0" in proc.stdout
    assert "symlink" in proc.stderr or "not a regular file" in proc.stderr
    assert int(proc.stdout.split("maxrss_mb")[1]) < 2000
    assert os.path.lexists(path) and not list(tmp_path.glob("cpu/*.corrupt-*"))


def test_lock_file_is_never_opened_through_a_symlink(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "victim"
    store = _cache.CacheStore(tmp_path / "cache")
    lock = store.path_for("cpu", "k").with_name("k.msgpack.lock")
    lock.parent.mkdir(parents=True)
    lock.symlink_to(target)
    with pytest.raises(jaxtune.CacheError, match=r"lock file .* is a symlink; remove it"):
        store.write([entry()])
    assert not target.exists()
    with pytest.warns(jaxtune.JaxtuneWarning, match="used in this process but is not saved"):
        assert store.save([entry()]) is False
    assert store.lookup("k", "cpu", "f32[8]") == entry()
    assert not target.exists()


# -- 4. quarantine races a writer -----------------------------------------------------------


def test_quarantine_never_moves_a_file_a_writer_just_replaced(tmp_path, monkeypatch):
    store = _cache.CacheStore(tmp_path)
    path = store.path_for("cpu", "k")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x93garbage")
    fresh = packb(cache_doc({"f32[8]": entry().to_dict()}))
    real = _cache.read_bounded

    def read_then_writer_replaces(p, **kw):
        data = real(p, **kw)
        if data != fresh:  # between this read and the quarantine, a writer replaces it
            atomic_write(path, fresh)
        return data

    monkeypatch.setattr(_cache, "read_bounded", read_then_writer_replaces)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.read("cpu", "k")
    assert path.read_bytes() == fresh
    assert not list(tmp_path.glob("cpu/*.corrupt-*"))
    assert store.lookup("k", "cpu", "f32[8]") == entry()


# -- 6. config values the cache cannot store; 7. settings -----------------------------------


def test_precision_and_dtype_configs_are_tuned_stored_and_read_back(py, tmp_path):
    proc = py(
        """
        import jax, jax.numpy as jnp
        from hostile_kernels import enum_configs
        x = jnp.ones((8, 8))
        result = enum_configs.tune(x)
        (e,) = result.values()
        print("stored", type(e.config["precision"]).__name__, e.config["acc"])
        from jaxtune._tuning.state import TUNING_STATE
        TUNING_STATE.reset("user caches")
        choice = enum_configs.config_for(x)
        print("read", choice.source, choice.config["precision"] in set(jax.lax.Precision))
        """,
        env={"JAXTUNE_CACHE_DIR": str(tmp_path), "JAXTUNE_ISOLATION": "process"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "stored Precision" in proc.stdout
    assert "read cache True" in proc.stdout


def test_config_value_the_cache_cannot_store_is_refused_at_decoration():
    with pytest.raises(jaxtune.ConfigSpaceError, match=r"cannot be stored in the cache.*dtype"):

        @jaxtune.autotuned(configs={"fn": [object()]})
        def k(x, *, fn):
            return x


def test_huge_timeout_is_a_settings_error_not_overflow():
    for raw in ("1e10", "1e300", "inf", "nan", "-1", "0"):
        with pytest.raises(jaxtune.SettingsError, match=r"JAXTUNE_TIMEOUT=.* up to 1e\+06"):
            _settings.settings({"JAXTUNE_TIMEOUT": raw})
    assert _settings.settings({"JAXTUNE_TIMEOUT": "1e6"}).timeout == 1e6
    with pytest.raises(jaxtune.ConfigSpaceError, match="timeout must be a positive number"):

        @jaxtune.autotuned(configs={"c": [1]}, timeout=1e10)
        def k(x, *, c):
            return x


def test_result_file_load_never_blocks_on_a_fifo(tmp_path):
    fifo = tmp_path / "result.msgpack"
    os.mkfifo(fifo)
    with pytest.raises(jaxtune.CacheError, match="not a regular file"):
        TuningResult.load(fifo)


# -- concurrency under kill -9, with a reader quarantining beside the writers ---------------

CONFIRMING_WRITER = """
import sys
from jaxtune._tuning.store.cache import CacheStore
from jaxtune._tuning.result import Entry
store = CacheStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    key = f"w{sys.argv[2]}-{i}"
    store.write([Entry(kernel="shared", device_kind="cpu", key=key, config={"block": i},
                       time_us=1.0, default_config={"block": 0}, default_time_us=2.0)])
    print(key, flush=True)  # confirmed: the write returned
"""

CORRUPTING_READER = """
import os, sys, warnings
from jaxtune._tuning.store.cache import CacheStore
warnings.simplefilter("ignore")
while not os.path.exists(sys.argv[2]):  # until every writer has ended
    with open(sys.argv[1] + "/cpu/other.msgpack", "wb") as f:
        f.write(b"\\x93garbage")
    store = CacheStore(sys.argv[1])
    store.read("cpu", "other")
    assert all(e.kernel == "shared" for e in store.read("cpu", "shared").values())
"""


@pytest.mark.child
@pytest.mark.slow
def test_no_confirmed_entry_is_lost_under_writers_kills_and_quarantines(tmp_path):
    (tmp_path / "cpu").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = tmp_path / "writers-done"
    reader = subprocess.Popen(
        [sys.executable, "-c", CORRUPTING_READER, str(tmp_path), str(done)], env=env
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", CONFIRMING_WRITER, str(tmp_path), str(w), "40"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(6)
    ]
    rng = random.Random(11)
    time.sleep(rng.uniform(4, 8))
    for victim in rng.sample(writers, 3):
        victim.kill()  # SIGKILL, possibly while it holds the lock or writes the temp file
    confirmed = set()
    for w in writers:
        out, _ = w.communicate(timeout=300)
        confirmed.update(out.split())
    done.touch()
    assert reader.wait(timeout=300) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stored = set(_cache.CacheStore(tmp_path).read("cpu", "shared"))
    assert confirmed, "no writer confirmed anything"
    assert confirmed <= stored, sorted(confirmed - stored)
    assert not list(tmp_path.glob("cpu/shared.msgpack.corrupt-*"))


def test_cache_list_of_an_unreadable_dir_says_how_to_fix(py, tmp_path):
    cache_dir = tmp_path / "cache"
    _cache.CacheStore(cache_dir).write([entry()])
    cache_dir.chmod(0)
    try:
        proc = py(
            "import sys; from jaxtune._cli import main; sys.exit(main(['cache', 'list']))",
            env={"JAXTUNE_CACHE_DIR": str(cache_dir), "PYTHONWARNINGS": "default"},
            unprivileged=True,
        )
    finally:
        cache_dir.chmod(0o755)
    assert proc.returncode == 0, proc.stderr
    assert f"cannot list the cache directory: [Errno 13] Permission denied: '{cache_dir}'" in (
        proc.stderr
    )
    assert f"chmod u+rwX -R {cache_dir}" in proc.stderr
