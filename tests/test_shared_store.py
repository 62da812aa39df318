"""The shared store (JAXTUNE_REMOTE_CACHE): against a real S3-compatible server started
here on localhost (moto's server mode, tests/s3_server.py) and on a shared directory.
Covers docs/shared-store.md, "Setting it up", "How writes never collide" and "Limits".

Processes with separate user caches share tuned configs through the store; concurrent
publishers killed at random lose no acknowledged entry; a store that stops mid-run, or
refuses the credentials, costs one warning and one bounded wait, never a crash or a second
wait; `jaxtune cache push/pull` sync explicitly.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import threading
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from local_store import LocalStore, as_process, thread_store
from s3_server import MISSING, S3Server
from shared_store_state import count_requests, forget

import jaxtune
from jaxtune._core import settings as _settings
from jaxtune._core.errors import JaxtuneWarning, SettingsError
from jaxtune._core.vocabulary import Entry
from jaxtune._distributed import agree as _agree
from jaxtune._tuning import lookup as _lookup
from jaxtune._tuning.store import cache as _cache
from jaxtune._tuning.store import shared as _shared
from jaxtune._tuning.store.layout import blob
from jaxtune._tuning.store.remote import SharedStore

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKER = pathlib.Path(__file__).with_name("shared_store_worker.py")

if MISSING:  # `nox -s tests` installs them all: a missing one is an error, not a skip
    raise ImportError(MISSING)


def _scaled(name: str):
    @jaxtune.autotuned(configs={"factor": [1, 2, 3]}, check=False, name=name)
    def scaled(x, *, factor):
        """Its output reveals which config ran (the default is factor 1)."""
        return x * factor

    return scaled


first = _scaled("tests.shared.first")
second = _scaled("tests.shared.second")
third = _scaled("tests.shared.third")
X = jnp.ones((8,), jnp.float32)


def tuned(kernel, config, *, created: float = 1.0) -> Entry:
    """An entry of ``kernel`` for X holding ``config``, as a sweep would store it."""
    return Entry(
        kernel=kernel.kernel_id,
        device_kind=_lookup.device_kind(),
        key=kernel.config_for(X).key,
        config=config,
        time_us=1.0,
        default_config={"factor": 1},
        default_time_us=2.0,
        created=created,
        kernel_version=kernel.options.version,
    )


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Each test starts as a fresh process would: no store known, read or given up."""
    forget()
    yield
    forget()


@pytest.fixture
def requests(monkeypatch):
    """The requests made to each store this process uses, by URL."""
    return count_requests(monkeypatch)


@pytest.fixture(scope="session")
def s3_server():
    server = S3Server()
    yield server
    server.stop()


def _use_s3(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{server.bucket()}/team"


def _directory(tmp_path: pathlib.Path) -> str:
    """A fresh directory store: made here, since jaxtune never makes a store's root."""
    (tmp_path / "shared").mkdir()
    return str(tmp_path / "shared")


@pytest.fixture(params=["s3", "directory"])
def store_url(request, tmp_path, monkeypatch) -> str:
    """A fresh shared store: a bucket of the session's S3 server, or a directory."""
    if request.param == "directory":
        return _directory(tmp_path)
    return _use_s3(request.getfixturevalue("s3_server"), monkeypatch)


# -- the setting -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("", ""),
        ("s3://bucket/team/", "s3://bucket/team"),
        ("gs://bucket", "gs://bucket"),
        ("file:///srv/jaxtune", "/srv/jaxtune"),
    ],
)
def test_setting_accepts_buckets_and_directories(monkeypatch, raw, value):
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", raw)
    assert _settings.settings().remote_cache == value


