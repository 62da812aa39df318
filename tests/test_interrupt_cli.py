"""Ctrl-C (a real SIGINT) ends every CLI command: exit 130, no process left, what finished
kept. How soon it ends is bench/bench_tune_command.py's to measure (docs/benchmarks.md);
here a deadline only tells an ended command from one left running."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import uuid

import pytest
from interrupt_programs import SLEEPER, TWO_KERNELS
from waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.child]

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: How long a command may take to end after SIGINT before it counts as left running: far
#: past what a loaded machine takes, far short of the ten minutes its programs sleep.
ENDS_WITHIN_S = 60


def tagged(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (psutil-free: /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = pathlib.Path(f"/proc/{entry}/environ").read_bytes()
            state = pathlib.Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"JAXTUNE_TEST_TAG={tag}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry))
    return found


def wait_for(path: pathlib.Path, proc: subprocess.Popen) -> None:
    """Waits until ``path`` exists (it is written whole right before a ten-minute sleep),
    failing at once should ``proc`` end first."""

    def there() -> bool:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        return path.exists()

    until(there, f"{path} to appear", within=300)


def interrupt(args: list[str], mark: pathlib.Path, tmp_path, *, ignored: bool = False):
    """Starts `python -m jaxtune ARGS`, sends SIGINT once ``mark`` exists and gives it
    ``ENDS_WITHIN_S`` to end; returns the exit status, stderr and the processes left."""
    tag = uuid.uuid4().hex
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JAXTUNE_TEST_TAG": tag,
        "MARK": str(mark),
        "JAXTUNE_ISOLATION": "process",
    }
    command = [sys.executable, "-m", "jaxtune", *args]
    if ignored:  # a background job of a non-interactive shell inherits SIGINT ignored
        command = ["sh", "-c", 'trap "" INT; exec "$0" "$@"', *command]
    proc = subprocess.Popen(
        command,
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(mark, proc)
        os.kill(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=ENDS_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"jaxtune {args[0]} still running {ENDS_WITHIN_S} s after SIGINT")
        # A sweep child notices a dead parent within 0.5 s, and then needs a moment on the
        # cores to end; one left alone would sleep out its ten minutes.
        with contextlib.suppress(AssertionError):
            until(lambda: not tagged(tag), "every process the command started to end")
        return proc.returncode, err, tagged(tag)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in tagged(tag):  # first: the program holds the pipes open
            os.kill(pid, signal.SIGKILL)
        proc.communicate()


@pytest.mark.parametrize("ignored", [False, True], ids=["default", "inherited-ignored"])
def test_ctrl_c_while_tune_records_the_program(tmp_path, ignored):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    mark = tmp_path / "mark"
    args = ["tune", "--", "python", "sleeper.py", str(mark)]
    status, err, left = interrupt(args, mark, tmp_path, ignored=ignored)
    assert status == 130, err[-3000:]
    assert "interrupted" in err
    assert left == []


def test_ctrl_c_during_a_sweep_keeps_what_was_tuned(tmp_path):
    (tmp_path / "prog.py").write_text(TWO_KERNELS)
    mark = tmp_path / "mark"
    cache = tmp_path / "cache"
    os.environ["JAXTUNE_CACHE_DIR"] = str(cache)  # restored by the autouse fixture
    status, err, left = interrupt(["tune", "--", "python", "prog.py"], mark, tmp_path)
    assert status == 130, err[-3000:]
    assert left == []
    from jaxtune._tuning.store import cache as _cache

    kernels = {e.kernel for e in _cache.CacheStore(cache).all_entries()}
    assert "ci.quick" in kernels  # tuned before the interrupt: kept
    assert "ci.slow" not in kernels
    # And it says so: which sweep was dropped, what was saved.
    assert "jaxtune tune: interrupted during the sweep of ci.slow " in err, err[-3000:]
    assert (
        "it is dropped, and the cache keeps what it held for that call; saved before it: 1 sweep"
        in err
    )


@pytest.mark.parametrize("ignored", [False, True], ids=["default", "inherited-ignored"])
def test_ctrl_c_while_profile_runs_the_program(tmp_path, ignored):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    mark = tmp_path / "mark"
    args = ["profile", "--", "python", "sleeper.py", str(mark)]
    status, err, left = interrupt(args, mark, tmp_path, ignored=ignored)
    assert status == 130, err[-3000:]
    assert left == []
