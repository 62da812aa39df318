"""A cache lock another process holds for ever: writes give up after JAXTUNE_LOCK_TIMEOUT
with one warning that names the holder; a read of a corrupt file does not wait at all."""

from __future__ import annotations

import queue
import subprocess
import sys
import textwrap
import threading
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

    def release():
        """Ends every holder (its lock goes with it)."""
        for proc in procs:
            proc.kill()
            proc.wait()

    start.release = release
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
        assert store.save([entry]) is False
        assert store.save([make_entry(key="f32[16]")]) is False
    assert len(caught) == 1  # once, not per write
    assert "JAXTUNE_LOCK_TIMEOUT" in str(caught[0].message)
    # The tuned config is still used in this process.
    assert store.lookup(entry.kernel, entry.device_kind, entry.key) == entry


@pytest.mark.child
def test_a_corrupt_file_read_names_the_holder_and_leaves_the_file_to_the_writer(tmp_path, hold):
    store = _cache.CacheStore(tmp_path / "c")
    entry = make_entry()
    path = store.path_for(entry.device_kind, entry.kernel)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xc1 not msgpack")
    pid = hold(path)
    with pytest.warns(JaxtuneWarning, match=rf"unreadable.* process {pid} holds its lock"):
        assert store.lookup(entry.kernel, entry.device_kind, entry.key) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, not per lookup
        assert store.lookup(entry.kernel, entry.device_kind, entry.key) is None
    assert path.read_bytes() == b"\xc1 not msgpack"  # not moved aside without the lock


@pytest.mark.child
def test_the_next_writer_moves_a_corrupt_file_left_by_a_read_aside(tmp_path, hold):
    store = _cache.CacheStore(tmp_path / "c")
    entry = make_entry()
    path = store.path_for(entry.device_kind, entry.kernel)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xc1 not msgpack")
    hold(path)
    with pytest.warns(JaxtuneWarning, match="left in place"):
        assert store.lookup(entry.kernel, entry.device_kind, entry.key) is None
    hold.release()
    store.write([entry])  # silent: the warning above said what it would do
    assert [p.read_bytes() for p in path.parent.glob("*.corrupt-*")] == [b"\xc1 not msgpack"]
    assert store.lookup(entry.kernel, entry.device_kind, entry.key) == entry


READER = textwrap.dedent(
    """
    import warnings
    import jax.numpy as jnp
    import jaxtune

    @jaxtune.autotuned(configs={"c": [1, 2]}, default={"c": 3}, name="tests.corrupt_read")
    def kernel(x, *, c):
        return x * c

    x = jnp.ones(8)
    print("ready", flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = kernel.config_for(x)
        total = float(kernel(x).sum())
    print(choice.source, choice.config["c"], total, flush=True)
    for w in caught:
        print("warning:", str(w.message).replace("\\n", " "), flush=True)
    print("end", flush=True)
    """
)


@pytest.mark.child
def test_a_cached_read_of_a_corrupt_file_does_not_wait_for_the_lock(hold, monkeypatch):
    """A cached-mode call does not wait JAXTUNE_LOCK_TIMEOUT for a lock another process
    holds just to move a corrupt file aside (it is left for the next write); a healthy
    file's read takes no lock (docs/cache.md, "The cache")."""
    monkeypatch.setenv("JAXTUNE_MODE", "cached")
    monkeypatch.setenv("JAXTUNE_LOCK_TIMEOUT", "3600")
    path = _cache.user_cache().path_for(jax.devices()[0].device_kind, "tests.corrupt_read")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xc1 garbage, not msgpack")
    pid = hold(path)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str] = queue.Queue()

    def follow() -> None:
        for line in reader.stdout:
            lines.put(line.rstrip("\n"))
        lines.put("")  # the reader ended

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    out: list[str] = []
    try:
        out.append(lines.get(timeout=300))  # JAX imported
        if out[0] == "ready":
            try:
                out.append(lines.get(timeout=60))  # the lookup and the call: under a second
            except queue.Empty:
                pytest.fail("the cached read of a corrupt file waited for the lock's holder")
            while out[-1] not in ("end", ""):
                out.append(lines.get(timeout=60))
    finally:
        reader.kill()
        reader.wait()
        follower.join(timeout=30)
        err = reader.stderr.read()
        reader.stdout.close()
        reader.stderr.close()
    assert out[0] == "ready" and out[-1] == "end", (out, err)
    out = out[1:]
    assert out[0] == "default 3 24.0", out
    warned = [line for line in out if line.startswith("warning:") and str(path) in line]
    assert len(warned) == 1, out  # once, for the lookup and the call
    assert f"process {pid} holds its lock" in warned[0]
    assert path.exists()  # left for the next writer


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
