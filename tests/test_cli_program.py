"""`jaxtune tune|profile -- COMMAND`: the right Python, and the program's exit status."""

from __future__ import annotations

import os
import re
import sys

import pytest

pytestmark = pytest.mark.child


@pytest.mark.parametrize("verb", ["tune", "profile"])
def test_a_failing_program_fails_the_command_with_its_status(cli, verb):
    proc = cli(verb, "--", "python", "-c", "import sys; sys.exit(3)")
    assert proc.returncode == 3, proc.stderr
    if verb == "tune":
        assert "exited with status 3; it recorded no autotuned call" in proc.stderr, proc.stderr


@pytest.mark.parametrize("verb", ["tune", "profile"])
def test_python_means_the_interpreter_jaxtune_runs_in(cli, verb):
    # A PATH whose `python` (if any) is not this one: the command must still use ours.
    env = {"PATH": "/usr/bin:/bin"}
    proc = cli(verb, "--", "python", "-c", "import sys, jax; print(sys.executable)", env=env)
    # A program that profiles nothing fails `jaxtune profile` (status 3), and says so.
    assert proc.returncode == (3 if verb == "profile" else 0), proc.stderr
    assert os.path.realpath(sys.executable) in {
        os.path.realpath(line) for line in proc.stdout.splitlines() if line.startswith("/")
    }


@pytest.mark.parametrize("verb", ["tune", "profile"])
def test_a_missing_command_is_a_message_not_a_traceback(cli, verb):
    proc = cli(verb, "--", "no-such-command-jaxtune")
    assert proc.returncode == 2
    assert f"jaxtune {verb}: could not start 'no-such-command-jaxtune'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("verb", ["tune", "profile"])
def test_a_program_killed_by_a_signal_is_named_by_the_signal(cli, verb):
    proc = cli(
        verb, "--", "python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    )
    assert proc.returncode == 1, proc.stderr
    assert "was killed by SIGSEGV" in proc.stderr, proc.stderr
    assert not re.search(r"(?<![\w/-])-11\b", proc.stderr), proc.stderr  # not the raw status
