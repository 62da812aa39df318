"""A cache lock another process holds for ever: writes and corrupt-file reads give up after
JAXTUNE_LOCK_TIMEOUT with one warning that names the holder."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import pytest
from test_cache import make_entry

import jaxtune
from jaxtune._core.errors import JaxtuneWarning
from jaxtune._tuning.store import cache as _cache

HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, f"{os.getpid()}\\n".encode(), 0)
    print("held", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def hold(monkeypatch):
    """Holds the lock of a cache file from another process; yields that process's pid."""
    monkeypatch.setenv("JAXTUNE_LOCK_TIMEOUT", "0.5")
    procs = []

    def start(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.with_name(path.name + ".lock")
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc.pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.mark.child
def test_a_write_gives_up_and_names_the_holder(tmp_path, hold):
    store = _cache.CacheStore(tmp_path / "c")
    entry = make_entry()
    pid = hold(store.path_for(entry.device_kind, entry.kernel))
    with pytest.warns(JaxtuneWarning, match=rf"lock .* process {pid} holds it") as caught:
        assert store.keep([entry]) is False
        assert store.keep([make_entry(key="f32[16]")]) is False
    assert len(caught) == 1  # once, not per write
    assert "JAXTUNE_LOCK_TIMEOUT" in str(caught[0].message)
    # The tuned config is still used in this process.
    assert store.lookup(entry.kernel, entry.device_kind, entry.key) == entry


@pytest.mark.child
def test_a_corrupt_file_read_gives_up_and_names_the_holder(tmp_path, hold):
    store = _cache.CacheStore(tmp_path / "c")
    entry = make_entry()
    path = store.path_for(entry.device_kind, entry.kernel)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xc1 not msgpack")
    pid = hold(path)
    with pytest.warns(JaxtuneWarning, match=rf"unreadable.* process {pid} holds it"):
        assert store.lookup(entry.kernel, entry.device_kind, entry.key) is None
    assert path.exists()  # not moved aside without the lock


@jaxtune.autotuned(configs={"c": [1, 2]}, default={"c": 1}, name="tests.lock_probe")
def lock_probe(x, *, c):
    return x * c


@pytest.mark.child
def test_tune_mode_sweeps_and_goes_on_without_the_write(hold, monkeypatch):
    monkeypatch.setenv("JAXTUNE_MODE", "tune")
    monkeypatch.setenv("JAXTUNE_ISOLATION", "inline")
    x = jnp.ones(8)
    store = _cache.user_cache()
    pid = hold(store.path_for(jax.devices()[0].device_kind, "tests.lock_probe"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert float(lock_probe(x).sum()) == 8.0
    messages = [str(w.message) for w in caught if issubclass(w.category, JaxtuneWarning)]
    assert any(f"process {pid} holds it" in m for m in messages), messages
