"""Child logs in $TMPDIR: a private folder, never a symlink or one others can write, and
nothing left behind but the newest crash logs in the one folder every run shares."""

from __future__ import annotations

import os
import pathlib
import re
import stat
import subprocess
import sys
import tempfile
import textwrap
import warnings

import pytest

from jaxtune._core.errors import JaxtuneWarning
from jaxtune._isolation import logs as _logs
from jaxtune._isolation.state import ISOLATION_STATE


@pytest.fixture
def tmpdir_here(tmp_path, monkeypatch, fresh_warnings):
    """$TMPDIR is ``tmp_path`` for this process (as a fresh process would find it)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ISOLATION_STATE.reset("log folders")
    yield tmp_path
    ISOLATION_STATE.reset("log folders")


def spoil(tmp_path: pathlib.Path, how: str) -> pathlib.Path:
    """Puts at ``$TMPDIR/jaxtune-<uid>`` what jaxtune must not use: a symlink (to a private
    folder of this very user, the most tempting one to follow) or a world-writable folder.
    Returns where a log written through it would land."""
    usual = tmp_path / f"jaxtune-{os.getuid()}"
    if how == "symlink":
        target = tmp_path / "elsewhere"
        target.mkdir(mode=0o700)
        usual.symlink_to(target)
        return target
    usual.mkdir()
    usual.chmod(0o777)
    return usual


def private(folder: pathlib.Path) -> bool:
    info = os.lstat(folder)
    return (
        stat.S_ISDIR(info.st_mode)
        and stat.S_IMODE(info.st_mode) == 0o700
        and info.st_uid == os.getuid()
    )


@pytest.mark.parametrize(
    ("how", "why"),
    [("symlink", "is a symlink"), ("open", r"can be written by others \(mode 777\)")],
)
def test_a_spoiled_log_folder_is_refused_once_for_one_every_run_reuses(tmpdir_here, how, why):
    landing = spoil(tmpdir_here, how)
    usual = tmpdir_here / f"jaxtune-{os.getuid()}"
    spare = tmpdir_here / f"jaxtune-{os.getuid()}.1"
    said = rf"{re.escape(str(usual))} {why}, .* go to .*{re.escape(str(spare))}"
    with pytest.warns(JaxtuneWarning, match=said):
        folder = _logs.log_dir()
    assert folder == spare and private(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        ISOLATION_STATE.reset("log folders")  # as the next process would choose
        assert _logs.log_dir() == spare
    assert not list(landing.iterdir())
    # Crash logs of every run meet in one folder, so only the newest few are kept.
    for pid in range(_logs.KEEP_CRASH_LOGS + 2):
        ISOLATION_STATE.reset("log folders")
        log = _logs.log_dir() / f"child-{os.getpid()}-{pid}.log"
        log.write_text("boom")
        os.utime(log, (pid, pid))
        _logs.keep_crash_log(str(log), pid)
    assert len(list(tmpdir_here.glob("jaxtune-*/crash-*.log"))) == _logs.KEEP_CRASH_LOGS
    assert sorted(p.name for p in tmpdir_here.iterdir()) == sorted(
        p.name for p in [usual, spare, *([landing] if how == "symlink" else [])]
    )


def test_another_users_spare_is_skipped(tmpdir_here):
    spoil(tmpdir_here, "open")
    taken = tmpdir_here / f"jaxtune-{os.getuid()}.1"
    taken.mkdir()
    taken.chmod(0o777)
    with pytest.warns(JaxtuneWarning, match="later runs use too"):
        assert _logs.log_dir() == tmpdir_here / f"jaxtune-{os.getuid()}.2"


@pytest.mark.child
def test_logs_of_dead_parents_are_deleted(tmpdir_here):
    folder = tmpdir_here / f"jaxtune-{os.getuid()}"
    folder.mkdir(mode=0o700)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = folder / f"child-{dead}-abcdefgh.log"
    live = folder / f"child-{os.getpid()}-abcdefgh.log"
    stale.write_text("x")
    live.write_text("x")
    assert _logs.log_dir() == folder
    assert not stale.exists() and live.exists()


CRASHING_RUN = textwrap.dedent(
    """
    import os, warnings
    warnings.simplefilter("always")
    from jaxtune._isolation.process import ChildProcess
    child = ChildProcess({**os.environ, "JAX_PLATFORMS": "cpu"})
    child.kill()  # as after a crash: the end of its log is kept
    print(child.log_path, flush=True)
    """
)


def run(tmp_path: pathlib.Path, script: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXTUNE_")}
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.child
@pytest.mark.parametrize("how", ["symlink", "open"])
def test_runs_with_a_spoiled_log_folder_leave_only_the_shared_crash_logs(tmp_path, how):
    """Runs with a spoiled shared log folder share one private folder instead of each
    leaving a new one, crash logs and all, in $TMPDIR, where no later run would clean it
    (docs/isolation.md, "Logs and descriptors")."""
    landing = spoil(tmp_path, how)
    runs = [run(tmp_path, CRASHING_RUN) for _ in range(2)]
    assert [proc.returncode for proc in runs] == [0, 0], [proc.stderr for proc in runs]
    kept = [pathlib.Path(proc.stdout.strip()) for proc in runs]
    spare = tmp_path / f"jaxtune-{os.getuid()}.1"
    folders = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("jaxtune-"))
    assert folders == [f"jaxtune-{os.getuid()}", spare.name]
    assert [p.parent for p in kept] == [spare, spare]
    assert sorted(spare.iterdir()) == sorted(kept)  # no child log left, both crash logs
    assert not list(landing.iterdir())
    for proc in runs:  # each run says where its logs went
        assert (
            "JaxtuneWarning" in proc.stderr and f"go to the private folder {spare}" in proc.stderr
        )


OWN_FOLDER = textwrap.dedent(
    """
    import pathlib, warnings
    warnings.simplefilter("ignore")
    from jaxtune._isolation import logs
    folder = logs.log_dir()
    (folder / "crash-x-1.log").write_text("boom")
    print(folder, flush=True)
    """
)


@pytest.mark.child
def test_a_folder_of_the_process_own_goes_when_it_ends(tmp_path):
    spoil(tmp_path, "open")
    for n in range(1, _logs.SPARE_NAMES + 1):
        spare = tmp_path / f"jaxtune-{os.getuid()}.{n}"
        spare.mkdir()
        spare.chmod(0o777)
    proc = run(tmp_path, OWN_FOLDER)
    assert proc.returncode == 0, proc.stderr
    folder = pathlib.Path(proc.stdout.strip())
    assert folder.parent == tmp_path and folder.name.startswith(f"jaxtune-{os.getuid()}-")
    assert not folder.exists()