def test_setting_makes_a_directory_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", "team-store")
    assert _settings.settings().remote_cache == str(tmp_path / "team-store")


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("JAXTUNE_REMOTE_CACHE", "http://example.com/cache"),
        ("JAXTUNE_REMOTE_CACHE", "s3://"),
        ("JAXTUNE_REMOTE_CACHE", "file://relative"),
        ("JAXTUNE_REMOTE_TIMEOUT", "0"),
        ("JAXTUNE_REMOTE_TIMEOUT", "soon"),
    ],
)
def test_bad_values_name_the_variable(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(SettingsError, match=rf"^{name}='{raw}' is not valid; allowed values: "):
        _settings.settings()


def test_bad_value_names_the_allowed_stores(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", "ftp://host/x")
    with pytest.raises(SettingsError, match=r"s3://bucket/prefix, gs://bucket/prefix, or a dir"):
        _settings.settings()
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", str(tmp_path / "file"))
    with pytest.raises(SettingsError, match="exists and is not a directory"):
        _settings.settings()


# -- read through, on a directory (in this process) --------------------------------------


def test_a_miss_reads_the_store_through_once_per_kernel(monkeypatch, tmp_path, requests):
    url = _directory(tmp_path)
    SharedStore(url, 30).publish([tuned(first, {"factor": 3})])
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
    choice = first.config_for(X)
    assert (choice.config, choice.source) == ({"factor": 3}, "cache")
    np.testing.assert_array_equal(jax.jit(first)(X), X * 3)
    # Copied into the user cache: the next process finds it there without the store.
    local = _cache.user_cache().lookup(first.kernel_id, _lookup.device_kind(), choice.key)
    assert local is not None and dict(local.config) == {"factor": 3}
    assert requests[url] == 1
    # Another key of the same kernel, a miss: no second request for this kernel's file.
    assert first.config_for(jnp.ones((16,), jnp.float32)).source == "default"
    assert requests[url] == 1
    # Another kernel: its own file, read once.
    assert second.config_for(X).source == "default"
    assert requests[url] == 2


def test_the_user_cache_entry_tuned_later_stays(monkeypatch, tmp_path):
    url = _directory(tmp_path)
    SharedStore(url, 30).publish([tuned(first, {"factor": 3}, created=1.0)])
    newer = tuned(first, {"factor": 2}, created=2.0)
    _cache.user_cache().write([newer])
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
    _shared.read_through(first.kernel_id, _lookup.device_kind())
    assert first.config_for(X).config == {"factor": 2}


def test_only_process_zero_reads_the_store(monkeypatch, tmp_path, requests):
    url = _directory(tmp_path)
    SharedStore(url, 30).publish([tuned(first, {"factor": 3})])
    fit = _lookup.Fit(first.kernel_id, first.options.version, first.space(X))
    key = first.config_for(X).key  # before the store is set: nothing read through yet
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
    monkeypatch.setattr(_agree, "key_value", thread_store)
    job = LocalStore(2)
    for pid, reads in ((1, 0), (0, 1)):
        with as_process(job.view(pid)):
            found = _lookup.cached_entry(first.kernel_id, _lookup.device_kind(), key, fit)
        assert requests[url] == reads
        assert (found is not None) == (pid == 0)


def test_a_missing_client_library_names_the_extra_once(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec raises ImportError
    (tmp_path / "shared").mkdir()
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", str(tmp_path / "shared"))
    with pytest.warns(JaxtuneWarning, match=r"pip install 'jaxtune\[remote\]'") as caught:
        assert first.config_for(X).source == "default"
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert second.config_for(X).source == "default"
        assert _shared.publish([tuned(second, {"factor": 2})]) is False


def test_an_absent_directory_is_said_before_a_missing_client_library(monkeypatch, tmp_path):
    # A typo needs no client to be seen, and is the likelier mistake.
    monkeypatch.setitem(sys.modules, "fsspec", None)
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", str(tmp_path / "typo"))
    with pytest.warns(JaxtuneWarning, match="does not exist") as caught:
        assert first.config_for(X).source == "default"
    assert len(caught) == 1
    assert "jaxtune[remote]" not in str(caught[0].message)


def test_an_unusable_directory_costs_one_warning(monkeypatch, tmp_path, requests):
    (tmp_path / "file").write_text("")
    url = str(tmp_path / "file" / "shared")  # below a regular file: never a directory
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
    with pytest.warns(JaxtuneWarning, match="cannot use the shared store") as caught:
        assert first.config_for(X).source == "default"
    assert len(caught) == 1
    asked = requests[url]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert second.config_for(X).source == "default"
        assert _shared.publish([tuned(second, {"factor": 2})]) is False
    assert requests[url] == asked


def test_a_missing_directory_is_one_warning_naming_it_never_an_empty_store(
    monkeypatch, tmp_path, requests
):
    """A typo in JAXTUNE_REMOTE_CACHE (or an unmounted filesystem) is said, and the store
    is never made by jaxtune: the next publish does not turn the typo into a store."""
    url = str(tmp_path / "shraed")
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
    with pytest.warns(JaxtuneWarning, match="cannot use the shared store") as caught:
        assert first.config_for(X).source == "default"
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"the shared store {url} does not exist (no such directory)" in message
    assert "mkdir -p" in message and "credentials" not in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert second.config_for(X).source == "default"
        assert _shared.publish([tuned(second, {"factor": 2})]) is False
    assert not os.path.exists(url)


def test_a_store_deleted_mid_run_is_not_made_again(monkeypatch, tmp_path):
    url = _directory(tmp_path)
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
    assert _shared.publish([tuned(first, {"factor": 3})]) is True
    shutil.rmtree(url)
    with pytest.warns(JaxtuneWarning, match=r"does not exist \(no such directory\)") as caught:
        assert _shared.publish([tuned(second, {"factor": 2})]) is False
    assert len(caught) == 1
    assert not os.path.exists(url)


def test_pull_and_push_of_a_missing_directory_exit_2(incli, tmp_path):
    missing = tmp_path / "no-such-store"
    _cache.user_cache().write([tuned(first, {"factor": 3})])
    for action in ("pull", "push"):
        done = incli("cache", action, "--store", str(missing))
        assert done.returncode == 2, (action, done.stdout, done.stderr)
        assert f"the shared store {missing} does not exist" in done.stderr, done.stderr
    assert not missing.exists()


def test_a_stray_file_where_a_kernels_folder_belongs_skips_that_kernel_only(
    monkeypatch, tmp_path, incli
):
    url = _directory(tmp_path)
    store = SharedStore(url, 30)
    stray = pathlib.Path(url, store.folder(_lookup.device_kind(), first.kernel_id))
    stray.parent.mkdir()
    stray.write_text("not a folder")
    SharedStore(url, 30).publish([tuned(third, {"factor": 3})])
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
    with pytest.warns(JaxtuneWarning, match="is not a folder") as caught:
        assert _shared.publish([tuned(first, {"factor": 2})]) is False
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(stray.relative_to(url)) in message and "remove it" in message
    assert "network" not in message and "credentials" not in message
    # Everything else still goes to the store and comes from it, without a word.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _shared.publish([tuned(second, {"factor": 2})]) is True
        assert _shared.publish([tuned(first, {"factor": 3})]) is False  # said once
        assert third.config_for(X).config == {"factor": 3}  # read through
    held = SharedStore(url, 30).read(_lookup.device_kind(), second.kernel_id)
    assert [dict(e.config) for e in held.values()] == [{"factor": 2}]
    assert stray.read_text() == "not a folder"
    # `cache push` publishes the rest, names the stray and exits 1.
    _cache.user_cache().write([tuned(first, {"factor": 2}, created=9.0)])
    _cache.user_cache().write([tuned(second, {"factor": 3}, created=9.0)])
    pushed = incli("cache", "push", "--json", "--store", url)
    assert pushed.returncode == 1, pushed.stderr
    doc = json.loads(pushed.stdout)
    assert (doc["published"], list(doc["unwritable"])) == (1, [str(stray.relative_to(url))])


def test_objects_that_cannot_be_read_are_skipped_and_kept(tmp_path):
    url = _directory(tmp_path)
    store = SharedStore(url, 30)
    store.publish([tuned(first, {"factor": 3})])
    folder = next((tmp_path / "shared").glob("*/*"))
    (folder / "0-damaged.msgpack").write_bytes(b"\xc1 not msgpack")
    store.publish([tuned(first, {"factor": 2}, created=5.0)])
    entries = SharedStore(url, 30).read(_lookup.device_kind(), first.kernel_id)
    assert [dict(e.config) for e in entries.values()] == [{"factor": 2}]
    # Never deleted by a publisher, since nothing of it could be merged.
    assert (folder / "0-damaged.msgpack").exists()
    assert "0-damaged.msgpack" in next(iter(store.unreadable))


# -- two processes, concurrent publishers, on S3 and on a directory ----------------------


def _worker(*args: str, env: dict[str, str], timeout: float = 600):
    return subprocess.run(
        [sys.executable, str(WORKER), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.mark.child
@pytest.mark.slow
def test_b_gets_the_config_a_tuned_without_sweeping(store_url, tmp_path):
    reports = {}
    for name in ("a", "b"):
        out = tmp_path / f"{name}.json"
        env = {
            "JAXTUNE_MODE": "tune",
            "JAXTUNE_CACHE_DIR": str(tmp_path / f"cache-{name}"),
            "JAXTUNE_REMOTE_CACHE": store_url,
        }
        done = _worker("tune", str(out), env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "JaxtuneWarning" not in done.stderr, done.stderr[-3000:]
        reports[name] = json.loads(out.read_text())
    a, b = reports["a"], reports["b"]
    assert a["config"] == {"work": 1}, a  # A swept: the cheap config beats the default
    # B used A's entry, the very one (a sweep of B's own would be created later) ...
    assert (b["config"], b["created"], b["source"]) == (a["config"], a["created"], "cache")
    assert b["output"] == 1.0  # ... and ran with it: x + work
    # ... read through into B's own cache, so its next process needs no store.
    assert list((tmp_path / "cache-b").rglob("*.msgpack"))


@pytest.mark.child
@pytest.mark.slow
def test_eight_publishers_killed_at_random_lose_no_acknowledged_entry(store_url):
    env = {"JAXTUNE_REMOTE_CACHE": store_url, "JAXTUNE_REMOTE_TIMEOUT": "120"}
    publishers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "publish", f"w{i}", "5000"],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        for i in range(8)
    ]
    lines: list[list[str]] = [[] for _ in publishers]
    first_ack = [threading.Event() for _ in publishers]

    def read(i: int) -> None:
        assert publishers[i].stdout is not None
        for line in publishers[i].stdout:
            if line.endswith("\n"):  # a line cut by the kill acknowledges nothing
                lines[i].append(line.strip())
                if line.startswith("ack "):
                    first_ack[i].set()
        first_ack[i].set()

    readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(8)]
    for r in readers:
        r.start()
    try:
        for event in first_ack:
            assert event.wait(300), "a publisher acknowledged nothing in 300 s"
        # Every publisher is mid-stream now: kill each at a random moment of the next 3 s.
        rng = random.Random(33)
        start = time.monotonic()
        for at, p in sorted(((rng.uniform(0, 3), p) for p in publishers), key=lambda t: t[0]):
            time.sleep(max(0.0, start + at - time.monotonic()))
            p.kill()
    finally:
        for p in publishers:
            p.kill()
            p.wait(timeout=60)
    for r, p in zip(readers, publishers, strict=True):
        r.join(timeout=60)
        assert p.stdout is not None
        p.stdout.close()
    acked = {line.split()[1] for out in lines for line in out if line.startswith("ack ")}
    assert all(any(line.startswith("ack ") for line in out) for out in lines), lines
    assert sum(p.returncode == -9 for p in publishers) >= 4  # killed mid-stream, not done
    held = SharedStore(store_url, 120).read("cpu", "tests.shared.many")
    missing = acked - {key for _, key in held}
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged entries lost: {missing}"


@pytest.mark.child
def test_push_and_pull(store_url, incli, tmp_path, monkeypatch):
    # `jaxtune cache push` and `pull` in this process: a fresh one adds nothing to them.
    entries = [tuned(first, {"factor": 3}), tuned(second, {"factor": 2})]
    _cache.user_cache().write(entries)
    monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", store_url)
    pushed = incli("cache", "push", "--json")
    assert pushed.returncode == 0, pushed.stderr
    doc = json.loads(pushed.stdout)
    assert (doc["store"], doc["entries"], doc["published"], doc["skipped"]) == (
        store_url,
        2,
        2,
        0,
    )
    again = json.loads(incli("cache", "push", "--json").stdout)
    assert (again["published"], again["skipped"]) == (0, 2)
    unknown = incli("cache", "push", "--kernel", "no.such.kernel")
    assert unknown.returncode == 2 and "has no entry of no.such.kernel" in unknown.stderr
    other = tmp_path / "other-cache"
    monkeypatch.setenv("JAXTUNE_CACHE_DIR", str(other))
    pulled = incli("cache", "pull", "--json")
    assert pulled.returncode == 0, pulled.stderr
    doc = json.loads(pulled.stdout)
    assert (doc["entries"], doc["new"], doc["unchanged"], doc["replaced"]) == (2, 2, 0, [])
    got = sorted(blob(e) for e in _cache.CacheStore(other).all_entries())
    assert got == sorted(blob(e) for e in entries)
    text = incli("cache", "pull")
    assert "0 new, 2 unchanged" in text.stdout


def test_push_without_a_store_says_how_to_name_one(incli):
    done = incli("cache", "push")
    assert done.returncode == 2
    assert "no shared store to push to: set JAXTUNE_REMOTE_CACHE" in done.stderr


# -- a store that stops mid-run or refuses the credentials (S3) --------------------------


@pytest.mark.child
@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_store_stopped_mid_run_costs_one_warning_and_one_wait(how, monkeypatch, cli, requests):
    server = S3Server()
    try:
        url = _use_s3(server, monkeypatch)
        SharedStore(url, 60).publish([tuned(first, {"factor": 3})])
        monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
        # Read through while up, with room for s3fs's import and client on a busy machine
        # (2.3 s alone); the store is then asked again with a 2 s limit.
        monkeypatch.setenv("JAXTUNE_REMOTE_TIMEOUT", "60")
        np.testing.assert_array_equal(jax.jit(first)(X), X * 3)
        monkeypatch.setenv("JAXTUNE_REMOTE_TIMEOUT", "2")
        (server.freeze if how == "frozen" else server.stop)()
        # A miss traced inside jax.jit: one bounded wait, one warning, the default runs.
        with pytest.warns(JaxtuneWarning, match="cannot use the shared store") as caught:
            np.testing.assert_array_equal(jax.jit(second)(X), X)
        assert len(caught) == 1
        message = str(caught[0].message)
        assert f"the shared store {url}" in message
        # A refused connection may fail at once or after the client's retries: a frozen
        # server never answers, so it is the deadline that ends the wait.
        assert how == "killed" or "did not answer within 2 s" in message, message
        asked = requests[url]
        # From now on: no request, no warning, no wait, for lookups and publishes alike.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_array_equal(jax.jit(third)(X), X)
            np.testing.assert_array_equal(jax.jit(first)(X), X * 3)  # the user cache
            assert _shared.publish([tuned(third, {"factor": 2})]) is False
        assert requests[url] == asked
        # An explicit sync says what failed, and fails.
        pulled = cli("cache", "pull", env={"JAXTUNE_REMOTE_TIMEOUT": "2"})
        assert pulled.returncode == 2 and f"the shared store {url}" in pulled.stderr
    finally:
        server.stop()


@pytest.mark.child
@pytest.mark.slow
def test_refused_credentials_cost_one_warning(monkeypatch, cli, requests):
    server = S3Server(refuse=True)
    try:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        url = "s3://team-bucket/configs"
        monkeypatch.setenv("JAXTUNE_REMOTE_CACHE", url)
        with pytest.warns(JaxtuneWarning, match="refused access") as caught:
            np.testing.assert_array_equal(jax.jit(first)(X), X)
        assert len(caught) == 1
        assert "The AWS Access Key Id you provided does not exist" in str(caught[0].message)
        asked = requests[url]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert second.config_for(X).source == "default"
            assert _shared.publish([tuned(second, {"factor": 2})]) is False
        assert requests[url] == asked
        pushed = cli("cache", "pull")
        assert pushed.returncode == 2 and "refused access" in pushed.stderr
    finally:
        server.stop()
