"""Bounded property-based fuzzing (hypothesis) of cache files, result files and traces, in
a child process: 0 crashes, 0 hangs, every error a JaxtuneError subclass or a warning."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent

pytestmark = [pytest.mark.slow, pytest.mark.child]


def test_fuzzing_cache_files_result_files_and_traces_never_crashes_or_hangs():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *sys.path])
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, str(HERE / "fuzzing.py"), "300"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # a hang is a failure, not a stuck test run
    )
    assert proc.returncode == 0, proc.stderr[-5000:]  # < 0: a crash (signal)
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    for reader in ("cache file", "result file", "trace"):
        assert sum(n for k, n in counts.items() if k.startswith(reader)) >= 300, counts
    # The fuzzer reached both outcomes of each reader (so it is not testing nothing).
    assert counts.get("cache file: warning") and counts.get("cache file: ok"), counts
    assert counts.get("result file: CacheError") and counts.get("result file: ok"), counts
    assert counts.get("trace: ProfileError") and counts.get("trace: ok"), counts
