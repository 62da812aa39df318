"""Odd paths around the cache: non-regular export targets, symlinked device folders,
temporaries of killed writers, schemas below 1, undecodable files (child logs:
test_child_logs.py)."""

from __future__ import annotations

import os
import pathlib
import signal
import stat
import subprocess
import sys
import textwrap

import pytest
from test_cache import make_entry

from jaxtune import _cli
from jaxtune._core.codec import packb
from jaxtune._core.errors import CacheError, JaxtuneWarning
from jaxtune._tuning.result import TuningResult
from jaxtune._tuning.store import cache as _cache

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def one_entry():
    _cache.user_cache().write([make_entry()])


def cache_cli(capsys, *argv):
    code = _cli.main(["cache", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_export_refuses_to_replace_a_fifo(tmp_path, capsys, one_entry):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = cache_cli(capsys, "export", str(fifo))
    assert code == 2
    assert f"refusing to replace {fifo}: it is not a regular file" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_refuses_to_replace_a_device_node(tmp_path, capsys, one_entry):
    node = tmp_path / "full"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # what /dev/full is
    except PermissionError:
        # Making a device node needs root; without it, /dev/full itself, which this user
        # cannot replace either, should the refusal ever be missing.
        node = pathlib.Path("/dev/full")
    code, _, err = cache_cli(capsys, "export", str(node))
    assert code == 2 and "not a regular file" in err
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_export_onto_a_directory_names_the_target(tmp_path, capsys, one_entry):
    code, _, err = cache_cli(capsys, "export", str(tmp_path))
    assert code == 2
    assert f"{tmp_path} is a directory" in err and ".tmp" not in err


def test_show_html_below_a_file_says_the_parent_is_not_a_directory(capsys, one_entry):
    code, _, err = cache_cli(capsys, "show", "--html", "/dev/null/x.html")
    assert code == 2
    assert "/dev/null is not a directory" in err


def test_writes_do_not_follow_a_symlinked_device_folder(tmp_path):
    store = _cache.CacheStore(tmp_path / "c")
    outside = tmp_path / "outside"
    outside.mkdir()
    store.root.mkdir()
    (store.root / "cpu").symlink_to(outside)
    with pytest.warns(JaxtuneWarning, match="symlink or not a directory"):
        assert store.save([make_entry(kind="cpu")]) is False
    assert list(outside.iterdir()) == []


KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from jaxtune._tuning.store import cache as _cache
    sys.path.insert(0, sys.argv[2])
    from test_cache import make_entry
    def stuck(fd):
        print("writing", flush=True)
        time.sleep(600)
    os.fsync = stuck  # killed between writing the temporary file and renaming it
    _cache.CacheStore(sys.argv[1]).write([make_entry()])
    """
)


@pytest.mark.child
def test_a_writer_killed_mid_write_leaves_no_temporary_after_the_next_write(tmp_path):
    root = tmp_path / "c"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root), str(ROOT / "tests")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert writer.stdout.readline().strip() == "writing"
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    finally:
        writer.kill()
        writer.stdout.close()
    folder = root / "cpu"
    assert [p.name for p in folder.glob(".*.tmp")], "the killed writer left no temporary"
    _cache.CacheStore(root).write([make_entry(key="f32[16]")])
    assert list(folder.glob(".*.tmp")) == []


def test_a_live_writer_of_another_file_keeps_its_temporary(tmp_path):
    store = _cache.CacheStore(tmp_path / "c")
    store.write([make_entry()])
    folder = store.root / "cpu"
    other = folder / ".k.msgpack.x.msgpack.abcdefgh.tmp"  # kernel "k.msgpack.x"'s writer
    other.write_bytes(b"")
    store.write([make_entry(key="f32[16]")])
    assert other.exists()


@pytest.mark.parametrize("schema", [0, -1])
def test_cache_files_of_schema_below_one_are_corrupt(tmp_path, schema):
    store = _cache.CacheStore(tmp_path / "c")
    entry = make_entry()
    path = store.path_for(entry.device_kind, entry.kernel)
    path.parent.mkdir(parents=True)
    doc = {"schema": schema, "format": "jaxtune.cache", "kernel": "k", "device_kind": "cpu"}
    path.write_bytes(packb({**doc, "entries": {entry.key: packb(entry.to_dict())}}))
    with pytest.warns(JaxtuneWarning, match=rf"unreadable \(schema {schema} is no jaxtune"):
        assert store.lookup(entry.kernel, entry.device_kind, entry.key) is None


def test_undecodable_files_are_named_by_load_import_and_merge(tmp_path, capsys):
    good = tmp_path / "good.msgpack"
    TuningResult.of(make_entry()).save(good)
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(b"\xc1")
    with pytest.raises(CacheError, match=str(bad)):
        TuningResult.load(bad)
    code, _, err = cache_cli(capsys, "import", str(bad))
    assert code == 2 and str(bad) in err
    code, _, err = cache_cli(capsys, "merge", str(good), str(bad), "-o", str(tmp_path / "m"))
    assert code == 2 and str(bad) in err
    _cache.register_cache(bad)  # a shipped file never fails the import that registers it
    with pytest.warns(JaxtuneWarning, match=f"ignores the packaged cache {bad}: not a jaxtune"):
        assert _cache.layers()[0].all_entries() == []


NO_FCNTL = textwrap.dedent(
    """
    import sys, warnings
    sys.modules["fcntl"] = None  # as on Windows: importing fcntl fails
    warnings.simplefilter("always")
    sys.path.insert(0, sys.argv[2])
    import jaxtune
    from jaxtune._tuning.store import cache as _cache
    from test_cache import make_entry

    with warnings.catch_warnings(record=True) as caught:
        store = _cache.CacheStore(sys.argv[1])
        store.write([make_entry()])
        store.write([make_entry(key="f32[16]")])
    print(len(store.all_entries()), [str(w.message) for w in caught])
    """
)


@pytest.mark.child
def test_import_and_cache_writes_work_where_fcntl_is_missing(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", NO_FCNTL, str(tmp_path / "c"), str(ROOT / "tests")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, messages = proc.stdout.strip().split(" ", 1)
    assert count == "2"  # both entries written, unlocked
    assert messages.count("without a lock") == 1, messages  # one warning, not one a write


def test_writes_honour_the_umask_without_changing_it(tmp_path, monkeypatch):
    old = os.umask(0o027)
    calls = []
    real_umask = os.umask
    monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or real_umask(mask))
    try:
        _cache.CacheStore(tmp_path / "c").write([make_entry()])
    finally:
        real_umask(old)
    assert calls == []  # never flipped: another thread creating a file meanwhile would get 0
    (written,) = (tmp_path / "c" / "cpu").glob("*.msgpack")
    assert stat.S_IMODE(written.stat().st_mode) == 0o640
