"""Which config a lost child is blamed on: the steps in flight when it died, narrowed to
one by the thread its fatal-error report names. No child is started here."""

from __future__ import annotations

import signal
import subprocess
import sys

import jax.numpy as jnp
import pytest
from faulty_kernels import faulty

from jaxtune._isolation.frames import CompileStarted, RoundStarted, RunStarted
from jaxtune._isolation.logs import crashed_thread, read_tail
from jaxtune._tuning.sweep import requests as _requests
from jaxtune._tuning.sweep.flight import InFlight

REPORT = """\
some output of the kernel
Fatal Python error: Segmentation fault

Current thread 0x00007fc6d11356c0 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "kern.py", line 8 in crash

Thread 0x00007fc6d19366c0 (most recent call first):
  File "kern.py", line 5 in other
"""


def test_the_crashed_thread_is_read_off_the_fatal_error_report(tmp_path):
    assert crashed_thread(REPORT) == 0x7FC6D11356C0
    log = tmp_path / "child.log"
    log.write_text(REPORT)
    assert crashed_thread(read_tail(str(log), 0, 0)) == 0x7FC6D11356C0  # what the runner reads
    assert crashed_thread("Current thread 0x1 (most recent call first):") is None  # no report
    assert crashed_thread("Fatal Python error: Aborted\n\nThread 0x5 (most recent...)") is None
    # The last report counts (an earlier child's, or an earlier crash, may come first).
    assert crashed_thread(REPORT + REPORT.replace("11356c0", "22222c0")) == 0x7FC6D22222C0


def flight(*configs: str) -> InFlight:
    task = faulty.options.bound(
        faulty.options.bind((jnp.ones(4),), {}),
        [{"mode": c} for c in configs],
        {"mode": configs[0]},
    ).sweep_task()
    request = _requests.Measure(todo=[{"mode": c} for c in configs]).of(
        _requests.sweep_request(task)
    )
    return InFlight(request)


def test_a_crash_in_one_compile_thread_is_that_configs_alone():
    f = flight("ok", "segfault", "fast")
    f.event(CompileStarted(cid="mode='ok'", thread=11))
    f.event(CompileStarted(cid="mode='segfault'", thread=22))
    both = sorted(["mode='ok'", "mode='segfault'"])
    assert sorted(f.suspects(hung=False, timeout_s=5)) == both
    assert f.suspects(hung=False, timeout_s=5, crashed_thread=22) == ["mode='segfault'"]
    # A thread that compiles none of them (XLA's own, the main one) narrows nothing.
    assert sorted(f.suspects(hung=False, timeout_s=5, crashed_thread=33)) == both
    # A hang is not a crash: the thread of a crash report says nothing about it.
    assert sorted(f.suspects(hung=True, timeout_s=0, crashed_thread=22)) == both


def test_a_crash_in_the_running_thread_is_the_running_configs():
    f = flight("ok", "segfault", "fast")
    f.event(CompileStarted(cid="mode='fast'", thread=11))
    f.event(RunStarted(cid="mode='segfault'", thread=1))
    assert f.suspects(hung=False, timeout_s=5, crashed_thread=1) == ["mode='segfault'"]
    # In a round of passes the running thread runs several configs: no single culprit.
    f.event(RoundStarted(cids=("mode='ok'", "mode='segfault'")))
    assert len(f.suspects(hung=False, timeout_s=5, crashed_thread=1)) == 3


CRASH = """
import ctypes, faulthandler, sys, threading, time
faulthandler.enable()
def wait():
    time.sleep(30)
threading.Thread(target=wait, daemon=True).start()
def crash():
    print(threading.get_ident(), flush=True)
    ctypes.string_at(0)
if sys.argv[1] == "python":  # a Python thread crashes: faulthandler names it
    threading.Thread(target=crash).start()
else:  # a thread with no Python state crashes (as one of XLA's own may)
    tid = ctypes.c_ulong()
    ctypes.CDLL(None).pthread_create(ctypes.byref(tid), None, ctypes.c_void_p(1), None)
time.sleep(30)
"""


@pytest.mark.child
@pytest.mark.parametrize("where", ["python", "native"])
def test_the_crash_report_names_a_python_thread_and_no_other(where):
    """What the pinning rests on, on this toolchain: faulthandler's report calls the crashed
    thread ``Current thread`` (with its ``threading.get_ident()``) only when it is a Python
    thread; a crash in another thread names none, and the suspects stay as they were."""
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, where], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGSEGV, proc.stderr[-2000:]
    named = crashed_thread(proc.stderr)
    if where == "python":
        assert named == int(proc.stdout.split()[0]), proc.stderr[-2000:]
    else:
        assert named is None, proc.stderr[-2000:]
